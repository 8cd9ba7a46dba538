#include "dsl/functional.h"

#include <fmt/format.h>

#include <optional>

#include "codegen/builders.h"
#include "codegen/grad_mode.h"

namespace tessel {

namespace {
// The shift that keeps exp() in range carries no gradient (softmax does not
// depend on it). Built without history rather than by detach(), which would
// realize it: lazy, it joins the sum and the division in one row-program kernel.
// softmax of integers has no integer result (PyTorch raises too).
void check_floating(std::string_view op, const Tensor& x) {
  if (!is_floating(x.dtype()))
    throw DTypeError(fmt::format("{}: needs a floating-point tensor, got dtype {}; convert first, e.g. "
                                 "x.to(DType::f32)",
                                 op, dtype_name(x.dtype())));
}

Tensor row_max(const Tensor& x, int64_t dim) {
  NoGradGuard no_grad;
  return x.max(dim, true);
}
}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  check_floating("softmax", x);
  Tensor shifted = sub(x, row_max(x, dim));
  Tensor e = shifted.exp();
  return div(e, e.sum({dim}, true));
}

Tensor layer_norm(const Tensor& x, const std::vector<int64_t>& normalized_shape, const Tensor* weight,
                  const Tensor* bias, double eps) {
  check_floating("layer_norm", x);
  const auto k = static_cast<int64_t>(normalized_shape.size());
  const int64_t r = x.shape().rank();
  bool fits = k >= 1 && k <= r;
  for (int64_t i = 0; fits && i < k; ++i) fits = x.shape()[r - k + i] == normalized_shape[static_cast<size_t>(i)];
  if (!fits)
    throw ShapeError(fmt::format("layer_norm: normalized_shape {} must match the last dims of the input (shape {})",
                                 Shape{normalized_shape}.str(), x.shape().str()));
  auto check_affine = [&](const Tensor* t, const char* name) {
    if (t && !(t->shape() == Shape{normalized_shape}))
      throw ShapeError(fmt::format("layer_norm: {} has shape {}, expected normalized_shape {}", name, t->shape().str(),
                                   Shape{normalized_shape}.str()));
  };
  check_affine(weight, "weight");
  check_affine(bias, "bias");
  std::vector<int64_t> dims;
  for (int64_t i = r - k; i < r; ++i) dims.push_back(i);
  Tensor centered = sub(x, x.mean(dims, true));
  Tensor var = mul(centered, centered).mean(dims, true);
  Tensor y = mul(centered, binary_op(ir::Op::Add, var, Scalar(eps)).rsqrt());
  if (weight) y = mul(y, *weight);
  if (bias) y = add(y, *bias);
  return y;
}

Tensor log_softmax(const Tensor& x, int64_t dim) {
  check_floating("log_softmax", x);
  Tensor shifted = sub(x, row_max(x, dim));
  return sub(shifted, shifted.exp().sum({dim}, true).log());
}

// PyTorch's CPU formulas, operation for operation, so f64 results agree to the last bit.
Tensor gelu(const Tensor& x, std::string_view approximate) {
  check_floating("gelu", x);
  if (approximate == "none") {
    constexpr double kAlpha = 0.70710678118654752440;  // 1 / sqrt(2)
    Tensor cdf = binary_op(ir::Op::Add, binary_op(ir::Op::Mul, x, kAlpha).erf(), 1.0);
    return mul(binary_op(ir::Op::Mul, x, 0.5), cdf);
  }
  if (approximate == "tanh") {
    constexpr double kBeta = 0.79788456080286535588, kKappa = 0.044715;  // sqrt(2 / pi)
    Tensor cube = mul(mul(x, x), x);
    Tensor inner = binary_op(ir::Op::Mul, add(x, binary_op(ir::Op::Mul, cube, kKappa)), kBeta);
    return mul(binary_op(ir::Op::Mul, x, 0.5), binary_op(ir::Op::Add, inner.tanh(), 1.0));
  }
  throw ValueError(fmt::format("gelu: approximate must be \"none\" or \"tanh\", got \"{}\"", approximate));
}

Tensor silu(const Tensor& x) {
  check_floating("silu", x);
  return div(x, binary_op(ir::Op::Add, x.neg().exp(), 1.0));
}

Tensor softplus(const Tensor& x, double beta, double threshold) {
  check_floating("softplus", x);
  // Built once per use: the scheduler cuts a kernel at every node with two
  // consumers, and recomputing beta * x is cheaper than a round trip to memory.
  auto bx = [&] { return binary_op(ir::Op::Mul, x, beta); };
  auto linear = [&] { return binary_op(ir::Op::Gt, bx(), threshold); };
  // The exp branch reads 0 where it is not taken: e^(beta x) may overflow
  // there, and its gradient would be 0 * inf = NaN.
  Tensor safe = where(linear(), scalar_like(0.0, x), bx());
  return where(linear(), x, binary_op(ir::Op::Div, safe.exp().log1p(), beta));
}

namespace {
// A label outside [0, C) would select no class: a row of zeros, and a loss
// that is silently wrong. PyTorch raises; so does tessel (the labels are
// read on the host: one batch of integers, which training reads anyway).
// Returns how many labels count (are not ignore_index): read here once.
int64_t check_labels(std::string_view op, const Tensor& labels, int64_t num_classes,
                     std::optional<int64_t> ignore_index = std::nullopt) {
  if (is_floating(labels.dtype()))
    throw DTypeError(fmt::format("{}: labels must be integer class indices, got dtype {}", op,
                                 dtype_name(labels.dtype())));
  if (num_classes <= 0)
    throw ValueError(fmt::format("{}: the number of classes must be positive, got {}", op, num_classes));
  const std::vector<int64_t> v = labels.to_vector<int64_t>();
  int64_t counted = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (ignore_index && v[i] == *ignore_index) continue;
    ++counted;
    if (v[i] < 0 || v[i] >= num_classes)
      throw IndexError(fmt::format("{}: label {} (at index {}) is outside [0, {}): labels must be class indices "
                                   "from 0 to C-1 for C = {} classes{}",
                                   op, v[i], i, num_classes, num_classes,
                                   ignore_index ? fmt::format(", or ignore_index = {}", *ignore_index) : ""));
  }
  return counted;
}

// "mean", "sum" or "none", as PyTorch's losses spell them.
void check_reduction(std::string_view op, std::string_view reduction) {
  if (reduction != "mean" && reduction != "sum" && reduction != "none")
    throw ValueError(fmt::format("{}: reduction must be \"mean\", \"sum\" or \"none\", got \"{}\"", op,
                                 reduction));
}

Tensor one_hot_of_checked(const Tensor& labels, int64_t num_classes) {
  Tensor classes = arange(num_classes, DType::i64, labels.device());
  return binary_op(ir::Op::Eq, labels.to(DType::i64).unsqueeze(-1), classes);
}
}  // namespace

Tensor one_hot(const Tensor& labels, int64_t num_classes) {
  check_labels("one_hot", labels, num_classes);
  return one_hot_of_checked(labels, num_classes);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& labels, const CrossEntropyOptions& opt) {
  if (logits.dim() != 2)
    throw ShapeError(fmt::format("cross_entropy: logits must be [N, C], got shape {}", logits.shape().str()));
  if (labels.dim() != 1 || labels.size(0) != logits.size(0))
    throw ShapeError(fmt::format("cross_entropy: labels must be [N] = [{}] class indices, got shape {}",
                                 logits.size(0), labels.shape().str()));
  check_reduction("cross_entropy", opt.reduction);
  if (!(opt.label_smoothing >= 0.0 && opt.label_smoothing <= 1.0))
    throw ValueError(fmt::format("cross_entropy: label_smoothing must be in [0, 1], got {}", opt.label_smoothing));
  const int64_t num_classes = logits.size(1);
  const int64_t counted = check_labels("cross_entropy", labels, num_classes, opt.ignore_index);
  const bool all_count = counted == labels.size(0);
  const double eps = opt.label_smoothing;
  // The value is computed without gradients and differentiated through
  //   sum(logits * D, 1), reduced as the loss,  D = keep * softmax - target
  // (target: the smoothed one-hot of the rows that count), whose backward is
  // one row program over the logits: max, sum of exp, then D times the
  // incoming gradient. Differentiating log_softmax op by op instead would keep
  // exp(x - max) for backward and cut the head into a dozen small kernels.
  const bool via_softmax = grad_enabled() && logits.requires_grad();
  std::optional<NoGradGuard> no_grad;
  if (via_softmax) no_grad.emplace();
  // An ignored label selects no class in the one-hot (it is outside [0, C)
  // or masked below), so its row of nll is 0; `keep` zeroes its smoothing
  // term. With no ignored row the graph is the plain one (fewest kernels).
  // Both from the labels' memory, so that neither is a reshape of a computed value.
  auto keep_of = [&](const Tensor& l) { return binary_op(ir::Op::Ne, l, Scalar(opt.ignore_index)).to(logits.dtype()); };
  Tensor keep = all_count ? Tensor() : keep_of(labels);                    // [N]
  Tensor keep_col = all_count ? Tensor() : keep_of(labels.unsqueeze(-1));  // [N, 1]
  Tensor mask = one_hot_of_checked(labels, num_classes).to(logits.dtype());
  if (!all_count) mask = mul(mask, keep_col);
  Tensor logp = log_softmax(logits, 1);
  Tensor picked = mul(logp, mask).sum({1});
  Tensor loss = picked.neg();
  if (eps > 0) {
    Tensor row = logp.sum({1});
    if (!all_count) row = mul(row, keep);
    Tensor smooth = binary_op(ir::Op::Div, row.neg(), Scalar(static_cast<double>(num_classes)));
    loss = add(binary_op(ir::Op::Mul, loss, Scalar(1.0 - eps)), binary_op(ir::Op::Mul, smooth, Scalar(eps)));
  }
  // The mean is over the rows that count: 0 / 0 = NaN when every row is ignored, as in PyTorch.
  auto reduce = [&](const Tensor& per_row, const Tensor& plain_mean) {
    if (opt.reduction == "none") return per_row;
    if (opt.reduction == "sum") return per_row.sum();
    if (plain_mean.defined()) return plain_mean;
    return binary_op(ir::Op::Div, per_row.sum(), Scalar(static_cast<double>(counted)));
  };
  const bool plain = all_count && eps == 0;
  // The mean of the negated rows (not the negated mean, the same bits): the
  // negation runs in the mean's kernel instead of one of its own.
  Tensor value = reduce(loss, plain && opt.reduction == "mean" ? picked.neg().mean() : Tensor());
  if (!via_softmax) return value;
  // keep * (softmax - (1 - eps) * one_hot - eps / C), keep read once. It
  // shares no node with the value's graph: a node both read would be stored
  // between them, while each recomputes its one-hot and softmax in its own
  // kernel at no extra memory traffic.
  Tensor target = one_hot_of_checked(labels, num_classes).to(logits.dtype());
  if (eps > 0) target = binary_op(ir::Op::Mul, target, Scalar(1.0 - eps));
  Tensor d = sub(softmax(logits, 1), target);
  if (eps > 0) d = binary_op(ir::Op::Sub, d, Scalar(eps / static_cast<double>(num_classes)));
  if (!all_count) d = mul(d, keep_col);
  no_grad.reset();
  Tensor per_row = mul(logits, d).sum({1});
  Tensor surrogate = reduce(per_row, plain && opt.reduction == "mean" ? per_row.mean() : Tensor());
  return Tensor::from_node(ir::with_gradient_via(value.node(), surrogate.node()), logits.device());
}

Tensor mse_loss(const Tensor& pred, const Tensor& target, std::string_view reduction) {
  check_reduction("mse_loss", reduction);
  Tensor d = sub(pred, target);
  Tensor sq = mul(d, d);
  if (reduction == "none") return sq;
  if (reduction == "sum") return sq.sum();
  return sq.mean();
}

Tensor dropout(const Tensor& x, double p, bool training) {
  if (p < 0 || p > 1) throw ValueError(fmt::format("dropout: probability must be in [0, 1], got {}", p));
  if (!training || p == 0) return x;
  if (p == 1) return mul(x, zeros(x.shape(), x.dtype(), x.device()));
  Tensor keep = binary_op(ir::Op::Ge, rand(x.shape(), x.dtype(), x.device()), Scalar(p));
  return binary_op(ir::Op::Mul, mul(x, keep.to(x.dtype())), Scalar(1.0 / (1.0 - p)));
}

}  // namespace tessel
