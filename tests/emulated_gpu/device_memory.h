// Device memory of the emulated GPUs: one arena per device, reserved up front
// and kept PROT_NONE except while the emulator itself works on it (a kernel, a
// copy, a memset, a cuBLASLt product), so host code that dereferences a device
// pointer faults here just as it would crash next to a real GPU. A SIGSEGV /
// SIGBUS handler turns such a fault into one line on stderr and exit code 86.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessel_emu {

using CUresult = int;

inline constexpr int kMaxDevices = 16;
/// Every allocation starts on this boundary (cudaMalloc guarantees 256 bytes).
inline constexpr std::size_t kAlignment = 256;
/// Exit status of a process that touched device memory from host code.
inline constexpr int kHostAccessExitCode = 86;

/// Reserves `count` arenas of `bytes` each (once per process; later calls do nothing).
/// False when the address space cannot be reserved.
bool init_devices(int count, std::size_t bytes);
int device_count();
std::size_t device_bytes();

/// First-fit allocation on `device`: CUDA_ERROR_OUT_OF_MEMORY when no free block fits.
CUresult allocate(int device, std::size_t bytes, std::uintptr_t* out);
/// CUDA_ERROR_INVALID_VALUE unless `p` is the start of a live allocation.
CUresult release(std::uintptr_t p);
/// Bytes not handed out on `device`.
std::size_t free_bytes(int device);

/// The device whose live allocation holds all of [p, p + bytes); -1 when none does.
int allocation_device(std::uintptr_t p, std::size_t bytes);
/// The device whose arena holds `p` (allocated or not); -1 for host memory.
int arena_device(const void* p);

/// Arenas readable and writable until the matching leave(); nests and may be
/// called from several threads at once (a depth count under one mutex).
void enter();
void leave();

struct Unprotected {
  Unprotected() { enter(); }
  ~Unprotected() { leave(); }
  Unprotected(const Unprotected&) = delete;
  Unprotected& operator=(const Unprotected&) = delete;
};

/// Installs the fault handler unless it is already the current one (test
/// frameworks swap their own in and out around each test, so this is asked again
/// at every allocation).
void ensure_fault_handler();

}  // namespace tessel_emu
