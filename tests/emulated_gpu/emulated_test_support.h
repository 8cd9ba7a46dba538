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

inline unsigned long long kernels_launched() {
  (void)tessel::cuda::device_count();  // loads the driver
  auto f = symbol<unsigned long long (*)()>(TESSEL_EMU_DRIVER_PATH, "tessel_emu_kernels_launched");
  return f ? f() : ~0ull;
}

inline unsigned long long host_compiles() {
  (void)tessel::cuda::device_count();
  auto f = symbol<unsigned long long (*)()>(TESSEL_EMU_DRIVER_PATH, "tessel_emu_host_compiles");
  return f ? f() : ~0ull;
}

// Fiber stacks the driver's pool handed to kernel launches, and mappings it made.
inline unsigned long long fiber_stacks_taken() {
  (void)tessel::cuda::device_count();
  auto f = symbol<unsigned long long (*)()>(TESSEL_EMU_DRIVER_PATH, "tessel_emu_fiber_stacks_taken");
  return f ? f() : ~0ull;
}
inline unsigned long long fiber_stack_mappings() {
  (void)tessel::cuda::device_count();
  auto f = symbol<unsigned long long (*)()>(TESSEL_EMU_DRIVER_PATH, "tessel_emu_fiber_stack_mappings");
  return f ? f() : ~0ull;
}

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
