// One 2-D convolution's geometry, in PyTorch's conventions, as every engine
// that computes a Conv, ConvGradInput or ConvGradWeight node sees it: the ref
// loops (the oracle), oneDNN on the CPU and cuDNN on a GPU.
//
//   input  [n, c, h, w]            (NCHW)
//   weight [o, c / groups, kh, kw] (OIHW)
//   output [n, o, oh, ow]
//   oh = (h + pad_t + pad_b - dilation_h * (kh - 1) - 1) / stride_h + 1
//
// Dilation 1 is a dense kernel; padding may differ before and after ("same"
// with an even kernel). Output element (oy, ox) reads input row
// oy * stride_h - pad_t + ky * dilation_h for kernel row ky.
#pragma once

#include <cstdint>

namespace tessel::ir {

struct Node;

struct ConvGeometry {
  int64_t n = 1, c = 1, h = 1, w = 1;
  int64_t o = 1, kh = 1, kw = 1, groups = 1;
  int64_t stride_h = 1, stride_w = 1, pad_t = 0, pad_l = 0, pad_b = 0, pad_r = 0, dilation_h = 1, dilation_w = 1;
  int64_t oh = 1, ow = 1;
  bool operator==(const ConvGeometry&) const = default;
};

/// The geometry of a Conv, ConvGradInput or ConvGradWeight node, from its
/// attributes, its args' shapes and its own.
ConvGeometry conv_geometry(const Node& n);

}  // namespace tessel::ir
