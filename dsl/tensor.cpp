#include "dsl/tensor.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <span>
#include <unordered_set>

#include "codegen/autodiff.h"
#include "codegen/backend.h"
#include "codegen/builders.h"
#include "codegen/movement.h"
#include "dsl/deferred_expr.h"
#include "dsl/grad_hooks.h"
#include "dsl/lazy_registry.h"

namespace tessel {

namespace {

// A realized tensor's elements live on the host (device tensors are copied).
ir::BufferView host_view(const Tensor& t) {
  if (!t.device().is_cpu()) return t.to(cpu()).buffer();
  return t.buffer();
}

bool can_cast(DType from, DType to) {
  if (is_floating(from) && !is_floating(to)) return false;
  if (from != DType::b8 && to == DType::b8) return false;
  return true;
}

Tensor view_of(const Tensor& t, ir::BufferView v, Shape s) {
  auto impl = std::make_shared<TensorImpl>();
  impl->node = ir::input(std::move(v), t.dtype(), std::move(s));
  impl->device = t.device();
  return Tensor(impl);
}

// Graph-building views: a tensor that carries gradients, or that is not
// realized yet, gets an IR node; a realized plain tensor gets a memory view.
bool wants_graph(const Tensor& t) { return !t.is_realized() || (t.requires_grad() && grad_enabled()); }

}  // namespace

NestedList::NestedList(std::initializer_list<NestedList> items) {
  std::optional<Shape> inner;
  for (const auto& it : items) {
    if (inner && !(*inner == it.shape))
      throw ShapeError(fmt::format("tensor(): nested lists must be rectangular; found sub-lists of shapes {} and {}",
                                   inner->str(), it.shape.str()));
    inner = it.shape;
    values.insert(values.end(), it.values.begin(), it.values.end());
    all_int = all_int && it.all_int;
    all_bool = all_bool && it.all_bool;
  }
  shape.dims.push_back(static_cast<int64_t>(items.size()));
  if (inner) shape.dims.insert(shape.dims.end(), inner->dims.begin(), inner->dims.end());
}

namespace {
std::shared_ptr<TensorImpl> impl_of_node(ir::NodePtr node, Device device) {
  auto impl = std::make_shared<TensorImpl>();
  impl->is_leaf = !node->requires_grad;
  impl->node = std::move(node);
  impl->device = device;
  return impl;
}
}  // namespace

Tensor Tensor::from_node_pending(ir::NodePtr node, Device device) {
  auto impl = impl_of_node(std::move(node), device);
  if (!impl->node->realized() && !DeferPendingScope::active()) register_pending(impl);
  return Tensor(impl);
}

Tensor Tensor::from_node(ir::NodePtr node, Device device) {
  bool lazy = !node->realized();
  auto impl = impl_of_node(std::move(node), device);
  if (lazy && impl->node->depth > ir::kMaxPendingDepth) {
    // A chain this deep (x = x * a + b in a loop) is computed now, as
    // ArrayFire evaluates its JIT trees past a node limit: every walk over
    // a pending graph stays shallow, and one kernel never grows without bound.
    Tensor t(impl);
    t.eval();
    return t;
  }
  if (lazy && !DeferPendingScope::active()) register_pending(impl);
  return Tensor(impl);
}

Tensor from_buffer(ir::BufferView view, DType t, const Shape& s, Device d) {
  auto impl = std::make_shared<TensorImpl>();
  impl->node = ir::input(std::move(view), t, s);
  impl->device = d;
  return Tensor(impl);
}

void Tensor::check_defined(const char* what) const {
  // `what` is the API call when the user made it (backward, grad, ...); the
  // internal accessors every op goes through (node, device) say nothing to a
  // user, so those messages name the tensor instead.
  const std::string_view w(what);
  const bool internal = w == "node" || w == "device";
  if (!impl_)
    throw ValueError(fmt::format("{}an undefined tensor (default-constructed, or the grad of a tensor no backward has "
                                 "reached) was used; give it a value first",
                                 internal ? "" : fmt::format("{}: ", what)));
  if (impl_->kind == TensorImpl::Kind::uninitialized_parameter || (!impl_->node && !impl_->deferred))
    throw ValueError(fmt::format(
        "{}{} is an UninitializedParameter: its shape is not known until its lazy layer sees its first input; "
        "run a forward pass (or apply_init) first",
        internal ? "" : fmt::format("{}: ", what), impl_->name.empty() ? "this parameter" : impl_->name));
}

const ir::NodePtr& Tensor::node() const {
  check_defined("node");
  if (impl_->deferred) materialize(*impl_);
  ir::NodePtr& n = impl_->node;
  // Memory written in place since this leaf node was made: new graphs get a
  // fresh node at the new version, while graphs built before keep the old
  // one, so their backward can tell the value it needs is gone.
  if (n->op == ir::Op::Input && n->buffer->storage && n->version != n->buffer->storage->version())
    n = ir::input(*n->buffer, n->dtype, n->shape, n->requires_grad, n->owner);
  return n;
}
const Shape& Tensor::shape() const { return node()->shape; }
DType Tensor::dtype() const { return node()->dtype; }
Device Tensor::device() const {
  check_defined("device");
  return impl_->device;
}
int64_t Tensor::size(int64_t d) const { return shape()[ir::normalize_axis("size", d, dim(), shape())]; }

bool Tensor::is_realized() const { return node()->realized(); }

namespace {

bool is_movement(const ir::Node& n) { return ir::op_category(n.op) == ir::Category::Movement; }

// The strides a pending node's value will have once realized, by the rules
// realize() follows: computed values are dense, movement nodes view the
// memory below them, and a reshape no strides can express is a dense copy.
Strides layout_of(const ir::Node& n) {
  if (n.realized()) return n.buffer->strides;
  if (!is_movement(n)) return contiguous_strides(n.shape);
  ir::BufferView in;
  in.strides = layout_of(*n.args[0]);
  auto v = ir::movement_view(n, in);
  return v ? v->strides : contiguous_strides(n.shape);
}

}  // namespace

namespace {

// A deferred expression's fast path; false when it must be lowered instead.
bool compute_deferred(TensorImpl& impl) {
  std::shared_ptr<const DeferredExpr> d = impl.deferred;  // alive while it computes
  if (!d->compute(impl)) return false;
  impl.deferred.reset();
  return true;
}

// `keep_grad_values`: whether values that carry gradients are kept for a
// later backward (false when the caller is that backward).
void realize_all(std::span<const Tensor> ts, bool keep_grad_values = true) {
  for (const auto& t : ts)
    if (t.defined() && t.impl_ptr()->deferred) compute_deferred(*t.impl_ptr());
  // Roots by device, in first-seen order: each device's backend realizes its own.
  struct Group {
    Device device;
    std::vector<ir::NodePtr> roots;
    bool keep = false;
  };
  std::vector<Group> groups;
  std::vector<std::pair<ir::NodePtr, Device>> views;
  auto add_root = [&](const ir::NodePtr& n, Device d) {
    auto g = std::find_if(groups.begin(), groups.end(), [&](const Group& x) { return x.device == d; });
    if (g == groups.end()) g = groups.insert(groups.end(), Group{d, {}, false});
    g->roots.push_back(n);
    g->keep = g->keep || (keep_grad_values && n->requires_grad);
  };
  for (const auto& t : ts) {
    const auto& n = t.node();
    if (n->realized()) continue;
    if (is_movement(*n)) {
      // A view (t.t(), y.reshape(...)) shares memory with the value it views,
      // as in PyTorch: compute that value as itself, then view it, so writes
      // through the view reach every tensor holding it.
      const ir::NodePtr* base = &n;
      while (!(*base)->realized() && is_movement(**base)) base = &(*base)->args[0];
      if (!(*base)->realized()) add_root(*base, t.device());
      views.emplace_back(n, t.device());
      continue;
    }
    add_root(n, t.device());
  }
  for (Group& g : groups) {
    backend_for(g.device).realize(g.roots, g.keep);
    for (auto& r : g.roots)  // values that carry no gradient never need their inputs again
      if (!r->requires_grad) r->args.clear();
  }
  // Each view chain, bottom up: every node becomes a view of the memory below
  // it (so any tensor holding one of them shares that memory), except a
  // reshape that needs a copy, which gets memory of its own.
  for (auto& [top, device] : views) {
    std::vector<ir::NodePtr> chain;
    for (ir::NodePtr n = top; !n->realized(); n = n->args[0]) chain.push_back(n);
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      const ir::NodePtr& n = *it;
      if (n->realized()) continue;
      if (auto v = ir::movement_view(*n, *n->args[0]->buffer)) n->buffer = std::move(*v);
      else backend_for(device).realize({n}, n->requires_grad);
      if (!n->requires_grad) n->args.clear();
    }
  }
}

}  // namespace

void realize(const std::vector<Tensor>& ts) { realize_all(ts); }

// >>> post-accumulate-grad hooks: staged backward
namespace {
// The nodes a stage's realization computes that later stages read: realized
// with the stage (as extra roots), so the later stages start from them
// instead of computing them again. Constants are cheap and stay lazy.
std::vector<ir::NodePtr> shared_with_later_stages(const std::vector<Tensor>& stage, const std::vector<Tensor>& later) {
  std::unordered_set<const ir::Node*> in_stage;
  std::vector<ir::Node*> stack;
  for (const Tensor& t : stage)
    if (!t.node()->realized()) stack.push_back(t.node().get());
  while (!stack.empty()) {
    ir::Node* n = stack.back();
    stack.pop_back();
    if (!in_stage.insert(n).second) continue;
    for (auto& a : n->args)
      if (!a->realized()) stack.push_back(a.get());
  }
  std::vector<ir::NodePtr> cuts;
  std::unordered_set<const ir::Node*> seen;
  std::vector<ir::NodePtr> walk;
  for (const Tensor& t : later) walk.push_back(t.node());
  while (!walk.empty()) {
    ir::NodePtr n = std::move(walk.back());
    walk.pop_back();
    if (n->realized() || !seen.insert(n.get()).second) continue;
    if (in_stage.count(n.get())) {
      if (n->op != ir::Op::Constant) cuts.push_back(n);
      continue;
    }
    for (auto& a : n->args) walk.push_back(a);
  }
  return cuts;
}
}  // namespace
// <<< post-accumulate-grad hooks


const Tensor& Tensor::eval() const {
  if (impl_ && impl_->deferred && compute_deferred(*impl_)) return *this;
  if (!node()->realized()) realize_all({this, 1});  // no vector of handles for one tensor
  return *this;
}

const ir::BufferView& Tensor::buffer() const {
  eval();
  return *impl_->node->buffer;
}

bool Tensor::is_contiguous() const {
  // As in PyTorch, the stride of a size-1 dim does not matter.
  return ir::is_contiguous(shape(), buffer().strides);
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  ir::BufferView v = host_view(*this);
  std::vector<T> out;
  out.reserve(static_cast<size_t>(numel()));
  Shape s = shape();
  DType dt = dtype();
  int64_t n = s.numel();
  std::vector<int64_t> idx(s.dims.size(), 0);
  const std::byte* base = v.bytes(dt);
  size_t es = dtype_size(dt);
  for (int64_t k = 0; k < n; ++k) {
    int64_t off = 0;
    for (size_t i = 0; i < idx.size(); ++i) off += idx[i] * v.strides[i];
    const std::byte* p = base + off * static_cast<int64_t>(es);
    T val{};
    switch (dt) {
      case DType::f32: { float x; std::memcpy(&x, p, 4); val = static_cast<T>(x); break; }
      case DType::f64: { double x; std::memcpy(&x, p, 8); val = static_cast<T>(x); break; }
      case DType::i64: { int64_t x; std::memcpy(&x, p, 8); val = static_cast<T>(x); break; }
      case DType::i32: { int32_t x; std::memcpy(&x, p, 4); val = static_cast<T>(x); break; }
      case DType::b8: { bool x; std::memcpy(&x, p, 1); val = static_cast<T>(x); break; }
      case DType::f16: { uint16_t x; std::memcpy(&x, p, 2); val = static_cast<T>(f16_to_f32(x)); break; }
      case DType::bf16: { uint16_t x; std::memcpy(&x, p, 2); val = static_cast<T>(bf16_to_f32(x)); break; }
    }
    out.push_back(val);
    for (size_t i = idx.size(); i-- > 0;) {
      if (++idx[i] < s.dims[i]) break;
      idx[i] = 0;
    }
  }
  return out;
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<int32_t> Tensor::to_vector<int32_t>() const;
template std::vector<uint8_t> Tensor::to_vector<uint8_t>() const;

template <class T>
T Tensor::item() const {
  if (numel() != 1)
    throw ValueError(fmt::format("item(): the tensor has {} elements (shape {}); item() needs exactly one -- reduce it "
                                 "first, e.g. .sum(), or index one element",
                                 numel(), shape().str()));
  if constexpr (std::is_same_v<T, bool>) return to_vector<uint8_t>()[0] != 0;
  else return to_vector<T>()[0];
}
template float Tensor::item<float>() const;
template double Tensor::item<double>() const;
template int64_t Tensor::item<int64_t>() const;
template int32_t Tensor::item<int32_t>() const;
template bool Tensor::item<bool>() const;

Tensor::operator bool() const {
  if (numel() != 1)
    throw ValueError(fmt::format("the boolean value of a tensor with {} elements (shape {}) is ambiguous; reduce it "
                                 "first, e.g. (x > 0).all() or x.sum() > 1",
                                 numel(), shape().str()));
  return item<double>() != 0;
}

// ---------------------------------------------------------------- views

Tensor Tensor::reshape(std::vector<int64_t> s) const {
  if (!wants_graph(*this)) {
    // A view whenever the memory allows one (squeeze/unsqueeze of a
    // transposed tensor, say), so writes through it reach this tensor.
    ir::NodePtr probe = ir::reshape(ir::constant(ir::ScalarValue::of(0), dtype(), shape()), s);  // checks + infers -1
    const ir::BufferView& b = buffer();
    if (auto st = ir::reshape_strides(shape(), b.strides, probe->shape)) {
      ir::BufferView v = b;
      v.strides = std::move(*st);
      return view_of(*this, std::move(v), probe->shape);
    }
  }
  return from_node(ir::reshape(node(), std::move(s)), device());
}

Tensor Tensor::view(std::vector<int64_t> s) const {
  if (!(requires_grad() && grad_enabled())) {
    // The layout a pending value will have is known without computing it.
    ir::NodePtr probe = ir::reshape(ir::constant(ir::ScalarValue::of(0), dtype(), shape()), s);
    Strides st = layout_of(*node());
    if (!ir::reshape_strides(shape(), st, probe->shape))
      throw ShapeError(fmt::format("view: a tensor of shape {} with strides [{}] cannot be viewed as [{}] without a "
                                   "copy; use reshape(), which copies when it must (or contiguous() first)",
                                   shape().str(), fmt::join(st, ", "), fmt::join(s, ", ")));
  }
  return reshape(std::move(s));
}

Tensor Tensor::flatten(int64_t start, int64_t end) const {
  int64_t r = dim();
  if (r == 0) return reshape({1});
  start = ir::normalize_axis("flatten", start, r, shape());
  end = ir::normalize_axis("flatten", end, r, shape());
  if (start > end)
    throw IndexError(fmt::format("flatten: start_dim {} comes after end_dim {} (shape {}); flatten(start, end) needs "
                                 "start <= end",
                                 start, end, shape().str()));
  std::vector<int64_t> s;
  for (int64_t i = 0; i < start; ++i) s.push_back(shape()[i]);
  int64_t m = 1;
  for (int64_t i = start; i <= end; ++i) m *= shape()[i];
  s.push_back(m);
  for (int64_t i = end + 1; i < r; ++i) s.push_back(shape()[i]);
  return reshape(std::move(s));
}

Tensor Tensor::permute(std::vector<int64_t> order) const {
  ir::NodePtr p = ir::permute(node(), order);
  if (p == node()) return *this;
  if (!wants_graph(*this)) {
    return view_of(*this, *ir::movement_view(*p, buffer()), p->shape);
  }
  return from_node(p, device());
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  std::vector<int64_t> order(static_cast<size_t>(dim()));
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  d0 = ir::normalize_axis("transpose", d0, dim(), shape());
  d1 = ir::normalize_axis("transpose", d1, dim(), shape());
  std::swap(order[static_cast<size_t>(d0)], order[static_cast<size_t>(d1)]);
  return permute(std::move(order));
}

Tensor Tensor::t() const {
  if (dim() > 2)
    throw ShapeError(fmt::format("t(): expects a tensor with at most 2 dims, got shape {}; use transpose(d0, d1)",
                                 shape().str()));
  return dim() < 2 ? *this : transpose(0, 1);
}

Tensor Tensor::unsqueeze(int64_t d) const {
  d = ir::normalize_axis("unsqueeze", d, dim() + 1, Shape(shape()));
  std::vector<int64_t> s = shape().dims;
  s.insert(s.begin() + d, 1);
  return reshape(std::move(s));
}

Tensor Tensor::squeeze(int64_t d) const {
  d = ir::normalize_axis("squeeze", d, dim(), shape());
  if (shape()[d] != 1) return *this;
  std::vector<int64_t> s = shape().dims;
  s.erase(s.begin() + d);
  return reshape(std::move(s));
}

Tensor Tensor::expand(std::vector<int64_t> s) const {
  // -1 keeps the existing size, as in torch.expand.
  size_t lead = s.size() - std::min(s.size(), shape().dims.size());
  for (size_t i = lead; i < s.size(); ++i)
    if (s[i] == -1) s[i] = shape().dims[i - lead];
  ir::NodePtr e = ir::expand(node(), Shape(s));
  if (e == node()) return *this;
  if (!wants_graph(*this)) {
    ir::BufferView v = buffer();
    v.strides.assign(s.size(), 0);
    for (size_t i = 0; i < shape().dims.size(); ++i)
      v.strides[lead + i] = shape().dims[i] == 1 ? 0 : buffer().strides[i];
    return view_of(*this, std::move(v), Shape(s));
  }
  return from_node(e, device());
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  d = ir::normalize_axis("slice", d, dim(), shape());
  if (step <= 0) throw ValueError(fmt::format("slice: step must be positive, got {}", step));
  int64_t n = shape()[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  const int64_t len = end > start ? 1 + (end - start - 1) / step : 0;  // (end - start + step - 1) overflows
  Shape out = shape();
  out[d] = len;
  if (!wants_graph(*this) || !requires_grad()) {
    ir::BufferView v = buffer();
    v.offset += start * v.strides[static_cast<size_t>(d)];
    v.strides[static_cast<size_t>(d)] *= step;
    return view_of(*this, std::move(v), out);
  }
  std::vector<int64_t> starts(static_cast<size_t>(dim()), 0), steps(static_cast<size_t>(dim()), 1);
  starts[static_cast<size_t>(d)] = start;
  steps[static_cast<size_t>(d)] = step;
  return from_node(ir::slice(node(), starts, steps, out), device());
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  d = ir::normalize_axis("narrow", d, dim(), shape());
  const int64_t n = shape()[d];
  if (start < -n || start > n)
    throw IndexError(fmt::format("narrow: start {} is out of range for dimension {} of size {} (shape {})", start, d, n,
                                 shape().str()));
  if (start < 0) start += n;
  if (length < 0 || length > n - start)  // start + length would overflow for huge lengths
    throw IndexError(fmt::format("narrow: start ({}) + length ({}) exceeds dimension {} of size {} (shape {}); the "
                                 "length must be in [0, {}]",
                                 start, length, d, n, shape().str(), n - start));
  return slice(d, start, start + length);
}

Tensor Tensor::select(int64_t d, int64_t i) const {
  if (dim() == 0) throw IndexError("select: cannot index a 0-d tensor; use item() to read its value");
  d = ir::normalize_axis("select", d, dim(), shape());
  int64_t n = shape()[d];
  if (i < -n || i >= n)
    throw IndexError(fmt::format("index {} is out of bounds for dimension {} with size {} (tensor shape {})", i, d, n,
                                 shape().str()));
  if (i < 0) i += n;
  return slice(d, i, i + 1).squeeze(d);
}

Tensor Tensor::contiguous() const {
  if (is_realized() && is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  // A copy that is its own memory even when the value is a view of another's.
  if (requires_grad() && grad_enabled())  // stays in the graph: d(clone)/dx = 1
    return from_node(ir::binary(ir::Op::Add, node(), ir::constant(ir::ScalarValue::of(0), dtype())), device());
  Tensor out = empty(shape(), dtype(), device());
  out.copy_(*this);
  return out;
}

Tensor Tensor::detach() const {
  return view_of(*this, buffer(), shape());
}

Tensor Tensor::to(DType t) const {
  if (t == dtype()) return *this;
  return from_node(ir::cast(node(), t), device());
}

// ------------------------------------------------------------- in place

const Tensor& Tensor::assign_(const Tensor& value) const {
  check_defined("in-place op");
  if (!(value.shape() == shape())) {
    Shape b = ir::broadcast_shapes("in-place op", value.shape(), shape());
    if (!(b == shape()))
      throw ShapeError(fmt::format("in-place op: the result has shape {} but this tensor's shape is {}; an in-place op "
                                   "cannot change the shape",
                                   b.str(), shape().str()));
  }
  if (!can_cast(value.dtype(), dtype()))
    throw DTypeError(fmt::format("in-place op: result type {} can't be cast to this tensor's dtype {}; use the "
                                 "out-of-place form (x = x / 2) or convert first with .to()",
                                 dtype_name(value.dtype()), dtype_name(dtype())));
  ir::NodePtr v = ir::expand(ir::cast(value.node(), dtype()), shape());
  bool tracked = grad_enabled() && (requires_grad() || v->requires_grad);
  // A pending view (y.t(), y.reshape(...)) is written like memory, so the
  // write reaches the tensor it views.
  if (!is_realized() && ir::op_category(impl_->node->op) == ir::Category::Movement) {
    if (tracked)  // the graph would only change this view, never the tensor it views
      throw ValueError(
          "in-place op on a view (an index, slice, transpose or reshape) of a tensor that requires grad: the "
          "write cannot reach the tensor it views; write through .data() or inside a NoGradGuard, or use the "
          "out-of-place form");
    eval();
  }
  if (!is_realized() || (tracked && !is_leaf())) {
    // Not memory yet (or part of a graph): the new value extends the graph.
    ++impl_->writes;
    impl_->node = v;
    impl_->is_leaf = !v->requires_grad;
    if (v->realized()) return *this;
    if (v->depth > ir::kMaxPendingDepth) eval();  // as from_node: x += y in a long loop
    else register_pending(impl_);
    return *this;
  }
  if (tracked && requires_grad())
    throw ValueError("in-place op on a leaf tensor that requires grad (a parameter): its gradient would be lost; "
                     "write through .data() or inside a NoGradGuard");
  // An expanded view repeats one memory location across a dim: a write would
  // race with itself (PyTorch refuses it too).
  for (size_t d = 0; d < shape().dims.size(); ++d)
    if (shape().dims[d] > 1 && buffer().strides[d] == 0)
      throw ValueError(fmt::format("in-place op on a tensor of shape {} whose elements share memory (an expand() "
                                   "view, dim {} has stride 0); clone() it first",
                                   shape().str(), d));
  // Compute the value before the memory changes, then let other lazy readers
  // see the old bytes, then write.
  Tensor val = from_node(v, device());
  val.eval();
  const ir::BufferView& dst = buffer();
  realize_readers_of(dst.storage.get());
  ++impl_->writes;
  backend_for(device()).copy_into(dst, val.buffer(), dtype(), shape());
  dst.storage->bump_version();
  return *this;
}

#define TESSEL_INPLACE(opsym, OPNAME)                                                            \
  const Tensor& Tensor::operator opsym(const Tensor& o) const {                                  \
    return assign_(binary_op(ir::Op::OPNAME, *this, o));                                         \
  }                                                                                              \
  const Tensor& Tensor::operator opsym(const Scalar& s) const {                                  \
    return assign_(binary_op(ir::Op::OPNAME, *this, s));                                         \
  }
TESSEL_INPLACE(+=, Add)
TESSEL_INPLACE(-=, Sub)
TESSEL_INPLACE(*=, Mul)
TESSEL_INPLACE(/=, Div)
#undef TESSEL_INPLACE

Tensor& Tensor::operator=(const Scalar& v) && {
  fill_(v);
  return *this;
}
Tensor& Tensor::operator=(const Tensor& src) && {
  copy_(src);
  return *this;
}

const Tensor& Tensor::fill_(const Scalar& v) const {
  Tensor c = from_node(ir::constant(v.v, dtype(), shape()), device());
  return assign_(c);
}

const Tensor& Tensor::copy_(const Tensor& src) const {
  Tensor s = src;
  if (!(src.device() == device())) s = src.to(device());
  return assign_(s.dtype() == dtype() ? s : s.to(dtype()));
}

const Tensor& Tensor::uniform_(double a, double b) const {
  NoGradGuard g;
  Tensor r = rand(shape(), DType::f64, tessel::cpu());
  return copy_(binary_op(ir::Op::Add, binary_op(ir::Op::Mul, r, Scalar(b - a)), Scalar(a)));
}

const Tensor& Tensor::normal_(double mean, double std) const {
  NoGradGuard g;
  Tensor r = randn(shape(), DType::f64, tessel::cpu());
  return copy_(binary_op(ir::Op::Add, binary_op(ir::Op::Mul, r, Scalar(std)), Scalar(mean)));
}

// ------------------------------------------------------------- autograd

bool Tensor::requires_grad() const { return defined() && impl_->node && impl_->node->requires_grad; }

const Tensor& Tensor::requires_grad_(bool on) const {
  check_defined("requires_grad_");
  if (!is_leaf() && !on)
    throw ValueError("requires_grad_(false) on a non-leaf tensor; use detach() to cut it from the graph");
  if (!is_floating(dtype()) && on)
    throw DTypeError(fmt::format("requires_grad_: only floating tensors can require gradients, this one is {}",
                                 dtype_name(dtype())));
  if (!is_leaf()) return *this;
  // A fresh leaf node owned by this tensor: its identity is the gradient's target.
  const ir::BufferView& v = buffer();
  impl_->node = ir::input(v, dtype(), shape(), on, on ? std::weak_ptr<void>(impl_) : std::weak_ptr<void>());
  return *this;
}

Tensor Tensor::grad() const {
  check_defined("grad");
  return impl_->grad ? Tensor(impl_->grad) : Tensor();
}

void Tensor::set_grad(const Tensor& g) const {
  check_defined("set_grad");
  impl_->grad = g.impl_ptr();
}

bool Tensor::is_leaf() const { return !defined() || impl_->is_leaf || !impl_->node || !impl_->node->requires_grad; }

const Tensor& Tensor::retain_grad() const {
  if (!is_leaf()) {
    impl_->retains_grad = true;
    auto relay = std::static_pointer_cast<TensorImpl>(impl_->node->owner.lock());
    if (relay && relay->transfer_source) relay->transfer_result = impl_;  // keep relaying, and keep a copy
    else impl_->node->owner = impl_;
  }
  return *this;
}

std::string Tensor::grad_fn_name() const {
  if (is_leaf()) return {};
  if (auto relay = std::static_pointer_cast<TensorImpl>(impl_->node->owner.lock()); relay && relay->transfer_source)
    return "ToCopyBackward0";
  return autodiff::grad_fn_name(*impl_->node);
}

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  check_defined("backward");
  if (!requires_grad())
    throw ValueError("backward: this tensor does not require grad and has no grad_fn; did you forget "
                     "requires_grad_() on a leaf, or build it inside NoGradGuard?");
  Tensor seed = gradient;
  if (!seed.defined()) {
    if (numel() != 1)
      throw ValueError(fmt::format("backward: grad can be implicitly created only for one-element outputs; this one "
                                   "has shape {} -- pass a gradient of that shape",
                                   shape().str()));
    seed = ones(shape(), dtype(), device());
  } else if (!(seed.shape() == shape())) {
    throw ShapeError(fmt::format("backward: gradient has shape {} but the tensor has shape {}", seed.shape().str(),
                                 shape().str()));
  }
  NoGradGuard no_grad;
  std::vector<autodiff::LeafGrad> grads = autodiff::gradients(node(), seed.node(), retain_graph);
  std::vector<Tensor> values;
  // Realized together below: from_node's depth cut would realize each deep
  // gradient alone, recomputing the graph below it once per gradient.
  for (auto& lg : grads) values.push_back(from_node_pending(lg.grad, device()));
  // The output's own value comes from the same forward pass: realize it
  // with the gradients, or the first in-place write to a parameter (an
  // optimizer step) would run the whole forward pass again to keep it.
  // Values of the forward graph that users still hold (the logits an
  // accuracy reads after the step) come out of the same pass too. Nothing
  // else is kept for another backward: a second one recomputes from the
  // graph, as lazily as ever.
  std::vector<Tensor> forward_roots;
  if (!is_realized()) {
    forward_roots.push_back(*this);
    ir::NodeTable forward;
    for (ir::Node* n : ir::topo_order({node()})) forward.put(n, 1);
    for (Tensor& t : pending_among(forward))
      if (!t.is_same(*this)) forward_roots.push_back(std::move(t));
  }
  // >>> post-accumulate-grad hooks (dsl/grad_hooks.h): a leaf with a hook ends a stage
  std::vector<size_t> stage_ends;
  for (size_t i = 0; i < grads.size(); ++i) {
    auto owner = std::static_pointer_cast<TensorImpl>(grads[i].leaf->owner.lock());
    if (owner && !owner->transfer_source && autograd::detail::has_post_accumulate_grad_hooks(owner.get()))
      stage_ends.push_back(i + 1);
  }
  if (stage_ends.empty() || stage_ends.back() != grads.size()) stage_ends.push_back(grads.size());
  autograd::detail::backward_enter();
  bool ok = false;
  struct ExitGuard {
    bool& ok;
    ~ExitGuard() {
      if (!ok) autograd::detail::backward_exit(false);
    }
  } exit_guard{ok};
  // <<< post-accumulate-grad hooks
  std::vector<std::pair<Tensor, Tensor>> relayed;  // (source of a device copy, its gradient)
  size_t begin = 0;
  for (size_t end : stage_ends) {
    std::vector<Tensor> roots(values.begin() + static_cast<std::ptrdiff_t>(begin),
                              values.begin() + static_cast<std::ptrdiff_t>(end));
    if (begin == 0) roots.insert(roots.end(), forward_roots.begin(), forward_roots.end());
    if (end < grads.size()) {
      std::vector<Tensor> later(values.begin() + static_cast<std::ptrdiff_t>(end), values.end());
      for (const ir::NodePtr& n : shared_with_later_stages(roots, later)) roots.push_back(from_node(n, device()));
    }
    realize_all(roots, /*keep_grad_values=*/false);
    for (size_t i = begin; i < end; ++i) {
      auto owner = std::static_pointer_cast<TensorImpl>(grads[i].leaf->owner.lock());
      if (!owner) continue;
      Tensor g = values[i];
      if (owner->transfer_source) {
        // Copies of one source (on one device) sum first, so its graph is walked once.
        auto same = std::find_if(relayed.begin(), relayed.end(), [&](const auto& r) {
          return r.first.impl_ptr() == owner->transfer_source && r.second.device() == g.device();
        });
        if (same == relayed.end()) relayed.emplace_back(Tensor(owner->transfer_source), g);
        else same->second = add(same->second, g);
        owner = owner->transfer_result.lock();  // a retained grad on the copy itself
        if (!owner) continue;
      }
      if (owner->grad) {
        Tensor acc = add(Tensor(owner->grad), g);
        acc.eval();
        owner->grad = acc.detach().impl_ptr();
      } else {
        owner->grad = g.detach().impl_ptr();
      }
      // >>> post-accumulate-grad hooks: the stage's last leaf is the hooked one
      if (i + 1 == end && autograd::detail::has_post_accumulate_grad_hooks(owner.get()))
        autograd::detail::run_post_accumulate_grad_hooks(owner);
      // <<< post-accumulate-grad hooks
    }
    begin = end;
  }
  // Each device copy's gradient goes back to its source's device and on
  // through the source's own graph.
  for (auto& [source, g] : relayed) source.backward(g.to(source.device()), retain_graph);
  ok = true;
  autograd::detail::backward_exit(true);
}

}  // namespace tessel
