#include "dsl/functional.h"

#include <fmt/format.h>

#include "codegen/builders.h"
#include "codegen/grad_mode.h"

namespace tessel {

namespace {
// The shift that keeps exp() in range carries no gradient (softmax does not
// depend on it). Built without history rather than by detach(), which would
// realize it: lazy, it joins the sum and the division in one row-program kernel.
Tensor row_max(const Tensor& x, int64_t dim) {
  NoGradGuard no_grad;
  return x.max(dim, true);
}
}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  Tensor shifted = sub(x, row_max(x, dim));
  Tensor e = shifted.exp();
  return div(e, e.sum({dim}, true));
}

Tensor log_softmax(const Tensor& x, int64_t dim) {
  Tensor shifted = sub(x, row_max(x, dim));
  return sub(shifted, shifted.exp().sum({dim}, true).log());
}

Tensor one_hot(const Tensor& labels, int64_t num_classes) {
  if (is_floating(labels.dtype()))
    throw DTypeError(fmt::format("one_hot: labels must be integer class indices, got dtype {}",
                                 dtype_name(labels.dtype())));
  Tensor classes = arange(num_classes, DType::i64, labels.device());
  return binary_op(ir::Op::Eq, labels.to(DType::i64).unsqueeze(-1), classes);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& labels) {
  if (logits.dim() != 2)
    throw ShapeError(fmt::format("cross_entropy: logits must be [N, C], got shape {}", logits.shape().str()));
  if (labels.dim() != 1 || labels.size(0) != logits.size(0))
    throw ShapeError(fmt::format("cross_entropy: labels must be [N] = [{}] class indices, got shape {}",
                                 logits.size(0), labels.shape().str()));
  Tensor mask = one_hot(labels, logits.size(1)).to(logits.dtype());
  Tensor picked = mul(log_softmax(logits, 1), mask).sum({1});
  return picked.mean().neg();
}

Tensor mse_loss(const Tensor& pred, const Tensor& target) {
  Tensor d = sub(pred, target);
  return mul(d, d).mean();
}

Tensor dropout(const Tensor& x, double p, bool training) {
  if (p < 0 || p > 1) throw ValueError(fmt::format("dropout: probability must be in [0, 1], got {}", p));
  if (!training || p == 0) return x;
  if (p == 1) return mul(x, zeros(x.shape(), x.dtype(), x.device()));
  Tensor keep = binary_op(ir::Op::Ge, rand(x.shape(), x.dtype(), x.device()), Scalar(p));
  return binary_op(ir::Op::Mul, mul(x, keep.to(x.dtype())), Scalar(1.0 / (1.0 - p)));
}

}  // namespace tessel
