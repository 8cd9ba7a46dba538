// The CUDA backend: realizes IR for tensors on gpu(i). The shared passes
// (schedule -> lower_to_kernel_ir) run as for the CPU; emit_cuda writes CUDA
// C++, NVRTC compiles it (memory + disk kernel cache, keyed by the source,
// the NVRTC version and flags and the device arch), the driver loads and
// launches it, picking the variant (vectorized, split reduction) by
// cudagen::launch_shape. f32/f64 matmuls run on cuBLASLt (loaded at run
// time), a bias/ReLU epilogue fused into the product where blas_epilogue
// recognizes it, any other epilogue as a kernel after it; f32/f64
// convolutions and their gradients run on cuDNN (loaded at run time,
// codegen/cuda/cudnn_conv.h); Attention and AttentionGrad nodes on generated
// flash-attention kernels (codegen/cuda/attention_kernels.h); integer
// matmuls, other convolutions, every matmul or convolution whose library
// cannot be loaded, and nodes no kernel computes run on the host through the
// ref interpreter (copied there and back). Storage on GPUs comes from the caching device allocator through the
// storage hooks.
//
// The step loop is written against an Executor, so the tests run it over
// host memory with kernels executed by the CUDA emulation header.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "codegen/backend.h"
#include "codegen/executor.h"
#include "codegen/ir.h"
#include "codegen/lower.h"
#include "runtime/cuda/cublas.h"
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

/// A matmul epilogue cuBLASLt runs itself, and its bias (N contiguous elements).
struct BlasEpilogue {
  cuda::GemmEpilogue kind = cuda::GemmEpilogue::none;
  ir::BufferView bias;  // no storage unless kind has a bias
};
/// The cuBLASLt form of `epi`, the lowered elementwise epilogue of a 2-D
/// product whose value is `product` (dense [M, N]): relu(P), P + b, b + P or
/// relu(P + b), with b a length-N vector broadcast over the rows, every
/// value in the product's dtype, stored densely; else nullopt (the epilogue
/// then runs as its own kernel).
std::optional<BlasEpilogue> blas_epilogue(const lower::Lowered& epi, const ir::BufferView& product);

/// Writes `src` into `dst`, views of shape `s` and dtype `t` (dst without
/// elements sharing memory), with a copy kernel launched on `ex`; a source
/// overlapping the destination is first copied aside.
void copy_into(Executor& ex, const ir::BufferView& dst, const ir::BufferView& src, DType t, const Shape& s);

}  // namespace cudagen

struct CudaStats {
  std::uint64_t realizations = 0;
  std::uint64_t kernels_launched = 0;
  std::uint64_t kernels_compiled = 0;   // by NVRTC in this process (not from a cache)
  std::uint64_t kernels_from_disk = 0;
  std::uint64_t host_evals = 0;         // matmuls and fallbacks run on the host
  std::uint64_t vector_launches = 0;    // of kernels_launched: the vectorized variant
  std::uint64_t split_launches = 0;     // of kernels_launched: reductions in two passes (counted once)
  std::uint64_t blas_matmuls = 0;       // products on cuBLASLt (per batch element)
  std::uint64_t blas_epilogues = 0;     // of them: with the epilogue fused in
  std::uint64_t cudnn_convs = 0;        // Conv, ConvGradInput and ConvGradWeight nodes on cuDNN
  std::uint64_t attention_launches = 0; // Attention and AttentionGrad nodes on the attention kernels
                                        // (codegen/cuda/attention_kernels.h; one or two launches each)
  double compile_ms = 0;
};
CudaStats cuda_stats();

/// The backend of GPU `ordinal` (what backend_for(gpu(i)) returns): realizes
/// through cuda_realize, writes through cuda_copy_into, moves tensors with
/// copy_between_devices. It keeps no launch recordings (realize_recorded
/// returns null), so expression templates over GPU tensors take the IR path,
/// and the plan cache is the CPU backend's alone: every realization on a GPU
/// schedules and lowers again, then finds its kernels in the kernel cache.
Backend& cuda_backend(int ordinal);

/// Realizes `roots`, whose values live on GPU `device`. DeviceError when the
/// GPU is absent; CompileError when built without NVRTC.
void cuda_realize(int device, const std::vector<ir::NodePtr>& roots, bool keep_grad_values);

/// Writes the realized view `src` into `dst` (views of shape s and dtype t on
/// GPU `device`; dst has no elements sharing memory) with a copy kernel: the
/// device side of in-place writes (x += 1, x.data()[0] = 42, optimizer steps).
/// Overlapping source and destination are fine (the source is copied aside).
///
///   cuda_copy_into(0, x.buffer(), updated.buffer(), x.dtype(), x.shape());
void cuda_copy_into(int device, const ir::BufferView& dst, const ir::BufferView& src, DType t, const Shape& s);

/// A dense copy of the realized view (dtype t, shape s) living on `from`, placed
/// on `to` (host<->device through pinned staging, device<->device directly).
ir::BufferView copy_between_devices(const ir::BufferView& v, DType t, const Shape& s, Device from, Device to);

/// Routes storage on GPUs through the caching device allocators (idempotent;
/// called by the first cuda_realize / copy).
void install_cuda_storage_hooks();

}  // namespace tessel
