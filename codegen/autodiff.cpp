#include "codegen/autodiff.h"

#include <fmt/format.h>

#include <cstring>
#include <numeric>

#include "codegen/builders.h"
#include "codegen/grad_mode.h"
#include "codegen/ir_verifier.h"
#include "codegen/node_table.h"
#include "codegen/verify_mode.h"
#include "runtime/errors.h"
#include "runtime/storage.h"

namespace tessel::autodiff {
namespace {

using ir::NodePtr;
using ir::Op;

NodePtr scalar(double v, DType dt) { return ir::constant(ir::ScalarValue::of(v), dt); }
NodePtr bin(Op op, NodePtr a, NodePtr b) { return ir::binary(op, std::move(a), std::move(b)); }
NodePtr zeros_like(const NodePtr& x) { return ir::constant(ir::ScalarValue::of(0), x->dtype, x->shape); }

// Sums `g` (shaped like the Expand output) back to the Expand input's shape.
NodePtr unexpand(NodePtr g, const Shape& in) {
  const Shape& out = g->shape;
  size_t lead = out.dims.size() - in.dims.size();
  std::vector<int64_t> axes;
  for (size_t i = 0; i < out.dims.size(); ++i)
    if (i < lead || (in.dims[i - lead] == 1 && out.dims[i] != 1)) axes.push_back(static_cast<int64_t>(i));
  if (axes.empty()) return ir::reshape(std::move(g), in.dims);
  return ir::reshape(ir::reduce(Op::Sum, std::move(g), axes, true), in.dims);
}

// The reduced output broadcast back over the reduced axes of `x`. Without
// keepdim, the reduced axes are added in front by an expand and moved into
// place by a permute: views a kernel folds into its loads. (A reshape to the
// keepdim shape would read its source from memory, so a computed gradient --
// a mean's g / N -- would be stored by a kernel of its own first.)
NodePtr unreduce(const NodePtr& v, const ir::Node& red) {
  const Shape& xs = red.args[0]->shape;
  const ir::ReduceAttrs& r = red.reduce();
  if (r.keepdim) return ir::expand(v, xs);
  std::vector<bool> reduced(xs.dims.size(), false);
  for (int64_t a : r.axes) reduced[static_cast<size_t>(a)] = true;
  // front: the reduced dims (r.axes is sorted) ahead of v's, the kept ones.
  // Output axis j is front's axis order[j].
  std::vector<int64_t> front, order(xs.dims.size());
  for (int64_t a : r.axes) front.push_back(xs.dims[static_cast<size_t>(a)]);
  int64_t next_reduced = 0, next_kept = static_cast<int64_t>(r.axes.size());
  for (size_t j = 0; j < xs.dims.size(); ++j) {
    if (reduced[j]) {
      order[j] = next_reduced++;
    } else {
      front.push_back(xs.dims[j]);
      order[j] = next_kept++;
    }
  }
  return ir::permute(ir::expand(v, Shape(std::move(front))), std::move(order));
}

NodePtr sign(const NodePtr& x) {
  return bin(Op::Sub, ir::cast(bin(Op::Gt, x, scalar(0, x->dtype)), x->dtype),
             ir::cast(bin(Op::Lt, x, scalar(0, x->dtype)), x->dtype));
}

// The gradient of a strided window: `g` put back at the window's place in
// zeros of the input's shape. Along an axis of step s > 1, each element is
// first followed by s - 1 zeros (a pad of a new axis, merged by a reshape);
// then one pad per axis places the window (negative widths trim the end).
NodePtr unslice(NodePtr g, const ir::Node& n) {
  const Shape& in = n.args[0]->shape;
  const int64_t rank = in.rank();
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t step = n.window().dims[static_cast<size_t>(d)].step, len = g->shape[d];
    if (step == 1 || len == 0) continue;
    std::vector<int64_t> spread(g->shape.dims);
    spread.insert(spread.begin() + d + 1, 1);
    std::vector<int64_t> before(spread.size(), 0), after(spread.size(), 0);
    after[static_cast<size_t>(d + 1)] = step - 1;
    NodePtr padded = ir::pad(ir::reshape(g, spread), before, after, ir::ScalarValue::of(0));
    std::vector<int64_t> merged(g->shape.dims);
    merged[static_cast<size_t>(d)] = len * step;
    g = ir::reshape(padded, merged);
  }
  std::vector<int64_t> before(static_cast<size_t>(rank)), after(static_cast<size_t>(rank));
  bool moved = false;
  for (int64_t d = 0; d < rank; ++d) {
    before[static_cast<size_t>(d)] = n.window().dims[static_cast<size_t>(d)].start;
    after[static_cast<size_t>(d)] = in[d] - before[static_cast<size_t>(d)] - g->shape[d];
    moved = moved || before[static_cast<size_t>(d)] != 0 || after[static_cast<size_t>(d)] != 0;
  }
  return moved ? ir::pad(g, before, after, ir::ScalarValue::of(0)) : g;
}

// The gradient of a pad: the same pad with the widths negated (what was
// added is trimmed, what was trimmed comes back as zeros).
NodePtr unpad(const NodePtr& g, const ir::Node& n) {
  std::vector<int64_t> before, after;
  for (const ir::PadWidth& w : n.widths().dims) {
    before.push_back(-w.before);
    after.push_back(-w.after);
  }
  return ir::pad(g, before, after, ir::ScalarValue::of(0));
}

// The gradients of a concatenation: each part's window of `g`.
std::vector<NodePtr> uncat(const NodePtr& g, const ir::Node& n) {
  const int64_t ax = n.axis(), rank = g->shape.rank();
  std::vector<NodePtr> parts;
  int64_t start = 0;
  for (const NodePtr& a : n.args) {
    std::vector<int64_t> starts(static_cast<size_t>(rank), 0), steps(static_cast<size_t>(rank), 1);
    starts[static_cast<size_t>(ax)] = start;
    parts.push_back(ir::slice(g, starts, steps, a->shape));
    start += a->shape[ax];
  }
  return parts;
}

NodePtr last_two_transposed(const NodePtr& x) {
  int64_t r = x->shape.rank();
  return ir::transpose(x, r - 2, r - 1);
}

bool is_last_two_transpose(const ir::Node& x) {
  if (x.op != Op::Permute || x.realized()) return false;
  const std::vector<int64_t>& o = x.order().order;
  const size_t r = o.size();
  for (size_t i = 0; i + 2 < r; ++i)
    if (o[i] != static_cast<int64_t>(i)) return false;
  return r >= 2 && o[r - 2] == static_cast<int64_t>(r - 1) && o[r - 1] == static_cast<int64_t>(r - 2);
}

// An Attention's q, k, v gradients: one AttentionGrad node, its packed
// value cut into three views. The log-sum-exp column's gradient is dropped:
// the DSL hands out only the output columns, so it is zero.
std::vector<NodePtr> attention_derivative(const NodePtr& self, const NodePtr& g) {
  const ir::Node& n = *self;
  const Shape& q = n.args[0]->shape;
  const int64_t r = q.rank();
  const int64_t tq = q[r - 2], d = q[r - 1], tk = n.args[1]->shape[r - 2], dv = n.args[2]->shape[r - 1];
  std::vector<int64_t> go_dims(q.dims.begin(), q.dims.end() - 1);
  go_dims.push_back(dv);
  Shape go_shape(go_dims);
  NodePtr go;
  // The usual g is the DSL's slice gradient: a zero pad of exactly the output.
  if (g->op == Op::Pad && g->args[0]->shape == go_shape) {
    bool leading = true;
    for (const ir::PadWidth& w : g->widths().dims) leading = leading && w.before == 0;
    if (leading) go = g->args[0];
  }
  if (!go) go = ir::slice(g, std::vector<int64_t>(static_cast<size_t>(r), 0), std::vector<int64_t>(static_cast<size_t>(r), 1), go_shape);
  NodePtr packed = ir::attention_grad(self, go);
  std::vector<int64_t> batch(q.dims.begin(), q.dims.end() - 2);
  auto part = [&](int64_t start, int64_t rows, int64_t cols) {
    std::vector<int64_t> starts(static_cast<size_t>(r - 1), 0), steps(static_cast<size_t>(r - 1), 1);
    starts.back() = start;
    std::vector<int64_t> flat(batch);
    flat.push_back(rows * cols);
    std::vector<int64_t> shaped(batch);
    shaped.push_back(rows);
    shaped.push_back(cols);
    return ir::reshape(ir::slice(packed, starts, steps, Shape(flat)), shaped);
  };
  std::vector<NodePtr> out{part(0, tq, d), part(tq * d, tk, d), part(tq * d + tk * d, tk, dv)};
  if (n.args.size() == 4) out.push_back(nullptr);  // the mask: no gradient (the DSL refuses one that wants it)
  return out;
}

// d(out)/d(args[i]) * g for node `n` (whose value is `self`).
std::vector<NodePtr> derivative(const NodePtr& self, const NodePtr& g) {
  const ir::Node& n = *self;
  const auto& a = n.args;
  DType dt = n.dtype;
  auto one = [&] { return scalar(1, dt); };
  switch (n.op) {
    case Op::Neg: return {ir::unary(Op::Neg, g)};
    case Op::Abs: return {bin(Op::Mul, g, sign(a[0]))};
    case Op::Exp: return {bin(Op::Mul, g, self)};
    case Op::Log: return {bin(Op::Div, g, a[0])};
    case Op::Sqrt: return {bin(Op::Div, g, bin(Op::Mul, scalar(2, dt), self))};
    case Op::Tanh: return {bin(Op::Mul, g, bin(Op::Sub, one(), bin(Op::Mul, self, self)))};
    case Op::Sigmoid: return {bin(Op::Mul, g, bin(Op::Mul, self, bin(Op::Sub, one(), self)))};
    case Op::Sin: return {bin(Op::Mul, g, ir::unary(Op::Cos, a[0]))};
    case Op::Cos: return {ir::unary(Op::Neg, bin(Op::Mul, g, ir::unary(Op::Sin, a[0])))};
    case Op::Erf:  // 2/sqrt(pi) * e^(-x^2)
      return {bin(Op::Mul, g, bin(Op::Mul, scalar(1.1283791670955126, dt),
                                   ir::unary(Op::Exp, ir::unary(Op::Neg, bin(Op::Mul, a[0], a[0])))))};
    case Op::Log1p: return {bin(Op::Div, g, bin(Op::Add, a[0], one()))};
    case Op::Expm1: return {bin(Op::Mul, g, bin(Op::Add, self, one()))};
    // From the output, as PyTorch: -1/2 * rsqrt(x)^3 and -reciprocal(x)^2.
    case Op::Rsqrt:
      return {bin(Op::Mul, bin(Op::Mul, g, scalar(-0.5, dt)), bin(Op::Mul, self, bin(Op::Mul, self, self)))};
    case Op::Reciprocal: return {ir::unary(Op::Neg, bin(Op::Mul, g, bin(Op::Mul, self, self)))};
    // Piecewise constant: zero almost everywhere, as PyTorch.
    case Op::Sign: case Op::Floor: case Op::Ceil: case Op::Round: return {zeros_like(g)};
    // From the output, as PyTorch's threshold_backward (relu(x) > 0 exactly when
    // x > 0): training then keeps only the activation, not the pre-activation
    // too, and a Linear's bias add fuses into its ReLU.
    case Op::Relu: return {ir::where(bin(Op::Gt, self, scalar(0, dt)), g, zeros_like(g))};
    case Op::Cast: return {ir::cast(g, a[0]->dtype)};
    case Op::Add: return {g, g};
    case Op::Sub: return {g, ir::unary(Op::Neg, g)};
    case Op::Mul: return {bin(Op::Mul, g, a[1]), bin(Op::Mul, g, a[0])};
    case Op::Div:
      return {bin(Op::Div, g, a[1]), ir::unary(Op::Neg, bin(Op::Div, bin(Op::Mul, g, self), a[1]))};
    case Op::Pow: {
      // b * a^(b-1), taken as 0 where b == 0 (0 * inf at a == 0 otherwise), as PyTorch does.
      NodePtr da = bin(Op::Mul, g, ir::where(bin(Op::Eq, a[1], scalar(0, dt)), zeros_like(g),
                                             bin(Op::Mul, a[1], bin(Op::Pow, a[0], bin(Op::Sub, a[1], one())))));
      NodePtr db = a[1]->requires_grad ? bin(Op::Mul, g, bin(Op::Mul, self, ir::unary(Op::Log, a[0]))) : nullptr;
      return {da, db};
    }
    case Op::Maximum:
    case Op::Minimum: {
      // Ties split the gradient evenly, as PyTorch does.
      Op wins = n.op == Op::Maximum ? Op::Gt : Op::Lt;
      NodePtr half = bin(Op::Mul, ir::cast(bin(Op::Eq, a[0], a[1]), dt), scalar(0.5, dt));
      NodePtr wa = bin(Op::Add, ir::cast(bin(wins, a[0], a[1]), dt), half);
      NodePtr wb = bin(Op::Add, ir::cast(bin(wins, a[1], a[0]), dt), half);
      return {bin(Op::Mul, g, wa), bin(Op::Mul, g, wb)};
    }
    case Op::Where:
      return {nullptr, ir::where(a[0], g, zeros_like(g)), ir::where(a[0], zeros_like(g), g)};
    case Op::Sum: return {unreduce(g, n)};
    case Op::Mean: {
      int64_t count = 1;
      for (int64_t ax : n.reduce().axes) count *= a[0]->shape[ax];
      return {bin(Op::Div, unreduce(g, n), scalar(static_cast<double>(count), dt))};
    }
    case Op::Max:
    case Op::Min: {
      NodePtr mask = ir::cast(bin(Op::Eq, a[0], unreduce(self, n)), dt);
      NodePtr count = ir::reduce(Op::Sum, mask, n.reduce().axes, true);
      return {bin(Op::Mul, unreduce(g, n), bin(Op::Div, mask, ir::expand(count, a[0]->shape)))};
    }
    case Op::Prod: {
      // g * prod_{j != i} x_j from the count of zeros along the row (self / x
      // would divide by them), as PyTorch: with none, p / x_i, p the product
      // of the nonzero elements; with one, p at the zero and 0 elsewhere; with
      // more, 0. Zeros become 1 before any division.
      const std::vector<int64_t>& axes = n.reduce().axes;
      const Shape& xs = a[0]->shape;
      auto per_row = [&](Op op, NodePtr v) { return ir::expand(ir::reduce(op, std::move(v), axes, true), xs); };
      NodePtr is_zero = bin(Op::Eq, a[0], scalar(0, dt));
      NodePtr nonzero = ir::where(is_zero, scalar(1, dt), a[0]);
      NodePtr zeros = per_row(Op::Sum, ir::cast(is_zero, dt));
      NodePtr p = per_row(Op::Prod, nonzero);
      NodePtr none = zeros_like(a[0]);
      auto when = [&](double count, NodePtr v, NodePtr other) {
        return ir::where(bin(Op::Eq, zeros, scalar(count, dt)), std::move(v), std::move(other));
      };
      NodePtr at_zero, elsewhere;
      if (grad_enabled()) {
        // A gradient that is itself differentiated must keep its dependence
        // on the zeros, which the selects drop: s, the row's sum of its zero
        // elements (0 in value), carries it. With one zero z, x_i's entry is
        // p / x_i * s (d/dx_z: prod over j != i, z); with two, z's is
        // p * (s - x_z) (d/dx_z': p). Higher orders would need more terms.
        NodePtr s = per_row(Op::Sum, ir::where(is_zero, a[0], none));
        at_zero = when(1, p, when(2, bin(Op::Mul, p, bin(Op::Sub, s, a[0])), none));
        elsewhere = when(0, bin(Op::Div, p, nonzero), when(1, bin(Op::Mul, bin(Op::Div, p, nonzero), s), none));
      } else {
        at_zero = when(1, p, none);
        elsewhere = when(0, bin(Op::Div, p, nonzero), none);
      }
      return {bin(Op::Mul, unreduce(g, n), ir::where(is_zero, at_zero, elsewhere))};
    }
    case Op::Reshape: return {ir::reshape(g, a[0]->shape.dims)};
    case Op::Permute: {
      const std::vector<int64_t>& order = n.order().order;
      std::vector<int64_t> inv(order.size());
      for (size_t i = 0; i < order.size(); ++i) inv[static_cast<size_t>(order[i])] = static_cast<int64_t>(i);
      // A gradient that arrives permuted the other way (a transposed
      // operand's, from the MatMul rule) is the value underneath.
      if (g->op == Op::Permute && !g->realized() && g->order().order == order) return {g->args[0]};
      return {ir::permute(g, inv)};
    }
    case Op::Expand: return {unexpand(g, a[0]->shape)};
    case Op::MatMul: {
      // The gradient of a transposed operand (Linear's x @ w^T) is formed as
      // the product that yields it untransposed: w's gradient is then dense
      // in w's order, and the optimizer's update reads it in order instead
      // of through a transposed view.
      NodePtr ga = is_last_two_transpose(*a[0]) ? last_two_transposed(ir::matmul(a[1], last_two_transposed(g)))
                                                : ir::matmul(g, last_two_transposed(a[1]));
      NodePtr gb = is_last_two_transpose(*a[1]) ? last_two_transposed(ir::matmul(last_two_transposed(g), a[0]))
                                                : ir::matmul(last_two_transposed(a[0]), g);
      return {ga, gb};
    }
    // The three convolution nodes are bilinear and each one's partial
    // derivatives are the other two (so any order of derivative exists):
    // y = conv(x, w): dx = grad_input(g, w), dw = grad_weight(x, g).
    case Op::Conv:
      return {ir::conv_grad_input(g, a[1], n.conv(), a[0]->shape), ir::conv_grad_weight(a[0], g, n.conv(), a[1]->shape)};
    // gx = grad_input(gy, w): d gy = conv(g, w), d w = grad_weight(g, gy).
    case Op::ConvGradInput: return {ir::conv(g, a[1], n.conv()), ir::conv_grad_weight(g, a[0], n.conv(), a[1]->shape)};
    // gw = grad_weight(x, gy): d x = grad_input(gy, g), d gy = conv(x, g).
    case Op::ConvGradWeight: return {ir::conv_grad_input(a[1], g, n.conv(), a[0]->shape), ir::conv(a[0], g, n.conv())};
    case Op::Attention: return attention_derivative(self, g);
    case Op::AttentionGrad:
      throw ValueError(
          "scaled_dot_product_attention: a derivative of its gradient (double backward) is not supported by the fused "
          "op; use scaled_dot_product_attention_math for higher-order derivatives");
    case Op::Slice: return {unslice(g, n)};
    case Op::Pad: return {unpad(g, n), nullptr};
    case Op::Cat: return uncat(g, n);
    case Op::Gather: return {ir::scatter_add(g, a[1], n.axis(), a[0]->shape), nullptr};
    case Op::ScatterAdd: return {ir::gather(g, a[1], n.axis()), nullptr};
    case Op::IsNan: case Op::IsInf: case Op::Iota:
    case Op::Input: case Op::Constant: case Op::Not: case Op::Eq: case Op::Ne: case Op::Lt: case Op::Le:
    case Op::Gt: case Op::Ge: case Op::And: case Op::Or:
      break;  // leaves, bool and index results: no gradient
  }
  return std::vector<NodePtr>(a.size(), nullptr);
}

}  // namespace

std::vector<LeafGrad> gradients(const NodePtr& root, const NodePtr& seed, bool retain_graph) {
  TESSEL_ASSERT("autodiff", seed->shape == root->shape);
  // Post-order over the nodes gradients flow through; reversed it visits each
  // node after every node that consumes it.
  std::vector<NodePtr> order;
  ir::NodeTable seen;  // local: derivative() may differentiate again (grad of grad)
  std::vector<std::pair<NodePtr, size_t>> stack{{root, 0}};
  seen.put(root.get(), 1);
  while (!stack.empty()) {
    auto& [n, next] = stack.back();
    // A node with grad_via passes its gradient only to that graph.
    const size_t below = n->grad_via ? 1 : n->args.size();
    if (next < below) {
      const NodePtr& a = n->grad_via ? n->grad_via : n->args[next];
      ++next;
      if (a->requires_grad && !seen.find(a.get())) {
        seen.put(a.get(), 1);
        stack.push_back({a, 0});
      }
      continue;
    }
    if (n->backward_done)
      throw ValueError(
          "backward: trying to backward through the graph a second time: its saved values were freed by the first "
          "backward(); pass retain_graph (y.backward({}, /*retain_graph=*/true)) to the first call if you need to "
          "go through it again, or compute the output again");
    order.push_back(n);
    stack.pop_back();
  }
  ir::NodeTable grad_at;  // node -> its gradient in grads
  std::vector<NodePtr> grads;
  // A node reached along several paths gets the sum of their contributions.
  auto accumulate = [&](ir::Node* to, const NodePtr& part) {
    if (int* i = grad_at.find(to)) {
      grads[static_cast<size_t>(*i)] = bin(Op::Add, grads[static_cast<size_t>(*i)], part);
      return;
    }
    grad_at.put(to, static_cast<int>(grads.size()));
    grads.push_back(part);
  };
  accumulate(root.get(), ir::cast(seed, root->dtype));
  std::vector<LeafGrad> out;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const NodePtr& n = *it;
    const int* found = grad_at.find(n.get());
    if (!found) continue;
    NodePtr g = grads[static_cast<size_t>(*found)];
    if (!n->owner.expired()) out.push_back({n.get(), g});
    if (n->grad_via) {
      accumulate(n->grad_via.get(), g);
      continue;
    }
    if (n->args.empty()) continue;
    std::vector<NodePtr> parts = derivative(n, g);
    for (size_t i = 0; i < n->args.size(); ++i) {
      const NodePtr& a = n->args[i];
      if (!a->requires_grad || !parts[i]) continue;
      TESSEL_ASSERT("autodiff", parts[i]->shape == a->shape);
      accumulate(a.get(), ir::cast(parts[i], a->dtype));
    }
  }
  // The values the backward graph reads are its realized leaves; one written
  // in place after the forward graph took it would give a silently wrong
  // gradient (PyTorch's version-counter check).
  std::vector<NodePtr> roots;
  for (auto& lg : out) roots.push_back(lg.grad);
  if (verify_enabled()) ir::verify_ir(roots, "autodiff");
  for (ir::Node* n : ir::topo_order(roots)) {
    if (n->op != Op::Input || !n->buffer->storage) continue;
    uint64_t now = n->buffer->storage->version();
    if (now != n->version)
      throw ValueError(fmt::format(
          "backward: a value this gradient needs (a {} tensor of shape {}) was modified in place after the forward "
          "pass used it (it is at version {}, the graph used version {}); do the in-place update (an optimizer "
          "step, x.data() += ...) after backward, or compute on a clone()",
          dtype_name(n->dtype), n->shape.str(), now, n->version));
  }
  if (!retain_graph)
    for (const NodePtr& n : order)
      if (!n->args.empty()) n->backward_done = true;  // leaves can start a new graph any time
  return out;
}

std::string grad_fn_name(const ir::Node& n) {
  // PyTorch's names where they are not the op's own name + "Backward0".
  const bool whole = ir::is_reduction(n.op) &&
                     static_cast<int64_t>(n.reduce().axes.size()) == (n.args.empty() ? 0 : n.args[0]->shape.rank()) &&
                     !n.reduce().keepdim;
  if (n.op == Op::Sum) return whole ? "SumBackward0" : "SumBackward1";
  if (n.op == Op::Mean) return whole ? "MeanBackward0" : "MeanBackward1";
  if (n.op == Op::Max) return whole ? "MaxBackward1" : "MaxBackward0";
  if (n.op == Op::Min) return whole ? "MinBackward1" : "MinBackward0";
  if (n.op == Op::Prod) return whole ? "ProdBackward0" : "ProdBackward1";
  if (n.op == Op::Reshape) return "ViewBackward0";
  if (n.op == Op::Permute) return n.shape.rank() == 2 ? "TBackward0" : "PermuteBackward0";
  if (n.op == Op::Cast) return "ToCopyBackward0";
  if (n.op == Op::MatMul) return n.shape.rank() == 2 ? "MmBackward0" : "BmmBackward0";
  if (n.op == Op::Conv) return "ConvolutionBackward0";
  if (n.op == Op::ConvGradInput || n.op == Op::ConvGradWeight) return "ConvolutionBackwardBackward0";
  if (n.op == Op::Attention) return "ScaledDotProductFlashAttentionBackward0";
  if (n.op == Op::Pow) return n.args[1]->requires_grad ? "PowBackward1" : "PowBackward0";
  if (n.op == Op::Log1p) return "Log1PBackward0";
  if (n.op == Op::Pad) return "ConstantPadNdBackward0";
  if (n.op == Op::ScatterAdd) return "ScatterAddBackward0";
  std::string name(ir::op_name(n.op));
  name[0] = static_cast<char>(std::toupper(name[0]));
  return name + "Backward0";
}

ValuesRead values_read(const ir::Node& n) {
  const auto& a = n.args;
  auto grad = [&](size_t i) { return i < a.size() && a[i]->requires_grad; };
  auto arg = [](size_t i) { return uint32_t{1} << i; };
  auto when = [&](size_t i, uint32_t bits) { return grad(i) ? bits : 0u; };
  const uint32_t all = a.size() >= 32 ? ~0u : (uint32_t{1} << a.size()) - 1;
  switch (n.op) {
    // Linear in their arguments, or piecewise constant: nothing.
    case Op::Neg: case Op::Cast: case Op::Add: case Op::Sub: case Op::Sum: case Op::Mean: case Op::Reshape:
    case Op::Permute: case Op::Expand: case Op::Slice: case Op::Pad: case Op::Cat: case Op::Sign: case Op::Floor:
    case Op::Ceil: case Op::Round:
      return {};
    // From the argument.
    case Op::Abs: case Op::Log: case Op::Sin: case Op::Cos: case Op::Erf: case Op::Log1p: case Op::Prod:
      return {false, when(0, arg(0))};
    // From the output.
    case Op::Exp: case Op::Sqrt: case Op::Tanh: case Op::Sigmoid: case Op::Expm1: case Op::Rsqrt:
    case Op::Reciprocal: case Op::Relu:
      return {grad(0), 0};
    // Each argument's gradient reads the other.
    case Op::Mul: case Op::MatMul: case Op::Conv: return {false, when(0, arg(1)) | when(1, arg(0))};
    case Op::Div: return {grad(1), when(0, arg(1)) | when(1, arg(1))};
    case Op::Pow: return {grad(1), when(0, arg(0) | arg(1)) | when(1, arg(0))};
    case Op::Maximum: case Op::Minimum: return {false, grad(0) || grad(1) ? arg(0) | arg(1) : 0u};
    case Op::Where: return {false, grad(1) || grad(2) ? arg(0) : 0u};
    case Op::Max: case Op::Min: return {grad(0), when(0, arg(0))};
    // gx = grad_input(gy, w): d gy reads w, d w reads gy; gw = grad_weight(x, gy): d x reads gy, d gy reads x.
    case Op::ConvGradInput: case Op::ConvGradWeight: return {false, when(0, arg(1)) | when(1, arg(0))};
    case Op::Attention: return {true, all};
    case Op::Gather: case Op::ScatterAdd: return {false, grad(0) ? arg(1) : 0u};
    case Op::AttentionGrad:  // no derivative (an error when asked for)
    case Op::IsNan: case Op::IsInf: case Op::Iota: case Op::Input: case Op::Constant: case Op::Not: case Op::Eq:
    case Op::Ne: case Op::Lt: case Op::Le: case Op::Gt: case Op::Ge: case Op::And: case Op::Or:
      return {};
  }
  return {true, all};
}

}  // namespace tessel::autodiff
