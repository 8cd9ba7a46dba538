#include "dsl/windows.h"

#include <fmt/format.h>

#include "dsl/expr.h"
#include "dsl/indexing.h"
#include "runtime/errors.h"

namespace tessel::detail {

namespace {

Tensor padded(const Tensor& x, int64_t dim_h, int64_t dim_w, const WindowDim& h, const WindowDim& w,
              const Scalar& fill) {
  const int64_t rank = x.dim();
  Tensor xp = x;
  if (h.pad_before || h.pad_after || w.pad_before || w.pad_after) {
    // pad() takes (before, after) pairs from the last dim back to the first it pads.
    const int64_t first = std::min(dim_h, dim_w);
    std::vector<int64_t> widths;
    for (int64_t d = rank - 1; d >= first; --d) {
      if (d == dim_h) widths.insert(widths.end(), {h.pad_before, h.pad_after});
      else if (d == dim_w) widths.insert(widths.end(), {w.pad_before, w.pad_after});
      else widths.insert(widths.end(), {0, 0});
    }
    xp = pad(x, widths, fill);
  }
  return xp;
}

Tensor window(const Tensor& xp, int64_t dim, const WindowDim& d, int64_t k) {
  const int64_t start = k * d.dilation;
  return xp.slice(dim, start, start + d.stride * (d.out - 1) + 1, d.stride);
}

}  // namespace

std::vector<Tensor> window_views(const Tensor& x, int64_t dim_h, int64_t dim_w, const WindowDim& h,
                                 const WindowDim& w, const Scalar& fill) {
  Tensor xp = padded(x, dim_h, dim_w, h, w, fill);
  std::vector<Tensor> views;
  views.reserve(static_cast<size_t>(h.kernel * w.kernel));
  for (int64_t kh = 0; kh < h.kernel; ++kh) {
    Tensor row = window(xp, dim_h, h, kh);
    for (int64_t kw = 0; kw < w.kernel; ++kw) views.push_back(window(row, dim_w, w, kw));
  }
  return views;
}

Tensor unfold_windows(const Tensor& x, int64_t dim_h, int64_t dim_w, const WindowDim& h, const WindowDim& w,
                      const Scalar& fill) {
  Tensor xp = padded(x, dim_h, dim_w, h, w, fill);
  // Two passes, one per spatial dim: each stacks windows that lie one
  // step apart in memory, which the kernel IR reads as one strided load
  // (codegen/lower.cpp strided_stack), and the gradient of each is a sum of
  // kernel-size shifted copies, not of their product. Each new axis goes
  // right after the width, so the dims after it (channels, when they come
  // last) stay contiguous runs in both passes.
  auto along = [&](const Tensor& t, int64_t dim, const WindowDim& d) {
    std::vector<Tensor> parts;
    parts.reserve(static_cast<size_t>(d.kernel));
    for (int64_t k = 0; k < d.kernel; ++k) parts.push_back(window(t, dim, d, k));
    return parts.size() == 1 ? parts[0].unsqueeze(dim_w + 1) : stack(parts, dim_w + 1);
  };
  Tensor rows = along(xp, dim_h, h);   // [..., OH, ..., W, KH, ...]
  return along(rows, dim_w, w);        // [..., OH, ..., OW, KW, KH, ...]
}

std::pair<Tensor, bool> batched_4d(std::string_view op, const Tensor& x) {
  if (x.dim() == 4) return {x, false};
  if (x.dim() == 3) return {x.unsqueeze(0), true};
  throw ShapeError(fmt::format("{}: expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, got shape {}", op,
                               x.shape().str()));
}

int64_t pooled_size(int64_t size, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation, bool ceil_mode) {
  const int64_t span = dilation * (kernel - 1) + 1;
  const int64_t room = size + 2 * pad - span;
  if (room < 0) return 0;
  int64_t out = (ceil_mode ? (room + stride - 1) / stride : room / stride) + 1;
  if (ceil_mode && (out - 1) * stride >= size + pad) --out;
  return out;
}

}  // namespace tessel::detail
