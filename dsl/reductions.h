// Reductions composed of the IR's sum, mean, max and min (argmax is too): variance and
// standard deviation, logsumexp, vector norms, and max/min with their
// indices, with PyTorch's semantics. Being composites, they fuse: x.var({1})
// and logsumexp(x, {1}) over the rows of a matrix are one row-program kernel
// each (codegen/schedule.cpp).
//
//   Tensor v = x.var({1});                       // unbiased, as torch.var
//   Tensor l = logsumexp(scores, {-1});
//   auto [best, where] = x.max_with_indices(1);  // values and int64 indices
#pragma once

#include <vector>

#include "dsl/tensor.h"

namespace tessel {

/// The variance over `dims` (all dims when empty) divided by
/// max(0, N - correction), as torch.var: correction 1 is the unbiased
/// estimate, 0 the population variance. Two passes (the mean, then the sum
/// of squared deviations), so values far from 0 with a small spread keep
/// their digits.
///
///   Tensor v = var(x, {1}, 0.0, true);   // [N, C] -> [N, 1], population variance
Tensor var(const Tensor& x, std::vector<int64_t> dims = {}, double correction = 1.0, bool keepdim = false);
/// sqrt(var(x, dims, correction, keepdim)), as torch.std.
Tensor std_dev(const Tensor& x, std::vector<int64_t> dims = {}, double correction = 1.0, bool keepdim = false);

/// log(sum(exp(x))) over `dims` (all when empty), computed as m + log(sum(exp(x - m))) with
/// m the (gradient-free) maximum, so large values do not overflow; rows of
/// -inf give -inf and a +inf gives +inf, as torch.logsumexp.
///
///   Tensor lse = logsumexp(logits, {1});   // [N, C] -> [N]
Tensor logsumexp(const Tensor& x, std::vector<int64_t> dims, bool keepdim = false);

/// The p-norm over `dims` (all when empty), as torch.linalg.vector_norm:
/// p = 2 is sqrt(sum(x^2)), 1 is sum(|x|), INFINITY is max(|x|), -INFINITY
/// min(|x|), 0 the count of nonzeros, any other p (sum(|x|^p))^(1/p).
///
///   Tensor n = norm(g);                  // the 2-norm of every element
///   Tensor r = norm(x, 1.0, {1}, true);  // [N, C] -> [N, 1]
Tensor norm(const Tensor& x, double p = 2.0, std::vector<int64_t> dims = {}, bool keepdim = false);

/// torch.max(x, dim) / torch.min(x, dim): the values and the int64 index of
/// each (the first one on ties, a NaN where there is one). The gradient of
/// `values` goes to that index only, as in PyTorch.
///
///   auto [v, i] = max_with_indices(x, 1);
Tensor::ValuesIndices max_with_indices(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor::ValuesIndices min_with_indices(const Tensor& x, int64_t dim, bool keepdim = false);

/// torch.prod: the product of every element, or along `dim` (x.prod(dim)).
///
///   Tensor p = prod(x, 1, true);   // [N, C] -> [N, 1]
Tensor prod(const Tensor& x);
Tensor prod(const Tensor& x, int64_t dim, bool keepdim = false);

/// The index of the first minimum (of the flattened tensor without a dim), as torch.argmin.
///
///   Tensor i = argmin(x, 1);
Tensor argmin(const Tensor& x);
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);

}  // namespace tessel
