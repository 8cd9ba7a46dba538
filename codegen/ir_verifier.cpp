#include "codegen/ir_verifier.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <unordered_set>

#include "codegen/builders.h"
#include "codegen/conv_geometry.h"
#include "runtime/errors.h"

namespace tessel::ir {

namespace {

bool is_half(DType t) { return t == DType::f16 || t == DType::bf16; }

// One node's checks; `fail` throws with the node's text.
class NodeCheck {
 public:
  NodeCheck(const Node& n, std::string_view pass) : n_(n), pass_(pass) {}

  void run() {
    if (n_.realized()) {  // memory now, whatever made it (its args may be gone)
      expect(n_.buffer->strides.size() == n_.shape.dims.size(),
             fmt::format("has {} strides for rank {}", n_.buffer->strides.size(), n_.shape.rank()));
      return;
    }
    expect(n_.attrs.index() == static_cast<size_t>(op_attr_kind(n_.op)),
           fmt::format("carries attribute alternative {}, its kind is {}", n_.attrs.index(),
                       static_cast<int>(op_attr_kind(n_.op))));
    for (const NodePtr& a : n_.args) expect(a != nullptr, "has a null arg");
    switch (op_category(n_.op)) {
      case Category::Leaf: leaf(); return;
      case Category::Unary: arity(1); elementwise(); return;
      case Category::Binary: arity(2); elementwise(); return;
      case Category::Compare: arity(2); elementwise(); return;
      case Category::Ternary: arity(3); elementwise(); return;
      case Category::Reduce: arity(1); reduction(); return;
      case Category::Movement: arity(1); movement(); return;
      case Category::Indexed: indexed(); return;
      case Category::Scatter: arity(2); scatter(); return;
      case Category::Contraction:
        if (n_.op != Op::Attention && n_.op != Op::AttentionGrad) arity(2);  // attention() counts its own
        contraction();
        return;
    }
  }

 private:
  const Node& n_;
  std::string_view pass_;

  [[noreturn]] void fail(const std::string& what) const {
    std::string args;
    for (const NodePtr& a : n_.args)
      args += a ? fmt::format(" {}{}", dtype_name(a->dtype), a->shape.str()) : std::string(" null");
    throw InternalError(fmt::format("IR verifier after {}: {} node ({}{}, args:{}) {}", pass_, op_name(n_.op),
                                    dtype_name(n_.dtype), n_.shape.str(), args.empty() ? " none" : args, what));
  }
  void expect(bool ok, const std::string& what) const {
    if (!ok) fail(what);
  }
  const Node& arg(size_t i) const { return *n_.args[i]; }
  void arity(size_t k) const {
    expect(n_.args.size() == k, fmt::format("has {} args, its category takes {}", n_.args.size(), k));
  }
  void axis_in_range(int64_t axis, int64_t rank) const {
    expect(axis >= 0 && axis < rank, fmt::format("indexes along axis {}, outside [0, {})", axis, rank));
  }

  void leaf() const {
    arity(0);
    expect(n_.op != Op::Input, "is an Input without a buffer");
  }

  void elementwise() const {
    const bool half_arith = n_.op != Op::Cast && (is_half(n_.dtype) || std::any_of(n_.args.begin(), n_.args.end(),
                                                     [](const NodePtr& a) { return is_half(a->dtype); }));
    expect(!half_arith, "computes on f16/bf16 (builders compute half values in f32)");
    for (size_t i = 0; i < n_.args.size(); ++i)
      expect(arg(i).shape == n_.shape, fmt::format("arg {} has shape {} (elementwise args have the node's shape; "
                                                   "broadcasts are Expand nodes)",
                                                   i, arg(i).shape.str()));
    if (has_trait(n_.op, kBoolResult)) expect(n_.dtype == DType::b8, "has a bool-result op but is not b8");
    if (n_.op == Op::Cast) return;
    if (n_.op == Op::Where) {
      expect(arg(0).dtype == DType::b8, "has a condition that is not b8");
      expect(arg(1).dtype == n_.dtype && arg(2).dtype == n_.dtype, "has branches of another dtype than the node's");
      return;
    }
    const DType operand = n_.args[0]->dtype;
    for (size_t i = 0; i < n_.args.size(); ++i)
      expect(arg(i).dtype == operand, fmt::format("has args of different dtypes ({} and {})", dtype_name(operand),
                                                  dtype_name(arg(i).dtype)));
    if (!has_trait(n_.op, kBoolResult)) expect(n_.dtype == operand, "has another dtype than its args");
  }

  void reduction() const {
    const ReduceAttrs& r = n_.reduce();
    const Shape& in = arg(0).shape;
    for (size_t i = 0; i < r.axes.size(); ++i) {
      axis_in_range(r.axes[i], in.rank());
      expect(i == 0 || r.axes[i - 1] < r.axes[i], fmt::format("has axes [{}], not sorted and unique", fmt::join(r.axes, ", ")));
    }
    std::vector<int64_t> out;
    for (int64_t d = 0; d < in.rank(); ++d) {
      const bool red = std::binary_search(r.axes.begin(), r.axes.end(), d);
      if (!red) out.push_back(in[d]);
      else if (r.keepdim) out.push_back(1);
    }
    expect(n_.shape == Shape(out), fmt::format("has shape {}, reducing {} over [{}] gives {}", n_.shape.str(),
                                               in.str(), fmt::join(r.axes, ", "), Shape(out).str()));
  }

  void movement() const {
    const Shape& in = arg(0).shape;
    expect(arg(0).dtype == n_.dtype, "changes the dtype of its arg");
    switch (n_.op) {
      case Op::Reshape:
        expect(in.numel() == n_.numel(), fmt::format("has {} elements, its arg {}", n_.numel(), in.numel()));
        return;
      case Op::Permute: {
        const std::vector<int64_t>& order = n_.order().order;
        expect(static_cast<int64_t>(order.size()) == in.rank(), "has an order of another rank than its arg");
        std::vector<bool> seen(order.size(), false);
        for (size_t i = 0; i < order.size(); ++i) {
          axis_in_range(order[i], in.rank());
          expect(!seen[static_cast<size_t>(order[i])], fmt::format("has order [{}], not a permutation", fmt::join(order, ", ")));
          seen[static_cast<size_t>(order[i])] = true;
          expect(n_.shape[static_cast<int64_t>(i)] == in[order[i]], "has a shape that is not its arg's permuted");
        }
        return;
      }
      case Op::Expand: {
        expect(n_.shape.rank() >= in.rank(), "expands to a lower rank");
        const int64_t lead = n_.shape.rank() - in.rank();
        for (int64_t d = 0; d < in.rank(); ++d)
          expect(in[d] == 1 || in[d] == n_.shape[lead + d], fmt::format("expands dim {} of size {} to {}", d, in[d],
                                                                        n_.shape[lead + d]));
        return;
      }
      case Op::Slice: {
        const std::vector<SliceDim>& w = n_.window().dims;
        expect(static_cast<int64_t>(w.size()) == in.rank() && n_.shape.rank() == in.rank(),
               "has a window of another rank than its arg");
        for (size_t d = 0; d < w.size(); ++d) {
          const int64_t len = n_.shape.dims[d];
          expect(w[d].step >= 1, fmt::format("has step {} in dim {}", w[d].step, d));
          expect(len == 0 || (w[d].start >= 0 && w[d].start + (len - 1) * w[d].step < in.dims[d]),
                 fmt::format("reads [{}, {}) step {} of dim {} of size {}", w[d].start, w[d].start + len * w[d].step,
                             w[d].step, d, in.dims[d]));
        }
        return;
      }
      TESSEL_IR_CASES_NOT_MOVEMENT fail("is not a movement op");
    }
  }

  void indexed() const {
    switch (n_.op) {
      case Op::Iota:
        arity(0);
        expect(n_.dtype == DType::i64, "is an iota that is not i64");
        axis_in_range(n_.axis(), std::max<int64_t>(n_.shape.rank(), 1));
        return;
      case Op::Pad: {
        arity(2);
        const std::vector<PadWidth>& w = n_.widths().dims;
        expect(static_cast<int64_t>(w.size()) == arg(0).shape.rank() && n_.shape.rank() == arg(0).shape.rank(),
               "has widths of another rank than its arg");
        for (size_t d = 0; d < w.size(); ++d)
          expect(n_.shape.dims[d] == arg(0).shape.dims[d] + w[d].before + w[d].after,
                 fmt::format("has size {} in dim {}, its arg {} + {} + {}", n_.shape.dims[d], d, arg(0).shape.dims[d],
                             w[d].before, w[d].after));
        expect(arg(1).numel() == 1 && arg(1).dtype == n_.dtype && arg(0).dtype == n_.dtype,
               "has a fill that is not a scalar of its dtype");
        return;
      }
      case Op::Cat: {
        expect(!n_.args.empty(), "concatenates nothing");
        axis_in_range(n_.axis(), n_.shape.rank());
        int64_t total = 0;
        for (size_t i = 0; i < n_.args.size(); ++i) {
          const Shape& s = arg(i).shape;
          expect(arg(i).dtype == n_.dtype && s.rank() == n_.shape.rank(), fmt::format("has part {} of another dtype or rank", i));
          for (int64_t d = 0; d < s.rank(); ++d)
            expect(d == n_.axis() || s[d] == n_.shape[d], fmt::format("has part {} of shape {}", i, s.str()));
          total += s[n_.axis()];
        }
        expect(total == n_.shape[n_.axis()], fmt::format("has parts of {} elements along the axis, not {}", total,
                                                         n_.shape[n_.axis()]));
        return;
      }
      case Op::Gather:
        arity(2);
        expect(arg(1).dtype == DType::i64, "has an index that is not i64");
        expect(arg(1).shape == n_.shape && arg(0).shape.rank() == n_.shape.rank(), "has an index of another shape than the node");
        expect(arg(0).dtype == n_.dtype, "changes the dtype of its input");
        axis_in_range(n_.axis(), n_.shape.rank());
        return;
      TESSEL_IR_CASES_NOT_INDEXED fail("is not an indexed op");
    }
  }

  void scatter() const {
    expect(arg(1).dtype == DType::i64, "has an index that is not i64");
    expect(arg(0).shape == arg(1).shape && arg(0).shape.rank() == n_.shape.rank(), "has source and index of different shapes");
    expect(arg(0).dtype == n_.dtype, "changes the dtype of its source");
    axis_in_range(n_.axis(), n_.shape.rank());
  }

  void contraction() const {
    if (n_.op == Op::Attention || n_.op == Op::AttentionGrad) return attention();
    if (n_.op != Op::MatMul) return convolution();
    const Shape &a = arg(0).shape, &b = arg(1).shape;
    expect(a.rank() >= 2 && a.rank() == b.rank() && n_.shape.rank() == a.rank(), "multiplies operands of ranks other than equal and >= 2");
    const int64_t r = a.rank();
    expect(a[r - 1] == b[r - 2], fmt::format("contracts {} with {}", a.str(), b.str()));
    for (int64_t d = 0; d < r - 2; ++d) expect(a[d] == b[d] && n_.shape[d] == a[d], "has unequal batch dims");
    expect(n_.shape[r - 2] == a[r - 2] && n_.shape[r - 1] == b[r - 1], fmt::format("has shape {}", n_.shape.str()));
    expect(arg(0).dtype == n_.dtype && arg(1).dtype == n_.dtype, "has operands of another dtype");
  }

  // Both attention nodes: equal batch dims, matching head dims, a mask of
  // [*, Tq, Tk] exactly when the attributes name one, the packed shapes.
  void attention() const {
    expect(n_.dtype == DType::f32 || n_.dtype == DType::f64, "is not f32/f64");
    const AttentionAttrs& a = n_.attention();
    const bool masked = a.mask != AttentionMask::None;
    const size_t want = (n_.op == Op::Attention ? 3u : 5u) + (masked ? 1u : 0u);
    expect(n_.args.size() == want, fmt::format("has {} args for {} expected", n_.args.size(), want));
    const Shape &q = arg(0).shape, &k = arg(1).shape, &v = arg(2).shape;
    const int64_t r = q.rank();
    expect(r >= 2 && k.rank() == r && v.rank() == r, "has q, k, v of different ranks (or below 2)");
    for (int64_t d = 0; d < r - 2; ++d) expect(k[d] == q[d] && v[d] == q[d], "has unequal batch dims");
    const int64_t tq = q[r - 2], d = q[r - 1], tk = k[r - 2], dv = v[r - 1];
    expect(k[r - 1] == d && v[r - 2] == tk, fmt::format("has q {}, k {}, v {}", q.str(), k.str(), v.str()));
    for (size_t i = 0; i < 3; ++i) expect(arg(i).dtype == n_.dtype, "has q, k or v of another dtype");
    expect(a.dropout_p >= 0 && a.dropout_p <= 1, "has a dropout probability outside [0, 1]");
    std::vector<int64_t> batch(q.dims.begin(), q.dims.end() - 2);
    if (masked) {
      const Node& m = arg(n_.args.size() - 1);
      std::vector<int64_t> ms(batch);
      ms.push_back(tq);
      ms.push_back(tk);
      expect(m.shape == Shape(ms), fmt::format("has a mask of shape {}", m.shape.str()));
      expect(a.mask == AttentionMask::Bool ? m.dtype == DType::b8 : m.dtype == n_.dtype, "has a mask of the wrong dtype");
    }
    std::vector<int64_t> out(batch);
    if (n_.op == Op::Attention) {
      out.push_back(tq);
      out.push_back(dv + 1);
    } else {
      expect(arg(3).op == Op::Attention && arg(3).attention() == a, "reads no Attention node with its attributes");
      std::vector<int64_t> gs(batch);
      gs.push_back(tq);
      gs.push_back(dv);
      expect(arg(4).shape == Shape(gs) && arg(4).dtype == n_.dtype, fmt::format("has a gradient of shape {}", arg(4).shape.str()));
      out.push_back(tq * d + tk * d + tk * dv);
    }
    expect(n_.shape == Shape(out), fmt::format("has shape {}", n_.shape.str()));
  }

  // The three directions share one geometry; the output shape of the forward
  // follows from the input's, the weight's and the attributes.
  void convolution() const {
    expect(arg(0).dtype == n_.dtype && arg(1).dtype == n_.dtype && is_floating(n_.dtype) && !is_half(n_.dtype),
           "has operands of another dtype, or not f32/f64");
    expect(arg(0).shape.rank() == 4 && arg(1).shape.rank() == 4 && n_.shape.rank() == 4, "is not 4-D (NCHW)");
    const ConvAttrs& a = n_.conv();
    for (size_t d = 0; d < 2; ++d)
      expect(a.stride[d] >= 1 && a.dilation[d] >= 1 && a.pad_before[d] >= 0 && a.pad_after[d] >= 0,
             "has a stride or dilation below 1, or a negative padding");
    const ConvGeometry g = conv_geometry(n_);
    expect(g.groups >= 1 && g.c % g.groups == 0 && g.o % g.groups == 0,
           fmt::format("has {} groups for {} input and {} output channels", g.groups, g.c, g.o));
    const Shape x({g.n, g.c, g.h, g.w}), w({g.o, g.c / g.groups, g.kh, g.kw});
    const Shape& weight = n_.op == Op::ConvGradWeight ? n_.shape : arg(1).shape;
    expect(weight == w, fmt::format("has a weight of shape {} for input {} and {} groups", weight.str(), x.str(), g.groups));
    const Shape y = conv_output_shape(x, w, a);
    expect(y == Shape({g.n, g.o, g.oh, g.ow}), fmt::format("has an output of shape [{}, {}, {}, {}]; input {} gives {}",
                                                          g.n, g.o, g.oh, g.ow, x.str(), y.str()));
  }
};

}  // namespace

void verify_ir(const std::vector<NodePtr>& roots, std::string_view after_pass) {
  for (const NodePtr& r : roots)
    if (!r) throw InternalError(fmt::format("IR verifier after {}: a null root", after_pass));
  for (Node* n : topo_order(roots)) NodeCheck(*n, after_pass).run();
}

void verify_schedule(const sched::Schedule& s, std::string_view after_pass) {
  std::unordered_set<const Node*> done;
  auto fail = [&](const sched::Step& st, const std::string& what) {
    throw InternalError(fmt::format("schedule verifier after {}: {} step for a {} node {}", after_pass,
                                    sched::step_name(st.kind), op_name(st.node->op), what));
  };
  for (const sched::Step& st : s.steps) {
    if (!st.node) throw InternalError(fmt::format("schedule verifier after {}: a step without a node", after_pass));
    if (!s.materialized.count(st.node)) fail(st, "that is not marked materialized");
    if (!done.insert(st.node).second) fail(st, "computed by a second step");
    if (st.epilogue && !done.insert(st.epilogue).second) fail(st, "whose epilogue is computed by a second step");
    if (st.stored.size() != st.stages.size()) fail(st, "whose stages and stored flags differ in number");
  }
  // Producers first: a materialized arg of a step's node has its own step
  // earlier (or is realized already).
  std::unordered_set<const Node*> before;
  for (const sched::Step& st : s.steps) {
    auto check_args = [&](const Node* n) {
      for (const NodePtr& a : n->args)
        if (!a->realized() && s.materialized.count(a.get()) && !before.count(a.get()) && a.get() != st.node)
          fail(st, fmt::format("that reads a materialized {} node computed later", op_name(a->op)));
    };
    for (const Node* g : st.stages) before.insert(g);  // computed by the same kernel
    check_args(st.node);
    before.insert(st.node);
    if (st.epilogue) before.insert(st.epilogue);
  }
}

}  // namespace tessel::ir
