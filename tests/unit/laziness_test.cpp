// Laziness never changes a result: a pending value computed from memory that
// is later written in place still sees the old bytes.
#include "tests/support/tensor_testing.h"

using namespace tessel;
using namespace tessel::testing;

TEST_CASE("ops build IR and nothing runs until a value is needed", "[lazy]") {
  Tensor x = tensor({1., 2.});
  Tensor y = x * 2 + 1;
  CHECK(!y.is_realized());
  CHECK(dims(y) == std::vector<int64_t>{2});  // shape is known without running
  CHECK(y.dtype() == DType::f32);
  CHECK(!y.is_realized());
  CHECK(vals(y) == std::vector<double>{3, 5});
  CHECK(y.is_realized());
}

TEST_CASE("eval() realizes and returns the same tensor", "[lazy]") {
  Tensor y = tensor({1., 2.}).exp();
  const Tensor& e = y.eval();
  CHECK(&e == &y);
  CHECK(y.is_realized());
}

TEST_CASE("y = x * 2 then x += 1 leaves y at the old value", "[lazy]") {
  Tensor x = tensor({1., 2., 3.});
  Tensor y = x * 2;
  x += 1;
  CHECK(vals(x) == std::vector<double>{2, 3, 4});
  CHECK(vals(y) == std::vector<double>{2, 4, 6});
}

TEST_CASE("a write through an element view keeps pending readers at the old value", "[lazy]") {
  Tensor x = tensor({1., 2., 3.});
  Tensor s = x.sum();
  Tensor y = x * x;
  x[0] = 10;
  CHECK(s.item<double>() == 6);
  CHECK(vals(y) == std::vector<double>{1, 4, 9});
  CHECK(vals(x) == std::vector<double>{10, 2, 3});
}

TEST_CASE("a write through data() keeps pending readers at the old value", "[lazy]") {
  Tensor x = tensor({1., 2.});
  Tensor y = x + 1;
  x.data() *= 0;
  CHECK(vals(y) == std::vector<double>{2, 3});
}

TEST_CASE("a pending reader of a view of x sees x's old value", "[lazy]") {
  Tensor x = tensor({{1., 2.}, {3., 4.}});
  Tensor y = x.t() * 10;  // reads x through a transposed view
  x.fill_(0);
  CHECK(vals(y) == std::vector<double>{10, 30, 20, 40});
}

TEST_CASE("fill_ and copy_ keep pending readers at the old value", "[lazy]") {
  Tensor x = tensor({1., 2.});
  Tensor y = x * 3;
  x.copy_(tensor({7., 8.}));
  Tensor z = x * 3;
  x.fill_(0);
  CHECK(vals(y) == std::vector<double>{3, 6});
  CHECK(vals(z) == std::vector<double>{21, 24});
}

TEST_CASE("in-place on a pending tensor extends its graph, older readers keep their value", "[lazy]") {
  Tensor a = tensor({1., 2.});
  Tensor x = a * 2;  // pending
  Tensor y = x + 1;  // reads the old x
  x += 10;
  CHECK(!x.is_realized());
  CHECK(vals(x) == std::vector<double>{12, 14});
  CHECK(vals(y) == std::vector<double>{3, 5});
}

TEST_CASE("while (X.abs().sum() > 1) X /= 2 halves until small", "[lazy]") {
  Tensor X = tensor({{4., -4.}, {2., 6.}});  // |X| sums to 16
  int steps = 0;
  while (X.abs().sum() > 1) {
    X /= 2;
    ++steps;
  }
  CHECK(steps == 4);  // 16 -> 8 -> 4 -> 2 -> 1
  CHECK(vals(X) == std::vector<double>{0.25, -0.25, 0.125, 0.375});
}

TEST_CASE("control flow on a pending scalar that grows each step", "[lazy]") {
  Tensor s = tensor({3., 5.}).sum();  // pending
  int steps = 0;
  while (s > 1) {
    s /= 2;
    ++steps;
  }
  CHECK(steps == 3);
  CHECK(s.item<double>() == 1);
}

TEST_CASE("a long chain of in-place updates on a pending tensor", "[lazy]") {
  Tensor x = tensor({1.}) * 1;
  for (int i = 0; i < 2000; ++i) x += 1;
  CHECK(x.item<double>() == 2001);
}

TEST_CASE("realize() computes several tensors in one go", "[lazy]") {
  Tensor a = tensor({1., 2.});
  Tensor shared = a.exp();
  Tensor p = shared + 1, q = shared * 2;
  realize({p, q});
  CHECK(p.is_realized());
  CHECK(q.is_realized());
  CHECK(vals(q) == std::vector<double>{2 * static_cast<double>(std::exp(1.0f)), 2 * static_cast<double>(std::exp(2.0f))});
}

TEST_CASE("the same tensor used twice is one input of the graph", "[lazy]") {
  Tensor x = tensor({1., 2.});
  Tensor y = x * x + x;
  std::string ir = ir::to_string(y.node());
  size_t inputs = 0;
  for (size_t p = ir.find("input"); p != std::string::npos; p = ir.find("input", p + 1)) ++inputs;
  CHECK(inputs == 1);
  CHECK(vals(y) == std::vector<double>{2, 6});
}

TEST_CASE("a view's later write is seen by a view, not by a computed value", "[lazy]") {
  Tensor x = tensor({1., 2.});
  Tensor view = x.reshape({2, 1});
  Tensor computed = x * 1;
  x += 1;
  CHECK(vals(view) == std::vector<double>{2, 3});      // a view sees the new memory
  CHECK(vals(computed) == std::vector<double>{1, 2});  // a value does not
}

TEST_CASE("a pending expression object is evaluated when converted", "[lazy]") {
  Tensor x = tensor({1., 2.});
  auto e = x * 2;  // an expression object
  Tensor y = e;    // lowered to IR now
  x += 5;
  CHECK(vals(y) == std::vector<double>{2, 4});
  // The expression holds x by handle: evaluated after the write it would read
  // the new values, which is an error (tests/error/expression_errors_test.cpp).
  CHECK_THROWS_AS(vals(e), ValueError);
}

TEST_CASE("item() and bool() realize", "[lazy]") {
  Tensor s = tensor({1., 2.}).sum();
  CHECK(static_cast<bool>(s > 2));
  CHECK(!static_cast<bool>(s > 3));
  CHECK(s.item<float>() == 3.0f);
  CHECK(s.item<int64_t>() == 3);
  CHECK(s.item<bool>());
}

TEST_CASE("pending tensors that die before realization cost nothing", "[lazy]") {
  Tensor x = tensor({1.});
  for (int i = 0; i < 500; ++i) {
    Tensor tmp = x * i;  // never realized
    (void)tmp;
  }
  x += 1;
  CHECK(x.item<double>() == 2);
}

TEST_CASE("a write through a view of a pending tensor reaches the tensor", "[lazy]") {
  Tensor y = ones({2, 2}) * 2;  // pending
  Tensor v = y.t();             // a view of y, as in PyTorch
  v[0][1] = 5;                  // y[1][0]
  CHECK(vals(y) == std::vector<double>{2, 2, 5, 2});
  CHECK(vals(v) == std::vector<double>{2, 5, 2, 2});
}

TEST_CASE("in-place on a reshaped view of a pending tensor reaches the tensor", "[lazy]") {
  Tensor y = ones({2, 2}) * 2;
  Tensor z = y.reshape({4});
  z += 1;
  CHECK(vals(z) == std::vector<double>{3, 3, 3, 3});
  CHECK(vals(y) == std::vector<double>{3, 3, 3, 3});
}

TEST_CASE("a view of a pending tensor shares memory once realized", "[lazy]") {
  Tensor y = arange(6, DType::f64) * 1;
  Tensor v = y.reshape({2, 3}).t();
  Tensor before = v * 1;  // reads the old values
  y[5] = 100;
  CHECK(vals(v) == std::vector<double>{0, 3, 1, 4, 2, 100});
  CHECK(vals(before) == std::vector<double>{0, 3, 1, 4, 2, 5});
}

TEST_CASE("a view of a pending tensor computes the base once", "[lazy]") {
  Tensor y = ones({3}) + 1;
  Tensor v = y.reshape({3, 1});
  CHECK(vals(v) == std::vector<double>{2, 2, 2});
  CHECK(y.is_realized());
}

TEST_CASE("a pending reader of a tensor written through a view keeps its value", "[lazy]") {
  Tensor y = ones({2, 2}) * 3;  // pending
  y.reshape({-1})[1] = 7;       // realizes y, writes through the view
  Tensor z = y + 1;             // pending reader of y's memory
  y.fill_(0);
  CHECK(vals(z) == std::vector<double>{4, 8, 4, 4});
  CHECK(vals(y) == std::vector<double>{0, 0, 0, 0});
}

TEST_CASE("a view of a copying reshape of a pending view shares the copy", "[lazy]") {
  // v = t.t().reshape({-1}).reshape({3, 2}): the first reshape must copy; v is
  // a view of that copy, so writes through v's own views reach v (as in PyTorch).
  Tensor t = arange(6, DType::f64).reshape({2, 3});
  Tensor v = t.t().reshape({-1}).reshape({3, 2});
  v.reshape({-1})[1] = 100;
  CHECK(vals(v) == std::vector<double>{0, 100, 1, 4, 2, 5});
  CHECK(vals(t) == std::vector<double>{0, 1, 2, 3, 4, 5});
}

TEST_CASE("view() of a pending tensor checks the layout it will have", "[lazy]") {
  Tensor y = ones({2, 3}) * 2;
  CHECK(dims(y.view({3, 2})) == std::vector<int64_t>{3, 2});  // dense once computed
  CHECK_THROWS_AS(y.t().view({6}), ShapeError);                // a transposed view of it
  CHECK(!y.is_realized());                                     // nothing computed to decide
  CHECK(dims(y.t().reshape({6})) == std::vector<int64_t>{6});
}

// A filled tensor's node is a splatted constant until it is realized; from
// then on it is memory, which element writes change. Every consumer, on every
// backend, must read that memory rather than the fill value.
TEST_CASE("a filled pending tensor written element-wise is read from memory", "[lazy][inplace]") {
  Tensor a = ones({3}, DType::f64);
  Tensor v = a * 2.0;
  v.fill_(0.0);
  v[0] = -18.0;
  CHECK(vals(Tensor(v + a)) == std::vector<double>{-17, 1, 1});
  CHECK(vals(v) == std::vector<double>{-18, 0, 0});
}

TEST_CASE("a zeroed, realized tensor written element-wise sums to the written value", "[lazy][inplace]") {
  Tensor w = zeros({4}) + 0.0f;
  w.zero_();
  w.eval();
  w[2] = 5.0;
  CHECK(w.sum().item<float>() == 5.0f);
  // The same expression again (a plan replay) sees a later write too.
  w[1] = 2.0;
  CHECK(w.sum().item<float>() == 7.0f);
}
