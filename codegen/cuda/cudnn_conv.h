// Convolution nodes (Conv, ConvGradInput, ConvGradWeight) of a realization on
// a GPU, computed by cuDNN (runtime/cuda/cudnn.h) on device memory.
//
// cuDNN's 2-D descriptor pads both sides of a dim alike. A node with more
// padding on one side ("same" with an even kernel: one more row and column
// after) gives cuDNN the smaller padding of each dim and adds the rest to the
// input explicitly: the input is copied into a zeroed buffer that is larger
// by the difference, on the side that has more. The output geometry is then
// the node's. The forward and the weight gradient read that padded input; the
// input gradient comes out padded too and its interior is the node's value.
// Operands that are not dense NCHW / OIHW are made dense by copy kernels.
#pragma once

#include <vector>

#include "codegen/conv_geometry.h"
#include "codegen/executor.h"
#include "codegen/ir.h"
#include "runtime/cuda/cudnn.h"

namespace tessel::cudagen {

/// A convolution node's problem for cuDNN: symmetric padding, over the input
/// padded by `extra_*` more on one side.
struct CudnnProblem {
  cuda::ConvProblem problem;
  int64_t extra_t = 0, extra_b = 0, extra_l = 0, extra_r = 0;
  bool padded() const { return extra_t || extra_b || extra_l || extra_r; }
};
CudnnProblem cudnn_problem(const ir::ConvGeometry& g);

/// Which cuDNN pass computes `n` (a Conv, ConvGradInput or ConvGradWeight node).
cuda::ConvPass conv_pass(const ir::Node& n);

/// Whether cuDNN computes `n` on GPU `ordinal`: f32 or f64, cuDNN loaded, and
/// an algorithm for the problem (else the caller runs it on the host, and
/// TESSEL_TRACE=jit says why).
bool conv_on_cudnn(int ordinal, const ir::Node& n);

/// The value of `n` on GPU `ordinal`, computed by cuDNN on the legacy default
/// stream; `args` are the values of n's args there, with any strides. Copies
/// (dense operands, explicit padding) are kernels launched on `ex`.
ir::BufferView cudnn_conv(exec::StepExecutor& ex, int ordinal, const ir::Node& n,
                          const std::vector<ir::BufferView>& args);

}  // namespace tessel::cudagen
