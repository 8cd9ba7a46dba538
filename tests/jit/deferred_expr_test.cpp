// Deferred expressions (dsl/deferred_expr.h): a tree over realized leaves
// whose launches are recorded becomes a tensor without IR, and evaluates
// through the expression type's cache. Values must equal the IR path's
// whatever changes between calls (leaves, numbers, views, storage sharing),
// and laziness must be kept (fusion across statements, in-place writes).
#include "tests/support/tensor_testing.h"

#include <thread>

#include "codegen/cpu/cpu_backend.h"
#include "dsl/deferred_expr.h"
#include "tessel/config.h"

using namespace tessel;
using namespace tessel::testing;

namespace {

Tensor realized(std::vector<double> v, const Shape& s, DType t = DType::f64) {
  Tensor x = make(v, s, t);
  x.eval();
  return x;
}

bool is_deferred(const Tensor& t) { return t.impl_ptr()->deferred != nullptr; }
// Deferred with recorded launches (not only recording its first evaluation).
bool is_replaying(const Tensor& t) { return dynamic_cast<const ReplayDeferred*>(t.impl_ptr()->deferred.get()); }

}  // namespace

TEST_CASE("deferred: new leaves, numbers, views and shared storage give the IR path's values", "[jit][deferred]") {
  uint64_t seed = test_seed("deferred leaves");
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(-3, 3);
  auto fill = [&](int64_t n) {
    std::vector<double> v(static_cast<size_t>(n));
    for (auto& x : v) x = u(g);
    return v;
  };
  for (int round = 0; round < 40; ++round) {
    int64_t n = 1 + static_cast<int64_t>(g() % 9);
    Tensor big = realized(fill(3 * n), {3, n});
    Tensor a = round % 3 == 0 ? big[1] : realized(fill(n), {n});        // a view at an offset, or its own memory
    Tensor b = round % 4 == 0 ? a : realized(fill(n), {n});             // sometimes the same tensor twice
    Tensor c = round % 5 == 0 ? big.t()[0] : realized(fill(n), {n});   // a strided view
    if (round % 5 == 0) c = realized(fill(3), {3})[0].expand({n});     // broadcast (stride 0)
    double k = u(g);
    int64_t e = 1 + static_cast<int64_t>(g() % 3);
    Tensor got = pow(relu(a * b + c) * k - 1, e);
    Tensor want;
    {
      BackendOverride r(ref_backend());
      want = pow(relu(a * b + c) * k - 1, e);
    }
    INFO("seed " << seed << " round " << round << " n " << n << " k " << k << " e " << e);
    require_close(vals(got), vals(want), 1e-12, 1e-12);
  }
}

TEST_CASE("deferred: pow with an integer exponent over fresh leaves each call", "[jit][deferred]") {
  for (int k = 0; k < 4; ++k) {
    NoGradGuard g;
    Tensor x = realized({1.0 + k, 2.0, -3.0}, {3});
    Tensor y = pow(x, 3);
    CHECK(vals(y) == std::vector<double>{(1.0 + k) * (1.0 + k) * (1.0 + k), 8.0, -27.0});
  }
}

TEST_CASE("deferred: a tree recorded over a plan made with other constants uses its own", "[jit][deferred]") {
  // x.pow(2) (no expression template) plans the same DAG form as pow(x, 3).
  Tensor x = realized({2, 3}, {2});
  CHECK(vals(x.pow(2)) == std::vector<double>{4, 9});
  for (int i = 0; i < 3; ++i) CHECK(vals(pow(x, 3)) == std::vector<double>{8, 27});
}

#if TESSEL_HAS_LLVM
// The typed path needs a backend that records launches: the compiled one.

TEST_CASE("deferred: the second conversion of a tree over realized leaves builds no IR", "[jit][deferred]") {
  BackendOverride o(*cpu_jit_backend());
  Tensor a = realized({1, -2, 3}, {3}), b = realized({4, 5, -6}, {3});
  Tensor first = relu(a * b) + 1;  // a miss: IR now, launches recorded when evaluated
  CHECK(is_deferred(first));
  CHECK_FALSE(is_replaying(first));
  CHECK(vals(first) == std::vector<double>{5, 1, 1});
  Tensor second = relu(a * b) + 1;
  CHECK(is_replaying(second));
  CHECK(second.impl_ptr()->node == nullptr);
  CHECK(vals(second) == std::vector<double>{5, 1, 1});
  CHECK_FALSE(is_deferred(second));
}

TEST_CASE("deferred: a recorded tree is one kernel launch and no realization", "[jit][deferred]") {
  BackendOverride o(*cpu_jit_backend());
  Tensor a = realized({1, 2}, {2}, DType::f32), b = realized({3, 4}, {2}, DType::f32);
  for (int i = 0; i < 2; ++i) Tensor(relu(a * b - 5) * a).eval();  // record
  reset_cpu_jit_stats();
  Tensor y = relu(a * b - 5) * a;
  y.eval();
  CpuJitStats s = cpu_jit_stats();
  CHECK(s.kernels_launched == 1);
  CHECK(s.realizations == 0);  // no schedule, no plan lookup
  CHECK(s.kernels_compiled == 0);
  CHECK(vals(y) == std::vector<double>{0, 6});
}

TEST_CASE("deferred: the IR is built when another op needs it, so fusion is kept", "[jit][deferred]") {
  BackendOverride o(*cpu_jit_backend());
  Tensor a = realized({1, 2, 3}, {3}, DType::f32), b = realized({2, 2, 2}, {3}, DType::f32);
  for (int i = 0; i < 2; ++i) Tensor(a * b).eval();  // record a * b
  Tensor h = a * b;
  REQUIRE(is_replaying(h));
  Tensor y = h + 1;  // reads h: h is lowered and y fuses it
  CHECK_FALSE(is_deferred(h));
  CHECK_FALSE(h.is_realized());
  CHECK(h.shape() == Shape({3}));
  CHECK(vals(y) == std::vector<double>{3, 5, 7});
  CHECK(vals(h) == std::vector<double>{2, 4, 6});
}

TEST_CASE("deferred: an in-place write to a leaf evaluates the tree first", "[jit][deferred]") {
  BackendOverride o(*cpu_jit_backend());
  Tensor a = realized({1, 2, 3}, {3});
  for (int i = 0; i < 2; ++i) Tensor(a * 2).eval();
  Tensor y = a * 2;
  REQUIRE(is_replaying(y));
  a += 10;  // y keeps the old a * 2, as on the IR path
  CHECK(vals(y) == std::vector<double>{2, 4, 6});
  CHECK(vals(a) == std::vector<double>{11, 12, 13});
}

TEST_CASE("deferred: leaves that need a gradient take the IR path", "[jit][deferred]") {
  BackendOverride o(*cpu_jit_backend());
  Tensor w = realized({1, 2}, {2});
  w.requires_grad_();
  Tensor a = realized({3, 4}, {2});
  for (int i = 0; i < 2; ++i) {
    Tensor y = a * w + 1;
    CHECK_FALSE(is_deferred(y));
    CHECK(y.requires_grad());
  }
  NoGradGuard g;  // without gradients it may defer
  for (int i = 0; i < 2; ++i) Tensor(a * w + 1).eval();
  Tensor y = a * w + 1;
  CHECK(is_replaying(y));
  CHECK_FALSE(y.requires_grad());
  CHECK(vals(y) == std::vector<double>{4, 9});
}

TEST_CASE("deferred: a tree made under one backend and evaluated under another", "[jit][deferred]") {
  Tensor a = realized({1, 2}, {2});
  Tensor y;
  {
    BackendOverride o(*cpu_jit_backend());
    for (int i = 0; i < 2; ++i) Tensor(a - 3).eval();
    y = a - 3;
    REQUIRE(is_replaying(y));
  }
  BackendOverride r(ref_backend());
  CHECK(vals(y) == std::vector<double>{-2, -1});
}

TEST_CASE("deferred: threads recording and replaying one expression type at once", "[jit][deferred]") {
  // Each thread has its own leaves (some shapes shared, so entries are shared
  // across threads); every value must be its own thread's.
  constexpr int kThreads = 4, kCalls = 150;
  std::vector<int> wrong(kThreads, 0);
  std::vector<std::thread> pool;
  for (int t = 0; t < kThreads; ++t)
    pool.emplace_back([t, &wrong] {
      BackendOverride o(*cpu_jit_backend());
      for (int i = 0; i < kCalls; ++i) {
        int64_t n = 1 + (t + i) % 5;
        std::vector<double> av(static_cast<size_t>(n)), bv(static_cast<size_t>(n));
        for (int64_t j = 0; j < n; ++j) {
          av[static_cast<size_t>(j)] = t * 100 + i + j;
          bv[static_cast<size_t>(j)] = j - 2;
        }
        Tensor a = realized(av, {n}), b = realized(bv, {n});
        Tensor y = relu(a * b) + t;
        std::vector<double> got = vals(y);
        for (int64_t j = 0; j < n; ++j) {
          double want = std::max(0.0, av[static_cast<size_t>(j)] * bv[static_cast<size_t>(j)]) + t;
          if (got[static_cast<size_t>(j)] != want) ++wrong[static_cast<size_t>(t)];
        }
      }
    });
  for (auto& th : pool) th.join();
  CHECK(wrong == std::vector<int>(kThreads, 0));
}

#endif  // TESSEL_HAS_LLVM
