#include "dsl/attention.h"

#include <cmath>

#include <fmt/format.h>

#include "codegen/builders.h"
#include "dsl/functional.h"
#include "dsl/indexing.h"
#include "runtime/errors.h"
#include "runtime/philox.h"

namespace tessel {
namespace detail {

// The checks both forms share; returns the scale.
double check_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  constexpr std::string_view op = "scaled_dot_product_attention";
  for (const auto& [name, t] : {std::pair{"query", &q}, {"key", &k}, {"value", &v}}) {
    if (!t->defined()) throw ValueError(fmt::format("{}: {} is an undefined tensor", op, name));
    if (t->dim() < 2)
      throw ShapeError(fmt::format("{}: {} must have at least 2 dims [..., L, E], got shape {}", op, name,
                                   t->shape().str()));
    if (!is_floating(t->dtype()))
      throw DTypeError(fmt::format("{}: {} must be floating, got {}; convert it with .to(DType::f32)", op, name,
                                   dtype_name(t->dtype())));
  }
  if (q.dtype() != k.dtype() || q.dtype() != v.dtype())
    throw DTypeError(fmt::format("{}: query, key and value must have one dtype, got {}, {} and {}", op,
                                 dtype_name(q.dtype()), dtype_name(k.dtype()), dtype_name(v.dtype())));
  if (!(q.device() == k.device()) || !(q.device() == v.device()) ||
      (o.mask.defined() && !(o.mask.device() == q.device())))
    throw DeviceError(fmt::format("{}: query, key, value and mask must be on one device; the query is on {}; move "
                                  "them with .to({})",
                                  op, q.device().str(), q.device().str()));
  if (q.size(-1) != k.size(-1))
    throw ShapeError(fmt::format("{}: query and key must have the same last dim (E), got {} and {}", op,
                                 q.shape().str(), k.shape().str()));
  if (k.size(-2) != v.size(-2))
    throw ShapeError(fmt::format("{}: key and value must have the same number of keys (dim -2), got {} and {}", op,
                                 k.shape().str(), v.shape().str()));
  if (o.causal && o.mask.defined())
    throw ValueError(fmt::format("{}: pass either a mask or causal = true, not both (fold the causal triangle into "
                                 "the mask with tril)",
                                 op));
  if (o.mask.defined() && o.mask.dtype() != DType::b8 && !is_floating(o.mask.dtype()))
    throw DTypeError(fmt::format("{}: the mask must be bool (true = attend) or floating (added to the scores), got {}",
                                 op, dtype_name(o.mask.dtype())));
  if (!(o.dropout_p >= 0.0 && o.dropout_p <= 1.0))
    throw ValueError(fmt::format("{}: dropout_p must be in [0, 1], got {}", op, o.dropout_p));
  const double scale = o.scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  if (!std::isfinite(scale)) throw ValueError(fmt::format("{}: scale must be finite, got {}", op, scale));
  return scale;
}

}  // namespace detail

Tensor scaled_dot_product_attention_math(const Tensor& q, const Tensor& k, const Tensor& v,
                                         const AttentionOptions& o) {
  const double scale = detail::check_attention(q, k, v, o);
  const int64_t Tq = q.size(-2), Tk = k.size(-2);
  Tensor s = binary_op(ir::Op::Mul, q.matmul(k.transpose(-2, -1)), Scalar(scale));
  if (o.causal) s = masked_fill(s, logical_not(tril(ones({Tq, Tk}, DType::b8, q.device()))), -INFINITY);
  if (o.mask.defined()) {
    if (o.mask.dtype() == DType::b8) s = masked_fill(s, logical_not(o.mask), -INFINITY);
    else s = binary_op(ir::Op::Add, s, o.mask.to(s.dtype()));
  }
  // A row whose keys are all masked out gives zeros, not softmax's NaNs: its
  // scores are replaced by zeros before the softmax (so no NaN reaches the
  // gradient either) and its probabilities by zeros after.
  Tensor masked = binary_op(ir::Op::Eq, s, Scalar(-INFINITY));
  Tensor dead_row = masked.all(-1, /*keepdim=*/true);
  Tensor p = softmax(where(dead_row, zeros({}, s.dtype(), s.device()), s), -1);
  p = where(masked, zeros({}, s.dtype(), s.device()), p);
  if (o.dropout_p > 0) p = dropout(p, o.dropout_p, /*training=*/true);
  return p.matmul(v);
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  const double scale = detail::check_attention(q, k, v, o);
  constexpr std::string_view op = "scaled_dot_product_attention";
  ir::AttentionAttrs a;
  a.scale = scale;
  a.causal = o.causal;
  a.dropout_p = o.dropout_p;
  ir::NodePtr mask;
  if (o.mask.defined()) {
    if (o.mask.requires_grad())
      throw ValueError(fmt::format("{}: the mask requires grad, which the fused op does not differentiate; pass "
                                   "mask.detach(), or use scaled_dot_product_attention_math",
                                   op));
    a.mask = o.mask.dtype() == DType::b8 ? ir::AttentionMask::Bool : ir::AttentionMask::Additive;
    // Broadcast to [..., Tq, Tk] here so a wrong mask names this op and its shape.
    std::vector<int64_t> qk{q.size(-2), k.size(-2)};
    Shape m = o.mask.shape();
    std::vector<int64_t> want(m.dims);
    while (want.size() < 2) want.insert(want.begin(), 1);
    try {
      (void)ir::broadcast_shapes(op, Shape(std::vector<int64_t>(want.end() - 2, want.end())), Shape(qk));
    } catch (const ShapeError&) {
      throw ShapeError(fmt::format("{}: the mask of shape {} does not broadcast to the scores' [{}, {}] (queries, keys)",
                                   op, m.str(), qk[0], qk[1]));
    }
    Tensor mk = o.mask;
    if (want.size() != m.dims.size()) mk = mk.reshape(want);
    if (want[want.size() - 2] != qk[0] || want.back() != qk[1]) {
      std::vector<int64_t> e(want);
      e[e.size() - 2] = qk[0];
      e.back() = qk[1];
      mk = mk.expand(e);
    }
    mask = mk.node();
  }
  if (a.dropout_p > 0) {
    // A key of its own per call, drawn from the global stream (manual_seed replays it).
    auto [seed, first] = reserve_random(2);
    a.seed = uint64_t{Philox4x32::word(seed, first * 4)} | uint64_t{Philox4x32::word(seed, first * 4 + 1)} << 32;
  }
  // Halves compute in f32, as every other op's arithmetic.
  const DType dt = q.dtype();
  const DType ct = dt == DType::f16 || dt == DType::bf16 ? DType::f32 : dt;
  auto in = [&](const Tensor& t) { return ct == dt ? t.node() : ir::cast(t.node(), ct); };
  ir::NodePtr fwd = ir::attention(in(q), in(k), in(v), std::move(mask), a);
  const int64_t r = fwd->shape.rank();
  std::vector<int64_t> out(fwd->shape.dims);
  out.back() -= 1;
  ir::NodePtr y = ir::slice(fwd, std::vector<int64_t>(static_cast<size_t>(r), 0),
                            std::vector<int64_t>(static_cast<size_t>(r), 1), Shape(out));
  if (ct != dt) y = ir::cast(y, dt);
  return Tensor::from_node(std::move(y), q.device());
}

}  // namespace tessel
