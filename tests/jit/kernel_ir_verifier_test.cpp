// The kernel-IR verifier (codegen/kernel_ir_verifier.h): kernels lowered from
// small IR trees pass it; each one broken in one field fails with the pass
// and the broken invariant named; TESSEL_VERIFY's switch turns it off.
#include "tests/support/tensor_testing.h"

#include <cstdlib>
#include <functional>
#include <string>

#include "codegen/kernel_ir_verifier.h"
#include "codegen/lower.h"
#include "codegen/schedule.h"
#include "codegen/verify_mode.h"
#include "dsl/functional.h"
#include "runtime/errors.h"

using namespace tessel;
using namespace tessel::testing;
using ir::Op;
using kir::Stmt;
using kir::StmtKind;

namespace {

constexpr const char* kPass = "lower_to_kernel_ir";

std::string msg(const std::string& what) { return std::string("kernel IR verifier after ") + kPass + ": " + what; }

std::optional<ir::BufferView> realized_value(ir::Node* n) {
  if (n->realized()) return *n->buffer;
  return std::nullopt;
}

ir::BufferView no_copy(DType, const Shape&, const ir::BufferView&) {
  throw std::logic_error("these trees need no dense copy");
}

// Lowering never touches memory: a dense output view without storage will do.
ir::BufferView dense_out(const Shape& s) { return {nullptr, 0, contiguous_strides(s)}; }

lower::Lowered lower_tree(const ir::NodePtr& root) {
  return lower::lower_to_kernel_ir(*root, realized_value, no_copy, dense_out(root->shape));
}

// Index of the first statement of `list` that `want` accepts.
int find(const std::vector<Stmt>& list, const std::function<bool(const Stmt&)>& want) {
  for (size_t i = 0; i < list.size(); ++i)
    if (want(list[i])) return static_cast<int>(i);
  FAIL("no such statement in the kernel");
  return -1;
}
int find_op(const std::vector<Stmt>& list, Op op) {
  return find(list, [&](const Stmt& s) { return s.kind == StmtKind::Op && s.op == op; });
}
int find_kind(const std::vector<Stmt>& list, StmtKind kind) {
  return find(list, [&](const Stmt& s) { return s.kind == kind; });
}
size_t at(int i) { return static_cast<size_t>(i); }

// The trees' leaves: tensors of memory, kept alive with the kernels' tests.
struct Leaves {
  Tensor x = rand({4, 8});
  Tensor y = rand({4, 8});
  Tensor idx = from_vector<int64_t>({0, 7, 3, 1, 2, 5, 6, 4}, Shape{4, 2});
};

// where(x > y, x * 2 + y, exp(y)): loads, a constant, a comparison, a select.
kir::Kernel elementwise(const Leaves& L) {
  ir::NodePtr x = L.x.node(), y = L.y.node();
  ir::NodePtr two = ir::constant(ir::ScalarValue::of(2), DType::f32);
  ir::NodePtr e = ir::where(ir::binary(Op::Gt, x, y), ir::binary(Op::Add, ir::binary(Op::Mul, x, two), y),
                            ir::unary(Op::Exp, y));
  return lower_tree(e).kernel;
}

// mean(x * y) over dim 1: a reduction whose epilogue reads the accumulator and the count.
kir::Kernel reduction(const Leaves& L) {
  return lower_tree(ir::reduce(Op::Mean, ir::binary(Op::Mul, L.x.node(), L.y.node()), {1}, false)).kernel;
}

// x padded by one element before dim 0 and two after dim 1: coordinates and predicated loads.
kir::Kernel padded(const Leaves& L) {
  return lower_tree(ir::pad(L.x.node(), {1, 0}, {0, 2}, ir::ScalarValue::of(0))).kernel;
}

// torch.gather(x, 1, idx): a load at an index computed per element.
kir::Kernel gathered(const Leaves& L) { return lower_tree(ir::gather(L.x.node(), L.idx.node(), 1)).kernel; }

// softmax over dim 1: a row program of two stages (max, sum) and a main body.
lower::Lowered row_program(const Leaves& L) {
  Tensor y = softmax(L.x, 1);
  sched::Schedule s = sched::schedule({y.node()});
  for (const sched::Step& st : s.steps)
    if (st.kind == sched::StepKind::RowProgram) {
      std::vector<ir::BufferView> stage_out(st.stages.size());  // no storage: kept in registers
      return lower::lower_row_program(*st.node, st.stages, stage_out, realized_value, no_copy,
                                      dense_out(st.node->shape));
    }
  FAIL("softmax is not a row program");
  return {};
}

void check_breaks(const kir::Kernel& k, const std::string& what) {
  CHECK_THROWS_MATCHES(kir::verify_kernel(k, kPass), InternalError, Catch::Message(msg(what)));
}

}  // namespace

TEST_CASE("kernel IR verifier: lowered kernels pass", "[jit]") {
  Leaves L;
  for (const kir::Kernel& k : {elementwise(L), reduction(L), padded(L), gathered(L)}) {
    INFO(k.text());
    CHECK_NOTHROW(kir::verify_kernel(k, kPass));
  }
  lower::Lowered row = row_program(L);
  INFO(row.kernel.text());
  REQUIRE(row.kernel.stages.size() == 2);
  CHECK_NOTHROW(kir::verify_lowered(row, kPass));
  lower::Lowered copy = lower::lower_copy(DType::f32, Shape({4, 8}), *L.x.node()->buffer, dense_out(Shape({4, 8})));
  CHECK_NOTHROW(kir::verify_lowered(copy, kPass));
}

TEST_CASE("kernel IR verifier: params and slots", "[jit]") {
  Leaves L;
  const kir::Kernel good = elementwise(L);
  INFO(good.text());
  {
    kir::Kernel k = good;
    k.params.clear();
    check_breaks(k, "no params (params[0] is the output)");
  }
  {
    kir::Kernel k = good;
    k.params[0].output = false;
    check_breaks(k, "params[0] is not an output");
  }
  {
    kir::Kernel k = good;
    k.params[1].output = true;
    check_breaks(k, "param 1 is an output but no stage stores to it");
  }
  {
    kir::Kernel k = good;
    const size_t n = k.params.size();
    k.load_params[0] = static_cast<int>(n);
    check_breaks(k, fmt::format("load slot 0 reads param {}, which does not exist ({} params)", n, n));
  }
  {
    kir::Kernel k = good;
    k.load_params[0] = 0;
    check_breaks(k, "load slot 0 reads param 0, an output");
  }
  {
    kir::Kernel k = good;
    const int c = find_kind(k.body, StmtKind::Const);
    k.body[at(c)].slot = static_cast<int>(k.const_types.size());
    check_breaks(k, fmt::format("body stmt {} (const) reads constant slot {}, which does not exist ({} constant slots)",
                                c, k.const_types.size(), k.const_types.size()));
  }
  {
    kir::Kernel k = good;
    const int c = find_kind(k.body, StmtKind::Const);
    k.const_types[at(k.body[at(c)].slot)] = DType::f64;
    check_breaks(k, fmt::format("body stmt {} (const) is f32 but constant slot {} is f64", c, k.body[at(c)].slot));
  }
  {
    kir::Kernel k = good;
    const int l = find_kind(k.body, StmtKind::Load);
    k.body[at(l)].slot = static_cast<int>(k.load_params.size());
    check_breaks(k, fmt::format("body stmt {} (load) reads load slot {}, which does not exist ({} load slots)", l,
                                k.load_params.size(), k.load_params.size()));
  }
  {
    kir::Kernel k = good;
    const int l = find_kind(k.body, StmtKind::Load);
    k.params[at(k.load_params[at(k.body[at(l)].slot)])].dtype = DType::f16;
    check_breaks(k, fmt::format("body stmt {} (load) is f32 but its param p{} is f16", l,
                                k.load_params[at(k.body[at(l)].slot)]));
  }
  {
    kir::Kernel k = good;
    k.params[0].dtype = DType::f64;
    check_breaks(k, fmt::format("stored value, body stmt {} is f32 but its param p0 is f64", k.value));
  }
  {
    kir::Kernel k = good;
    k.value = static_cast<int>(k.body.size());
    check_breaks(k, fmt::format("value is body stmt {}, which does not exist ({} stmts)", k.body.size(), k.body.size()));
  }
}

TEST_CASE("kernel IR verifier: interleaved loads and short inner dims", "[jit]") {
  Leaves L;
  const kir::Kernel good = elementwise(L);
  INFO(good.text());
  const size_t loads = good.load_params.size();
  {
    kir::Kernel k = good;
    k.interleave.assign(loads + 1, 0);
    check_breaks(k, fmt::format("{} interleave strides for {} load slots", loads + 1, loads));
  }
  {
    kir::Kernel k = good;
    k.interleave.assign(loads, 0);
    k.interleave[0] = 5;
    check_breaks(k, "load slot 0 has interleave stride 5, not 2, 3 or 4");
  }
  {
    kir::Kernel k = reduction(L);
    k.interleave.assign(k.load_params.size(), 2);
    check_breaks(k, "interleave strides on a reduction or row program");
  }
  {
    kir::Kernel k = good;
    k.short_inner = 2;
    k.short_inner_steps.assign(2 * loads, 1);
    check_breaks(k, fmt::format("{} short-inner steps for {} store and load slots", 2 * loads, loads + 1));
  }
  {
    kir::Kernel k = good;
    k.short_inner = 8;
    k.short_inner_steps.assign(2 * (loads + 1), 1);
    check_breaks(k, "short inner extent 8, not 2, 3 or 4");
  }
  {
    kir::Kernel k = good;
    k.short_inner_steps.assign(2 * (loads + 1), 1);
    check_breaks(k, "short-inner steps without a short inner dim");
  }
}

TEST_CASE("kernel IR verifier: the iteration domain", "[jit]") {
  Leaves L;
  const kir::Kernel ew = elementwise(L), red = reduction(L);
  INFO(ew.text() << red.text());
  {
    kir::Kernel k = ew;
    k.rank = 0;
    check_breaks(k, "rank is 0, below 1");
  }
  {
    kir::Kernel k = red;
    k.reduce_rank = k.rank + 1;
    check_breaks(k, fmt::format("reduce_rank {} is outside [0, rank {}]", k.rank + 1, k.rank));
  }
  {
    kir::Kernel k = red;
    k.reduce = kir::ReduceKind::None;
    check_breaks(k, fmt::format("an elementwise kernel (reduce none) has reduce_rank {}", k.reduce_rank));
  }
  {
    kir::Kernel k = red;
    k.reduce_rank = 0;
    check_breaks(k, "a mean reduction has reduce_rank 0");
  }
  {
    kir::Kernel k = red;
    k.acc_dtype = DType::f32;
    check_breaks(k, "the kernel accumulates a mean in f32, not f64 or i64");
  }
  {
    kir::Kernel k = ew;
    k.epilogue = red.epilogue;
    check_breaks(k, "an elementwise kernel (reduce none) has an epilogue");
  }
}

TEST_CASE("kernel IR verifier: statements read earlier statements of their kind", "[jit]") {
  Leaves L;
  const kir::Kernel good = elementwise(L);
  INFO(good.text());
  const int add = find_op(good.body, Op::Add), gt = find_op(good.body, Op::Gt), where = find_op(good.body, Op::Where);
  const int load = find_kind(good.body, StmtKind::Load);
  {
    kir::Kernel k = good;
    const int later = static_cast<int>(k.body.size()) - 1;
    REQUIRE(later > add);
    k.body[at(add)].args[0] = later;
    check_breaks(k, fmt::format("body stmt {} (add) reads stmt {}, which is not earlier", add, later));
  }
  {
    kir::Kernel k = good;
    k.body[at(add)].args.pop_back();
    check_breaks(k, fmt::format("body stmt {} (add) has 1 operand(s), add takes 2", add));
  }
  {
    kir::Kernel k = good;
    k.body[at(add)].op = Op::Sum;
    check_breaks(k, fmt::format("body stmt {} (sum) is not an elementwise op", add));
  }
  {
    kir::Kernel k = good;
    k.body[at(gt)].dtype = DType::f32;
    check_breaks(k, fmt::format("body stmt {} (gt) yields f32, not bool (of f32 operands)", gt));
  }
  {
    kir::Kernel k = good;
    k.body[at(add)].dtype = DType::f64;
    check_breaks(k, fmt::format("body stmt {} (add) yields f64, not f32 (of f32 operands)", add));
  }
  {
    kir::Kernel k = good;
    k.body[at(where)].args[0] = load;
    check_breaks(k, fmt::format("body stmt {} (where) has condition stmt {}, which is f32, not bool", where, load));
  }
  {
    kir::Kernel k = good;
    k.body[at(add)].args[1] = gt;
    const int a0 = k.body[at(add)].args[0];
    check_breaks(k, fmt::format("body stmt {} (add) mixes operand dtypes: stmt {} is f32, stmt {} is bool", add, a0, gt));
  }
  {
    kir::Kernel k = good;
    k.body[at(load)].args = {0};
    check_breaks(k, fmt::format("body stmt {} (load) reads stmt 0, which is not earlier", load));
  }
  {
    kir::Kernel k = good;
    k.body[at(add)].pred = gt;
    check_breaks(k, fmt::format("body stmt {} (add) has a predicate (only loads do)", add));
  }
  {
    kir::Kernel k = good;
    k.body[at(load)].kind = StmtKind::Stage;
    check_breaks(k, fmt::format("body stmt {} (stage) is outside a row program", load));
  }
}

TEST_CASE("kernel IR verifier: coordinates, predicates and indices", "[jit]") {
  Leaves L;
  const kir::Kernel pad = padded(L), gather = gathered(L);
  INFO(pad.text() << gather.text());
  const int coord = find_kind(pad.body, StmtKind::Coord);
  const int pred_load = find(pad.body, [](const Stmt& s) { return s.kind == StmtKind::Load && s.pred >= 0; });
  {
    kir::Kernel k = pad;
    k.body[at(coord)].dtype = DType::i32;
    check_breaks(k, fmt::format("body stmt {} (coord) is i32, not i64", coord));
  }
  {
    kir::Kernel k = pad;
    k.body[at(coord)].slot = k.coords;
    check_breaks(k, fmt::format("body stmt {} (coord) reads coordinate slot {}, which does not exist ({} coordinates)",
                                coord, k.coords, k.coords));
  }
  {
    kir::Kernel k = pad;
    k.body[at(pred_load)].pred = coord;
    check_breaks(k, fmt::format("body stmt {} (load) is predicated on stmt {}, which is i64, not bool", pred_load, coord));
  }
  {
    kir::Kernel k = pad;
    k.body[at(pred_load)].pred = pred_load;
    check_breaks(k, fmt::format("body stmt {} (load) is predicated on stmt {}, which is not earlier", pred_load,
                                pred_load));
  }
  const int idx_load = find(gather.body, [](const Stmt& s) { return s.kind == StmtKind::Load && s.index >= 0; });
  {
    kir::Kernel k = gather;
    const int b8 = k.body[at(idx_load)].pred;
    REQUIRE(b8 >= 0);
    k.body[at(idx_load)].index = b8;
    check_breaks(k, fmt::format("body stmt {} (load) is indexed by stmt {}, which is bool, not i64", idx_load, b8));
  }
}

TEST_CASE("kernel IR verifier: epilogues and accumulators", "[jit]") {
  Leaves L;
  const kir::Kernel good = reduction(L);
  INFO(good.text());
  {
    kir::Kernel k = good;
    k.body[0] = {StmtKind::Acc, Op::Input, k.acc_dtype, {}, 0};
    check_breaks(k, "body stmt 0 (acc) is outside an epilogue");
  }
  {
    kir::Kernel k = good;
    const int count = find_kind(k.epilogue, StmtKind::Count);
    k.epilogue[at(count)] = {StmtKind::Load, Op::Input, DType::f32, {}, 0};
    check_breaks(k, fmt::format("epilogue stmt {} (load) is in an epilogue, which has no element index", count));
  }
  {
    kir::Kernel k = good;
    const int acc = find_kind(k.epilogue, StmtKind::Acc);
    k.epilogue[at(acc)].dtype = DType::f32;
    check_breaks(k, fmt::format("epilogue stmt {} (acc) is f32 but the accumulator is f64", acc));
  }
  {
    kir::Kernel k = good;
    k.result = -1;
    check_breaks(k, fmt::format("result is epilogue stmt -1, which does not exist ({} stmts)", k.epilogue.size()));
  }
  {
    kir::Kernel k = good;
    k.epilogue.back().dtype = DType::f64;  // the cast to the output's dtype
    REQUIRE(k.result == static_cast<int>(k.epilogue.size()) - 1);
    check_breaks(k, fmt::format("stored result, epilogue stmt {} is f64 but its param p0 is f32", k.result));
  }
}

TEST_CASE("kernel IR verifier: row programs' stages", "[jit]") {
  Leaves L;
  const lower::Lowered row = row_program(L);
  const kir::Kernel& good = row.kernel;
  INFO(good.text());
  REQUIRE(good.stages.size() == 2);
  const int read0 = find_kind(good.stages[1].body, StmtKind::Stage);  // the sum reads the max
  {
    kir::Kernel k = good;
    k.stages[1].body[at(read0)].slot = 1;
    check_breaks(k, fmt::format("stage 1 body stmt {} (stage) reads stage 1, which is not earlier", read0));
  }
  {
    kir::Kernel k = good;
    k.stages[1].body[at(read0)].dtype = DType::f64;
    check_breaks(k, fmt::format("stage 1 body stmt {} (stage) is f64 but stage 0 result is f32", read0));
  }
  {
    kir::Kernel k = good;
    const int main_read = find_kind(k.body, StmtKind::Stage);
    k.body[at(main_read)].slot = 2;
    check_breaks(k, fmt::format("body stmt {} (stage) reads stage 2, which is not earlier", main_read));
  }
  {
    kir::Kernel k = good;
    k.stages[0].store = 1;  // the input
    check_breaks(k, "stage 0 stores to param 1, which is not an output");
  }
  {
    kir::Kernel k = good;
    k.stages[0].reduce = kir::ReduceKind::None;
    check_breaks(k, "stage 0 is not a reduction (reduce none)");
  }
  {
    kir::Kernel k = good;
    k.stages[1].value = static_cast<int>(k.stages[1].body.size());
    check_breaks(k, fmt::format("stage 1 accumulates body stmt {}, which does not exist ({} stmts)",
                                k.stages[1].body.size(), k.stages[1].body.size()));
  }
  {
    kir::Kernel k = good;
    k.reduce_rank = 0;
    check_breaks(k, "a row program has reduce_rank 0");
  }
  {
    lower::Lowered l = row;
    l.args.pop_back();
    CHECK_THROWS_MATCHES(kir::verify_lowered(l, kPass), InternalError,
                         Catch::Message(msg(fmt::format("{} launch arguments, the layout takes {}", l.args.size(),
                                                        l.kernel.num_args()))));
  }
  {
    lower::Lowered l = row;
    l.buffers.pop_back();
    CHECK_THROWS_MATCHES(kir::verify_lowered(l, kPass), InternalError,
                         Catch::Message(msg(fmt::format("{} buffers for {} params", l.buffers.size(),
                                                        l.kernel.params.size()))));
  }
}

TEST_CASE("kernel IR verifier: TESSEL_VERIFY switches it", "[jit]") {
  CHECK(verify_requested("1"));
  CHECK_FALSE(verify_requested("0"));
  CHECK_FALSE(verify_requested(""));
  CHECK_FALSE(verify_requested("yes"));
  CHECK_FALSE(verify_requested(nullptr));

  Leaves L;
  lower::Lowered broken{elementwise(L), {}, {}, 0};
  broken.kernel.params[0].output = false;
  set_verify_enabled_for_testing(false);
  CHECK_FALSE(verify_enabled());
  CHECK_NOTHROW(kir::check_lowering(broken));
  set_verify_enabled_for_testing(true);
  CHECK(verify_enabled());
  CHECK_THROWS_MATCHES(kir::check_lowering(broken), InternalError, Catch::Message(msg("params[0] is not an output")));
  set_verify_enabled_for_testing(verify_requested(std::getenv("TESSEL_VERIFY")));
}
