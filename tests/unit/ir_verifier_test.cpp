// The IR verifier: graphs the builders make pass; a graph with one invariant
// broken (as a faulty builder or pass would leave it) is an InternalError
// that names the pass and the node. Also the typed attributes' accessors.
#include "tests/support/tensor_testing.h"

#include "codegen/backend.h"
#include "codegen/builders.h"
#include "codegen/ir_verifier.h"
#include "codegen/schedule.h"
#include "runtime/errors.h"

using namespace tessel;
using Catch::Matchers::Equals;

namespace {

ir::NodePtr leaf(Shape s, DType t = DType::f32) {
  return ir::input(host_dense(t, s), t, s);
}

// A copy of `n` (sharing its args) to break without touching the original.
ir::NodePtr clone(const ir::NodePtr& n) { return std::make_shared<ir::Node>(*n); }

std::string verify_message(const ir::NodePtr& root, std::string_view pass = "test") {
  try {
    ir::verify_ir({root}, pass);
  } catch (const InternalError& e) {
    return e.what();
  }
  return "passed";
}

}  // namespace

TEST_CASE("IR verifier: graphs the builders make pass", "[ir][verify]") {
  ir::NodePtr x = leaf({2, 3}), w = leaf({3, 4});
  ir::NodePtr y = ir::binary(ir::Op::Add, ir::matmul(x, w), ir::constant(ir::ScalarValue::of(1), DType::f32));
  ir::NodePtr r = ir::reduce(ir::Op::Sum, ir::permute(y, {1, 0}), {0}, true);
  ir::NodePtr p = ir::pad(ir::slice(y, {0, 1}, {1, 2}, Shape({2, 2})), {1, 0}, {0, 2}, ir::ScalarValue::of(0));
  ir::NodePtr c = ir::cat({p, p}, 1);
  ir::NodePtr g = ir::gather(y, ir::iota(Shape({2, 4}), 0), 0);
  CHECK(verify_message(r) == "passed");
  CHECK(verify_message(c) == "passed");
  CHECK(verify_message(g) == "passed");
  CHECK(verify_message(ir::scatter_add(g, ir::iota(Shape({2, 4}), 0), 0, Shape({2, 4}))) == "passed");
}

TEST_CASE("IR verifier: each broken invariant names the pass, the node and what is wrong", "[ir][verify]") {
  ir::NodePtr x = leaf({2, 3});
  SECTION("elementwise args of another shape") {
    ir::NodePtr bad = clone(ir::binary(ir::Op::Mul, x, x));
    bad->args[1] = leaf({3});
    CHECK_THAT(verify_message(bad, "schedule"),
               Equals("IR verifier after schedule: mul node (f32[2, 3], args: f32[2, 3] f32[3]) arg 1 has shape [3] "
                      "(elementwise args have the node's shape; broadcasts are Expand nodes)"));
  }
  SECTION("elementwise args of different dtypes") {
    ir::NodePtr bad = clone(ir::binary(ir::Op::Add, x, x));
    bad->args[1] = leaf({2, 3}, DType::f64);
    CHECK_THAT(verify_message(bad),
               Equals("IR verifier after test: add node (f32[2, 3], args: f32[2, 3] f64[2, 3]) has args of different "
                      "dtypes (f32 and f64)"));
  }
  SECTION("reduction axes not sorted") {
    ir::NodePtr bad = clone(ir::reduce(ir::Op::Sum, leaf({2, 3, 4}), {0, 2}, false));
    bad->attrs = ir::ReduceAttrs{{2, 0}, false};
    CHECK_THAT(verify_message(bad, "autodiff"),
               Equals("IR verifier after autodiff: sum node (f32[3], args: f32[2, 3, 4]) has axes [2, 0], not sorted "
                      "and unique"));
  }
  SECTION("reduction axis out of range") {
    ir::NodePtr bad = clone(ir::reduce(ir::Op::Max, x, {1}, false));
    bad->attrs = ir::ReduceAttrs{{2}, false};
    CHECK_THAT(verify_message(bad),
               Equals("IR verifier after test: max node (f32[2], args: f32[2, 3]) indexes along axis 2, outside [0, 2)"));
  }
  SECTION("the wrong attribute alternative") {
    ir::NodePtr bad = clone(ir::permute(x, {1, 0}));
    bad->attrs = ir::AxisAttrs{1};
    CHECK_THAT(verify_message(bad),
               Equals("IR verifier after test: permute node (f32[3, 2], args: f32[2, 3]) carries attribute "
                      "alternative 5, its kind is 2"));
  }
  SECTION("a permutation that repeats a dim") {
    ir::NodePtr bad = clone(ir::permute(x, {1, 0}));
    bad->attrs = ir::OrderAttrs{{1, 1}};
    CHECK_THAT(verify_message(bad),
               Equals("IR verifier after test: permute node (f32[3, 2], args: f32[2, 3]) has order [1, 1], not a "
                      "permutation"));
  }
  SECTION("a slice past the end of its input") {
    ir::NodePtr bad = clone(ir::slice(x, {0, 1}, {1, 1}, Shape({2, 2})));
    bad->attrs = ir::WindowAttrs{{{0, 1}, {2, 1}}};
    CHECK_THAT(verify_message(bad),
               Equals("IR verifier after test: slice node (f32[2, 2], args: f32[2, 3]) reads [2, 4) step 1 of dim 1 "
                      "of size 3"));
  }
  SECTION("a pad whose shape disagrees with its widths") {
    ir::NodePtr bad = clone(ir::pad(x, {1, 0}, {0, 0}, ir::ScalarValue::of(0)));
    bad->attrs = ir::WidthsAttrs{{{1, 0}, {0, 1}}};
    CHECK_THAT(verify_message(bad),
               Equals("IR verifier after test: pad node (f32[3, 3], args: f32[2, 3] f32[]) has size 3 in dim 1, its "
                      "arg 3 + 0 + 1"));
  }
  SECTION("a matmul over mismatched inner dims") {
    ir::NodePtr bad = clone(ir::matmul(x, leaf({3, 4})));
    bad->args[1] = leaf({2, 4});
    CHECK_THAT(verify_message(bad),
               Equals("IR verifier after test: matmul node (f32[2, 4], args: f32[2, 3] f32[2, 4]) contracts [2, 3] "
                      "with [2, 4]"));
  }
  SECTION("a gather whose index is not i64") {
    ir::NodePtr bad = clone(ir::gather(x, ir::iota(Shape({2, 3}), 0), 0));
    bad->args[1] = leaf({2, 3}, DType::i32);
    CHECK_THAT(verify_message(bad),
               Equals("IR verifier after test: gather node (f32[2, 3], args: f32[2, 3] i32[2, 3]) has an index that "
                      "is not i64"));
  }
  SECTION("an Input without memory") {
    ir::NodePtr bad = clone(x);
    bad->buffer.reset();
    CHECK_THAT(verify_message(ir::unary(ir::Op::Neg, bad)),
               Equals("IR verifier after test: input node (f32[2, 3], args: none) is an Input without a buffer"));
  }
  SECTION("a realized node is memory: its args may be gone") {
    ir::NodePtr done = clone(ir::binary(ir::Op::Add, x, x));
    done->buffer = host_dense(DType::f32, Shape({2, 3}));
    done->args.clear();
    CHECK(verify_message(ir::unary(ir::Op::Neg, done)) == "passed");
    done->buffer->strides = {1};
    CHECK_THAT(verify_message(ir::unary(ir::Op::Neg, done)),
               Equals("IR verifier after test: add node (f32[2, 3], args: none) has 1 strides for rank 2"));
  }
}

TEST_CASE("schedule verifier: a node computed by two steps, a step before its producer", "[ir][verify]") {
  ir::NodePtr x = leaf({4});
  ir::NodePtr a = ir::unary(ir::Op::Exp, x);
  ir::NodePtr b = ir::reduce(ir::Op::Sum, a, {}, false);
  sched::Schedule s = sched::schedule({b});
  CHECK_NOTHROW(ir::verify_schedule(s, "schedule"));
  sched::Schedule twice = s;
  twice.steps.push_back(twice.steps.back());
  CHECK_THROWS_MATCHES(ir::verify_schedule(twice, "schedule"), InternalError,
                       Catch::Matchers::Message("schedule verifier after schedule: reduce step for a sum node computed "
                                                "by a second step"));
  sched::Options unfused;
  unfused.fuse = false;
  sched::Schedule two = sched::schedule({b}, unfused);
  REQUIRE(two.steps.size() == 2);
  std::swap(two.steps[0], two.steps[1]);
  CHECK_THROWS_MATCHES(ir::verify_schedule(two, "schedule"), InternalError,
                       Catch::Matchers::Message("schedule verifier after schedule: reduce step for a sum node that reads "
                                                "a materialized exp node computed later"));
}

TEST_CASE("typed attributes: each op reads its own kind, and another kind is an internal error naming the op",
          "[ir][verify]") {
  ir::NodePtr x = leaf({2, 3});
  ir::NodePtr r = ir::reduce(ir::Op::Mean, x, {-1}, true);
  CHECK(r->reduce().axes == std::vector<int64_t>{1});
  CHECK(r->reduce().keepdim);
  CHECK(ir::permute(x, {1, 0})->order().order == std::vector<int64_t>{1, 0});
  CHECK(ir::slice(x, {1, 0}, {1, 2}, Shape({1, 2}))->window().dims[1] == ir::SliceDim{0, 2});
  CHECK(ir::pad(x, {0, 2}, {1, 0}, ir::ScalarValue::of(0))->widths().dims[1] == ir::PadWidth{2, 0});
  CHECK(ir::cat({x, x}, -1)->axis() == 1);
  CHECK(ir::op_attr_kind(ir::Op::Gather) == ir::AttrKind::Axis);
  CHECK(ir::op_attr_kind(ir::Op::Expand) == ir::AttrKind::None);
  CHECK_THROWS_MATCHES(r->order(), InternalError,
                       Catch::Matchers::Message("ir: a mean node has no permutation attribute (attrs alternative 1; a "
                                                "builder or pass set the wrong one)"));
}
