// The IR: canonical text, structural hashes, node kinds and the invariants
// the builders establish.
#include "tests/support/tensor_testing.h"

#include "codegen/backend.h"
#include "codegen/builders.h"

using namespace tessel;
using namespace tessel::testing;

TEST_CASE("ir text: inputs numbered by first appearance, post-order", "[ir]") {
  Tensor x = ones({2, 2}), y = ones({2, 2});
  Tensor r = x * y + x;
  CHECK(ir::to_string(r.node()) ==
        "%0 = input f32[2, 2]\n"
        "%1 = input f32[2, 2]\n"
        "%2 = mul(%0, %1) f32[2, 2]\n"
        "%3 = add(%2, %0) f32[2, 2]\n");
}

TEST_CASE("ir text: scalars are constants broadcast by explicit expands", "[ir]") {
  Tensor x = ones({3});
  CHECK(ir::to_string(Tensor(x * 2.5).node()) ==
        "%0 = input f32[3]\n"
        "%1 = constant() 2.5 f32[]\n"
        "%2 = expand(%1) f32[3]\n"
        "%3 = mul(%0, %2) f32[3]\n");
}

TEST_CASE("ir text: promotion inserts explicit casts", "[ir]") {
  Tensor i = ones({2}, DType::i64), f = ones({2});
  CHECK(ir::to_string(Tensor(i + f).node()) ==
        "%0 = input i64[2]\n"
        "%1 = cast(%0) f32[2]\n"
        "%2 = input f32[2]\n"
        "%3 = add(%1, %2) f32[2]\n");
}

TEST_CASE("ir text: reductions print their axes and keepdim", "[ir]") {
  Tensor x = ones({2, 3, 4});
  CHECK(ir::to_string(x.sum({-1, 0}, true).node()) ==
        "%0 = input f32[2, 3, 4]\n"
        "%1 = sum(%0) axes=[0, 2] keepdim f32[1, 3, 1]\n");
  CHECK(ir::to_string(x.max(1).node()) ==
        "%0 = input f32[2, 3, 4]\n"
        "%1 = max(%0) axes=[1] f32[2, 4]\n");
}

TEST_CASE("ir text: movement and matmul nodes", "[ir]") {
  Tensor a = ones({2, 3}).requires_grad_(), b = ones({3, 4});
  std::string s = ir::to_string(a.t().t().matmul(b).reshape({8}).node());
  CHECK(s ==
        "%0 = input f32[2, 3]\n"
        "%1 = permute(%0) order=[1, 0] f32[3, 2]\n"
        "%2 = permute(%1) order=[1, 0] f32[2, 3]\n"
        "%3 = input f32[3, 4]\n"
        "%4 = matmul(%2, %3) f32[2, 4]\n"
        "%5 = reshape(%4) f32[8]\n");
}

TEST_CASE("ir text: several roots end with a return line", "[ir]") {
  Tensor x = ones({2});
  Tensor p = x + 1, q = x * x;
  CHECK(ir::to_string(std::vector<ir::NodePtr>{p.node(), q.node()}) ==
        "%0 = input f32[2]\n"
        "%1 = constant() 1 f32[]\n"
        "%2 = expand(%1) f32[2]\n"
        "%3 = add(%0, %2) f32[2]\n"
        "%4 = mul(%0, %0) f32[2]\n"
        "return %3, %4\n");
}

TEST_CASE("equal trees over different buffers print and hash the same", "[ir]") {
  Tensor a = rand({4, 3}), b = rand({4, 3}), c = rand({4, 3}), d = rand({4, 3});
  Tensor t1 = Tensor(relu(a * b + a)).sum({1});
  Tensor t2 = Tensor(relu(c * d + c)).sum({1});
  CHECK(ir::to_string(t1.node()) == ir::to_string(t2.node()));
  CHECK(ir::structural_hash({t1.node()}) == ir::structural_hash({t2.node()}));
}

TEST_CASE("different trees hash differently", "[ir]") {
  Tensor a = rand({4, 3}), b = rand({4, 3});
  uint64_t base = ir::structural_hash({Tensor(a * b + a).node()});
  CHECK(ir::structural_hash({Tensor(a * b + b).node()}) != base);  // different input wiring
  CHECK(ir::structural_hash({Tensor(a * b - a).node()}) != base);  // different op
  CHECK(ir::structural_hash({Tensor(a * a + a).node()}) != base);  // one input instead of two
  Tensor c = rand({4, 4}), d = rand({4, 4});
  CHECK(ir::structural_hash({Tensor(c * d + c).node()}) != base);  // different shape
  Tensor e = rand({4, 3}, DType::f64), f = rand({4, 3}, DType::f64);
  CHECK(ir::structural_hash({Tensor(e * f + e).node()}) != base);  // different dtype
  CHECK(ir::structural_hash({Tensor(a * 2).node()}) != ir::structural_hash({Tensor(a * 3).node()}));  // constants differ
}

TEST_CASE("hash of several roots depends on their order", "[ir]") {
  Tensor x = ones({2});
  ir::NodePtr p = Tensor(x + 1).node(), q = Tensor(x * 2).node();
  CHECK(ir::structural_hash({p, q}) != ir::structural_hash({q, p}));
  CHECK(ir::structural_hash({p, q}) == ir::structural_hash({p, q}));
}

TEST_CASE("realized nodes print as inputs", "[ir]") {
  Tensor x = ones({2});
  Tensor y = x * 2;
  y.eval();
  CHECK(ir::to_string(Tensor(y + x).node()) ==
        "%0 = input f32[2]\n"
        "%1 = input f32[2]\n"
        "%2 = add(%0, %1) f32[2]\n");
}

TEST_CASE("topo_order lists each node once, args first", "[ir]") {
  Tensor x = ones({2});
  Tensor s = x * x;
  Tensor r = s + s;
  auto order = ir::topo_order({r.node()});
  CHECK(order.size() == 3);  // input, mul, add
  CHECK(order.front()->op == ir::Op::Input);
  CHECK(order.back() == r.node().get());
}

TEST_CASE("op names and categories", "[ir]") {
  CHECK(ir::op_name(ir::Op::Add) == "add");
  CHECK(ir::op_name(ir::Op::MatMul) == "matmul");  // as ir.h documents
  CHECK(ir::op_name(ir::Op::Min) == "min");
  CHECK(ir::op_category(ir::Op::Exp) == ir::Category::Unary);
  CHECK(ir::op_category(ir::Op::Lt) == ir::Category::Compare);
  CHECK(ir::op_category(ir::Op::Where) == ir::Category::Ternary);
  CHECK(ir::is_elementwise(ir::Op::Sigmoid));
  CHECK(!ir::is_elementwise(ir::Op::Sum));
  CHECK(ir::is_reduction(ir::Op::Mean));
  CHECK(ir::op_category(ir::Op::Slice) == ir::Category::Movement);
}

TEST_CASE("builders: elementwise args have the node's shape and one dtype", "[ir]") {
  ir::NodePtr a = ones({3, 1}, DType::i32).node(), b = ones({4}, DType::f64).node();
  ir::NodePtr r = ir::binary(ir::Op::Mul, a, b);
  CHECK(r->shape == Shape{3, 4});
  CHECK(r->dtype == DType::f64);
  for (auto& arg : r->args) {
    CHECK(arg->shape == r->shape);
    CHECK(arg->dtype == r->dtype);
  }
}

TEST_CASE("builders: half arithmetic runs in f32 between casts", "[ir]") {
  ir::NodePtr h = ones({2}, DType::f16).node();
  ir::NodePtr r = ir::binary(ir::Op::Add, h, h);
  CHECK(r->op == ir::Op::Cast);
  CHECK(r->dtype == DType::f16);
  CHECK(r->args[0]->op == ir::Op::Add);
  CHECK(r->args[0]->dtype == DType::f32);
  ir::NodePtr e = ir::unary(ir::Op::Exp, h);
  CHECK(e->op == ir::Op::Cast);
  CHECK(e->args[0]->dtype == DType::f32);
}

TEST_CASE("builders: reduction axes sorted, unique, non-negative", "[ir]") {
  ir::NodePtr x = ones({2, 3, 4, 5}).node();
  ir::NodePtr r = ir::reduce(ir::Op::Sum, x, {-1, 1, -4}, false);
  CHECK(r->reduce().axes == std::vector<int64_t>{0, 1, 3});
  CHECK(r->shape == Shape{4});
  CHECK(ir::reduce(ir::Op::Max, x, {}, true)->shape == Shape{1, 1, 1, 1});
}

TEST_CASE("builders: identity permute and same-shape reshape return the input node", "[ir]") {
  ir::NodePtr x = ones({2, 3}).node();
  CHECK(ir::permute(x, {0, 1}) == x);
  CHECK(ir::reshape(x, {2, 3}) == x);
  CHECK(ir::expand(x, Shape{2, 3}) == x);
  CHECK(ir::cast(x, DType::f32) == x);
}

TEST_CASE("builders: constants are stored in the dtype's kind", "[ir]") {
  CHECK(ir::constant(ir::ScalarValue::of(2.7), DType::i64)->value.i == 2);
  CHECK(ir::constant(ir::ScalarValue::of(2.7), DType::i64)->value.is_int);
  CHECK(ir::constant(ir::ScalarValue::of_int(3), DType::f32)->value.f == 3.0);
  CHECK(ir::constant(ir::ScalarValue::of(0.5), DType::b8)->value.i == 1);
  CHECK(ir::constant(ir::ScalarValue::of(0.0), DType::b8)->value.i == 0);
}

TEST_CASE("builders: matmul shapes follow torch.matmul", "[ir]") {
  auto mm = [](Shape a, Shape b) {
    return ir::matmul(zeros(a).node(), zeros(b).node())->shape;
  };
  CHECK(mm({3}, {3}) == Shape{});
  CHECK(mm({2, 3}, {3}) == Shape{2});
  CHECK(mm({3}, {3, 4}) == Shape{4});
  CHECK(mm({5, 2, 3}, {3, 4}) == Shape{5, 2, 4});
  CHECK(mm({2, 1, 2, 3}, {6, 3, 4}) == Shape{2, 6, 2, 4});
  CHECK(mm({3}, {7, 3, 4}) == Shape{7, 4});
  CHECK(mm({7, 2, 3}, {3}) == Shape{7, 2});
}

TEST_CASE("backends: ref is always there and can be forced", "[ir]") {
  CHECK(ref_backend().name() == "ref");
  BackendOverride o(ref_backend());
  CHECK(cpu_backend().name() == "ref");
  CHECK((tensor({1., 2.}) * 2).sum().item<double>() == 6);
}
