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

// Windows that tile the last two dims (stride = kernel, no padding or
// dilation: the common 2x2 pool) as selects of one reshaped view,
// [.., OH, KH, OW, KW]. Their gradients are then pads along the window axes
// that fuse with the sum over windows into one kernel, where strided slices'
// gradients need a spreading kernel each.
bool tiles(const Tensor& x, int64_t dim_h, int64_t dim_w, const WindowDim& h, const WindowDim& w) {
  auto plain = [](const WindowDim& d) {
    return d.stride == d.kernel && d.dilation == 1 && d.pad_before == 0 && d.pad_after == 0 && d.out * d.kernel <= d.size;
  };
  return dim_h == x.dim() - 2 && dim_w == x.dim() - 1 && plain(h) && plain(w);
}

}  // namespace

std::vector<Tensor> window_views(const Tensor& x, int64_t dim_h, int64_t dim_w, const WindowDim& h,
                                 const WindowDim& w, const Scalar& fill) {
  if (tiles(x, dim_h, dim_w, h, w)) {
    Tensor xc = x;
    if (h.out * h.kernel < h.size) xc = xc.narrow(dim_h, 0, h.out * h.kernel);  // floor mode drops the rest
    if (w.out * w.kernel < w.size) xc = xc.narrow(dim_w, 0, w.out * w.kernel);
    std::vector<int64_t> s(xc.shape().dims.begin(), xc.shape().dims.end() - 2);
    s.insert(s.end(), {h.out, h.kernel, w.out, w.kernel});
    Tensor x6 = xc.reshape(s);
    const int64_t r = x6.dim();
    std::vector<Tensor> views;
    views.reserve(static_cast<size_t>(h.kernel * w.kernel));
    for (int64_t kh = 0; kh < h.kernel; ++kh) {
      Tensor row = x6.select(r - 3, kh);  // [.., OH, OW, KW]
      for (int64_t kw = 0; kw < w.kernel; ++kw) views.push_back(row.select(r - 2, kw));
    }
    return views;
  }
  Tensor xp = padded(x, dim_h, dim_w, h, w, fill);
  std::vector<Tensor> views;
  views.reserve(static_cast<size_t>(h.kernel * w.kernel));
  for (int64_t kh = 0; kh < h.kernel; ++kh) {
    Tensor row = window(xp, dim_h, h, kh);
    for (int64_t kw = 0; kw < w.kernel; ++kw) views.push_back(window(row, dim_w, w, kw));
  }
  return views;
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
