#include "codegen/schedule.h"

#include <cstdlib>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <iterator>
#include <unordered_set>

#include "codegen/autodiff.h"
#include "runtime/errors.h"
#include "runtime/trace.h"

namespace tessel::sched {

using ir::Category;
using ir::Node;
using ir::Op;

std::string_view step_name(StepKind k) {
  switch (k) {
    case StepKind::Kernel: return "kernel";
    case StepKind::Reduce: return "reduce";
    case StepKind::View: return "view";
    case StepKind::MatMul: return "matmul";
    case StepKind::Conv: return "conv";
    case StepKind::Attention: return "attention";
    case StepKind::RowProgram: return "row";
    case StepKind::Fallback: return "fallback";
  }
  return "?";
}

StepKind contraction_step(Op op) {
  switch (op) {
    case Op::MatMul: return StepKind::MatMul;
    case Op::Conv: case Op::ConvGradInput: case Op::ConvGradWeight: return StepKind::Conv;
    case Op::Attention: case Op::AttentionGrad: return StepKind::Attention;
    TESSEL_IR_CASES_NOT_CONTRACTION break;
  }
  throw InternalError(fmt::format("schedule: contraction_step of a {} node", ir::op_name(op)));
}

int Schedule::kernels() const {
  int n = 0;
  for (const Step& s : steps)
    n += s.kind == StepKind::Kernel || s.kind == StepKind::Reduce || s.kind == StepKind::RowProgram || s.epilogue;
  return n;
}

int Schedule::attentions() const {
  int n = 0;
  for (const Step& s : steps) n += s.kind == StepKind::Attention;
  return n;
}

int Schedule::convs() const {
  int n = 0;
  for (const Step& s : steps) n += s.kind == StepKind::Conv;
  return n;
}

int Schedule::matmuls() const {
  int n = 0;
  for (const Step& s : steps) n += s.kind == StepKind::MatMul;
  return n;
}

std::string Schedule::to_string() const {
  std::string s;
  for (size_t i = 0; i < steps.size(); ++i) {
    const Step& st = steps[i];
    s += fmt::format("step {} {} {}.{}{} -- {}\n", i, step_name(st.kind), ir::op_name(st.node->op),
                     dtype_name(st.node->dtype), st.node->shape.str(), st.reason);
    for (size_t j = 0; j < st.stages.size(); ++j)
      s += fmt::format("  + stage {}.{}{}{}\n", ir::op_name(st.stages[j]->op), dtype_name(st.stages[j]->dtype),
                       st.stages[j]->shape.str(), st.stored[j] ? " (stored)" : "");
    if (st.epilogue)
      s += fmt::format("  + epilogue {}.{}{} -- {}\n", ir::op_name(st.epilogue->op), dtype_name(st.epilogue->dtype),
                       st.epilogue->shape.str(), "matmul epilogue");
  }
  return s;
}

namespace {
bool arith(DType t) { return t == DType::f32 || t == DType::f64 || t == DType::i64 || t == DType::i32; }
bool half(DType t) { return t == DType::f16 || t == DType::bf16; }
}  // namespace

bool kernel_supports(const Node& n) {
  if (n.op == Op::Constant) return true;
  if (ir::op_category(n.op) == Category::Indexed) return true;  // selects and index arithmetic: any dtype
  if (!ir::is_elementwise(n.op)) return false;
  // The operands' dtype: what the emitted code computes on.
  DType t = n.op == Op::Where || n.op == Op::Cast || ir::has_trait(n.op, ir::kBoolResult) ? n.args.back()->dtype
                                                                                         : n.dtype;
  if (n.op == Op::Cast) return !half(n.dtype) && !half(n.args[0]->dtype);
  if (n.op == Op::Where) return true;  // a select works on any storage type
  if (t == DType::b8) return ir::has_trait(n.op, ir::kBoolForm);
  if (!arith(t)) return false;
  if (is_integral(t)) return ir::has_trait(n.op, ir::kIntForm);
  return true;
}

bool reduce_supports(const Node& n) {
  if (!ir::is_reduction(n.op)) return false;
  DType t = n.args[0]->dtype;
  if (!(arith(t) || t == DType::b8)) return false;
  if (ir::has_trait(n.op, ir::kFloatOnly) && !is_floating(t)) return false;
  return !half(n.dtype);
}

namespace {

// The 2-D matmul an elementwise kernel step reads element for element (through
// elementwise ops only, so with the identity index), if it is the only reader
// of that product; else null.
Node* epilogue_source(const Schedule& S, Node* e, const std::unordered_map<Node*, int>& uses,
                      const std::vector<ir::NodePtr>& roots) {
  auto fits = [&](Node* m) {
    if (m->op != Op::MatMul || m->realized()) return false;  // (a convolution's epilogue is not fused yet)
    if (m->shape != e->shape || m->shape.dims.size() != 2 || !(m->dtype == DType::f32 || m->dtype == DType::f64))
      return false;
    auto u = uses.find(m);
    if (u == uses.end() || u->second != 1) return false;
    for (auto& r : roots)
      if (r.get() == m) return false;
    return true;
  };
  // A root that reads at computed positions (flip's gather, a pad) would read
  // the product where the epilogue is writing over it.
  if (!ir::is_elementwise(e->op)) return nullptr;
  std::vector<Node*> stack{e};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (auto& a : n->args) {
      Node* x = a.get();
      if (x->realized()) continue;
      if (S.materialized.count(x)) {
        if (fits(x)) return x;
        continue;
      }
      if (ir::is_elementwise(x->op)) stack.push_back(x);
    }
  }
  return nullptr;
}

void fuse_matmul_epilogues(Schedule& S, const std::vector<ir::NodePtr>& roots, const std::unordered_map<Node*, int>& uses) {
  std::unordered_map<Node*, size_t> step_of;
  for (size_t i = 0; i < S.steps.size(); ++i) step_of[S.steps[i].node] = i;
  std::vector<bool> drop(S.steps.size(), false);
  for (Step& st : S.steps) {
    if (st.kind != StepKind::Kernel || st.node->shape.dims.size() != 2) continue;
    Node* m = epilogue_source(S, st.node, uses, roots);
    if (!m) continue;
    auto it = step_of.find(m);
    if (it == step_of.end() || drop[it->second] || S.steps[it->second].epilogue) continue;
    // The product moves to its reader's place: nothing in between reads it.
    drop[it->second] = true;
    st = Step{StepKind::MatMul, m, S.steps[it->second].reason, st.node, {}, {}};
  }
  std::vector<Step> kept;
  kept.reserve(S.steps.size());
  for (size_t i = 0; i < S.steps.size(); ++i)
    if (!drop[i]) kept.push_back(std::move(S.steps[i]));
  S.steps = std::move(kept);
}


// Row programs. A group is a final node F (elementwise over a row domain's
// full shape, or one more reduction over it) and the keepdim reductions
// ("stages") F's kernel would read through broadcasts along the reduced axes
// (of the stage, or of elementwise math on it: layer norm's
// 1/sqrt(var + eps)), found by walking the region F's kernel inlines; a
// stage's own input region is walked too.
// Materialized nodes there that were cut only for having several consumers,
// all of them in the group, are inlined again (softmax's exp(x - max) feeds
// the sum and the division: recomputing it beats a round trip to memory).
// A candidate that breaks a rule is dropped and the walk redone:
//   - a stage read other than by a broadcast of its keepdim value to the
//     full shape (through another view, a reshape, or by a node outside the
//     group) -- its row value would be needed somewhere else;
//   - an inlined node with a consumer outside the group.
// With those, nothing outside the group depends on a member but F, so the
// kernel runs at F's place in the step order.
struct RowGroup {
  std::vector<Node*> stages;    // in topo order
  std::vector<Node*> absorbed;  // materialized nodes inlined again
  std::string reason;           // why it formed, or why not (empty: nothing to group)
};

struct RowGrouper {
  RowGrouper(const Schedule& s, const Options& o, const std::unordered_map<Node*, std::vector<Node*>>& u,
             const std::unordered_set<Node*>& p, const std::unordered_set<Node*>& t)
      : S(s), opts(o), users(u), pinned(p), taken(t) {}
  const Schedule& S;
  const Options& opts;
  const std::unordered_map<Node*, std::vector<Node*>>& users;
  const std::unordered_set<Node*>& pinned;  // materialized for a reason besides several consumers
  const std::unordered_set<Node*>& taken;   // members of groups formed already
  std::unordered_map<Node*, size_t> topo;

  Shape shape;
  std::vector<int64_t> axes;
  bool axes_known = false;
  std::unordered_set<Node*> banned, in_group, stage_set, externals;
  std::unordered_set<Node*> seen[3];  // per Mode
  std::vector<Node*> stages;
  bool restart = false;

  // How the walk reached a node: over the row domain itself (Plain), inside
  // one broadcast along the reduced axes through elementwise nodes only (Row:
  // where a stage may be read), or below some other view (View).
  enum Mode : uint8_t { Plain, Row, View };

  bool absorbable(Node* y, Mode mode) const {
    if (!S.materialized.count(y) || pinned.count(y) || taken.count(y) || banned.count(y)) return false;
    if (mode == Plain && y->shape != shape) return false;
    return (ir::is_elementwise(y->op) && kernel_supports(*y)) || (y->op == Op::Expand && mode == Plain);
  }
  bool stage_candidate(Node* r) const {
    return ir::is_reduction(r->op) && reduce_supports(*r) && r->reduce().keepdim && !taken.count(r) && !banned.count(r) &&
           r->args[0]->shape == shape && (!axes_known || r->reduce().axes == axes);
  }
  void visit(Node* x, Mode mode) {
    if (x->realized() || x->op == Op::Constant) return;
    if (!seen[mode].insert(x).second) return;
    if (stage_candidate(x)) {
      // Read other than along its row (over a row of one element, the
      // builders leave out the identity broadcast).
      if (mode != Row && !(mode == Plain && x->shape == shape)) {
        banned.insert(x);
        restart = true;
        return;
      }
      if (!axes_known) {
        axes = x->reduce().axes;
        axes_known = true;
      }
      if (stage_set.insert(x).second) {
        stages.push_back(x);
        visit(x->args[0].get(), Plain);
      }
      return;
    }
    if (S.materialized.count(x) && !absorbable(x, mode)) {
      externals.insert(x);
      return;
    }
    in_group.insert(x);
    if (x->op == Op::Reshape) return;  // reads its source as a buffer
    Mode next = mode;
    if (x->op == Op::Expand && mode == Plain && x->shape == shape) next = Row;
    else if (ir::op_category(x->op) == Category::Movement || ir::op_category(x->op) == Category::Indexed) next = View;
    for (auto& a : x->args) visit(a.get(), next);
  }

  RowGroup group(Node* F) {
    RowGroup g;
    // One grouper serves every candidate F: an elementwise F's rows take the
    // axes of its first stage, not those of the previous candidate's.
    axes.clear();
    axes_known = false;
    if (ir::is_reduction(F->op)) {
      if (!reduce_supports(*F)) return g;
      shape = F->args[0]->shape;
      axes = F->reduce().axes;
      axes_known = true;
    } else if (ir::is_elementwise(F->op) && kernel_supports(*F)) {
      shape = F->shape;
    } else {
      return g;
    }
    const bool fixed_axes = axes_known;
    std::vector<std::string> dropped;
    while (true) {
      axes_known = fixed_axes;
      if (!fixed_axes) axes.clear();
      in_group.clear(), stage_set.clear(), externals.clear();
      for (auto& v : seen) v.clear();
      stages.clear();
      restart = false;
      if (ir::is_reduction(F->op)) visit(F->args[0].get(), Plain);
      else for (auto& a : F->args) visit(a.get(), Plain);
      if (stages.empty()) {
        if (!dropped.empty()) g.reason = "no row program: " + dropped.front();
        return g;
      }
      if (!restart) {
        auto inside = [&](Node* u) { return u == F || in_group.count(u) || stage_set.count(u); };
        auto check = [&](Node* n, const char* what) {
          auto us = users.find(n);
          if (us == users.end()) return;
          for (Node* u : us->second)
            if (!inside(u)) {
              dropped.push_back(fmt::format("{} {} is read outside the kernel", what, ir::op_name(n->op)));
              banned.insert(n);
              restart = true;
              return;
            }
        };
        for (Node* r : stages) check(r, "stage");
        for (Node* y : in_group)
          if (S.materialized.count(y)) check(y, "value");
      }
      if (!restart) break;
    }
    // Distinct buffers read: realized leaves and external values.
    std::unordered_set<Node*> reads(externals);
    for (Node* y : in_group)
      for (auto& a : y->args)
        if (a->realized()) reads.insert(a.get());
    for (Node* r : stages)
      if (r->args[0]->realized()) reads.insert(r->args[0].get());
    if (static_cast<int>(reads.size()) > opts.max_inputs) {
      g.reason = fmt::format("no row program: would read {} buffers (limit {})", reads.size(), opts.max_inputs);
      return g;
    }
    std::sort(stages.begin(), stages.end(), [&](Node* a, Node* b) { return topo.at(a) < topo.at(b); });
    g.stages = stages;
    for (Node* y : in_group)
      if (S.materialized.count(y)) g.absorbed.push_back(y);
    g.reason = fmt::format("row program: {} reduction(s) over axes [{}] of {} share the kernel", stages.size(),
                           fmt::join(axes, ", "), shape.str());
    return g;
  }
};
}  // namespace

namespace {
// A node marked only for having several consumers needs no memory when
// every consumer is computed elementwise, at the same element, in one and the
// same kernel: lowering emits a node once per index map, so that kernel
// computes it once (a max pool's running maximum is read by a compare, a NaN
// test and a select; batch norm's centred input by its square and its scale).
// Consumers first, each node's kernel is found: its own when it is
// materialized, else the one kernel all its consumers are in, if there is one.
// Consumers that move or index it (expand, slice, pad, cat) read it at other
// elements, which would compute it again, so they keep it in memory.
// (Roots are pinned: they stay memory.)
void share_within_kernels(Schedule& S, const std::unordered_map<Node*, std::vector<Node*>>& users,
                          const std::unordered_set<Node*>& pinned) {
  auto& M = S.materialized;
  static const std::vector<Node*> kNone;
  std::unordered_map<Node*, Node*> kernel_of;
  for (auto it = S.order.rbegin(); it != S.order.rend(); ++it) {
    Node* n = *it;
    if (n->realized()) continue;
    const bool marked = M.count(n) > 0;
    if (marked && (pinned.count(n) || !ir::is_pointwise(n->op))) {
      kernel_of[n] = n;
      continue;
    }
    Node* kernel = nullptr;
    auto us = users.find(n);
    for (Node* u : us == users.end() ? kNone : us->second) {
      auto k = kernel_of.find(u);
      const bool same_element = ir::is_elementwise(u->op) || (ir::is_reduction(u->op) && M.count(u));
      if (!same_element || k == kernel_of.end() || (kernel && kernel != k->second)) {
        kernel = nullptr;
        break;
      }
      kernel = k->second;
    }
    if (!marked) {
      if (kernel) kernel_of[n] = kernel;
    } else if (kernel) {
      M.erase(n);
      kernel_of[n] = kernel;
    } else {
      kernel_of[n] = n;
    }
  }
}
}  // namespace

namespace {
// The values a later backward reads from this forward pass: those the
// derivative rules of the nodes here read (autodiff::values_read), and through
// a view, the value it views; for a node whose gradient goes through another
// graph (grad_via), every value of this pass that graph reaches. Only these
// are kept for backward: the rest fuses as if no backward came (a batch norm's
// squared deviations, a bias added before a ReLU).
std::unordered_set<Node*> read_by_backward(const std::vector<Node*>& order) {
  std::unordered_set<Node*> in_pass(order.begin(), order.end()), read;
  auto mark = [&](Node* x) {
    while (read.insert(x).second && !x->realized() && ir::op_category(x->op) == Category::Movement)
      x = x->args[0].get();
  };
  for (Node* n : order) {
    if (n->realized() || !n->requires_grad) continue;
    if (n->grad_via) {
      std::vector<Node*> stack{n->grad_via.get()};
      std::unordered_set<Node*> seen;
      while (!stack.empty()) {
        Node* s = stack.back();
        stack.pop_back();
        if (!seen.insert(s).second) continue;
        if (in_pass.count(s)) mark(s);
        else if (!s->realized())
          for (auto& a : s->args) stack.push_back(a.get());
      }
      continue;
    }
    const autodiff::ValuesRead r = autodiff::values_read(*n);
    if (r.self) mark(n);
    for (size_t i = 0; i < n->args.size() && i < 32; ++i)
      if (r.args >> i & 1u) mark(n->args[i].get());
  }
  return read;
}
}  // namespace

bool fusion_enabled_by_env() {
  static const bool on = [] {
    const char* e = std::getenv("TESSEL_FUSION");
    return !(e && std::string_view(e) == "off");
  }();
  return on;
}

Schedule schedule(const std::vector<ir::NodePtr>& roots, const Options& opts) {
  Schedule S;
  S.order = ir::topo_order(roots);
  std::unordered_map<Node*, int> uses;
  for (Node* n : S.order)
    if (!n->realized())
      for (auto& a : n->args) ++uses[a.get()];
  auto& M = S.materialized;
  const std::unordered_set<Node*> backward_reads =
      opts.keep_grad_values ? read_by_backward(S.order) : std::unordered_set<Node*>{};
  std::unordered_set<Node*> pinned;  // marked for more than having several consumers
  auto mark = [&](Node* n, std::string why, bool only_uses = false) {
    if (n->realized()) return;
    if (!only_uses) pinned.insert(n);
    if (M.count(n)) return;
    M.emplace(n, std::move(why));
  };
  for (auto& r : roots) mark(r.get(), "root");
  for (Node* n : S.order) {
    if (n->realized()) continue;
    Category c = ir::op_category(n->op);
    // An iota costs an index computation: recomputed by each reader, as a constant is.
    bool constant = n->op == Op::Constant || n->op == Op::Iota;
    if (uses[n] > 1 && !constant) mark(n, fmt::format("used by {} consumers", uses[n]), /*only_uses=*/true);
    if (!opts.fuse && !constant && c != Category::Movement) mark(n, "fusion off");
    if (backward_reads.count(n) && n->requires_grad && !constant && c != Category::Movement)
      mark(n, "kept for backward");
    if (c == Category::Reduce) {
      mark(n, reduce_supports(*n) ? "reduction output" : "reduction not compiled: ref");
      if (!reduce_supports(*n)) mark(n->args[0].get(), "input of a ref reduction");
    } else if (c == Category::Scatter) {  // accumulation at computed positions: the ref interpreter, in order
      mark(n, "scatter: ref");
      for (auto& a : n->args) mark(a.get(), "input of a ref node");
    } else if (c == Category::Contraction) {
      const std::string_view what = sched::step_name(contraction_step(n->op));
      mark(n, fmt::format("{} output", what));
      for (auto& a : n->args) mark(a.get(), fmt::format("{} operand", what));
    } else if (!constant && ir::is_elementwise(n->op) && !kernel_supports(*n)) {
      mark(n, fmt::format("{} on {} not compiled: ref", ir::op_name(n->op), dtype_name(n->args.back()->dtype)));
      for (auto& a : n->args) mark(a.get(), "input of a ref node");
    }
  }
  // Consumer-driven cuts, consumers first: a materialized view needs its
  // source materialized; a reshape reads its source as a buffer.
  auto cut_view_sources = [&] {
    for (auto it = S.order.rbegin(); it != S.order.rend(); ++it) {
      Node* n = *it;
      if (n->realized() || ir::op_category(n->op) != Category::Movement) continue;
      if (M.count(n)) {
        mark(n->args[0].get(), "source of a materialized view");
      } else if (n->op == Op::Reshape) {
        Node* src = n->args[0].get();
        while (!src->realized() && !M.count(src) && ir::op_category(src->op) == Category::Movement)
          src = src->args[0].get();
        if (!src->realized()) mark(src, "reshape of a computed value");
      }
    }
  };
  cut_view_sources();
  // Each computed node's consumers (a root's reader is the caller: an entry
  // with none), for the sharing pass and the row programs.
  std::unordered_map<Node*, std::vector<Node*>> users;
  if (opts.fuse) {
    for (Node* n : S.order)
      if (!n->realized())
        for (auto& a : n->args) users[a.get()].push_back(n);
    for (auto& r : roots) users[r.get()];
    share_within_kernels(S, users, pinned);
  }
  // Input and size limits, producers first: reads[n] = buffers read to
  // compute n in a kernel, computes[n] = nodes that kernel computes for it.
  // Both are sets (sorted), since a node shared inside a kernel is read or
  // computed once.
  using NodeSet = std::vector<Node*>;
  std::unordered_map<Node*, NodeSet> reads, computes;
  auto inlined = [&](Node* a) { return !a->realized() && !M.count(a); };
  auto unite = [](const NodeSet& a, const NodeSet& b) {
    NodeSet u;
    u.reserve(a.size() + b.size());
    std::set_union(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(u));
    return u;
  };
  // What a kernel computing a reads from memory for it.
  auto reads_for = [&](Node* a) -> NodeSet {
    if (inlined(a)) return reads[a];
    if (a->op == Op::Constant && !a->realized()) return {};
    return {a};
  };
  for (Node* n : S.order) {
    if (n->realized()) continue;
    if (n->op == Op::Constant) {
      computes[n] = {n};
      continue;
    }
    if (!(ir::is_pointwise(n->op) || ir::op_category(n->op) == Category::Movement || ir::is_reduction(n->op)) ||
        n->op == Op::Reshape) {
      reads[n] = {n};  // a reshape is read from its source's memory
      computes[n] = {n};
      continue;
    }
    // Compile time grows faster than the kernel (measured: a 1,000-node chain
    // in one kernel 0.25 s, 2,000 nodes 0.75 s), so large trees are cut into
    // kernels of at most max_ops nodes: compile time linear in the graph.
    while (true) {
      NodeSet total{n};
      Node* largest = nullptr;
      for (auto& a : n->args) {
        if (!inlined(a.get())) continue;
        total = unite(total, computes[a.get()]);
        if (!largest || computes[a.get()].size() > computes[largest].size()) largest = a.get();
      }
      if (static_cast<int>(total.size()) <= opts.max_ops || !largest) {
        computes[n] = std::move(total);
        break;
      }
      mark(largest, fmt::format("size limit {} nodes (would compute {})", opts.max_ops, total.size()));
    }
    while (true) {
      NodeSet total;
      Node* worst = nullptr;
      for (auto& a : n->args) {
        total = unite(total, reads_for(a.get()));
        if (inlined(a.get()) && (!worst || reads[a.get()].size() > reads[worst].size())) worst = a.get();
      }
      if (static_cast<int>(total.size()) <= opts.max_inputs || !worst) {
        reads[n] = std::move(total);
        break;
      }
      mark(worst, fmt::format("input limit {} (would read {})", opts.max_inputs, total.size()));
    }
  }
  // The limits may have cut at a view (a window of a concatenation, say):
  // its source must then be memory too.
  cut_view_sources();
  // Row programs, consumers first so a group grows from its last reader.
  std::unordered_set<Node*> taken;
  std::unordered_map<Node*, RowGroup> groups;
  if (opts.fuse && opts.row_programs) {
    RowGrouper G(S, opts, users, pinned, taken);
    for (size_t i = 0; i < S.order.size(); ++i) G.topo[S.order[i]] = i;
    for (auto it = S.order.rbegin(); it != S.order.rend(); ++it) {
      Node* F = *it;
      if (F->realized() || !M.count(F) || taken.count(F)) continue;
      G.banned.clear();
      RowGroup g = G.group(F);
      if (!g.reason.empty() && detail::trace_enabled("jit"))
        detail::trace_line("jit", fmt::format("schedule: {} {} -- {}", ir::op_name(F->op), F->shape.str(), g.reason));
      if (g.stages.empty()) continue;
      for (Node* r : g.stages) taken.insert(r);
      for (Node* y : g.absorbed) {
        taken.insert(y);
        M.erase(y);
      }
      taken.insert(F);
      groups.emplace(F, std::move(g));
    }
  }
  std::unordered_set<Node*> root_set;
  for (auto& r : roots) root_set.insert(r.get());
  for (Node* n : S.order) {
    auto it = M.find(n);
    if (it == M.end()) continue;
    if (auto g = groups.find(n); g != groups.end()) {
      Step st{StepKind::RowProgram, n, g->second.reason, nullptr, {}, {}};
      st.stages = g->second.stages;
      for (Node* r : st.stages)
        st.stored.push_back(root_set.count(r) || (backward_reads.count(r) && r->requires_grad));
      S.steps.push_back(std::move(st));
      continue;
    }
    if (taken.count(n)) continue;  // a stage: computed by its group's kernel
    StepKind k = StepKind::Fallback;
    switch (ir::op_category(n->op)) {
      case Category::Movement: k = StepKind::View; break;
      case Category::Reduce: k = reduce_supports(*n) ? StepKind::Reduce : StepKind::Fallback; break;
      case Category::Contraction: k = contraction_step(n->op); break;
      case Category::Leaf: case Category::Unary: case Category::Binary: case Category::Compare:
      case Category::Ternary: case Category::Indexed:
        k = kernel_supports(*n) ? StepKind::Kernel : StepKind::Fallback;
        break;
      case Category::Scatter: k = StepKind::Fallback; break;
    }
    S.steps.push_back({k, n, it->second, nullptr, {}, {}});
  }
  if (opts.fuse && opts.matmul_epilogues) fuse_matmul_epilogues(S, roots, uses);
  if (detail::trace_enabled("jit"))
    for (const Step& s : S.steps)
      detail::trace_line("jit", fmt::format("schedule: {} {} -- {}", step_name(s.kind), ir::op_name(s.node->op), s.reason));
  return S;
}

}  // namespace tessel::sched
