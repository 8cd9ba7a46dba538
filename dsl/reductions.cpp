#include "dsl/reductions.h"

#include <fmt/format.h>

#include <functional>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "codegen/builders.h"
#include "codegen/grad_mode.h"
#include "dsl/indexing.h"

namespace tessel {
namespace {

// Integer inputs have no floating result to give (mean raises the same way).
void check_floating(std::string_view op, const Tensor& x) {
  if (!is_floating(x.dtype()))
    throw DTypeError(fmt::format("{0}: input dtype is {1}, but {0} needs a floating dtype; cast first, e.g. "
                                 "x.to(DType::f32).{0}(...)",
                                 op, dtype_name(x.dtype())));
}

// The dims checked and named by this op (not by the sum or max it is built
// from): every dim when none are given, each in range, none twice.
std::vector<int64_t> checked_dims(std::string_view op, const Tensor& x, std::vector<int64_t> dims) {
  int64_t rank = x.dim();
  if (dims.empty()) {
    dims.resize(static_cast<size_t>(rank));
    std::iota(dims.begin(), dims.end(), 0);
  }
  for (auto& d : dims) d = ir::normalize_axis(op, d, rank, x.shape());
  if (rank == 0) dims.clear();
  std::sort(dims.begin(), dims.end());
  auto dup = std::adjacent_find(dims.begin(), dims.end());
  if (dup != dims.end())
    throw IndexError(fmt::format("{}: dim {} appears more than once in dims [{}]", op, *dup, fmt::join(dims, ", ")));
  return dims;
}

int64_t count_over(const Tensor& x, const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= x.size(d);
  return n;
}

// A reduction over `dims`; on a 0-d tensor (no dims left) the value itself.
Tensor reduce_over(ir::Op op, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  if (dims.empty()) return x;
  return Tensor::from_node(ir::reduce(op, x.node(), dims, keepdim), x.device());
}

Tensor variance(std::string_view op, const Tensor& x, std::vector<int64_t> dims, double correction, bool keepdim) {
  check_floating(op, x);
  dims = checked_dims(op, x, std::move(dims));
  // Two passes: the squared deviations from the mean, not E[x^2] - E[x]^2,
  // which cancels catastrophically when the mean is large.
  // Each squared deviation is divided before the sum, so the sum is the
  // result: a row program's last stage is its output, while a division after
  // it would be a second kernel (codegen/schedule.cpp).
  Tensor d = sub(x, reduce_over(ir::Op::Mean, x, dims, true));
  double divisor = std::max(0.0, static_cast<double>(count_over(x, dims)) - correction);
  return reduce_over(ir::Op::Sum, binary_op(ir::Op::Div, mul(d, d), Scalar(divisor)), dims, keepdim);
}

// The row maximum as a shift: no gradient (the result does not depend on
// it), and 0 where it is infinite, so a row of -inf stays -inf (exp(-inf -
// 0) = 0, log 0 = -inf) and a +inf stays +inf. Built lazily under no_grad,
// not by detach(), which would realize it.
Tensor finite_shift(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  NoGradGuard no_grad;
  Tensor m = reduce_over(ir::Op::Max, x, dims, keepdim);
  return where(m.isinf(), scalar_like(0.0, m), m);
}

Tensor::ValuesIndices with_indices(const Tensor& x, const Tensor& idx, int64_t dim, bool keepdim) {
  // The values are read at the index, so their gradient is a scatter-add
  // into that one position (gather's rule), as PyTorch routes it.
  Tensor values = gather(x, dim, idx);
  if (keepdim || x.dim() == 0) return {values, idx};
  return {values.squeeze(dim), idx.squeeze(dim)};
}

// A key whose first maximum is x's first minimum, exactly: -x for floats
// (NaN stays NaN, which argmax picks as torch.argmin does), -1 - x for
// integers (no overflow at the int64 limits, unlike -x), !x for bools.
Tensor min_key(const Tensor& x) {
  if (x.dtype() == DType::b8) return logical_not(x);
  if (is_floating(x.dtype())) return x.neg();
  return binary_op(ir::Op::Sub, Scalar(-1), x);
}

}  // namespace

Tensor var(const Tensor& x, std::vector<int64_t> dims, double correction, bool keepdim) {
  return variance("var", x, std::move(dims), correction, keepdim);
}

Tensor std_dev(const Tensor& x, std::vector<int64_t> dims, double correction, bool keepdim) {
  return variance("std", x, std::move(dims), correction, keepdim).sqrt();
}

Tensor Tensor::var_with(std::vector<int64_t> dims, double correction, bool keepdim) const {
  return tessel::var(*this, std::move(dims), correction, keepdim);
}
Tensor Tensor::std_with(std::vector<int64_t> dims, double correction, bool keepdim) const {
  return std_dev(*this, std::move(dims), correction, keepdim);
}

Tensor logsumexp(const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  check_floating("logsumexp", x);
  dims = checked_dims("logsumexp", x, std::move(dims));
  if (dims.empty()) return x;  // a 0-d tensor: log(exp(x)) is x
  // The shift is built once per use: a node with two readers would be a
  // kernel boundary, and recomputing the max keeps one row-program kernel.
  Tensor e = sub(x, finite_shift(x, dims, true)).exp();
  return add(reduce_over(ir::Op::Sum, e, dims, keepdim).log(), finite_shift(x, dims, keepdim));
}
Tensor Tensor::logsumexp(std::vector<int64_t> dims, bool keepdim) const {
  return tessel::logsumexp(*this, std::move(dims), keepdim);
}

Tensor norm(const Tensor& x, double p, std::vector<int64_t> dims, bool keepdim) {
  if (!is_floating(x.dtype()))
    throw DTypeError(fmt::format("norm: input dtype is {}, but norm needs a floating dtype; cast first, e.g. "
                                 "norm(x.to(DType::f32))",
                                 dtype_name(x.dtype())));
  if (std::isnan(p)) throw ValueError("norm: the order p is NaN; use 2, 1, INFINITY or another number");
  dims = checked_dims("norm", x, std::move(dims));
  if (std::isinf(p)) {
    // max(|x|): ties share the gradient evenly, as torch's inf-norm does.
    if (count_over(x, dims) == 0) {
      if (p > 0) return reduce_over(ir::Op::Sum, x.abs(), dims, keepdim);  // 0, as torch
      throw ValueError(fmt::format("norm: the -inf norm of an empty dimension has no value (shape {})",
                                   x.shape().str()));
    }
    return reduce_over(p > 0 ? ir::Op::Max : ir::Op::Min, x.abs(), dims, keepdim);
  }
  if (p == 0) return reduce_over(ir::Op::Sum, binary_op(ir::Op::Ne, x, Scalar(0)).to(x.dtype()), dims, keepdim);
  if (p == 1) return reduce_over(ir::Op::Sum, x.abs(), dims, keepdim);
  // The root of a zero sum: value 0 and, as torch, gradient 0 (the root's
  // own derivative is infinite there, and inf * 0 would be NaN).
  auto root = [&](const Tensor& sum, const std::function<Tensor(const Tensor&)>& f) {
    Tensor zero = binary_op(ir::Op::Eq, sum, Scalar(0.0));
    Tensor safe = where(zero, full({}, 1.0, sum.dtype(), sum.device()), sum);
    return where(zero, full({}, 0.0, sum.dtype(), sum.device()), f(safe));
  };
  if (p == 2) return root(reduce_over(ir::Op::Sum, mul(x, x), dims, keepdim), [](const Tensor& t) { return t.sqrt(); });
  return root(reduce_over(ir::Op::Sum, x.abs().pow(p), dims, keepdim), [p](const Tensor& t) { return t.pow(1.0 / p); });
}
Tensor Tensor::norm(double p, std::vector<int64_t> dims, bool keepdim) const {
  return tessel::norm(*this, p, std::move(dims), keepdim);
}

Tensor prod(const Tensor& x) { return x.prod(); }
Tensor prod(const Tensor& x, int64_t dim, bool keepdim) { return x.prod(dim, keepdim); }

Tensor argmin(const Tensor& x) {
  if (x.numel() == 0)
    throw ValueError(fmt::format("argmin: cannot reduce over an empty tensor (shape {})", x.shape().str()));
  return min_key(x).argmax();
}
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) {
  dim = ir::normalize_axis("argmin", dim, x.dim(), x.shape());
  if (x.dim() > 0 && x.size(dim) == 0)
    throw ValueError(fmt::format("argmin: cannot reduce over an empty dimension (dim {} of shape {})", dim,
                                 x.shape().str()));
  return min_key(x).argmax(dim, keepdim);
}
Tensor Tensor::argmin() const { return tessel::argmin(*this); }
Tensor Tensor::argmin(int64_t dim, bool keepdim) const { return tessel::argmin(*this, dim, keepdim); }

Tensor::ValuesIndices max_with_indices(const Tensor& x, int64_t dim, bool keepdim) {
  dim = ir::normalize_axis("max", dim, x.dim(), x.shape());
  if (x.dim() > 0 && x.size(dim) == 0)
    throw ValueError(fmt::format("max: cannot reduce over an empty dimension (dim {} of shape {})", dim,
                                 x.shape().str()));
  if (x.dim() == 0) return {x, zeros({}, DType::i64, x.device())};
  return with_indices(x, x.argmax(dim, true), dim, keepdim);
}
Tensor::ValuesIndices min_with_indices(const Tensor& x, int64_t dim, bool keepdim) {
  dim = ir::normalize_axis("min", dim, x.dim(), x.shape());
  if (x.dim() > 0 && x.size(dim) == 0)
    throw ValueError(fmt::format("min: cannot reduce over an empty dimension (dim {} of shape {})", dim,
                                 x.shape().str()));
  if (x.dim() == 0) return {x, zeros({}, DType::i64, x.device())};
  return with_indices(x, min_key(x).argmax(dim, true), dim, keepdim);
}
Tensor::ValuesIndices Tensor::max_with_indices(int64_t dim, bool keepdim) const {
  return tessel::max_with_indices(*this, dim, keepdim);
}
Tensor::ValuesIndices Tensor::min_with_indices(int64_t dim, bool keepdim) const {
  return tessel::min_with_indices(*this, dim, keepdim);
}

}  // namespace tessel
