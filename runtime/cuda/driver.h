// The CUDA driver API, loaded at run time.
//
// libcuda.so.1 is opened with dlopen on first use, so tessel builds and runs on
// machines without an NVIDIA driver: there device_count() is 0 and nothing else
// here is called. The handful of driver types used by tessel are declared here
// (ABI-compatible with cuda.h) so that no header users include needs the toolkit.
//
// Every failing driver call raises tessel::DeviceError naming the call, the
// driver's error name and its description:
//
//   if (tessel::cuda::device_count() > 0) {
//     using namespace tessel::cuda;
//     CUdeviceptr d = mem_alloc(0, 4 * n);
//     memcpy_htod(d, host.data(), 4 * n);
//     Module m = Module::load_ptx(0, compiled.ptx);
//     void* args[] = {&d, &n};
//     launch_kernel(m.function("scale"), {blocks}, {256}, 0, nullptr, args);
//     memcpy_dtoh(host.data(), d, 4 * n);
//     mem_free(d);
//   }
//
// The environment variable TESSEL_CUDA_DRIVER names another library to load
// instead of libcuda.so.1 (a driver installed outside the loader's path).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace tessel::cuda {

// --- driver types (same size and meaning as in cuda.h) ---
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
struct CUctx_st;
struct CUmod_st;
struct CUfunc_st;
struct CUstream_st;
struct CUevent_st;
using CUcontext = CUctx_st*;
using CUmodule = CUmod_st*;
using CUfunction = CUfunc_st*;
using CUstream = CUstream_st*;  // nullptr is the legacy default stream
using CUevent = CUevent_st*;

/// The driver's result codes that tessel reacts to (values from cuda.h).
enum : CUresult {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_STUB_LIBRARY = 34,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_IMAGE = 200,
  CUDA_ERROR_INVALID_PTX = 218,
  CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_NOT_READY = 600,
};

/// Grid or block extent of a launch.
struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

// --- availability (never throw) ---

/// True when the driver library loaded and cuInit succeeded.
bool driver_available() noexcept;
/// Why the driver is unavailable ("" when it is available), e.g.
/// "libcuda.so.1: cannot open shared object file: No such file or directory".
std::string driver_unavailable_reason();
/// Number of CUDA devices; 0 when the library or a device is missing.
int device_count() noexcept;
/// The driver's CUDA version as major*1000 + minor*10 (13000 for 13.0); 0 when unavailable.
int driver_version() noexcept;
/// "CUDA_ERROR_OUT_OF_MEMORY" for a result code (works without the driver for the codes above).
std::string error_name(CUresult r);

// --- devices ---

struct DeviceProperties {
  int ordinal = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;  // compute capability
  std::size_t total_memory = 0;    // bytes
  int multiprocessors = 0;
  int max_threads_per_block = 0;
  int max_shared_memory_per_block = 0;         // bytes, without opt-in
  int max_shared_memory_per_block_optin = 0;   // bytes, with cuFuncSetAttribute
  int warp_size = 0;
  /// Compute capability as NVRTC spells the arch: 90 for 9.0.
  int arch() const { return cc_major * 10 + cc_minor; }
};

/// Properties of device `ordinal`; DeviceError when it does not exist.
DeviceProperties device_properties(int ordinal);
std::string device_name(int ordinal);
/// {major, minor}
std::pair<int, int> compute_capability(int ordinal);
std::size_t total_memory(int ordinal);

struct MemoryInfo {
  std::size_t free = 0, total = 0;
};
/// Free and total memory of the device as the driver reports them now.
MemoryInfo memory_info(int ordinal);

// --- contexts ---

/// The device's primary context, retained on first use and kept for the process.
CUcontext primary_context(int ordinal);
/// Makes the device's primary context current on the calling thread.
void set_device(int ordinal);
/// The device whose primary context is current on this thread; -1 when none is.
int current_device();
/// Waits for all work on the device.
void device_synchronize(int ordinal);

// --- memory ---

/// Device memory on `ordinal`; DeviceError (naming CUDA_ERROR_OUT_OF_MEMORY) when exhausted.
CUdeviceptr mem_alloc(int ordinal, std::size_t bytes);
/// Like mem_alloc but reports exhaustion by returning the result code instead of throwing
/// (for allocators that react to it); other failures still throw.
CUresult try_mem_alloc(int ordinal, std::size_t bytes, CUdeviceptr* out);
void mem_free(CUdeviceptr ptr);

void memcpy_htod(CUdeviceptr dst, const void* src, std::size_t bytes);
void memcpy_dtoh(void* dst, CUdeviceptr src, std::size_t bytes);
void memcpy_dtod(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes);
void memcpy_htod_async(CUdeviceptr dst, const void* src, std::size_t bytes, CUstream stream);
void memcpy_dtoh_async(void* dst, CUdeviceptr src, std::size_t bytes, CUstream stream);
void memcpy_dtod_async(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes, CUstream stream);
/// Copy between devices (through peer access where the driver can, else staged by the driver).
void memcpy_peer_async(CUdeviceptr dst, int dst_device, CUdeviceptr src, int src_device,
                       std::size_t bytes, CUstream stream);
bool can_access_peer(int device, int peer_device);
void memset_d8(CUdeviceptr dst, unsigned char value, std::size_t bytes);
void memset_d8_async(CUdeviceptr dst, unsigned char value, std::size_t bytes, CUstream stream);

/// Page-locked host memory (portable across contexts), for asynchronous copies.
void* host_alloc_pinned(std::size_t bytes);
void host_free_pinned(void* ptr);

// --- streams and events ---

/// A stream on `ordinal` that does not synchronize with the legacy default stream.
CUstream stream_create(int ordinal);
void stream_destroy(CUstream s);
void stream_synchronize(CUstream s);
/// True when all work on the stream has completed.
bool stream_query(CUstream s);
/// Makes later work on `s` wait for `e`.
void stream_wait_event(CUstream s, CUevent e);

/// An event on `ordinal`; `timing` events can measure elapsed time but cost more to record.
CUevent event_create(int ordinal, bool timing = false);
void event_destroy(CUevent e);
void event_record(CUevent e, CUstream s);
void event_synchronize(CUevent e);
/// True when the event has completed.
bool event_query(CUevent e);
/// Milliseconds between two recorded timing events.
float event_elapsed_ms(CUevent start, CUevent end);

// --- modules and launches ---

/// Loads a NUL-terminated PTX text or a CUBIN/fatbin image; the JIT log is in the error.
CUmodule module_load_data(int ordinal, const void* image);
void module_unload(CUmodule m);
/// DeviceError naming the kernel when the module does not define it.
CUfunction module_get_function(CUmodule m, const char* name);
/// Allows a kernel more dynamic shared memory than the 48 KiB default.
void function_set_max_dynamic_shared(CUfunction f, int bytes);

/// Launches `f`; `args[i]` points at the value of the kernel's i-th parameter.
void launch_kernel(CUfunction f, Dim3 grid, Dim3 block, unsigned shared_bytes, CUstream stream,
                   void** args);

/// A loaded module that unloads itself.
class Module {
 public:
  Module() = default;
  static Module load_ptx(int ordinal, std::string_view ptx);
  static Module load_cubin(int ordinal, std::span<const char> cubin);
  Module(Module&& o) noexcept : m_(o.m_) { o.m_ = nullptr; }
  Module& operator=(Module&& o) noexcept;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  ~Module();

  CUfunction function(const char* name) const { return module_get_function(m_, name); }
  CUmodule get() const { return m_; }

 private:
  explicit Module(CUmodule m) : m_(m) {}
  CUmodule m_ = nullptr;
};

}  // namespace tessel::cuda
