#include "codegen/kernel_ir_verifier.h"

#include <fmt/format.h>

#include <string>
#include <utility>
#include <vector>

#include "codegen/verify_mode.h"
#include "runtime/errors.h"

namespace tessel::kir {

namespace {

using ir::Category;
using ir::Op;

std::string_view kind_name(StmtKind k) {
  switch (k) {
    case StmtKind::Load: return "load";
    case StmtKind::Const: return "const";
    case StmtKind::Op: return "op";
    case StmtKind::Acc: return "acc";
    case StmtKind::Count: return "count";
    case StmtKind::Stage: return "stage";
    case StmtKind::Coord: return "coord";
  }
  return "?";
}

// Operands an op statement takes; 0 for ops no kernel computes element by element.
int arity(Op op) {
  switch (ir::op_category(op)) {
    case Category::Unary: return 1;
    case Category::Binary: case Category::Compare: return 2;
    case Category::Ternary: return 3;
    case Category::Leaf: case Category::Reduce: case Category::Movement: case Category::Indexed:
    case Category::Scatter: case Category::Contraction: return 0;
  }
  return 0;
}

// One statement list and what may appear in it.
struct List {
  const std::vector<Stmt>& stmts;
  int stage;       // the stage it belongs to; -1: the main part
  bool epilogue;   // per output element, from the accumulator: no element index
  DType acc;       // epilogue: the accumulator's dtype
  size_t visible;  // Stage statements may read stages [0, visible)
};

class Verifier {
 public:
  Verifier(const Kernel& k, std::string_view pass) : k_(k), pass_(pass) {}

  void run() {
    check_params();
    check_domain();
    for (size_t i = 0; i < k_.stages.size(); ++i) check_stage(i);
    check_main();
  }

 private:
  const Kernel& k_;
  std::string_view pass_;

  template <class... A>
  [[noreturn]] void fail(fmt::format_string<A...> f, A&&... a) const {
    throw InternalError(fmt::format("kernel IR verifier after {}: {}", pass_, fmt::format(f, std::forward<A>(a)...)));
  }

  // "stage 1 epilogue stmt 2 (div)": built only when something broke.
  static std::string where(const List& l, size_t i) {
    std::string s = l.stage >= 0 ? fmt::format("stage {} ", l.stage) : std::string();
    s += l.epilogue ? "epilogue" : "body";
    const Stmt& st = l.stmts[i];
    return fmt::format("{} stmt {} ({})", s, i, st.kind == StmtKind::Op ? ir::op_name(st.op) : kind_name(st.kind));
  }

  void check_params() {
    const size_t n = k_.params.size();
    if (n == 0) fail("no params (params[0] is the output)");
    if (!k_.params[0].output) fail("params[0] is not an output");
    // Outputs: params[0] and the stage stores, each stored by one stage.
    std::vector<int> stored_by(n, -1);
    for (size_t i = 0; i < k_.stages.size(); ++i) {
      const int p = k_.stages[i].store;
      if (p == -1) continue;
      if (p < 0 || static_cast<size_t>(p) >= n) fail("stage {} stores to param {}, which does not exist ({} params)", i, p, n);
      if (p == 0) fail("stage {} stores to param 0, the main output", i);
      if (!k_.params[static_cast<size_t>(p)].output) fail("stage {} stores to param {}, which is not an output", i, p);
      if (stored_by[static_cast<size_t>(p)] >= 0)
        fail("stages {} and {} both store to param {}", stored_by[static_cast<size_t>(p)], i, p);
      stored_by[static_cast<size_t>(p)] = static_cast<int>(i);
    }
    for (size_t p = 1; p < n; ++p)
      if (k_.params[p].output && stored_by[p] < 0) fail("param {} is an output but no stage stores to it", p);
    for (size_t l = 0; l < k_.load_params.size(); ++l) {
      const int p = k_.load_params[l];
      if (p < 0 || static_cast<size_t>(p) >= n) fail("load slot {} reads param {}, which does not exist ({} params)", l, p, n);
      if (k_.params[static_cast<size_t>(p)].output) fail("load slot {} reads param {}, an output", l, p);
    }
    if (!k_.invariant.empty() && k_.invariant.size() != k_.load_params.size())
      fail("{} invariant flags for {} load slots", k_.invariant.size(), k_.load_params.size());
    if (!k_.interleave.empty()) {
      if (k_.interleave.size() != k_.load_params.size())
        fail("{} interleave strides for {} load slots", k_.interleave.size(), k_.load_params.size());
      if (k_.reduce != ReduceKind::None || k_.row_program()) fail("interleave strides on a reduction or row program");
      for (size_t l = 0; l < k_.interleave.size(); ++l) {
        const int v = k_.interleave[l];
        if (v != 0 && (v < 2 || v > 4)) fail("load slot {} has interleave stride {}, not 2, 3 or 4", l, v);
        if (v != 0 && k_.inner_invariant(l)) fail("load slot {} is both invariant and interleaved", l);
      }
    }
    if (k_.short_inner != 0) {
      if (k_.short_inner < 2 || k_.short_inner > 4) fail("short inner extent {}, not 2, 3 or 4", k_.short_inner);
      if (k_.reduce != ReduceKind::None || k_.row_program() || k_.rank < 2)
        fail("a short inner dim on a reduction, a row program or a rank-{} domain", k_.rank);
      if (k_.short_inner_steps.size() != 2 * (k_.load_params.size() + 1))
        fail("{} short-inner steps for {} store and load slots", k_.short_inner_steps.size(), k_.load_params.size() + 1);
      if (k_.indexed_loads()) fail("a short inner dim with a predicated or indexed load");
    } else if (!k_.short_inner_steps.empty()) {
      fail("short-inner steps without a short inner dim");
    }
    if (k_.coords < 0) fail("coords is {}, below 0", k_.coords);
  }

  void check_domain() {
    if (k_.rank < 1) fail("rank is {}, below 1", k_.rank);
    if (k_.reduce_rank < 0 || k_.reduce_rank > k_.rank)
      fail("reduce_rank {} is outside [0, rank {}]", k_.reduce_rank, k_.rank);
    if (k_.row_program()) {
      if (k_.reduce_rank == 0) fail("a row program has reduce_rank 0");
    } else if (k_.reduce == ReduceKind::None) {
      if (k_.reduce_rank != 0) fail("an elementwise kernel (reduce none) has reduce_rank {}", k_.reduce_rank);
    } else if (k_.reduce_rank == 0) {
      fail("a {} reduction has reduce_rank 0", reduce_name(k_.reduce));
    }
  }

  void check_acc(std::string_view who, ReduceKind r, DType acc) const {
    if (acc != DType::f64 && acc != DType::i64)
      fail("{} accumulates a {} in {}, not f64 or i64", who, reduce_name(r), dtype_name(acc));
  }

  // The stored value's dtype is the param's: stores write `dtype`-sized elements.
  void check_store(std::string_view what, int index, DType t, size_t param) const {
    const DType p = k_.params[param].dtype;
    if (t != p) fail("{} {} is {} but its param p{} is {}", what, index, dtype_name(t), param, dtype_name(p));
  }

  void check_stage(size_t i) {
    const Stage& g = k_.stages[i];
    const int s = static_cast<int>(i);
    if (g.reduce == ReduceKind::None) fail("stage {} is not a reduction (reduce none)", i);
    check_acc(fmt::format("stage {}", i), g.reduce, g.acc_dtype);
    check_list({g.body, s, false, g.acc_dtype, i});
    if (g.value < 0 || static_cast<size_t>(g.value) >= g.body.size())
      fail("stage {} accumulates body stmt {}, which does not exist ({} stmts)", i, g.value, g.body.size());
    check_list({g.epilogue, s, true, g.acc_dtype, i});
    if (g.result < 0 || static_cast<size_t>(g.result) >= g.epilogue.size())
      fail("stage {} result is epilogue stmt {}, which does not exist ({} stmts)", i, g.result, g.epilogue.size());
    if (g.store >= 0)
      check_store(fmt::format("stage {} result, epilogue stmt", i), g.result,
                  g.epilogue[static_cast<size_t>(g.result)].dtype, static_cast<size_t>(g.store));
  }

  void check_main() {
    const size_t stages = k_.stages.size();
    check_list({k_.body, -1, false, k_.acc_dtype, stages});
    if (k_.value < 0 || static_cast<size_t>(k_.value) >= k_.body.size())
      fail("value is body stmt {}, which does not exist ({} stmts)", k_.value, k_.body.size());
    if (k_.reduce == ReduceKind::None) {
      if (!k_.epilogue.empty()) fail("an elementwise kernel (reduce none) has an epilogue");
      check_store("stored value, body stmt", k_.value, k_.body[static_cast<size_t>(k_.value)].dtype, 0);
      return;
    }
    check_acc("the kernel", k_.reduce, k_.acc_dtype);
    check_list({k_.epilogue, -1, true, k_.acc_dtype, stages});
    if (k_.result < 0 || static_cast<size_t>(k_.result) >= k_.epilogue.size())
      fail("result is epilogue stmt {}, which does not exist ({} stmts)", k_.result, k_.epilogue.size());
    check_store("stored result, epilogue stmt", k_.result, k_.epilogue[static_cast<size_t>(k_.result)].dtype, 0);
  }

  void check_list(const List& l) const {
    for (size_t i = 0; i < l.stmts.size(); ++i) check_stmt(l, i);
  }

  // An operand, predicate or index: an earlier statement of the same list.
  void check_earlier(const List& l, size_t i, int a, std::string_view role) const {
    if (a < 0 || static_cast<size_t>(a) >= i) fail("{} {} stmt {}, which is not earlier", where(l, i), role, a);
  }

  void check_stmt(const List& l, size_t i) const {
    const Stmt& s = l.stmts[i];
    for (int a : s.args) check_earlier(l, i, a, "reads");
    if (s.kind != StmtKind::Op && !s.args.empty()) fail("{} has operands (only op statements do)", where(l, i));
    if (s.kind != StmtKind::Load) {
      if (s.pred != -1) fail("{} has a predicate (only loads do)", where(l, i));
      if (s.index != -1) fail("{} has an index (only loads do)", where(l, i));
    }
    switch (s.kind) {
      case StmtKind::Load: check_load(l, i); break;
      case StmtKind::Const:
        if (s.slot < 0 || static_cast<size_t>(s.slot) >= k_.const_types.size())
          fail("{} reads constant slot {}, which does not exist ({} constant slots)", where(l, i), s.slot,
               k_.const_types.size());
        if (s.dtype != k_.const_types[static_cast<size_t>(s.slot)])
          fail("{} is {} but constant slot {} is {}", where(l, i), dtype_name(s.dtype), s.slot,
               dtype_name(k_.const_types[static_cast<size_t>(s.slot)]));
        break;
      case StmtKind::Coord:
        if (l.epilogue) fail("{} is in an epilogue, which has no element index", where(l, i));
        if (s.slot < 0 || s.slot >= k_.coords)
          fail("{} reads coordinate slot {}, which does not exist ({} coordinates)", where(l, i), s.slot, k_.coords);
        if (s.dtype != DType::i64) fail("{} is {}, not i64", where(l, i), dtype_name(s.dtype));
        break;
      case StmtKind::Acc:
        if (!l.epilogue) fail("{} is outside an epilogue", where(l, i));
        if (s.dtype != l.acc)
          fail("{} is {} but the accumulator is {}", where(l, i), dtype_name(s.dtype), dtype_name(l.acc));
        break;
      case StmtKind::Count:
        if (!l.epilogue) fail("{} is outside an epilogue", where(l, i));
        break;
      case StmtKind::Stage:
        if (!k_.row_program()) fail("{} is outside a row program", where(l, i));
        if (l.epilogue) fail("{} is in an epilogue (stages are read per row element)", where(l, i));
        if (s.slot < 0 || static_cast<size_t>(s.slot) >= l.visible)
          fail("{} reads stage {}, which is not earlier", where(l, i), s.slot);
        if (const Stage& g = k_.stages[static_cast<size_t>(s.slot)];
            s.dtype != g.epilogue[static_cast<size_t>(g.result)].dtype)  // read as is, not converted
          fail("{} is {} but stage {} result is {}", where(l, i), dtype_name(s.dtype), s.slot,
               dtype_name(g.epilogue[static_cast<size_t>(g.result)].dtype));
        break;
      case StmtKind::Op: check_op(l, i); break;
    }
  }

  void check_load(const List& l, size_t i) const {
    const Stmt& s = l.stmts[i];
    if (l.epilogue) fail("{} is in an epilogue, which has no element index", where(l, i));
    if (s.slot < 0 || static_cast<size_t>(s.slot) >= k_.load_params.size())
      fail("{} reads load slot {}, which does not exist ({} load slots)", where(l, i), s.slot, k_.load_params.size());
    const int p = k_.load_params[static_cast<size_t>(s.slot)];
    const DType pt = k_.params[static_cast<size_t>(p)].dtype;
    if (s.dtype != pt) fail("{} is {} but its param p{} is {}", where(l, i), dtype_name(s.dtype), p, dtype_name(pt));
    if (s.pred != -1) {
      check_earlier(l, i, s.pred, "is predicated on");
      const DType t = l.stmts[static_cast<size_t>(s.pred)].dtype;
      if (t != DType::b8) fail("{} is predicated on stmt {}, which is {}, not bool", where(l, i), s.pred, dtype_name(t));
    }
    if (s.index != -1) {
      check_earlier(l, i, s.index, "is indexed by");
      const DType t = l.stmts[static_cast<size_t>(s.index)].dtype;
      if (t != DType::i64) fail("{} is indexed by stmt {}, which is {}, not i64", where(l, i), s.index, dtype_name(t));
    }
  }

  // ir.h's elementwise rules, as the emitters read them: one operand dtype
  // (but Where's condition, b8), the result's dtype that of the operands
  // unless the op yields b8 or is a Cast.
  void check_op(const List& l, size_t i) const {
    const Stmt& s = l.stmts[i];
    const int n = arity(s.op);
    if (n == 0) fail("{} is not an elementwise op", where(l, i));
    if (s.args.size() != static_cast<size_t>(n))
      fail("{} has {} operand(s), {} takes {}", where(l, i), s.args.size(), ir::op_name(s.op), n);
    if (s.op == Op::Cast) return;
    auto dtype_of = [&](size_t j) { return l.stmts[static_cast<size_t>(s.args[j])].dtype; };
    size_t first = 0;
    if (s.op == Op::Where) {
      if (dtype_of(0) != DType::b8)
        fail("{} has condition stmt {}, which is {}, not bool", where(l, i), s.args[0], dtype_name(dtype_of(0)));
      first = 1;
    }
    const DType t = dtype_of(first);
    for (size_t j = first + 1; j < s.args.size(); ++j)
      if (dtype_of(j) != t)
        fail("{} mixes operand dtypes: stmt {} is {}, stmt {} is {}", where(l, i), s.args[first], dtype_name(t),
             s.args[j], dtype_name(dtype_of(j)));
    const DType want = ir::has_trait(s.op, ir::kBoolResult) ? DType::b8 : t;
    if (s.dtype != want)
      fail("{} yields {}, not {} (of {} operands)", where(l, i), dtype_name(s.dtype), dtype_name(want), dtype_name(t));
  }
};

}  // namespace

void verify_kernel(const Kernel& k, std::string_view after_pass) { Verifier(k, after_pass).run(); }

void verify_lowered(const lower::Lowered& l, std::string_view after_pass) {
  verify_kernel(l.kernel, after_pass);
  const Kernel& k = l.kernel;
  if (l.buffers.size() != k.params.size())
    throw InternalError(fmt::format("kernel IR verifier after {}: {} buffers for {} params", after_pass,
                                    l.buffers.size(), k.params.size()));
  if (l.args.size() != k.num_args())
    throw InternalError(fmt::format("kernel IR verifier after {}: {} launch arguments, the layout takes {}",
                                    after_pass, l.args.size(), k.num_args()));
}

void check_lowering(const lower::Lowered& l) {
  if (verify_enabled()) verify_lowered(l, "lower_to_kernel_ir");
}

}  // namespace tessel::kir
