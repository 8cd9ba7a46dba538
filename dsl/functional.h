// Composite ops built from IR primitives: the fusion stage sees through them,
// and autodiff derives them from the primitives' rules.
//   Tensor p = softmax(logits, 1);
//   Tensor loss = cross_entropy(logits, labels);   // labels: int64 class indices
#pragma once

#include "dsl/tensor.h"

namespace tessel {

Tensor softmax(const Tensor& x, int64_t dim);
/// log(softmax(x)) computed stably: x - max - log(sum(exp(x - max))).
Tensor log_softmax(const Tensor& x, int64_t dim);
/// Mean negative log-likelihood of integer `labels` [N] under `logits` [N, C].
Tensor cross_entropy(const Tensor& logits, const Tensor& labels);
/// Mean squared error.
Tensor mse_loss(const Tensor& pred, const Tensor& target);
/// [N] int labels -> [N, C] bool.
Tensor one_hot(const Tensor& labels, int64_t num_classes);
/// Zeroes each element with probability p and scales the rest by 1/(1-p).
Tensor dropout(const Tensor& x, double p, bool training = true);

}  // namespace tessel
