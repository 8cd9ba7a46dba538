#include "codegen/schedule.h"

#include <cstdlib>
#include <string_view>

#include <fmt/format.h>

#include <algorithm>

#include "runtime/kernel_cache.h"

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
    case StepKind::Fallback: return "fallback";
  }
  return "?";
}

int Schedule::kernels() const {
  int n = 0;
  for (const Step& s : steps) n += s.kind == StepKind::Kernel || s.kind == StepKind::Reduce || s.epilogue;
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
  if (!ir::is_elementwise(n.op)) return false;
  DType t = n.op == Op::Where || n.op == Op::Cast || ir::op_category(n.op) == Category::Compare ? n.args.back()->dtype
                                                                                                : n.dtype;
  if (n.op == Op::Cast) return !half(n.dtype) && !half(n.args[0]->dtype);
  if (n.op == Op::Where) return true;  // a select works on any storage type
  if (t == DType::b8) {
    switch (n.op) {
      case Op::Abs: case Op::Relu: case Op::Not: case Op::Add: case Op::Or: case Op::Maximum:
      case Op::Mul: case Op::And: case Op::Minimum: case Op::Eq: case Op::Ne: case Op::Lt:
      case Op::Le: case Op::Gt: case Op::Ge:
        return true;
      default: return false;
    }
  }
  if (!arith(t)) return false;
  if (is_integral(t)) {
    switch (n.op) {
      case Op::Exp: case Op::Log: case Op::Sqrt: case Op::Tanh: case Op::Sigmoid: case Op::Pow: case Op::Div:
        return false;
      default: return true;
    }
  }
  return true;
}

bool reduce_supports(const Node& n) {
  if (n.op == Op::ArgMax || !ir::is_reduction(n.op)) return false;
  DType t = n.args[0]->dtype;
  if (!(arith(t) || t == DType::b8)) return false;
  if (n.op == Op::Mean && !is_floating(t)) return false;
  return !half(n.dtype);
}

namespace {

// The 2-D matmul an elementwise kernel step reads element for element (through
// elementwise ops only, so with the identity index), if it is the only reader
// of that product; else null.
Node* epilogue_source(const Schedule& S, Node* e, const std::unordered_map<Node*, int>& uses,
                      const std::vector<ir::NodePtr>& roots) {
  auto fits = [&](Node* m) {
    if (ir::op_category(m->op) != Category::Contraction || m->realized()) return false;
    if (m->shape != e->shape || m->shape.dims.size() != 2 || !(m->dtype == DType::f32 || m->dtype == DType::f64))
      return false;
    auto u = uses.find(m);
    if (u == uses.end() || u->second != 1) return false;
    for (auto& r : roots)
      if (r.get() == m) return false;
    return true;
  };
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
    st = Step{StepKind::MatMul, m, S.steps[it->second].reason, st.node};
  }
  std::vector<Step> kept;
  kept.reserve(S.steps.size());
  for (size_t i = 0; i < S.steps.size(); ++i)
    if (!drop[i]) kept.push_back(std::move(S.steps[i]));
  S.steps = std::move(kept);
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
  auto mark = [&](Node* n, std::string why) {
    if (n->realized() || M.count(n)) return;
    M.emplace(n, std::move(why));
  };
  for (auto& r : roots) mark(r.get(), "root");
  for (Node* n : S.order) {
    if (n->realized()) continue;
    Category c = ir::op_category(n->op);
    bool constant = n->op == Op::Constant;
    if (uses[n] > 1 && !constant) mark(n, fmt::format("used by {} consumers", uses[n]));
    if (!opts.fuse && !constant && c != Category::Movement) mark(n, "fusion off");
    if (opts.keep_grad_values && n->requires_grad && !constant && c != Category::Movement)
      mark(n, "kept for backward");
    if (c == Category::Reduce) {
      mark(n, reduce_supports(*n) ? "reduction output" : "reduction not compiled: ref");
      if (!reduce_supports(*n)) mark(n->args[0].get(), "input of a ref reduction");
    } else if (c == Category::Contraction) {
      mark(n, "matmul output");
      for (auto& a : n->args) mark(a.get(), "matmul operand");
    } else if (!constant && ir::is_elementwise(n->op) && !kernel_supports(*n)) {
      mark(n, fmt::format("{} on {} not compiled: ref", ir::op_name(n->op), dtype_name(n->args.back()->dtype)));
      for (auto& a : n->args) mark(a.get(), "input of a ref node");
    }
  }
  // Consumer-driven cuts, consumers first: a materialized view needs its
  // source materialized; a reshape reads its source as a buffer.
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
  // Input limit, producers first: loads[n] = buffers read to compute n in a kernel.
  std::unordered_map<Node*, int> loads;
  auto cost = [&](Node* a) { return a->realized() || M.count(a) ? (a->op == Op::Constant && !a->realized() ? 0 : 1) : loads[a]; };
  for (Node* n : S.order) {
    if (n->realized()) continue;
    if (n->op == Op::Constant) { loads[n] = 0; continue; }
    if (ir::op_category(n->op) == Category::Movement && n->op == Op::Reshape) { loads[n] = 1; continue; }
    if (!(ir::is_elementwise(n->op) || ir::op_category(n->op) == Category::Movement || ir::is_reduction(n->op))) {
      loads[n] = 1;
      continue;
    }
    while (true) {
      int total = 0;
      Node* worst = nullptr;
      for (auto& a : n->args) {
        total += cost(a.get());
        if (!a->realized() && !M.count(a.get()) && (!worst || loads[a.get()] > loads[worst])) worst = a.get();
      }
      if (total <= opts.max_inputs || !worst) {
        loads[n] = total;
        break;
      }
      mark(worst, fmt::format("input limit {} (would read {})", opts.max_inputs, total));
    }
  }
  for (Node* n : S.order) {
    auto it = M.find(n);
    if (it == M.end()) continue;
    StepKind k;
    switch (ir::op_category(n->op)) {
      case Category::Movement: k = StepKind::View; break;
      case Category::Reduce: k = reduce_supports(*n) ? StepKind::Reduce : StepKind::Fallback; break;
      case Category::Contraction: k = StepKind::MatMul; break;
      default: k = kernel_supports(*n) ? StepKind::Kernel : StepKind::Fallback; break;
    }
    S.steps.push_back({k, n, it->second});
  }
  if (opts.fuse && opts.matmul_epilogues) fuse_matmul_epilogues(S, roots, uses);
  if (detail::trace_enabled("jit"))
    for (const Step& s : S.steps)
      detail::trace_line("jit", fmt::format("schedule: {} {} -- {}", step_name(s.kind), ir::op_name(s.node->op), s.reason));
  return S;
}

}  // namespace tessel::sched
