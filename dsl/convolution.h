// Convolutions as torch.nn.functional spells them: conv1d, conv2d and
// conv_transpose2d over NCHW tensors, with stride, padding (numbers, "same",
// "valid"), dilation and groups (depthwise included).
//
// A convolution is one IR node (ir::Op::Conv), and each of its gradients one
// more (ConvGradInput, ConvGradWeight), computed by the device's engine:
// oneDNN for f32 on the CPU (direct loops otherwise), cuDNN for f32 and f64
// on a GPU (the host's loops otherwise); the ref interpreter's loops are the
// oracle. The bias, and any elementwise op that reads the output, fuse into
// one kernel after it. conv_transpose2d is a conv2d of the spread and padded
// input with the flipped weight.
//
//   Tensor y = conv2d(x, w, b, {.stride = 2, .padding = 1});      // [N, C, H, W] -> [N, O, H/2, W/2]
//   Tensor z = conv2d(x, w, {}, {.padding = "same", .groups = C});  // depthwise
#pragma once

#include <cstdint>
#include <string>

#include "dsl/tensor.h"

namespace tessel {

/// One size for both spatial dims, or (height, width), as torch's int-or-tuple arguments.
struct Size2 {
  int64_t h = 0, w = 0;
  Size2(int64_t v) : h(v), w(v) {}  // NOLINT: implicit, as torch's int argument
  Size2(int64_t height, int64_t width) : h(height), w(width) {}
  bool operator==(const Size2&) const = default;
};

/// A convolution's zero padding: numbers (one, or height and width), or
/// "valid" (none) or "same" (the output has the input's size; stride 1 only).
struct ConvPadding {
  Size2 size = 0;
  std::string mode;  // "", "same" or "valid"
  ConvPadding(int64_t v) : size(v) {}  // NOLINT
  ConvPadding(int v) : size(v) {}      // NOLINT: a literal 0 is a number, not a null string
  ConvPadding(int64_t height, int64_t width) : size(height, width) {}
  ConvPadding(const char* m) : mode(m) {}  // NOLINT
  ConvPadding(std::string m) : mode(std::move(m)) {}  // NOLINT
};

/// Options of conv2d, as torch.nn.functional.conv2d's.
struct Conv2dOptions {
  Size2 stride = 1;
  ConvPadding padding = 0;
  Size2 dilation = 1;
  int64_t groups = 1;
};

/// Options of conv1d, as torch.nn.functional.conv1d's.
struct Conv1dOptions {
  int64_t stride = 1;
  ConvPadding padding = 0;  // one number, "same" or "valid"
  int64_t dilation = 1;
  int64_t groups = 1;
};

/// Options of conv_transpose2d, as torch.nn.functional.conv_transpose2d's.
struct ConvTranspose2dOptions {
  Size2 stride = 1;
  Size2 padding = 0;
  Size2 output_padding = 0;
  int64_t groups = 1;
  Size2 dilation = 1;
};

/// torch.nn.functional.conv2d: x [N, C, H, W] (or [C, H, W]) with weight
/// [O, C / groups, KH, KW] and an optional bias [O] -> [N, O, OH, OW], where
/// OH = (H + 2 padding - dilation (KH - 1) - 1) / stride + 1.
///
///   Tensor y = conv2d(x, w, b, {.padding = 1});     // 3x3, same size
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), const Conv2dOptions& options = {});

/// torch.nn.functional.conv1d: x [N, C, L] (or [C, L]) with weight [O, C / groups, K].
///
///   Tensor y = conv1d(x, w, b, {.padding = "same"});
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), const Conv1dOptions& options = {});

/// torch.nn.functional.conv_transpose2d: the gradient of conv2d with respect
/// to its input, as an op: x [N, C, H, W] with weight [C, O / groups, KH, KW]
/// -> [N, O, (H - 1) stride - 2 padding + dilation (KH - 1) + output_padding + 1, ...].
///
///   Tensor up = conv_transpose2d(x, w, b, {.stride = 2, .padding = 1, .output_padding = 1});
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                        const ConvTranspose2dOptions& options = {});

}  // namespace tessel
