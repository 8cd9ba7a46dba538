#include "codegen/builders.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>

#include "codegen/grad_mode.h"
#include "runtime/errors.h"

namespace tessel::ir {
namespace {

NodePtr make(Op op, DType dt, Shape shape, std::vector<NodePtr> args) {
  auto n = std::make_shared<Node>();
  n->op = op;
  n->dtype = dt;
  n->shape = std::move(shape);
  bool rg = false;
  uint32_t below = 0;
  for (auto& a : args) {
    rg = rg || a->requires_grad;
    if (!a->realized()) below = std::max(below, a->depth);
  }
  n->requires_grad = rg && grad_enabled() && !has_trait(op, kNoGrad);
  n->depth = below + 1;
  n->args = std::move(args);
  return n;
}

bool is_half(DType t) { return t == DType::f16 || t == DType::bf16; }

// An operand converted to the compute dtype. A scalar constant typed as a
// half format (half_tensor * 0.1) keeps its exact value in the f32
// computation, as PyTorch's opmath does, instead of being rounded to f16 first.
NodePtr to_compute(NodePtr x, DType compute) {
  if (x->op == Op::Constant && is_half(x->dtype) && !is_half(compute)) return constant(x->value, compute, x->shape);
  return cast(std::move(x), compute);
}

}  // namespace

Shape broadcast_shapes(std::string_view op, const Shape& a, const Shape& b) {
  size_t r = std::max(a.dims.size(), b.dims.size());
  std::vector<int64_t> out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.dims.size() ? 1 : a.dims[i - (r - a.dims.size())];
    int64_t db = i < r - b.dims.size() ? 1 : b.dims[i - (r - b.dims.size())];
    if (da != db && da != 1 && db != 1)
      throw ShapeError(fmt::format(
          "{}: shapes {} and {} do not broadcast: dimension {} is {} vs {} (sizes must match or one must be 1)",
          op, a.str(), b.str(), i, da, db));
    out[i] = da == 1 ? db : da;
  }
  return Shape(std::move(out));
}

int64_t normalize_axis(std::string_view op, int64_t d, int64_t rank, const Shape& shape) {
  int64_t lo = rank == 0 ? -1 : -rank, hi = rank == 0 ? 0 : rank - 1;
  if (d < lo || d > hi)
    throw IndexError(fmt::format("{}: dim {} is out of range for a tensor of shape {} (valid dims are {}..{})", op, d,
                                 shape.str(), lo, hi));
  return d < 0 ? d + std::max<int64_t>(rank, 1) : d;
}

NodePtr input(BufferView view, DType dtype, Shape shape, bool requires_grad, std::weak_ptr<void> owner) {
  auto n = std::make_shared<Node>();
  n->op = Op::Input;
  n->dtype = dtype;
  n->shape = std::move(shape);
  n->version = view.storage ? view.storage->version() : 0;
  n->buffer = std::move(view);
  n->requires_grad = requires_grad;
  n->owner = std::move(owner);
  return n;
}

NodePtr constant(ScalarValue v, DType dtype, Shape shape) {
  auto n = make(Op::Constant, dtype, std::move(shape), {});
  if (is_integral(dtype) || dtype == DType::b8) {
    int64_t iv = v.is_int ? v.i : static_cast<int64_t>(v.f);
    if (dtype == DType::b8) iv = iv != 0 || (!v.is_int && v.f != 0);
    v = ScalarValue::of_int(iv);
  } else if (v.is_int) {
    v = ScalarValue::of(static_cast<double>(v.i));
  }
  n->value = v;
  return n;
}

NodePtr cast(NodePtr x, DType to) {
  if (x->dtype == to) return x;
  Shape s = x->shape;  // read before x is moved: argument order is unspecified
  return make(Op::Cast, to, std::move(s), {std::move(x)});
}

NodePtr unary(Op op, NodePtr x) {
  TESSEL_ASSERT("builders", op_category(op) == Category::Unary && op != Op::Cast);
  if (op == Op::Not) {
    Shape s = x->shape;
    return make(op, DType::b8, std::move(s), {cast(std::move(x), DType::b8)});
  }
  if (x->dtype == DType::b8 && (op == Op::Neg))
    throw DTypeError("neg: negation of a bool tensor is not supported; use logical_not (operator!) instead");
  const bool to_bool = has_trait(op, kBoolResult);
  // isnan/isinf of an integer: never, as torch.isnan(int_tensor).
  if (to_bool && !is_floating(x->dtype)) return constant(ScalarValue::of_int(0), DType::b8, x->shape);
  if (is_half(x->dtype)) {
    DType h = x->dtype;
    NodePtr r = unary(op, cast(std::move(x), DType::f32));
    return to_bool ? r : cast(std::move(r), h);
  }
  // Integers are cast first, as torch.exp(int_tensor) returns float.
  if (has_trait(op, kFloatOnly) && !is_floating(x->dtype)) x = cast(std::move(x), DType::f32);
  DType dt = to_bool ? DType::b8 : x->dtype;
  Shape s = x->shape;
  return make(op, dt, std::move(s), {std::move(x)});
}

NodePtr expand(NodePtr x, Shape s) {
  if (x->shape == s) return x;
  const auto& in = x->shape.dims;
  for (int64_t d : s.dims)
    if (d < 0)
      throw ShapeError(fmt::format("expand: cannot expand shape {} to {}: sizes must be non-negative (-1, which "
                                   "keeps a size, is only allowed for existing dims)",
                                   x->shape.str(), s.str()));
  if (in.size() > s.dims.size())
    throw ShapeError(fmt::format("expand: cannot expand shape {} to {} of lower rank", x->shape.str(), s.str()));
  size_t lead = s.dims.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i)
    if (in[i] != 1 && in[i] != s.dims[lead + i])
      throw ShapeError(fmt::format("expand: cannot expand shape {} to {}: dimension {} is {} (only size-1 dims expand)",
                                   x->shape.str(), s.str(), i, in[i]));
  (void)checked_numel("expand", s);
  DType dt = x->dtype;
  return make(Op::Expand, dt, std::move(s), {std::move(x)});
}

NodePtr binary(Op op, NodePtr a, NodePtr b) {
  Category cat = op_category(op);
  TESSEL_ASSERT("builders", cat == Category::Binary || cat == Category::Compare);
  std::string_view name = op_name(op);
  Shape out = broadcast_shapes(name, a->shape, b->shape);
  DType common = promote(a->dtype, b->dtype);
  if (op == Op::And || op == Op::Or) common = DType::b8;
  if (has_trait(op, kFloatOnly) && !is_floating(common)) common = DType::f32;  // true division
  if (op == Op::Sub && common == DType::b8)
    throw DTypeError("sub: subtraction of two bool tensors is not supported; use logical_xor semantics via != instead");
  DType compute = compute_dtype(common);
  a = expand(to_compute(std::move(a), compute), out);
  b = expand(to_compute(std::move(b), compute), out);
  if (has_trait(op, kBoolResult)) return make(op, DType::b8, std::move(out), {std::move(a), std::move(b)});
  NodePtr r = make(op, compute, std::move(out), {std::move(a), std::move(b)});
  return cast(std::move(r), common);
}

NodePtr where(NodePtr cond, NodePtr a, NodePtr b) {
  Shape out = broadcast_shapes("where", broadcast_shapes("where", cond->shape, a->shape), b->shape);
  DType common = promote(a->dtype, b->dtype);
  DType compute = compute_dtype(common);
  cond = expand(cast(std::move(cond), DType::b8), out);
  a = expand(to_compute(std::move(a), compute), out);
  b = expand(to_compute(std::move(b), compute), out);
  NodePtr r = make(Op::Where, compute, std::move(out), {std::move(cond), std::move(a), std::move(b)});
  return cast(std::move(r), common);
}

NodePtr with_gradient_via(NodePtr value, NodePtr surrogate) {
  TESSEL_ASSERT("builders", !value->realized() && !value->requires_grad && !value->grad_via);
  TESSEL_ASSERT("builders", value->shape == surrogate->shape && value->dtype == surrogate->dtype);
  if (!(surrogate->requires_grad && grad_enabled())) return value;
  // A copy, so a node someone else holds never changes what it differentiates to.
  auto n = std::make_shared<Node>(*value);
  n->requires_grad = true;
  n->grad_via = std::move(surrogate);
  return n;
}

NodePtr reduce(Op op, NodePtr x, std::vector<int64_t> axes, bool keepdim) {
  TESSEL_ASSERT("builders", op_category(op) == Category::Reduce);
  std::string_view name = op_name(op);
  int64_t rank = x->shape.rank();
  if (axes.empty()) {
    axes.resize(static_cast<size_t>(rank));
    std::iota(axes.begin(), axes.end(), 0);
  }
  for (auto& d : axes) d = normalize_axis(name, d, rank, x->shape);
  if (rank == 0) axes.clear();
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end())
    throw IndexError(fmt::format("{}: dim {} appears more than once in dims [{}]", name,
                                 *std::adjacent_find(axes.begin(), axes.end()), fmt::join(axes, ", ")));
  int64_t count = 1;
  for (int64_t d : axes) count *= x->shape[d];
  if ((op == Op::Max || op == Op::Min) && count == 0)
    throw ValueError(fmt::format("{}: cannot reduce over an empty dimension (shape {}); there is no identity for {}",
                                 name, x->shape.str(), name));
  if (has_trait(op, kFloatOnly) && !is_floating(x->dtype))
    throw DTypeError(fmt::format(
        "{0}: input dtype is {1}, but {0} needs a floating dtype; cast first, e.g. x.to(DType::f32).{0}()", name,
        dtype_name(x->dtype)));
  DType result = x->dtype;
  // torch.sum and torch.prod of bool/int inputs are int64.
  const bool widens = op == Op::Sum || op == Op::Prod;
  if (widens && !is_floating(x->dtype)) result = DType::i64;
  if (is_half(x->dtype)) {
    DType h = x->dtype;
    return cast(reduce(op, cast(std::move(x), DType::f32), std::move(axes), keepdim), h);
  }
  if (widens && result != x->dtype) x = cast(std::move(x), result);
  std::vector<int64_t> out;
  for (int64_t i = 0; i < rank; ++i) {
    bool red = std::binary_search(axes.begin(), axes.end(), i);
    if (!red) out.push_back(x->shape[i]);
    else if (keepdim) out.push_back(1);
  }
  NodePtr n = make(op, result, Shape(std::move(out)), {std::move(x)});
  n->attrs = ReduceAttrs{std::move(axes), keepdim};
  return n;
}

NodePtr argmax(NodePtr x, std::optional<int64_t> dim, bool keepdim) {
  const int64_t rank = x->shape.rank();
  if (!dim || rank == 0) {
    // torch.argmax without dim: the index into the flattened tensor (a
    // scalar's dim 0 or -1 is that too).
    if (dim) (void)normalize_axis("argmax", *dim, rank, x->shape);
    NodePtr r = argmax(reshape(std::move(x), {-1}), 0, false);
    if (keepdim) return reshape(std::move(r), std::vector<int64_t>(static_cast<size_t>(rank), 1));
    return r;
  }
  const int64_t axis = normalize_axis("argmax", *dim, rank, x->shape);
  const Shape shape = x->shape;
  const int64_t n = shape[axis];
  if (n == 0)
    throw ValueError(fmt::format("argmax: cannot reduce over an empty dimension (shape {}); there is no identity for "
                                 "argmax", shape.str()));
  // The smallest index where the row's maximum is: a row program of two
  // passes (the max, then the min over the hits) on every backend. Max
  // propagates NaN, so a row with one has hits only at its NaNs: the first
  // NaN wins, as in torch.argmax.
  NodePtr hit = binary(Op::Eq, x, reduce(Op::Max, x, {axis}, true));
  if (is_floating(x->dtype)) hit = binary(Op::Or, std::move(hit), unary(Op::IsNan, x));
  NodePtr index = where(std::move(hit), iota(shape, axis), constant(ScalarValue::of_int(n), DType::i64));
  return reduce(Op::Min, std::move(index), {axis}, keepdim);
}

NodePtr reshape(NodePtr x, std::vector<int64_t> s) {
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      if (infer >= 0) throw ShapeError(fmt::format("reshape: only one dimension can be -1, got [{}]", fmt::join(s, ", ")));
      infer = static_cast<int64_t>(i);
    } else if (s[i] < 0) {
      throw ShapeError(fmt::format("reshape: invalid size {} in [{}]", s[i], fmt::join(s, ", ")));
    } else if (__builtin_mul_overflow(known, s[i], &known)) {
      throw ShapeError(fmt::format("reshape: cannot view shape {} ({} elements) as [{}]: its sizes multiply past a "
                                   "64-bit integer",
                                   x->shape.str(), x->numel(), fmt::join(s, ", ")));
    }
  }
  int64_t n = x->numel();
  if (infer >= 0) {
    if (known == 0 || n % known != 0)
      throw ShapeError(fmt::format("reshape: cannot view shape {} ({} elements) as [{}]", x->shape.str(), n,
                                   fmt::join(s, ", ")));
    s[static_cast<size_t>(infer)] = n / known;
  } else if (known != n) {
    throw ShapeError(fmt::format("reshape: cannot view shape {} ({} elements) as [{}] ({} elements)", x->shape.str(),
                                 n, fmt::join(s, ", "), known));
  }
  Shape out(std::move(s));
  if (out == x->shape) return x;
  DType dt = x->dtype;
  return make(Op::Reshape, dt, std::move(out), {std::move(x)});
}

NodePtr permute(NodePtr x, std::vector<int64_t> order) {
  int64_t rank = x->shape.rank();
  if (static_cast<int64_t>(order.size()) != rank)
    throw ShapeError(fmt::format("permute: order [{}] has {} dims but the tensor {} has {}", fmt::join(order, ", "),
                                 order.size(), x->shape.str(), rank));
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  std::vector<int64_t> out;
  for (auto& d : order) {
    d = normalize_axis("permute", d, rank, x->shape);
    if (seen[static_cast<size_t>(d)]) throw IndexError(fmt::format("permute: dim {} repeated in the order", d));
    seen[static_cast<size_t>(d)] = true;
    out.push_back(x->shape[d]);
  }
  bool identity = true;
  for (int64_t i = 0; i < rank; ++i) identity = identity && order[static_cast<size_t>(i)] == i;
  if (identity) return x;
  // A permute of a pending permute is one permute of its input -- unless the
  // two cancel: the result would then be the input's node itself, which a
  // second tensor must not share (a leaf's node carries its gradient).
  if (x->op == Op::Permute && !x->realized()) {
    const std::vector<int64_t>& inner = x->order().order;
    std::vector<int64_t> composed(order.size());
    bool cancels = true;
    for (size_t i = 0; i < order.size(); ++i) {
      composed[i] = inner[static_cast<size_t>(order[i])];
      cancels = cancels && composed[i] == static_cast<int64_t>(i);
    }
    if (!cancels) {
      order = std::move(composed);
      x = x->args[0];
    }
  }
  DType dt = x->dtype;
  NodePtr n = make(Op::Permute, dt, Shape(std::move(out)), {std::move(x)});
  n->attrs = OrderAttrs{std::move(order)};
  return n;
}

NodePtr transpose(NodePtr x, int64_t d0, int64_t d1) {
  int64_t rank = x->shape.rank();
  d0 = normalize_axis("transpose", d0, rank, x->shape);
  d1 = normalize_axis("transpose", d1, rank, x->shape);
  std::vector<int64_t> order(static_cast<size_t>(rank));
  std::iota(order.begin(), order.end(), 0);
  std::swap(order[static_cast<size_t>(d0)], order[static_cast<size_t>(d1)]);
  return permute(std::move(x), std::move(order));
}

NodePtr slice(NodePtr x, std::vector<int64_t> starts, std::vector<int64_t> steps, Shape out) {
  TESSEL_ASSERT("builders", starts.size() == steps.size() && static_cast<int64_t>(starts.size()) == x->shape.rank());
  WindowAttrs attr;
  for (size_t i = 0; i < starts.size(); ++i) attr.dims.push_back({starts[i], steps[i]});
  DType dt = x->dtype;
  NodePtr n = make(Op::Slice, dt, std::move(out), {std::move(x)});
  n->attrs = std::move(attr);
  return n;
}

NodePtr iota(Shape shape, int64_t axis) {
  TESSEL_ASSERT("builders", axis >= 0 && axis < std::max<int64_t>(shape.rank(), 1));
  NodePtr n = make(Op::Iota, DType::i64, std::move(shape), {});
  n->attrs = AxisAttrs{axis};
  return n;
}

NodePtr pad(NodePtr x, std::vector<int64_t> before, std::vector<int64_t> after, ScalarValue fill) {
  const Shape& s = x->shape;
  TESSEL_ASSERT("builders", static_cast<int64_t>(before.size()) == s.rank() && before.size() == after.size());
  std::vector<int64_t> out(s.dims);
  WidthsAttrs attr;
  for (size_t d = 0; d < out.size(); ++d) {
    out[d] = s.dims[d] + before[d] + after[d];
    if (out[d] < 0)
      throw ShapeError(fmt::format("pad: widths {} before and {} after dim {} of shape {} leave {} elements; "
                                   "a negative width may remove at most the dim's size",
                                   before[d], after[d], d, s.str(), out[d]));
    attr.dims.push_back({before[d], after[d]});
  }
  DType dt = x->dtype;
  // The fill is a constant arg, so a kernel takes it as a launch argument.
  NodePtr n = make(Op::Pad, dt, Shape(std::move(out)), {std::move(x), constant(fill, dt)});
  n->attrs = std::move(attr);
  return n;
}

NodePtr cat(std::vector<NodePtr> xs, int64_t axis) {
  TESSEL_ASSERT("builders", !xs.empty());
  const Shape& s0 = xs[0]->shape;
  if (s0.rank() == 0) throw ShapeError("cat: zero-dimensional tensors cannot be concatenated; unsqueeze them first or use stack");
  axis = normalize_axis("cat", axis, s0.rank(), s0);
  std::vector<int64_t> out(s0.dims);
  out[static_cast<size_t>(axis)] = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Shape& si = xs[i]->shape;
    if (xs[i]->dtype != xs[0]->dtype)
      throw DTypeError(fmt::format("cat: tensor {} has dtype {} but tensor 0 has {}; cast them to one dtype first",
                                   i, dtype_name(xs[i]->dtype), dtype_name(xs[0]->dtype)));
    bool same = si.rank() == s0.rank();
    for (int64_t d = 0; same && d < s0.rank(); ++d) same = d == axis || si[d] == s0[d];
    if (!same)
      throw ShapeError(fmt::format("cat: tensor {} has shape {} but tensor 0 has {}; every dim but dim {} must match",
                                   i, si.str(), s0.str(), axis));
    out[static_cast<size_t>(axis)] += si[axis];
  }
  if (xs.size() == 1) return xs[0];
  DType dt = xs[0]->dtype;
  NodePtr n = make(Op::Cat, dt, Shape(std::move(out)), std::move(xs));
  n->attrs = AxisAttrs{axis};
  return n;
}

NodePtr gather(NodePtr x, NodePtr idx, int64_t axis) {
  const Shape &sx = x->shape, si = idx->shape;
  if (!is_integral(idx->dtype))
    throw DTypeError(fmt::format("gather: the index must be an integer tensor, got {}; convert it with .to(DType::i64)",
                                 dtype_name(idx->dtype)));
  if (sx.rank() == 0 || si.rank() != sx.rank())
    throw ShapeError(fmt::format("gather: the index (shape {}) must have the input's number of dims (shape {}), at least 1",
                                 si.str(), sx.str()));
  axis = normalize_axis("gather", axis, sx.rank(), sx);
  for (int64_t d = 0; d < sx.rank(); ++d)
    if (d != axis && si[d] > sx[d])
      throw ShapeError(fmt::format("gather: index shape {} is larger than input shape {} in dim {} (only dim {} may be)",
                                   si.str(), sx.str(), d, axis));
  DType dt = x->dtype;
  Shape out = si;
  NodePtr n = make(Op::Gather, dt, std::move(out), {std::move(x), cast(std::move(idx), DType::i64)});
  n->attrs = AxisAttrs{axis};
  return n;
}

NodePtr scatter_add(NodePtr src, NodePtr idx, int64_t axis, Shape shape) {
  TESSEL_ASSERT("builders", src->shape == idx->shape && src->shape.rank() == shape.rank() && axis >= 0 &&
                                axis < shape.rank());
  DType dt = src->dtype;
  if (is_half(dt)) return cast(scatter_add(cast(std::move(src), DType::f32), std::move(idx), axis, std::move(shape)), dt);
  NodePtr n = make(Op::ScatterAdd, dt, std::move(shape), {std::move(src), cast(std::move(idx), DType::i64)});
  n->attrs = AxisAttrs{axis};
  return n;
}

NodePtr matmul(NodePtr a, NodePtr b) {
  const Shape sa = a->shape, sb = b->shape;
  if (sa.rank() == 0 || sb.rank() == 0)
    throw ShapeError(fmt::format("matmul: both operands need at least 1 dimension, got shapes {} and {}", sa.str(),
                                 sb.str()));
  if (a->dtype != b->dtype)
    throw DTypeError(fmt::format("matmul: operands have dtypes {} and {}; cast one so they match, e.g. b.to(DType::{})",
                                 dtype_name(a->dtype), dtype_name(b->dtype), dtype_name(a->dtype)));
  if (a->dtype == DType::b8) throw DTypeError("matmul: bool tensors cannot be multiplied; cast to a number type first");
  bool squeeze_rows = sa.rank() == 1, squeeze_cols = sb.rank() == 1;
  if (squeeze_rows) a = reshape(a, {1, sa[0]});
  if (squeeze_cols) b = reshape(b, {sb[0], 1});
  const Shape& ma = a->shape;
  const Shape& mb = b->shape;
  int64_t k = ma[ma.rank() - 1], k2 = mb[mb.rank() - 2];
  if (k != k2)
    throw ShapeError(fmt::format("matmul: shapes {} and {} cannot be multiplied: inner dimensions {} and {} differ",
                                 sa.str(), sb.str(), k, k2));
  Shape ba(std::vector<int64_t>(ma.dims.begin(), ma.dims.end() - 2));
  Shape bb(std::vector<int64_t>(mb.dims.begin(), mb.dims.end() - 2));
  Shape batch = broadcast_shapes("matmul", ba, bb);
  auto with = [&](const Shape& bt, int64_t r, int64_t c) {
    Shape s = bt;
    s.dims.push_back(r);
    s.dims.push_back(c);
    return s;
  };
  int64_t n = ma[ma.rank() - 2], m = mb[mb.rank() - 1];
  if (is_half(a->dtype)) {
    DType h = a->dtype;
    return cast(matmul(cast(a, DType::f32), cast(b, DType::f32)), h);
  }
  a = expand(std::move(a), with(batch, n, k));
  b = expand(std::move(b), with(batch, k, m));
  DType dt = a->dtype;
  NodePtr r = make(Op::MatMul, dt, with(batch, n, m), {std::move(a), std::move(b)});
  std::vector<int64_t> out = batch.dims;
  if (!squeeze_rows) out.push_back(n);
  if (!squeeze_cols) out.push_back(m);
  return reshape(std::move(r), std::move(out));
}

namespace {

// The three convolution nodes: the DSL (dsl/convolution.cpp) checks the
// user's shapes and options and names the op; here they are invariants.
NodePtr conv_node(Op op, NodePtr a, NodePtr b, Shape out, const ConvAttrs& attrs) {
  TESSEL_ASSERT("builders", a->shape.rank() == 4 && b->shape.rank() == 4 && out.rank() == 4 && a->dtype == b->dtype &&
                                is_floating(a->dtype) && attrs.groups >= 1);
  if (is_half(a->dtype)) {
    DType h = a->dtype;
    return cast(conv_node(op, cast(std::move(a), DType::f32), cast(std::move(b), DType::f32), std::move(out), attrs), h);
  }
  DType dt = a->dtype;
  NodePtr n = make(op, dt, std::move(out), {std::move(a), std::move(b)});
  n->attrs = attrs;
  return n;
}

}  // namespace

Shape conv_output_shape(const Shape& x, const Shape& w, const ConvAttrs& a) {
  std::vector<int64_t> out{x[0], w[0], 0, 0};
  for (size_t d = 0; d < 2; ++d) {
    const int64_t span = a.dilation[d] * (w.dims[2 + d] - 1) + 1;
    out[2 + d] = (x.dims[2 + d] + a.pad_before[d] + a.pad_after[d] - span) / a.stride[d] + 1;
  }
  return Shape(std::move(out));
}

NodePtr conv(NodePtr x, NodePtr w, const ConvAttrs& attrs) {
  Shape out = conv_output_shape(x->shape, w->shape, attrs);
  TESSEL_ASSERT("builders", x->shape[1] == w->shape[1] * attrs.groups && out[2] > 0 && out[3] > 0);
  return conv_node(Op::Conv, std::move(x), std::move(w), std::move(out), attrs);
}

NodePtr conv_grad_input(NodePtr gy, NodePtr w, const ConvAttrs& attrs, Shape input) {
  return conv_node(Op::ConvGradInput, std::move(gy), std::move(w), std::move(input), attrs);
}

NodePtr conv_grad_weight(NodePtr x, NodePtr gy, const ConvAttrs& attrs, Shape weight) {
  return conv_node(Op::ConvGradWeight, std::move(x), std::move(gy), std::move(weight), attrs);
}

// The two attention nodes. Batch dims broadcast here (explicit Expands, as
// elementwise ops get); the DSL (dsl/attention.cpp) has checked the user's
// shapes and dtypes and computes halves in f32.
namespace {

std::vector<int64_t> attention_batch(const std::vector<const Node*>& xs) {
  Shape b;
  for (const Node* x : xs) {
    std::vector<int64_t> lead(x->shape.dims.begin(), x->shape.dims.end() - 2);
    b = broadcast_shapes("scaled_dot_product_attention", b, Shape(std::move(lead)));
  }
  return b.dims;
}

NodePtr expand_batch(NodePtr x, const std::vector<int64_t>& batch) {
  std::vector<int64_t> full(batch);
  full.push_back(x->shape[x->shape.rank() - 2]);
  full.push_back(x->shape[x->shape.rank() - 1]);
  Shape s(std::move(full));
  return x->shape == s ? x : expand(std::move(x), std::move(s));
}

}  // namespace

NodePtr attention(NodePtr q, NodePtr k, NodePtr v, NodePtr mask, const AttentionAttrs& attrs) {
  TESSEL_ASSERT("builders", q->shape.rank() >= 2 && k->shape.rank() >= 2 && v->shape.rank() >= 2 &&
                                q->dtype == k->dtype && q->dtype == v->dtype && (q->dtype == DType::f32 || q->dtype == DType::f64) &&
                                (mask != nullptr) == (attrs.mask != AttentionMask::None));
  std::vector<const Node*> xs{q.get(), k.get(), v.get()};
  if (mask) xs.push_back(mask.get());
  const std::vector<int64_t> batch = attention_batch(xs);
  const int64_t tq = q->shape[q->shape.rank() - 2], dv = v->shape[v->shape.rank() - 1];
  std::vector<NodePtr> args{expand_batch(std::move(q), batch), expand_batch(std::move(k), batch),
                            expand_batch(std::move(v), batch)};
  if (mask) {
    if (attrs.mask == AttentionMask::Additive && mask->dtype != args[0]->dtype) mask = cast(std::move(mask), args[0]->dtype);
    std::vector<int64_t> full(batch);
    full.push_back(tq);
    full.push_back(args[1]->shape[args[1]->shape.rank() - 2]);
    Shape ms(std::move(full));
    if (!(mask->shape == ms)) mask = expand(std::move(mask), std::move(ms));
    args.push_back(std::move(mask));
  }
  std::vector<int64_t> out(batch);
  out.push_back(tq);
  out.push_back(dv + 1);
  const DType dt = args[0]->dtype;
  NodePtr n = make(Op::Attention, dt, Shape(std::move(out)), std::move(args));
  n->attrs = attrs;
  return n;
}

NodePtr attention_grad(NodePtr fwd, NodePtr g) {
  TESSEL_ASSERT("builders", fwd->op == Op::Attention && g->dtype == fwd->dtype);
  const Shape& q = fwd->args[0]->shape;
  const int64_t r = q.rank();
  const int64_t tq = q[r - 2], d = q[r - 1], tk = fwd->args[1]->shape[r - 2], dv = fwd->args[2]->shape[r - 1];
  std::vector<int64_t> gs(q.dims.begin(), q.dims.end() - 1);
  gs.push_back(dv);
  if (!(g->shape == Shape(gs))) g = expand(std::move(g), Shape(gs));
  std::vector<NodePtr> args{fwd->args[0], fwd->args[1], fwd->args[2], fwd, std::move(g)};
  if (fwd->args.size() == 4) args.push_back(fwd->args[3]);
  std::vector<int64_t> out(q.dims.begin(), q.dims.end() - 2);
  out.push_back(tq * d + tk * d + tk * dv);
  NodePtr n = make(Op::AttentionGrad, fwd->dtype, Shape(std::move(out)), std::move(args));
  n->attrs = fwd->attrs;
  return n;
}

}  // namespace tessel::ir
