// Direct loops for the three convolution nodes: the oracle the engines
// (oneDNN, generated kernels) are tested against, and what computes
// convolutions in dtypes no engine has (f64). Dense row-major buffers in the
// layouts of codegen/conv_geometry.h; accumulation in double.
#pragma once

#include "codegen/conv_geometry.h"

namespace tessel::ref {

/// y = conv(x, w).
template <class T> void conv_forward(const ir::ConvGeometry& g, const T* x, const T* w, T* y);
/// gx = the input gradient, from gy and w.
template <class T> void conv_backward_data(const ir::ConvGeometry& g, const T* gy, const T* w, T* gx);
/// gw = the weight gradient, from x and gy.
template <class T> void conv_backward_weights(const ir::ConvGeometry& g, const T* x, const T* gy, T* gw);

}  // namespace tessel::ref
