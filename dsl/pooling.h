// Pooling as torch.nn.functional spells it: max_pool2d (with the indices
// PyTorch returns), avg_pool2d and adaptive_avg_pool2d over [N, C, H, W] or
// [C, H, W]. A pool combines the kernel_size strided views of its (padded)
// input elementwise, so it is one kernel that reads its input kernel-size
// times and stores only its output. The gradient of a max pool goes to the
// first maximum of each window only, as in PyTorch.
//
//   Tensor p = max_pool2d(x, 2);                               // [N, C, H/2, W/2]
//   Tensor a = avg_pool2d(x, 3, {.stride = 1, .padding = 1});  // same size
//   Tensor g = adaptive_avg_pool2d(x, 1);                      // [N, C, 1, 1]
#pragma once

#include <optional>

#include "dsl/convolution.h"

namespace tessel {

/// Options of max_pool2d, as torch.nn.functional.max_pool2d's (stride
/// defaults to kernel_size; padding is -inf and at most half the kernel).
struct MaxPool2dOptions {
  std::optional<Size2> stride;
  Size2 padding = 0;
  Size2 dilation = 1;
  bool ceil_mode = false;
};

/// Options of avg_pool2d, as torch.nn.functional.avg_pool2d's.
struct AvgPool2dOptions {
  std::optional<Size2> stride;
  Size2 padding = 0;
  bool ceil_mode = false;
  /// The zeros of the padding count in each window's divisor.
  bool count_include_pad = true;
  /// Divides every window by this instead.
  std::optional<int64_t> divisor_override;
};

/// The maximum of each window.
///
///   Tensor p = max_pool2d(x, 2);   // [64, 6, 28, 28] -> [64, 6, 14, 14]
Tensor max_pool2d(const Tensor& x, Size2 kernel_size, const MaxPool2dOptions& options = {});
/// The maximum of each window and where it is: int64 positions in the flattened
/// H x W plane of the input, as PyTorch's return_indices=True.
Tensor::ValuesIndices max_pool2d_with_indices(const Tensor& x, Size2 kernel_size, const MaxPool2dOptions& options = {});
/// The mean of each window.
Tensor avg_pool2d(const Tensor& x, Size2 kernel_size, const AvgPool2dOptions& options = {});
/// The mean over output_size cells, cell i spanning [floor(i H / OH), ceil((i + 1) H / OH)).
///
///   Tensor g = adaptive_avg_pool2d(x, 1);   // global average pool
Tensor adaptive_avg_pool2d(const Tensor& x, Size2 output_size);

}  // namespace tessel
