// 2-D convolution on oneDNN (CPU): forward, backward-data, backward-weights.
//
// Each call looks its primitives up in a small process-wide cache keyed by
// (geometry, direction, bias or not, thread count), so only the first call of
// a shape creates anything. oneDNN picks its own blocked layouts; the plain
// NCHW / OIHW buffers the callers hold are reordered in and the result out.
// oneDNN runs on as many OpenMP threads as tessel's CPU kernels use
// (tessel::num_threads(); one inside a parallel_for chunk). Any thread may
// call; convolutions run one at a time, each on all those threads.
//
//   onednn::ConvGeometry g{.n = 64, .c = 32, .h = 28, .w = 28, .o = 64, .kh = 3, .kw = 3,
//                          .pad_t = 1, .pad_l = 1, .pad_b = 1, .pad_r = 1, .oh = 28, .ow = 28};
//   if (onednn::available()) onednn::conv_forward(g, x, w, bias, y);
#pragma once

#include <cstdint>

#include "codegen/conv_geometry.h"

namespace tessel::onednn {

/// One convolution's geometry (codegen/conv_geometry.h: NCHW input, OIHW weight).
using ConvGeometry = ir::ConvGeometry;

/// Whether oneDNN was built in (false: callers use their own path).
bool available();

/// y = conv(x, w) + bias (bias may be null). All f32, dense row-major in the layouts above.
void conv_forward(const ConvGeometry& g, const float* x, const float* w, const float* bias, float* y);

/// gx = the gradient of the input given gy (dense NCHW) and w.
void conv_backward_data(const ConvGeometry& g, const float* gy, const float* w, float* gx);

/// gw = the gradient of the weight given x and gy; gbias (may be null) = gy summed over n, oh, ow.
void conv_backward_weights(const ConvGeometry& g, const float* x, const float* gy, float* gw, float* gbias);

/// oneDNN primitives (convolutions and reorders) this process has created so
/// far: a call whose primitives are cached leaves it unchanged. 0 without oneDNN.
std::int64_t primitives_created();

}  // namespace tessel::onednn
