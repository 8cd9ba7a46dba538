// The CUDA backend: realizes IR for tensors on gpu(i). The shared passes
// (schedule -> lower_to_kernel_ir) run as for the CPU; emit_cuda writes CUDA
// C++, NVRTC compiles it (memory + disk kernel cache, keyed by the source,
// the NVRTC version and flags and the device arch), the driver loads and
// launches it. Matmuls and nodes no kernel computes run on the host through
// the ref interpreter (copied there and back); storage on GPUs comes from
// the caching device allocator through the storage hooks.
//
// The step loop is written against an Executor, so the tests run it over
// host memory with kernels executed by the CUDA emulation header.
#pragma once

#include <cstdint>
#include <vector>

#include "codegen/backend.h"
#include "codegen/executor.h"
#include "codegen/ir.h"
#include "codegen/lower.h"
#include "runtime/device.h"

namespace tessel {

namespace cudagen {

/// Where the steps of a realization run (the shared step loop's executor,
/// codegen/executor.h); every launch is a CUDA kernel over all its rows.
class Executor : public exec::StepExecutor {
 public:
  /// Runs one lowered kernel.
  virtual void launch(const lower::Lowered& l) = 0;
  void launch(const lower::Lowered& l, exec::Role, const ir::Node*) final { launch(l); }
};

/// The scheduled steps of `roots` run on `ex`; sets every root's buffer (and,
/// with keep_grad_values, those of the nodes backward reads).
void realize_steps(Executor& ex, const std::vector<ir::NodePtr>& roots, bool keep_grad_values);

/// Evaluates `n` with the ref backend over host values of its arguments.
ir::BufferView ref_eval(const ir::Node& n, const std::vector<ir::BufferView>& args);

}  // namespace cudagen

struct CudaStats {
  std::uint64_t realizations = 0;
  std::uint64_t kernels_launched = 0;
  std::uint64_t kernels_compiled = 0;   // by NVRTC in this process (not from a cache)
  std::uint64_t kernels_from_disk = 0;
  std::uint64_t host_evals = 0;         // matmuls and fallbacks run on the host
  double compile_ms = 0;
};
CudaStats cuda_stats();

/// Realizes `roots`, whose values live on GPU `device`. DeviceError when the
/// GPU is absent; CompileError when built without NVRTC.
void cuda_realize(int device, const std::vector<ir::NodePtr>& roots, bool keep_grad_values);

/// A dense copy of the realized view (dtype t, shape s) living on `from`, placed
/// on `to` (host<->device through pinned staging, device<->device directly).
ir::BufferView copy_between_devices(const ir::BufferView& v, DType t, const Shape& s, Device from, Device to);

/// Routes storage on GPUs through the caching device allocators (idempotent;
/// called by the first cuda_realize / copy).
void install_cuda_storage_hooks();

}  // namespace tessel
