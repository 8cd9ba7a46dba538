// Tensor: a handle to a value that is either realized (memory on a device)
// or an unevaluated IR node. Ops on tensors build IR; nothing runs until a
// value is needed (item(), printing, host copy, save, control flow on a
// value, eval()).
//
//   Tensor x = rand({2, 20});
//   Tensor h = relu(x.matmul(w.t()) + b);   // builds IR only
//   fmt::print("{}\n", h.sum());              // realizes and prints
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <concepts>
#include <string>
#include <type_traits>
#include <vector>

#include "codegen/grad_mode.h"
#include "codegen/ir.h"
#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/errors.h"
#include "runtime/shape.h"

namespace tessel {

class Tensor;
class DeferredExpr;

/// Shared state behind Tensor handles; the same TensorImpl is the same tensor.
struct TensorImpl {
  ir::NodePtr node;              // the value (Input leaf when realized from memory)
  // An expression template's typed tree, not lowered yet (node is null until
  // it is: Tensor::node() lowers it, eval() may take its fast path).
  std::shared_ptr<const DeferredExpr> deferred;
  Device device;
  bool is_leaf = true;           // made by the user, not computed by an op
  std::shared_ptr<TensorImpl> grad;  // accumulated by backward (leaves)
  bool retains_grad = false;
  // A relay for to(device): backward hands the gradient (copied back) to the
  // tensor it was copied from; `transfer_result` is the copy, when it retains its grad.
  std::shared_ptr<TensorImpl> transfer_source;
  std::weak_ptr<TensorImpl> transfer_result;
  enum class Kind : uint8_t { tensor, parameter, uninitialized_parameter } kind = Kind::tensor;
  // In-place writes through this handle (assign_, a parameter's new value):
  // expression objects built over it detect a later write (dsl/leaf_stamp.h).
  uint64_t writes = 0;
  // A parameter's owner and name ("LazyLinear.weight"), for error messages.
  std::string name;
};

/// A number that becomes a tensor constant when mixed with tensors.
struct Scalar {
  ir::ScalarValue v;
  DType natural;  // b8, i64 or f32: the dtype it has on its own
  Scalar(double x) : v(ir::ScalarValue::of(x)), natural(DType::f32) {}
  Scalar(float x) : Scalar(static_cast<double>(x)) {}
  Scalar(int x) : v(ir::ScalarValue::of_int(x)), natural(DType::i64) {}
  Scalar(int64_t x) : v(ir::ScalarValue::of_int(x)), natural(DType::i64) {}
  Scalar(bool x) : v(ir::ScalarValue::of_int(x)), natural(DType::b8) {}
};

/// Nested initializer lists: tensor({{1, 2}, {3, 4}}).
struct NestedList {
  std::vector<double> values;
  Shape shape;
  bool all_int = true;
  bool all_bool = true;  // tensor({true, false}) is a bool tensor, as in PyTorch
  NestedList(double x) : values{x}, all_int(false), all_bool(false) {}
  NestedList(int x) : values{static_cast<double>(x)}, all_bool(false) {}
  NestedList(bool x) : values{x ? 1.0 : 0.0} {}
  NestedList(std::initializer_list<NestedList> items);
};

class Tensor {
 public:
  /// An undefined tensor (no value); `defined()` is false.
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}
  /// A tensor computed by `node` (lazy until needed).
  static Tensor from_node(ir::NodePtr node, Device device);
  /// from_node without its depth cut, for values the caller realizes together
  /// right away (backward's gradients: cut one by one, each deep gradient
  /// would recompute the whole graph below it in a realization of its own).
  static Tensor from_node_pending(ir::NodePtr node, Device device);

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  const Shape& sizes() const { return shape(); }
  int64_t dim() const { return shape().rank(); }
  int64_t size(int64_t d) const;
  int64_t numel() const { return shape().numel(); }
  DType dtype() const;
  Device device() const;

  // --- realization ---
  /// Computes the value now (no-op when realized); returns *this.
  const Tensor& eval() const;
  bool is_realized() const;
  /// The realized memory view (realizes first).
  const ir::BufferView& buffer() const;
  Strides strides() const { return buffer().strides; }
  bool is_contiguous() const;
  /// The single value of a one-element tensor, converted to T.
  template <class T = double> T item() const;
  /// Every value in row-major order, on the host, converted to T.
  template <class T> std::vector<T> to_vector() const;
  /// Boolean value of a one-element tensor (control flow on values).
  explicit operator bool() const;

  // --- views and copies ---
  Tensor reshape(std::vector<int64_t> s) const;
  /// reshape that never copies: ShapeError when the strides allow no view (use reshape then).
  Tensor view(std::vector<int64_t> s) const;
  Tensor flatten(int64_t start = 0, int64_t end = -1) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const;
  Tensor permute(std::vector<int64_t> order) const;
  Tensor unsqueeze(int64_t d) const;
  Tensor squeeze(int64_t d) const;
  Tensor expand(std::vector<int64_t> s) const;
  /// Element `i` along dim 0: a view that shares memory (t[0][0] = 42 writes through).
  Tensor operator[](int64_t i) const { return select(0, i); }
  Tensor select(int64_t dim, int64_t i) const;
  /// Elements [start, end) with `step` along `dim` (negative start/end count from the end).
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor contiguous() const;
  Tensor clone() const;
  /// Same memory, cut from autograd history.
  Tensor detach() const;
  /// The value without autograd: a detached view of the same memory (writes go through).
  Tensor data() const { return detach(); }
  Tensor to(DType t) const;
  /// Copy to `d`; returns *this (the same tensor) when already there.
  Tensor to(Device d) const;
  Tensor cuda(int i = 0) const { return to(gpu(i)); }
  Tensor cpu() const { return to(tessel::cpu()); }

  // --- math (lazy) ---
  Tensor abs() const;
  Tensor neg() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor tanh() const;
  Tensor sigmoid() const;
  Tensor relu() const;
  Tensor sin() const;
  Tensor cos() const;
  Tensor erf() const;
  /// log(1 + x) and e^x - 1, accurate where x is near 0.
  Tensor log1p() const;
  Tensor expm1() const;
  Tensor rsqrt() const;
  Tensor reciprocal() const;
  /// -1, 0 or 1 (0 for NaN, as torch.sign).
  Tensor sign() const;
  /// Integers come back unchanged; round() rounds half to even, as torch.round.
  Tensor floor() const;
  Tensor ceil() const;
  Tensor round() const;
  /// Bool tensors; an integer tensor has no NaN or inf (all false).
  Tensor isnan() const;
  Tensor isinf() const;
  /// Values limited to [min, max], either bound optional, as torch.clamp:
  /// NaN stays NaN, and where min > max every value is max.
  ///
  ///   Tensor y = x.clamp(0.0, 6.0);            // relu6
  ///   Tensor z = x.clamp(std::nullopt, 1.0);   // at most 1
  Tensor clamp(std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt) const;
  Tensor pow(const Scalar& e) const;
  Tensor pow(const Tensor& e) const;
  Tensor matmul(const Tensor& other) const;
  Tensor sum() const;
  Tensor sum(std::vector<int64_t> dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(std::vector<int64_t> dims, bool keepdim = false) const;
  Tensor max() const;
  Tensor max(int64_t dim, bool keepdim = false) const;
  Tensor min() const;
  Tensor min(int64_t dim, bool keepdim = false) const;
  Tensor argmax() const;
  Tensor argmax(int64_t dim, bool keepdim = false) const;
  /// The product of every element (a 0-d tensor), or along `dim`, as
  /// torch.prod: bool and integer inputs give int64, an empty product is 1,
  /// and the gradient is right where x has zeros.
  ///
  ///   Tensor p = x.prod(1);         // [N, C] -> [N]
  Tensor prod() const;
  Tensor prod(int64_t dim, bool keepdim = false) const;
  /// The index of the first minimum, as torch.argmin (dsl/reductions.h).
  Tensor argmin() const;
  Tensor argmin(int64_t dim, bool keepdim = false) const;
  /// torch.max(x, dim)'s pair: the values and their int64 indices.
  struct ValuesIndices;
  /// The maximum along `dim` and the index of the first one; the values'
  /// gradient goes to that index only (max(dim) splits it between ties).
  ///
  ///   auto [v, i] = x.max_with_indices(1);
  ValuesIndices max_with_indices(int64_t dim, bool keepdim = false) const;
  ValuesIndices min_with_indices(int64_t dim, bool keepdim = false) const;
  /// Variance and standard deviation over `dims` (all when empty), divided by
  /// N - correction, as torch.var / torch.std; `unbiased` false is correction 0.
  ///
  ///   Tensor v = x.var({1});              // unbiased
  ///   Tensor s = x.std({0, 1}, 0, true);  // population, dims kept
  ///   Tensor u = x.var({1}, false);       // unbiased = false
  template <class N = double>
    requires(std::is_arithmetic_v<N> && !std::is_same_v<N, bool>)
  Tensor var(std::vector<int64_t> dims = {}, N correction = 1, bool keepdim = false) const {
    return var_with(std::move(dims), static_cast<double>(correction), keepdim);
  }
  Tensor var(std::vector<int64_t> dims, bool unbiased, bool keepdim = false) const {
    return var_with(std::move(dims), unbiased ? 1.0 : 0.0, keepdim);
  }
  template <class N = double>
    requires(std::is_arithmetic_v<N> && !std::is_same_v<N, bool>)
  Tensor std(std::vector<int64_t> dims = {}, N correction = 1, bool keepdim = false) const {
    return std_with(std::move(dims), static_cast<double>(correction), keepdim);
  }
  Tensor std(std::vector<int64_t> dims, bool unbiased, bool keepdim = false) const {
    return std_with(std::move(dims), unbiased ? 1.0 : 0.0, keepdim);
  }
  /// log(sum(exp(x))) over `dims`, stably (dsl/reductions.h).
  Tensor logsumexp(std::vector<int64_t> dims, bool keepdim = false) const;
  /// The p-norm over `dims` (all when empty): p = 2, 1, INFINITY, ... (dsl/reductions.h).
  Tensor norm(double p = 2.0, std::vector<int64_t> dims = {}, bool keepdim = false) const;
  /// Whether every / some element is nonzero (bool tensors; empty: all() is
  /// true, any() false), as torch.all / torch.any.
  ///
  ///   if ((x > 0).all()) ...
  Tensor all() const;
  Tensor all(int64_t dim, bool keepdim = false) const;
  Tensor any() const;
  Tensor any(int64_t dim, bool keepdim = false) const;

  // --- in-place (write into this tensor's memory, or extend its graph) ---
  // Handles are shallow: in-place ops are const, as in LibTorch, so they work
  // on temporaries too (w.data() += 1, t[0] *= 2).
  const Tensor& operator+=(const Tensor& o) const;
  const Tensor& operator-=(const Tensor& o) const;
  const Tensor& operator*=(const Tensor& o) const;
  const Tensor& operator/=(const Tensor& o) const;
  const Tensor& operator+=(const Scalar& s) const;
  const Tensor& operator-=(const Scalar& s) const;
  const Tensor& operator*=(const Scalar& s) const;
  const Tensor& operator/=(const Scalar& s) const;
  /// Writes `v` into every element: t[0][0] = 42.
  Tensor& operator=(const Scalar& v) &&;
  /// Copies values from `src` (broadcast) into this tensor's memory: t[0] = other.
  Tensor& operator=(const Tensor& src) &&;
  Tensor& operator=(const Tensor& src) & = default;
  Tensor& operator=(Tensor&& src) & = default;
  Tensor(const Tensor&) = default;
  Tensor(Tensor&&) = default;
  const Tensor& fill_(const Scalar& v) const;
  const Tensor& zero_() const { return fill_(0.0); }
  /// Copies `src` into this tensor's memory (broadcasting, casting).
  const Tensor& copy_(const Tensor& src) const;
  /// Replaces the values by `value` (same shape): the memory is written when realized,
  /// else the graph is extended. Used by every in-place op.
  const Tensor& assign_(const Tensor& value) const;
  const Tensor& uniform_(double a = 0, double b = 1) const;
  const Tensor& normal_(double mean = 0, double std = 1) const;

  // --- autograd ---
  bool requires_grad() const;
  /// Marks a leaf as one whose gradient backward computes.
  const Tensor& requires_grad_(bool on = true) const;
  /// The accumulated gradient; undefined before any backward.
  Tensor grad() const;
  void set_grad(const Tensor& g) const;
  bool is_leaf() const;
  /// True for nn::Parameter (initialized or not), false for plain tensors.
  bool is_parameter() const { return impl_ && impl_->kind != TensorImpl::Kind::tensor; }
  /// Keeps this non-leaf's gradient after backward.
  const Tensor& retain_grad() const;
  /// PyTorch's grad_fn name, e.g. "SumBackward0"; empty for leaves.
  std::string grad_fn_name() const;
  /// Back-propagates from this scalar (or with `gradient` of this shape).
  /// Gradients of this tensor into every leaf that requires grad. Like
  /// PyTorch, the graph is spent afterwards unless `retain_graph`: a second
  /// backward through it is a ValueError.
  ///
  ///   Tensor y = (x * x).sum();
  ///   y.backward({}, /*retain_graph=*/true);
  ///   y.backward();   // x.grad() is now 4 * x
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;

  /// PyTorch-style text: tensor([[1., 2.], ...]).
  std::string str() const;

  /// The same TensorImpl: identity, not value equality.
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  const ir::NodePtr& node() const;

 protected:
  void check_defined(const char* what) const;
  Tensor var_with(std::vector<int64_t> dims, double correction, bool keepdim) const;
  Tensor std_with(std::vector<int64_t> dims, double correction, bool keepdim) const;
  std::shared_ptr<TensorImpl> impl_;
};

struct Tensor::ValuesIndices {
  Tensor values;
  Tensor indices;
};

// --- creation ---
Tensor empty(const Shape& s, DType t = DType::f32, Device d = cpu());
Tensor zeros(const Shape& s, DType t = DType::f32, Device d = cpu());
Tensor ones(const Shape& s, DType t = DType::f32, Device d = cpu());
Tensor zeros(const Shape& s, Device d);
Tensor ones(const Shape& s, Device d);
Tensor full(const Shape& s, const Scalar& v, DType t = DType::f32, Device d = cpu());
/// 0, 1, ..., end-1 (int64 like torch.arange with integer bounds).
Tensor arange(int64_t end, DType t = DType::i64, Device d = cpu());
Tensor arange(double start, double end, double step = 1, DType t = DType::f32, Device d = cpu());
/// Integer bounds give an i64 range, as torch.arange(0, 5): arange(2, 11, 3) is [2, 5, 8].
Tensor arange_int(int64_t start, int64_t end, int64_t step, DType t, Device d);
template <std::integral A, std::integral B, std::integral C = int64_t>
Tensor arange(A start, B end, C step = 1, DType t = DType::i64, Device d = cpu()) {
  return arange_int(static_cast<int64_t>(start), static_cast<int64_t>(end), static_cast<int64_t>(step), t, d);
}
/// Uniform in [0, 1), from the global counter-based generator.
Tensor rand(const Shape& s, DType t = DType::f32, Device d = cpu());
Tensor randn(const Shape& s, DType t = DType::f32, Device d = cpu());
Tensor rand(const Shape& s, Device d);
Tensor randn(const Shape& s, Device d);
/// torch.linspace: `steps` evenly spaced values from start to end, both included.
///
///   Tensor t = linspace(0, 1, 5);   // [0, 0.25, 0.5, 0.75, 1]
Tensor linspace(double start, double end, int64_t steps, DType t = DType::f32, Device d = cpu());
/// torch.randint: integers uniform in [low, high), int64 unless `t` says otherwise.
///
///   Tensor labels = randint(0, 10, {64});
Tensor randint(int64_t low, int64_t high, const Shape& s, DType t = DType::i64, Device d = cpu());
/// The factories shaped, typed and placed like `x` (torch.zeros_like, ...);
/// `t` overrides the dtype.
///
///   Tensor m = zeros_like(w);
Tensor zeros_like(const Tensor& x, std::optional<DType> t = std::nullopt);
Tensor ones_like(const Tensor& x, std::optional<DType> t = std::nullopt);
Tensor full_like(const Tensor& x, const Scalar& v, std::optional<DType> t = std::nullopt);
Tensor rand_like(const Tensor& x, std::optional<DType> t = std::nullopt);
Tensor randn_like(const Tensor& x, std::optional<DType> t = std::nullopt);
/// From nested lists: tensor({{1., 2.}, {3., 4.}}). Integers give int64, else float32.
Tensor tensor(const NestedList& values, Device d = cpu());
Tensor tensor(const NestedList& values, DType t, Device d = cpu());
/// From a flat vector and a shape (the values are copied).
template <class T> Tensor from_vector(const std::vector<T>& values, const Shape& s, Device d = cpu());
/// A tensor over memory this process owns, viewed with `strides`; tessel keeps `storage` alive.
Tensor from_buffer(ir::BufferView view, DType t, const Shape& s, Device d = cpu());

/// Seeds the global generator (CPU and GPU draw the same numbers).
void manual_seed(uint64_t seed);
/// Reserves `n` random words; returns (seed, first counter) for a generator kernel.
std::pair<uint64_t, uint64_t> reserve_random(uint64_t n);

// --- functional ops (the same ops as the methods; expressions lower to these) ---
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor binary_op(ir::Op op, const Tensor& a, const Tensor& b);
Tensor binary_op(ir::Op op, const Tensor& a, const Scalar& b);
Tensor binary_op(ir::Op op, const Scalar& a, const Tensor& b);
Tensor unary_op(ir::Op op, const Tensor& x);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor logical_not(const Tensor& x);
/// A constant tensor holding `s`, typed the way it would be combined with `like`.
Tensor scalar_like(const Scalar& s, const Tensor& like);

/// torch.allclose: |a - b| <= atol + rtol * |b| everywhere (a and b broadcast);
/// NaNs are close only with equal_nan, infinities only to themselves. Realizes both.
///
///   CHECK(allclose(y, expected, 1e-5, 1e-6));
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false);
/// torch.equal: the same shape and every element equal (NaN is never equal).
bool equal(const Tensor& a, const Tensor& b);

/// Realizes several tensors in one go (one schedule, shared subtrees computed once).
void realize(const std::vector<Tensor>& ts);

}  // namespace tessel

template <class T>
  requires std::is_base_of_v<tessel::Tensor, T>
struct fmt::formatter<T> : fmt::formatter<std::string> {
  auto format(const tessel::Tensor& t, fmt::format_context& ctx) const {
    return fmt::formatter<std::string>::format(t.str(), ctx);
  }
};
template <>
struct fmt::formatter<tessel::Shape> : fmt::formatter<std::string> {
  auto format(const tessel::Shape& s, format_context& ctx) const {
    return fmt::formatter<std::string>::format(s.str(), ctx);
  }
};
template <>
struct fmt::formatter<tessel::DType> : fmt::formatter<std::string_view> {
  auto format(tessel::DType t, format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(tessel::dtype_name(t), ctx);
  }
};
template <>
struct fmt::formatter<tessel::Device> : fmt::formatter<std::string> {
  auto format(const tessel::Device& d, format_context& ctx) const {
    return fmt::formatter<std::string>::format(d.str(), ctx);
  }
};
