#include "dsl/pooling.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <optional>

#include "codegen/builders.h"
#include "codegen/grad_mode.h"
#include "dsl/expr.h"
#include "dsl/indexing.h"
#include "dsl/windows.h"
#include "runtime/errors.h"

namespace tessel {
namespace {

struct PoolGeometry {
  detail::WindowDim h, w;
};

PoolGeometry pool_geometry(std::string_view op, const Tensor& x, Size2 k, Size2 stride, Size2 pad, Size2 dilation,
                           bool ceil_mode) {
  if (k.h <= 0 || k.w <= 0 || stride.h <= 0 || stride.w <= 0 || dilation.h <= 0 || dilation.w <= 0)
    throw ValueError(fmt::format("{}: kernel_size, stride and dilation must be positive, got kernel_size ({}, {}), "
                                 "stride ({}, {}), dilation ({}, {})",
                                 op, k.h, k.w, stride.h, stride.w, dilation.h, dilation.w));
  if (pad.h < 0 || pad.w < 0 || pad.h > k.h / 2 || pad.w > k.w / 2)
    throw ValueError(fmt::format("{}: padding ({}, {}) must be between 0 and half the kernel size ({}, {})", op, pad.h,
                                 pad.w, k.h, k.w));
  PoolGeometry g;
  const int64_t H = x.size(2), W = x.size(3);
  g.h = {H, k.h, stride.h, dilation.h, pad.h, pad.h};
  g.w = {W, k.w, stride.w, dilation.w, pad.w, pad.w};
  for (detail::WindowDim* d : {&g.h, &g.w}) {
    d->out = detail::pooled_size(d->size, d->kernel, d->stride, d->pad_before, d->dilation, ceil_mode);
    if (d->out <= 0)
      throw ShapeError(fmt::format("{}: the window ({} x {}, dilation ({}, {})) is larger than the padded input of "
                                   "shape {}; use a smaller kernel_size or pad the input",
                                   op, k.h, k.w, dilation.h, dilation.w, x.shape().str()));
    // ceil_mode's last window may reach past the padding: the reach is filled too.
    d->pad_after = std::max(d->pad_before, (d->out - 1) * d->stride + d->span() - d->size - d->pad_before);
  }
  return g;
}

Scalar lowest(DType t) {
  if (is_floating(t)) return -INFINITY;
  if (t == DType::b8) return false;
  return t == DType::i32 ? static_cast<int64_t>(std::numeric_limits<int32_t>::min())
                         : std::numeric_limits<int64_t>::min();
}

// The maximum of each window and the position of its first maximum (a NaN
// counts as the maximum, as in PyTorch): a running choice over the window's
// strided views in PyTorch's order, v = where(s_k > v, s_k, v), so the whole
// pool is one elementwise kernel reading its input kernel-size times.
// The gradient goes to the first maximum only, as PyTorch's does (a plain max
// would share it between ties). Differentiating the running choice itself
// would keep every choice and every partial maximum for backward and add up
// kernel-size shifted copies of the gradient; for windows that tile the
// input (stride == kernel, no padding or dilation: LeNet's pools) the value
// is computed without gradients instead and differentiated as
//   sum over the window of where(position == first maximum, x, 0),
// whose backward is one elementwise kernel over the input.
Tensor::ValuesIndices max_pool_impl(const Tensor& input, Size2 k, const MaxPool2dOptions& o, bool want_indices) {
  constexpr std::string_view op = "max_pool2d";
  auto [x, unbatched] = detail::batched_4d(op, input);
  const Size2 s = o.stride.value_or(k);
  PoolGeometry g = pool_geometry(op, x, k, s, o.padding, o.dilation, o.ceil_mode);
  const bool tiles = s.h == k.h && s.w == k.w && o.padding.h == 0 && o.padding.w == 0 && o.dilation.h == 1 &&
                     o.dilation.w == 1 && g.h.out * k.h <= g.h.size && g.w.out * k.w <= g.w.size;
  const bool via_first_max = tiles && grad_enabled() && x.requires_grad() && is_floating(x.dtype());
  // local: the chosen view's number i (kh = i / KW, kw = i % KW); which: its
  // offset in the flattened H x W plane, kh * dh * W + kw * dw.
  Tensor values, local, which;
  const int64_t W = x.size(3);
  {
    std::optional<NoGradGuard> no_grad;
    if (via_first_max) no_grad.emplace();
    std::vector<Tensor> views = detail::window_views(x, 2, 3, g.h, g.w, lowest(x.dtype()));
    values = views[0];
    auto zeros_i64 = [&] {
      return Tensor::from_node(ir::constant(ir::ScalarValue::of_int(0), DType::i64, values.shape()), x.device());
    };
    // i32: the narrowest integer kernels compute as fast as the floats they choose between.
    if (via_first_max)
      local = Tensor::from_node(ir::constant(ir::ScalarValue::of_int(0), DType::i32, values.shape()), x.device());
    if (want_indices) which = zeros_i64();
    for (size_t i = 1; i < views.size(); ++i) {
      Tensor take = views[i] > values;
      if (is_floating(x.dtype()))
        take = binary_op(ir::Op::Or, take, binary_op(ir::Op::And, views[i].isnan(), logical_not(values.isnan())));
      values = where(take, views[i], values);
      const int64_t kh = static_cast<int64_t>(i) / k.w, kw = static_cast<int64_t>(i) % k.w;
      if (via_first_max) local = masked_fill(local, take, static_cast<int64_t>(i));
      if (want_indices) which = masked_fill(which, take, kh * o.dilation.h * W + kw * o.dilation.w);
    }
  }
  if (via_first_max) {
    const int64_t N = x.size(0), C = x.size(1), OH = g.h.out, OW = g.w.out;
    Tensor tiled = x;
    if (OH * k.h < g.h.size) tiled = tiled.slice(2, 0, OH * k.h);
    if (OW * k.w < g.w.size) tiled = tiled.slice(3, 0, OW * k.w);
    Tensor windows = tiled.reshape({N, C, OH, k.h, OW, k.w});
    // Each element's number in its window, kh * KW + kw: index arithmetic
    // inside the kernel that reads it, no memory.
    const Shape in_window{1, 1, 1, k.h, 1, k.w};
    Tensor position = (Tensor::from_node(ir::iota(in_window, 3), x.device()) * k.w +
                       Tensor::from_node(ir::iota(in_window, 5), x.device()))
                          .to(DType::i32);
    Tensor first_max = local.reshape({N, C, OH, 1, OW, 1}) == position;
    Tensor surrogate = where(first_max, windows, 0.0).sum({3, 5});
    values = Tensor::from_node(ir::with_gradient_via(values.node(), surrogate.node()), x.device());
  }
  if (want_indices) {
    // Plus where the window starts: row oh*sh - ph, column ow*sw - pw.
    Tensor oh = arange(g.h.out, DType::i64, x.device()).reshape({-1, 1});
    Tensor ow = arange(g.w.out, DType::i64, x.device()).reshape({1, -1});
    which = which + ((oh * s.h - o.padding.h) * W + (ow * s.w - o.padding.w));
  }
  if (unbatched) {
    values = values.squeeze(0);
    if (which.defined()) which = which.squeeze(0);
  }
  return {values, which};
}

}  // namespace

Tensor max_pool2d(const Tensor& x, Size2 kernel_size, const MaxPool2dOptions& options) {
  // max_pool(relu(y)) is relu(max_pool(y)), values and gradients alike: ReLU
  // keeps the order of positive values, and a window it flattens to ties at 0
  // has a gradient of 0 whichever tie is chosen (NaN stays NaN with gradient
  // 0 either way). Pooling first puts the ReLU and its backward mask on the
  // pooled tensor (a quarter of the size for 2x2 windows): backward no longer
  // masks the full-size gradient in a pass after the pool's scatter. Only
  // here: the indices of max_pool2d_with_indices would differ on such ties.
  const ir::Node& n = *x.node();
  if (n.op == ir::Op::Relu && !n.realized() && is_floating(x.dtype()))
    return max_pool_impl(Tensor::from_node(n.args[0], x.device()), kernel_size, options, false).values.relu();
  return max_pool_impl(x, kernel_size, options, false).values;
}

Tensor::ValuesIndices max_pool2d_with_indices(const Tensor& input, Size2 k, const MaxPool2dOptions& o) {
  return max_pool_impl(input, k, o, true);
}

Tensor avg_pool2d(const Tensor& input, Size2 k, const AvgPool2dOptions& o) {
  constexpr std::string_view op = "avg_pool2d";
  auto [x, unbatched] = detail::batched_4d(op, input);
  if (!is_floating(x.dtype()))
    throw DTypeError(fmt::format("avg_pool2d: expected a floating input, got {}; convert it with .to(DType::f32)",
                                 dtype_name(x.dtype())));
  if (o.divisor_override && *o.divisor_override == 0)
    throw ValueError("avg_pool2d: divisor_override must be non-zero");
  const Size2 stride = o.stride.value_or(k);
  PoolGeometry g = pool_geometry(op, x, k, stride, o.padding, 1, o.ceil_mode);
  std::vector<Tensor> views = detail::window_views(x, 2, 3, g.h, g.w, 0.0);
  Tensor sums = views[0];
  for (size_t i = 1; i < views.size(); ++i) sums = sums + views[i];  // one elementwise kernel
  Tensor y;
  if (o.divisor_override) {
    y = sums / static_cast<double>(*o.divisor_override);
  } else {
    // Each window's divisor, as PyTorch counts it: the window clipped to the
    // padded input (count_include_pad) or to the input itself.
    auto counts = [&](const detail::WindowDim& d) {
      std::vector<double> c(static_cast<size_t>(d.out));
      for (int64_t i = 0; i < d.out; ++i) {
        int64_t start = i * d.stride - d.pad_before, end = std::min(start + d.kernel, d.size + d.pad_before);
        if (!o.count_include_pad) start = std::max<int64_t>(start, 0), end = std::min(end, d.size);
        c[static_cast<size_t>(i)] = static_cast<double>(end - start);
      }
      return c;
    };
    Tensor ch = from_vector(counts(g.h), Shape{g.h.out, 1}, x.device());
    Tensor cw = from_vector(counts(g.w), Shape{1, g.w.out}, x.device());
    y = sums / (ch * cw).to(x.dtype());
  }
  return unbatched ? y.squeeze(0) : y;
}

Tensor adaptive_avg_pool2d(const Tensor& input, Size2 out) {
  constexpr std::string_view op = "adaptive_avg_pool2d";
  auto [x, unbatched] = detail::batched_4d(op, input);
  if (out.h <= 0 || out.w <= 0)
    throw ValueError(fmt::format("adaptive_avg_pool2d: output_size must be positive, got ({}, {})", out.h, out.w));
  if (!is_floating(x.dtype()))
    throw DTypeError(fmt::format("adaptive_avg_pool2d: expected a floating input, got {}; convert it with "
                                 ".to(DType::f32)",
                                 dtype_name(x.dtype())));
  const int64_t H = x.size(2), W = x.size(3);
  Tensor y;
  if (out.h == 1 && out.w == 1) {
    y = x.mean({2, 3}, true);
  } else if (H % out.h == 0 && W % out.w == 0) {
    y = avg_pool2d(x, {H / out.h, W / out.w});
  } else {
    // Cell i spans [floor(i H / OH), ceil((i + 1) H / OH)): cells of unequal size.
    std::vector<Tensor> cells;
    for (int64_t i = 0; i < out.h; ++i) {
      const int64_t r0 = i * H / out.h, r1 = ((i + 1) * H + out.h - 1) / out.h;
      for (int64_t j = 0; j < out.w; ++j) {
        const int64_t c0 = j * W / out.w, c1 = ((j + 1) * W + out.w - 1) / out.w;
        cells.push_back(x.slice(2, r0, r1).slice(3, c0, c1).mean({2, 3}));
      }
    }
    y = stack(cells, 2).reshape({x.size(0), x.size(1), out.h, out.w});
  }
  return unbatched ? y.squeeze(0) : y;
}

}  // namespace tessel
