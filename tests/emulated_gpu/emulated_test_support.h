// Shared by the emulated-device tests: the emulated driver's test API, looked
// up in the already-loaded library, and NVRTC compiles of small kernels.
#pragma once

#include <dlfcn.h>

#include <string>
#include <string_view>

#include "runtime/cuda/driver.h"
#include "runtime/cuda/nvrtc.h"
#include "runtime/cuda/prelude.h"

namespace emulated_test {

/// A symbol of a loaded emulated library (TESSEL_EMU_DRIVER_PATH or TESSEL_EMU_CUBLASLT_PATH).
template <class F>
F symbol(const char* library, const char* name) {
  void* lib = dlopen(library, RTLD_NOW | RTLD_NOLOAD);
  return lib ? reinterpret_cast<F>(dlsym(lib, name)) : nullptr;
}

/// A counter of the emulated driver's test API (~0 when it has none of that name).
inline unsigned long long driver_counter(const char* name) {
  (void)tessel::cuda::device_count();  // loads the driver
  auto f = symbol<unsigned long long (*)()>(TESSEL_EMU_DRIVER_PATH, name);
  return f ? f() : ~0ull;
}
inline unsigned long long kernels_launched() { return driver_counter("tessel_emu_kernels_launched"); }
inline unsigned long long host_compiles() { return driver_counter("tessel_emu_host_compiles"); }
// Fiber stacks the driver's pool handed to kernel launches, and mappings it made.
inline unsigned long long fiber_stacks_taken() { return driver_counter("tessel_emu_fiber_stacks_taken"); }
inline unsigned long long fiber_stack_mappings() { return driver_counter("tessel_emu_fiber_stack_mappings"); }

inline int device_of(tessel::cuda::CUdeviceptr p) {
  (void)tessel::cuda::device_count();
  auto f = symbol<int (*)(const void*)>(TESSEL_EMU_DRIVER_PATH, "tessel_emu_device_of");
  return f ? f(reinterpret_cast<const void*>(p)) : -2;
}

/// PTX (carrying its source) for the prelude plus `body`, for compute_90.
inline std::string ptx(std::string_view body, std::string_view name) {
  return tessel::cuda::compile(std::string(tessel::cuda::prelude) + std::string(body), name, {.arch = 90}).ptx;
}

}  // namespace emulated_test
