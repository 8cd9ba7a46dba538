// The functional ops behind Tensor's methods and the expression operators.
// Device checks live here (the IR is device-neutral); shape and dtype rules
// live in codegen/builders.
#include <fmt/format.h>

#include "codegen/backend.h"
#include "codegen/builders.h"
#include "codegen/grad_mode.h"
#include "dsl/tensor.h"

namespace tessel {
namespace {

Device same_device(std::string_view op, const Tensor& a, const Tensor& b) {
  if (!(a.device() == b.device()))
    throw DeviceError(fmt::format("{}: expected all tensors on the same device, but found {} and {}; move one with "
                                  ".to({})",
                                  op, a.device().str(), b.device().str(), a.device().str()));
  return a.device();
}

// The dtype a Python-style scalar takes next to a tensor of dtype `t`:
// the tensor's, unless the scalar's category is higher (int tensor * 0.5 -> f32).
DType scalar_dtype(const Scalar& s, DType t) {
  if (s.natural == DType::f32 && !is_floating(t)) return DType::f32;
  if (s.natural == DType::i64 && t == DType::b8) return DType::i64;
  return t;
}

}  // namespace

Tensor scalar_like(const Scalar& s, const Tensor& like) {
  return Tensor::from_node(ir::constant(s.v, scalar_dtype(s, like.dtype())), like.device());
}

Tensor binary_op(ir::Op op, const Tensor& a, const Tensor& b) {
  Device d = same_device(ir::op_name(op), a, b);
  return Tensor::from_node(ir::binary(op, a.node(), b.node()), d);
}
Tensor binary_op(ir::Op op, const Tensor& a, const Scalar& b) {
  // As PyTorch: an integer tensor to a negative integer power has no integer result.
  if (op == ir::Op::Pow && is_integral(a.dtype()) && b.v.is_int && b.v.i < 0)
    throw ValueError(fmt::format("pow: integers to negative integer powers are not allowed ({} tensor to the power {}); "
                                 "cast the base to a floating dtype first, e.g. x.to(DType::f32).pow({})",
                                 dtype_name(a.dtype()), b.v.i, b.v.i));
  return binary_op(op, a, scalar_like(b, a));
}
Tensor binary_op(ir::Op op, const Scalar& a, const Tensor& b) { return binary_op(op, scalar_like(a, b), b); }
Tensor unary_op(ir::Op op, const Tensor& x) { return Tensor::from_node(ir::unary(op, x.node()), x.device()); }

Tensor add(const Tensor& a, const Tensor& b) { return binary_op(ir::Op::Add, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary_op(ir::Op::Sub, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary_op(ir::Op::Mul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary_op(ir::Op::Div, a, b); }
Tensor pow(const Tensor& a, const Tensor& b) { return binary_op(ir::Op::Pow, a, b); }
Tensor maximum(const Tensor& a, const Tensor& b) { return binary_op(ir::Op::Maximum, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary_op(ir::Op::Minimum, a, b); }
Tensor logical_not(const Tensor& x) { return unary_op(ir::Op::Not, x); }

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  same_device("where", cond, a);
  Device d = same_device("where", a, b);
  return Tensor::from_node(ir::where(cond.node(), a.node(), b.node()), d);
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  Device d = same_device("matmul", a, b);
  return Tensor::from_node(ir::matmul(a.node(), b.node()), d);
}

Tensor Tensor::abs() const { return unary_op(ir::Op::Abs, *this); }
Tensor Tensor::neg() const { return unary_op(ir::Op::Neg, *this); }
Tensor Tensor::exp() const { return unary_op(ir::Op::Exp, *this); }
Tensor Tensor::log() const { return unary_op(ir::Op::Log, *this); }
Tensor Tensor::sqrt() const { return unary_op(ir::Op::Sqrt, *this); }
Tensor Tensor::tanh() const { return unary_op(ir::Op::Tanh, *this); }
Tensor Tensor::sigmoid() const { return unary_op(ir::Op::Sigmoid, *this); }
Tensor Tensor::relu() const { return unary_op(ir::Op::Relu, *this); }
Tensor Tensor::sin() const { return unary_op(ir::Op::Sin, *this); }
Tensor Tensor::cos() const { return unary_op(ir::Op::Cos, *this); }
Tensor Tensor::erf() const { return unary_op(ir::Op::Erf, *this); }
Tensor Tensor::log1p() const { return unary_op(ir::Op::Log1p, *this); }
Tensor Tensor::expm1() const { return unary_op(ir::Op::Expm1, *this); }
Tensor Tensor::rsqrt() const { return unary_op(ir::Op::Rsqrt, *this); }
Tensor Tensor::reciprocal() const { return unary_op(ir::Op::Reciprocal, *this); }
Tensor Tensor::sign() const { return unary_op(ir::Op::Sign, *this); }
Tensor Tensor::floor() const { return unary_op(ir::Op::Floor, *this); }
Tensor Tensor::ceil() const { return unary_op(ir::Op::Ceil, *this); }
Tensor Tensor::round() const { return unary_op(ir::Op::Round, *this); }
Tensor Tensor::isnan() const { return unary_op(ir::Op::IsNan, *this); }
Tensor Tensor::isinf() const { return unary_op(ir::Op::IsInf, *this); }
Tensor Tensor::clamp(std::optional<Scalar> min, std::optional<Scalar> max) const {
  if (!min && !max)
    throw ValueError("clamp: at least one of min and max must be given, e.g. x.clamp(0.0, 1.0) or "
                     "x.clamp(std::nullopt, 1.0)");
  // max(min(x, ...)) as selects: NaN fails both comparisons and stays NaN,
  // min > max leaves every value at max, and the gradient is 1 exactly where
  // min <= x <= max (torch.clamp's three rules; maximum/minimum would split
  // the gradient at a tie).
  // The lower bound's select is built once per use: a node with two
  // consumers would be a kernel boundary (codegen/schedule.cpp).
  auto low = [&] { return min ? where(binary_op(ir::Op::Lt, *this, *min), scalar_like(*min, *this), *this) : *this; };
  if (!max) return low();
  Tensor bound = scalar_like(*max, low());
  return where(binary_op(ir::Op::Gt, low(), *max), bound, low());
}
Tensor Tensor::pow(const Scalar& e) const { return binary_op(ir::Op::Pow, *this, e); }
Tensor Tensor::pow(const Tensor& e) const { return binary_op(ir::Op::Pow, *this, e); }
Tensor Tensor::matmul(const Tensor& o) const { return tessel::matmul(*this, o); }

namespace {
Tensor reduce(ir::Op op, const Tensor& t, std::vector<int64_t> dims, bool keepdim) {
  return Tensor::from_node(ir::reduce(op, t.node(), std::move(dims), keepdim), t.device());
}
}  // namespace

Tensor Tensor::sum() const { return reduce(ir::Op::Sum, *this, {}, false); }
Tensor Tensor::sum(std::vector<int64_t> d, bool k) const { return reduce(ir::Op::Sum, *this, std::move(d), k); }
Tensor Tensor::mean() const { return reduce(ir::Op::Mean, *this, {}, false); }
Tensor Tensor::mean(std::vector<int64_t> d, bool k) const { return reduce(ir::Op::Mean, *this, std::move(d), k); }
Tensor Tensor::max() const { return reduce(ir::Op::Max, *this, {}, false); }
Tensor Tensor::max(int64_t d, bool k) const { return reduce(ir::Op::Max, *this, {d}, k); }
Tensor Tensor::min() const { return reduce(ir::Op::Min, *this, {}, false); }
Tensor Tensor::min(int64_t d, bool k) const { return reduce(ir::Op::Min, *this, {d}, k); }
Tensor Tensor::argmax() const { return from_node(ir::argmax(node(), std::nullopt, false), device()); }
Tensor Tensor::argmax(int64_t d, bool k) const { return from_node(ir::argmax(node(), d, k), device()); }
Tensor Tensor::prod() const { return reduce(ir::Op::Prod, *this, {}, false); }
Tensor Tensor::prod(int64_t d, bool k) const { return reduce(ir::Op::Prod, *this, {d}, k); }

namespace {
// 1 where an element is nonzero, as int64, so all/any are counts.
Tensor nonzero_count(const Tensor& t, std::vector<int64_t> dims, bool keepdim) {
  Tensor ones = binary_op(ir::Op::Ne, t, Scalar(0)).to(DType::i64);
  return dims.empty() ? ones.sum() : ones.sum(std::move(dims), keepdim);
}
}  // namespace

Tensor Tensor::all() const { return binary_op(ir::Op::Eq, nonzero_count(*this, {}, false), Scalar(numel())); }
Tensor Tensor::all(int64_t d, bool k) const {
  d = ir::normalize_axis("all", d, dim(), shape());
  return binary_op(ir::Op::Eq, nonzero_count(*this, {d}, k), Scalar(shape()[d]));
}
Tensor Tensor::any() const { return binary_op(ir::Op::Gt, nonzero_count(*this, {}, false), Scalar(0)); }
Tensor Tensor::any(int64_t d, bool k) const { return binary_op(ir::Op::Gt, nonzero_count(*this, {d}, k), Scalar(0)); }

Tensor Tensor::to(Device d) const {
  if (d == device()) return *this;
  check_device_exists(d);
  // A dense copy on `d` (host<->device through pinned staging, or device to device).
  ir::BufferView v = transfer(buffer(), dtype(), shape(), device(), d);
  if (!(requires_grad() && grad_enabled())) return from_buffer(std::move(v), dtype(), shape(), d);
  // Differentiable, as in PyTorch: the copy is a leaf of its device's graph
  // whose gradient a relay hands back (copied) to this tensor's graph.
  auto relay = std::make_shared<TensorImpl>();
  relay->transfer_source = impl_ptr();
  relay->device = d;
  auto impl = std::make_shared<TensorImpl>();
  impl->node = ir::input(std::move(v), dtype(), shape(), /*requires_grad=*/true, relay);
  impl->node->owner_hold = relay;
  impl->device = d;
  impl->is_leaf = false;
  return Tensor(impl);
}

}  // namespace tessel
