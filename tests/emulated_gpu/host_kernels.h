// Kernels of an emulated module, compiled for the host.
//
// tessel's NVRTC wrapper appends the CUDA source it compiled to each PTX image
// (`//@` lines between `//@tessel-cuda-source-begin` and `-end`). That source,
// after tests/cuda_emu/cuda_emulation.h, is host C++; a generated launcher per
// `extern "C" __global__ void NAME(` unpacks cuLaunchKernel's parameter array
// into the kernel's parameter types and runs emu::launch. The shared object is
// cached on disk (keyed by the source, the header and the compiler command) and
// in memory, so each distinct kernel is compiled once per cache directory.
//
// Environment: TESSEL_EMU_CXX (compiler; default the one CMake used),
// TESSEL_EMU_CACHE_DIR, else $TESSEL_CACHE_DIR/emulated-cuda, else
// ~/.cache/tessel/emulated-cuda; TESSEL_EMU_PCH=0 compiles without the
// precompiled header.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tessel_emu {

/// What a generated launcher looks like (see host_kernels.cpp).
using Launcher = void (*)(void** params, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                          unsigned bz, std::size_t shared_bytes);

struct HostModule {
  void* library = nullptr;  // dlopen handle, kept for the process
  std::vector<std::string> kernels;
  /// nullptr when the module defines no such extern "C" kernel.
  Launcher launcher(const char* name) const;
};

enum class LoadStatus { ok, not_ptx_with_source, cubin, compile_failed };

struct LoadResult {
  LoadStatus status = LoadStatus::ok;
  std::shared_ptr<const HostModule> module;
  std::string log;  // why it failed (the compiler's output for compile_failed)
};

/// The CUDA source carried by a PTX image; false when it has none.
bool extract_source(std::string_view image, std::string* source);
/// Names of the `extern "C" __global__ void NAME(` kernels, in order, without repeats.
std::vector<std::string> kernel_names(std::string_view source);

/// Compiles (or finds in a cache) the host module for a module image.
LoadResult load_host_module(const void* image);

/// Compilations this process ran (cache misses).
unsigned long long host_compiles();

/// Makes a kernel library just opened take its fiber stacks from the driver's
/// process-wide pool (fiber_stacks.cpp).
void share_fiber_stacks(void* library);
/// Stacks the shared pool handed out, and mappings it had to make.
unsigned long long fiber_stacks_taken();
unsigned long long fiber_stack_mappings();

}  // namespace tessel_emu
