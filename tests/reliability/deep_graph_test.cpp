// Deep lazy graphs: a loop that extends one value 100,000 times, in place or
// not, gives the right number without overflowing the stack (the DSL
// realizes past ir::kMaxPendingDepth), and a long chain of IR nodes is freed
// without recursing once per node.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>

#include "codegen/backend.h"
#include "codegen/builders.h"
#include "codegen/cpu/cpu_backend.h"
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

TEST_CASE("backward through a graph deeper than the pending limit computes each gradient once", "[reliability]") {
  // 12 residual blocks x + gelu(layer_norm(x) W + b): the early parameters'
  // gradients are deeper than ir::kMaxPendingDepth. Realized one by one, each would recompute the
  // backward chain below it (quadratic in depth; a 4-layer GPT step went
  // from 0.26 s to 9 s); realized together, each product runs once.
  const int layers = 12;
  manual_seed(3);
  std::vector<Tensor> ws, bs;
  for (int i = 0; i < layers; ++i) {
    ws.push_back(randn({8, 8}, DType::f64) * 0.3);
    bs.push_back(randn({8}, DType::f64) * 0.1);
    ws.back().eval();
    bs.back().eval();
    ws.back().requires_grad_();
    bs.back().requires_grad_();
  }
  const Tensor x0 = randn({4, 8}, DType::f64);
  auto grads = [&] {
    for (int i = 0; i < layers; ++i) ws[static_cast<size_t>(i)].set_grad(Tensor()), bs[static_cast<size_t>(i)].set_grad(Tensor());
    Tensor x = x0;
    for (int i = 0; i < layers; ++i) {
      const Tensor h = layer_norm(x, {8});
      x = x + gelu(h % ws[static_cast<size_t>(i)] + bs[static_cast<size_t>(i)]);  // a pre-norm residual block
    }
    Tensor loss = x.sum();
    loss.eval();
    reset_cpu_jit_stats();
    loss.backward();
    return std::pair{bs[0].grad().to_vector<double>(), ws[0].grad().to_vector<double>()};
  };
  const auto fused = grads();
  const CpuJitStats s = cpu_jit_stats();
  CHECK(s.realizations == 1);
  // Two products per block (the input's gradient and the weight's); the
  // forward values were kept.
  CHECK(s.matmuls <= 2 * layers);
  std::pair<std::vector<double>, std::vector<double>> ref;
  {
    BackendOverride o(ref_backend());
    ref = grads();
  }
  REQUIRE(fused.first.size() == 8);
  for (size_t i = 0; i < 8; ++i) CHECK(fused.first[i] == Approx(ref.first[i]).epsilon(1e-10).margin(1e-14));
  for (size_t i = 0; i < 64; ++i) CHECK(fused.second[i] == Approx(ref.second[i]).epsilon(1e-10).margin(1e-14));
}
