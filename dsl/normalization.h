// Batch and group normalization as torch.nn.functional spells them. Both
// are composites of the IR's reductions and elementwise ops, so they fuse:
// in eval mode batch_norm is one elementwise expression that joins the
// kernel reading the convolution before it, and in training the batch mean
// and variance are reductions over the same rows (one row program).
//
//   Tensor y = batch_norm(x, running_mean, running_var, w, b, /*training=*/true);
//   Tensor g = group_norm(x, 8, w, b);
#pragma once

#include <cstdint>

#include "dsl/tensor.h"

namespace tessel {

/// torch.nn.functional.batch_norm over x [N, C, *]: each channel normalized
/// by the batch's mean and population variance (training) or by
/// running_mean/running_var (eval), then scaled by weight and shifted by bias
/// when defined. In training, running_mean and running_var (when defined) are
/// updated in place: (1 - momentum) running + momentum batch, the variance
/// unbiased (N / (N - 1)), as PyTorch does.
///
///   Tensor y = batch_norm(x, rm, rv, w, b, true, 0.1, 1e-5);
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight = Tensor(), const Tensor& bias = Tensor(), bool training = false,
                  double momentum = 0.1, double eps = 1e-5);

/// torch.nn.functional.group_norm: x [N, C, *] normalized over each of
/// num_groups groups of C / num_groups channels (population variance), then
/// a per-channel affine when weight/bias [C] are defined.
///
///   Tensor y = group_norm(x, 4, w, b);
Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                  double eps = 1e-5);

}  // namespace tessel
