#include "dsl/convolution.h"

#include <fmt/format.h>

#include "codegen/builders.h"
#include "dsl/expr.h"
#include "dsl/indexing.h"
#include "dsl/windows.h"
#include "runtime/errors.h"

namespace tessel {
namespace {

void check_conv_operands(std::string_view op, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  if (!is_floating(x.dtype()) || !is_floating(weight.dtype()))
    throw DTypeError(fmt::format("{}: expected floating input and weight, got {} and {}; convert the input with "
                                 ".to(DType::f32)",
                                 op, dtype_name(x.dtype()), dtype_name(weight.dtype())));
  if (x.dtype() != weight.dtype())
    throw DTypeError(fmt::format("{}: input ({}) and weight ({}) must have the same dtype; convert one with .to()", op,
                                 dtype_name(x.dtype()), dtype_name(weight.dtype())));
  if (!(x.device() == weight.device()) || (bias.defined() && !(bias.device() == x.device())))
    throw DeviceError(fmt::format("{}: input, weight and bias must be on one device; the input is on {} and the "
                                  "weight on {}; move them with .to({})",
                                  op, x.device().str(), weight.device().str(), x.device().str()));
}

void check_positive(std::string_view op, std::string_view what, Size2 s) {
  if (s.h <= 0 || s.w <= 0)
    throw ValueError(fmt::format("{}: {} must be positive, got ({}, {})", op, what, s.h, s.w));
}

// conv2d, with errors naming `op` and the shapes the caller was given
// (conv1d passes its 3-D ones).
Tensor conv2d_as(std::string_view op, const Tensor& input, const Tensor& weight, const Tensor& bias,
                 const Conv2dOptions& o, const Shape& shown_input, const Shape& shown_weight) {
  check_conv_operands(op, input, weight, bias);
  auto [x, unbatched] = detail::batched_4d(op, input);
  const int64_t C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t O = weight.size(0), Cg = weight.size(1), KH = weight.size(2), KW = weight.size(3);
  const int64_t g = o.groups;
  if (g <= 0) throw ValueError(fmt::format("{}: groups must be positive, got {}", op, g));
  check_positive(op, "stride", o.stride);
  check_positive(op, "dilation", o.dilation);
  if (C % g != 0 || O % g != 0)
    throw ValueError(fmt::format("{}: groups={} must divide both in_channels ({}) and out_channels ({})", op, g, C, O));
  if (Cg * g != C)
    throw ShapeError(fmt::format("{}: the input has {} channels (shape {}) but the weight {} expects {} x groups "
                                 "{} = {}; the input's dim 1 must equal weight.size(1) * groups",
                                 op, C, shown_input.str(), shown_weight.str(), Cg, g, Cg * g));
  if (bias.defined() && !(bias.dim() == 1 && bias.size(0) == O))
    throw ShapeError(fmt::format("{}: expected a bias of shape [{}] (one per output channel), got {}", op, O,
                                 bias.shape().str()));

  detail::WindowDim h{H, KH, o.stride.h, o.dilation.h}, w{W, KW, o.stride.w, o.dilation.w};
  const std::string& mode = o.padding.mode;
  if (mode == "same") {
    if (o.stride.h != 1 || o.stride.w != 1)
      throw ValueError(fmt::format("{}: padding=\"same\" needs stride 1, got stride ({}, {}); give the padding "
                                   "as numbers instead",
                                   op, o.stride.h, o.stride.w));
    for (detail::WindowDim* d : {&h, &w}) {  // PyTorch puts the odd element on the far side
      const int64_t total = d->dilation * (d->kernel - 1);
      d->pad_before = total / 2;
      d->pad_after = total - total / 2;
    }
  } else if (mode.empty() || mode == "valid") {
    if (o.padding.size.h < 0 || o.padding.size.w < 0)
      throw ValueError(fmt::format("{}: padding must be non-negative, got ({}, {})", op, o.padding.size.h,
                                   o.padding.size.w));
    if (mode.empty()) {
      h.pad_before = h.pad_after = o.padding.size.h;
      w.pad_before = w.pad_after = o.padding.size.w;
    }
  } else {
    throw ValueError(fmt::format("{}: padding must be numbers, \"same\" or \"valid\", got \"{}\"", op, mode));
  }
  for (detail::WindowDim* d : {&h, &w}) {
    const int64_t padded = d->size + d->pad_before + d->pad_after;
    if (d->span() > padded)
      throw ShapeError(fmt::format("{}: the kernel ({} x {}, dilation ({}, {})) is larger than the padded input "
                                   "({} x {}) of shape {}; pad the input or use a smaller kernel",
                                   op, KH, KW, o.dilation.h, o.dilation.w, H + h.pad_before + h.pad_after,
                                   W + w.pad_before + w.pad_after, shown_input.str()));
  }

  // A convolution is one node, computed by the device's engine (oneDNN or
  // direct loops on the CPU, cuDNN on a GPU), and so are both of its gradients.
  ir::ConvAttrs a{.stride = {o.stride.h, o.stride.w},
                  .pad_before = {h.pad_before, w.pad_before},
                  .pad_after = {h.pad_after, w.pad_after},
                  .dilation = {o.dilation.h, o.dilation.w},
                  .groups = g};
  Tensor y = Tensor::from_node(ir::conv(x.node(), weight.node(), a), x.device());
  if (bias.defined()) y = y + bias.reshape({1, O, 1, 1});
  return unbatched ? y.squeeze(0) : y;
}

}  // namespace

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Conv2dOptions& o) {
  if (weight.dim() != 4)
    throw ShapeError(fmt::format("conv2d: expected a 4-D weight [out_channels, in_channels / groups, kH, kW], got "
                                 "shape {}",
                                 weight.shape().str()));
  return conv2d_as("conv2d", input, weight, bias, o, input.shape(), weight.shape());
}

Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Conv1dOptions& o) {
  if (input.dim() != 2 && input.dim() != 3)
    throw ShapeError(fmt::format("conv1d: expected a 2-D [C, L] or 3-D [N, C, L] input, got shape {}",
                                 input.shape().str()));
  if (weight.dim() != 3)
    throw ShapeError(fmt::format("conv1d: expected a 3-D weight [out_channels, in_channels / groups, k], got shape {}",
                                 weight.shape().str()));
  if (o.padding.mode.empty() && o.padding.size.h != o.padding.size.w)
    throw ValueError(fmt::format("conv1d: padding is one number, got ({}, {})", o.padding.size.h, o.padding.size.w));
  Conv2dOptions o2{.stride = {1, o.stride}, .padding = 0, .dilation = {1, o.dilation}, .groups = o.groups};
  o2.padding = o.padding.mode.empty() ? ConvPadding(0, o.padding.size.w) : ConvPadding(o.padding.mode);
  const int64_t spatial = input.dim() - 1;  // the length dim; a height of 1 goes before it
  Tensor y = conv2d_as("conv1d", input.unsqueeze(spatial), weight.unsqueeze(2), bias, o2, input.shape(), weight.shape());
  return y.squeeze(y.dim() - 2);
}

Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const ConvTranspose2dOptions& o) {
  constexpr std::string_view op = "conv_transpose2d";
  check_conv_operands(op, input, weight, bias);
  auto [x, unbatched] = detail::batched_4d(op, input);
  if (weight.dim() != 4)
    throw ShapeError(fmt::format("conv_transpose2d: expected a 4-D weight [in_channels, out_channels / groups, kH, "
                                 "kW], got shape {}",
                                 weight.shape().str()));
  const int64_t C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t Og = weight.size(1), KH = weight.size(2), KW = weight.size(3), g = o.groups;
  if (g <= 0) throw ValueError(fmt::format("conv_transpose2d: groups must be positive, got {}", g));
  check_positive(op, "stride", o.stride);
  check_positive(op, "dilation", o.dilation);
  if (weight.size(0) != C)
    throw ShapeError(fmt::format("conv_transpose2d: the input has {} channels (shape {}) but the weight {} expects {} "
                                 "(weight.size(0))",
                                 C, input.shape().str(), weight.shape().str(), weight.size(0)));
  if (C % g != 0)
    throw ValueError(fmt::format("conv_transpose2d: groups={} must divide in_channels ({})", g, C));
  if (o.padding.h < 0 || o.padding.w < 0 || o.output_padding.h < 0 || o.output_padding.w < 0)
    throw ValueError("conv_transpose2d: padding and output_padding must be non-negative");
  if ((o.output_padding.h >= o.stride.h && o.output_padding.h >= o.dilation.h) ||
      (o.output_padding.w >= o.stride.w && o.output_padding.w >= o.dilation.w))
    throw ValueError(fmt::format("conv_transpose2d: output_padding ({}, {}) must be smaller than either stride ({}, "
                                 "{}) or dilation ({}, {})",
                                 o.output_padding.h, o.output_padding.w, o.stride.h, o.stride.w, o.dilation.h,
                                 o.dilation.w));
  const int64_t O = Og * g;
  const int64_t OH = (H - 1) * o.stride.h - 2 * o.padding.h + o.dilation.h * (KH - 1) + o.output_padding.h + 1;
  const int64_t OW = (W - 1) * o.stride.w - 2 * o.padding.w + o.dilation.w * (KW - 1) + o.output_padding.w + 1;
  if (OH <= 0 || OW <= 0)
    throw ShapeError(fmt::format("conv_transpose2d: the output would be {} x {} for input {} and weight {}; reduce "
                                 "the padding",
                                 OH, OW, input.shape().str(), weight.shape().str()));
  if (bias.defined() && !(bias.dim() == 1 && bias.size(0) == O))
    throw ShapeError(fmt::format("conv_transpose2d: expected a bias of shape [{}] (one per output channel), got {}", O,
                                 bias.shape().str()));

  // The input gradient of a convolution as a convolution: zeros between the
  // input's elements (stride), a border of dilation (k - 1) - padding (a
  // negative one crops), output_padding more at the far side, and the weight
  // with in/out swapped per group and flipped in space.
  auto spread = [](const Tensor& t, int64_t dim, int64_t stride) {
    if (stride == 1) return t;
    const int64_t n = t.size(dim);
    std::vector<int64_t> merged = t.shape().dims;
    merged[static_cast<size_t>(dim)] = n * stride;
    Tensor moved = t.unsqueeze(dim + 1);  // [..., n, 1, ...] -> pad the 1 to `stride`
    std::vector<int64_t> w(static_cast<size_t>(2 * (moved.dim() - dim - 1)), 0);
    w[w.size() - 1] = stride - 1;
    return pad(moved, w).reshape(merged).narrow(dim, 0, (n - 1) * stride + 1);
  };
  Tensor xs = spread(spread(x, 2, o.stride.h), 3, o.stride.w);
  const int64_t bh = o.dilation.h * (KH - 1) - o.padding.h, bw = o.dilation.w * (KW - 1) - o.padding.w;
  Tensor xp = pad(xs, {bw, bw + o.output_padding.w, bh, bh + o.output_padding.h});
  Tensor wt = flip(weight.reshape({g, C / g, Og, KH, KW}).transpose(1, 2).reshape({O, C / g, KH, KW}), {2, 3});
  Tensor y = conv2d(xp, wt, bias, {.stride = 1, .padding = 0, .dilation = o.dilation, .groups = g});
  return unbatched ? y.squeeze(0) : y;
}

}  // namespace tessel
