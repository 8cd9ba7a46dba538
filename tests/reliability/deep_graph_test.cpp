// Deep lazy graphs: a loop that extends one value 100,000 times, in place or
// not, gives the right number without overflowing the stack (the DSL
// realizes past ir::kMaxPendingDepth), and a long chain of IR nodes is freed
// without recursing once per node.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>

#include "codegen/builders.h"
#include "dsl/tessel.h"

using namespace tessel;

namespace {
// x_{k+1} = x_k * a + b from x_0, in doubles: the value a loop must reach.
double affine_iterate(double x, double a, double b, int n) {
  for (int i = 0; i < n; ++i) x = x * a + b;
  return x;
}
}  // namespace

TEST_CASE("x = x * 1.0001 + 1.0 a hundred thousand times gives the loop's value", "[reliability]") {
  const int n = 100000;
  Tensor x = zeros({3}, DType::f64);
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) x = x * 1.0001 + 1.0;
  double got = x[0].item<double>();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  WARN("100,000-op chain: " << seconds << " s");
  CHECK(got == Approx(affine_iterate(0, 1.0001, 1.0, n)).epsilon(1e-12));
  CHECK(x.node()->depth <= ir::kMaxPendingDepth);
}

TEST_CASE("the in-place form x *= a then x += b a hundred thousand times on a pending value", "[reliability]") {
  const int n = 100000;
  Tensor x = zeros({2}, DType::f64) + 0.5;  // pending: every write extends its graph
  for (int i = 0; i < n; ++i) {
    x *= 1.00001;
    x += 0.25;
  }
  CHECK(x.sum().item<double>() == Approx(2 * affine_iterate(0.5, 1.00001, 0.25, n)).epsilon(1e-12));
}

TEST_CASE("a 300000-node IR chain nobody realized is freed without recursion", "[reliability]") {
  ir::NodePtr leaf = ir::constant(ir::ScalarValue::of(1.0), DType::f32, Shape{4});
  ir::NodePtr n = leaf;
  for (int i = 0; i < 300000; ++i) n = ir::binary(ir::Op::Add, n, leaf);
  CHECK(n->depth == 300001);
  n.reset();  // the whole chain goes here
  CHECK(leaf.use_count() == 1);
}
