// The sliding windows of a 2-D spatial input, shared by convolution (its
// geometry and argument checks) and pooling (internal to dsl/). A window read
// is a strided slice of the padded input: pad and slices are IR ops, so a pool
// reads its windows inside the one kernel that combines them and never stores
// them on their own; autodiff turns the slices into pads, so the gradient of a
// pool is a fused sum of shifted copies.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "dsl/convolution.h"

namespace tessel::detail {

/// Geometry of windows along one spatial dim.
struct WindowDim {
  int64_t size = 0;         // input size
  int64_t kernel = 1;
  int64_t stride = 1;
  int64_t dilation = 1;
  int64_t pad_before = 0;
  int64_t pad_after = 0;    // may exceed pad_before (ceil_mode, "same" with an even kernel)
  int64_t out = 0;          // number of windows
  int64_t span() const { return dilation * (kernel - 1) + 1; }
};

/// The windows of x along dims `dim_h` < `dim_w` as a list of strided views
/// of x padded with `fill`, in PyTorch's order (kh * w.kernel + kw), each of
/// x's shape with dim_h and dim_w replaced by h.out and w.out: a pool combines
/// them elementwise, so it is one kernel that reads its input kernel-size
/// times and stores nothing in between.
std::vector<Tensor> window_views(const Tensor& x, int64_t dim_h, int64_t dim_w, const WindowDim& h,
                                 const WindowDim& w, const Scalar& fill);

/// "[N, C, H, W] or [C, H, W]": x with a batch dim (and whether one was added),
/// or a ShapeError naming `op` and x's shape.
std::pair<Tensor, bool> batched_4d(std::string_view op, const Tensor& x);

/// PyTorch's pooling output size along one dim (ceil_mode rounds up, but the
/// last window must start inside the input or its left padding).
int64_t pooled_size(int64_t size, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation, bool ceil_mode);

}  // namespace tessel::detail
