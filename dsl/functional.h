// Composite ops built from IR primitives: the fusion stage sees through them,
// and autodiff derives them from the primitives' rules.
//   Tensor p = softmax(logits, 1);
//   Tensor loss = cross_entropy(logits, labels);   // labels: int64 class indices
#pragma once

#include <string_view>
#include <vector>

#include "dsl/tensor.h"

namespace tessel {

Tensor softmax(const Tensor& x, int64_t dim);
/// log(softmax(x)) computed stably: x - max - log(sum(exp(x - max))).
Tensor log_softmax(const Tensor& x, int64_t dim);
/// torch.nn.functional.layer_norm: x normalized over its last
/// normalized_shape.size() dims (population variance, eps inside the root),
/// then scaled by weight and shifted by bias when given (shape normalized_shape).
///
///   Tensor y = layer_norm(x, {768}, w, b);
Tensor layer_norm(const Tensor& x, const std::vector<int64_t>& normalized_shape, const Tensor* weight = nullptr,
                  const Tensor* bias = nullptr, double eps = 1e-5);
/// Options of cross_entropy, as torch.nn.functional.cross_entropy's.
struct CrossEntropyOptions {
  /// Rows whose label is this contribute nothing, and "mean" does not count them.
  int64_t ignore_index = -100;
  /// eps in [0, 1]: loss = (1 - eps) * nll + eps * mean over classes of -log p.
  double label_smoothing = 0.0;
  /// "mean" (over non-ignored rows), "sum", or "none" (one loss per row, 0 where ignored).
  std::string_view reduction = "mean";
};
/// Negative log-likelihood of integer `labels` [N] under `logits` [N, C],
/// with PyTorch's ignore_index, label_smoothing and reduction.
///
///   Tensor loss = cross_entropy(logits, labels);                  // mean over rows
///   Tensor l2 = cross_entropy(logits, labels, {.ignore_index = 0, .label_smoothing = 0.1});
Tensor cross_entropy(const Tensor& logits, const Tensor& labels, const CrossEntropyOptions& options = {});
/// Squared error, reduced as torch.nn.functional.mse_loss: "mean", "sum" or "none".
///
///   Tensor loss = mse_loss(pred, target);          // a scalar
///   Tensor each = mse_loss(pred, target, "none");  // pred's shape
Tensor mse_loss(const Tensor& pred, const Tensor& target, std::string_view reduction = "mean");
/// [N] int labels -> [N, C] bool.
Tensor one_hot(const Tensor& labels, int64_t num_classes);
/// x * P(X <= x) for a standard normal X, as torch.nn.functional.gelu:
/// approximate "none" is the exact erf form, "tanh" the tanh approximation.
///
///   Tensor h = gelu(x % w + b);           // one fused kernel with the bias add
///   Tensor t = gelu(x, "tanh");
Tensor gelu(const Tensor& x, std::string_view approximate = "none");
/// x * sigmoid(x) (also called swish), as torch.nn.functional.silu.
Tensor silu(const Tensor& x);
/// log(1 + e^(beta x)) / beta, and x itself where beta x > threshold (where
/// the two agree to rounding), as torch.nn.functional.softplus.
///
///   Tensor y = softplus(x);                  // beta 1, threshold 20
///   Tensor z = softplus(x, 2.0, 10.0);
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);
/// Zeroes each element with probability p and scales the rest by 1/(1-p).
Tensor dropout(const Tensor& x, double p, bool training = true);

}  // namespace tessel
