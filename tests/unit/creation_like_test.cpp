// linspace, randint, the *_like factories, flip, take_along_dim, allclose and
// equal: exact values as PyTorch gives them (worked out by hand), on the
// default backend and on ref, their gradients and their errors.
#include "tests/support/tensor_testing.h"

#include <cmath>
#include <limits>

#include "codegen/cpu/cpu_backend.h"

using namespace tessel;
using namespace tessel::testing;

TEST_CASE("linspace: both ends included, the last value exactly `end`", "[creation]") {
  CHECK(vals(linspace(0, 1, 5)) == std::vector<double>{0, 0.25, 0.5, 0.75, 1});
  // From both ends as torch: the last value is 0.7 exactly, not 0.1 + 6 * 0.1.
  std::vector<double> v = vals(linspace(0.1, 0.7, 7, DType::f64));
  CHECK(v.size() == 7);
  CHECK(v[0] == 0.1);
  CHECK(v[6] == 0.7);
  CHECK(std::abs(v[3] - 0.4) < 1e-15);
  CHECK(vals(linspace(3, -3, 3)) == std::vector<double>{3, 0, -3});
  CHECK(vals(linspace(2.5, 9, 1)) == std::vector<double>{2.5});
  CHECK(linspace(0, 1, 0).numel() == 0);
  CHECK(ivals(linspace(0, 10, 6, DType::i64)) == std::vector<int64_t>{0, 2, 4, 6, 8, 10});
  BackendOverride r(ref_backend());
  CHECK(vals(linspace(0, 1, 5)) == std::vector<double>{0, 0.25, 0.5, 0.75, 1});
}

TEST_CASE("linspace with negative steps is a ValueError", "[creation][error]") {
  CHECK_THROWS_MATCHES(linspace(0, 1, -2), ValueError, Catch::Matchers::Message("linspace: steps must be >= 0, got -2"));
}

TEST_CASE("randint: from low to high exclusive, int64, every value drawn, seeded", "[creation][random]") {
  manual_seed(7);
  Tensor a = randint(-3, 4, {4000});
  CHECK(a.dtype() == DType::i64);
  std::vector<int64_t> v = ivals(a);
  std::vector<int> count(7, 0);
  for (int64_t x : v) {
    REQUIRE(x >= -3);
    REQUIRE(x < 4);
    ++count[static_cast<size_t>(x + 3)];
  }
  for (int c : count) {  // 4000 / 7 = 571 expected; 5 sigma is about 110
    CHECK(c > 460);
    CHECK(c < 690);
  }
  manual_seed(7);
  CHECK(ivals(randint(-3, 4, {4000})) == v);
  CHECK(randint(0, 5, {2, 3}, DType::i32).dtype() == DType::i32);
  CHECK(ivals(randint(9, 10, {3})) == std::vector<int64_t>{9, 9, 9});
}

TEST_CASE("randint errors name the bounds and the dtype", "[creation][error]") {
  CHECK_THROWS_MATCHES(randint(5, 5, {2}), ValueError,
                       Catch::Matchers::Message("randint: high (5) must be greater than low (5)"));
  CHECK_THROWS_MATCHES(randint(0, 5, {2}, DType::f32), DTypeError,
                       Catch::Matchers::Message("randint: needs an integer dtype (i64 or i32), got f32"));
  CHECK_THROWS_MATCHES(randint(0, int64_t{1} << 40, {2}, DType::i32), ValueError,
                       Catch::Matchers::Message("randint: [0, 1099511627776) does not fit in i32; use DType::i64"));
}

TEST_CASE("zeros_like, ones_like, full_like, rand_like, randn_like keep shape, dtype and device", "[creation]") {
  Tensor x = tensor({{1, 2, 3}, {4, 5, 6}});  // i64
  CHECK(zeros_like(x).dtype() == DType::i64);
  CHECK(dims(zeros_like(x)) == std::vector<int64_t>{2, 3});
  CHECK(ivals(zeros_like(x)) == std::vector<int64_t>(6, 0));
  CHECK(vals(ones_like(x, DType::f64)) == std::vector<double>(6, 1.0));
  CHECK(ones_like(x, DType::f64).dtype() == DType::f64);
  CHECK(vals(full_like(tensor({1., 2.}), 2.5)) == std::vector<double>{2.5, 2.5});
  Tensor f = rand({3, 4});
  Tensor r = rand_like(f), n = randn_like(f, DType::f64);
  CHECK(dims(r) == std::vector<int64_t>{3, 4});
  CHECK(r.dtype() == DType::f32);
  CHECK(n.dtype() == DType::f64);
  for (double v : vals(r)) CHECK((v >= 0 && v < 1));
  CHECK_THROWS_AS(rand_like(x), DTypeError);  // integers have no uniform draw, as torch
}

TEST_CASE("flip reverses each named dim, its gradient is the flipped gradient", "[indexing][autograd]") {
  auto g = [] { return tensor({{0., 1., 2.}, {3., 4., 5.}}); };
  CHECK(vals(flip(g(), {1})) == std::vector<double>{2, 1, 0, 5, 4, 3});
  CHECK(vals(flip(g(), {0})) == std::vector<double>{3, 4, 5, 0, 1, 2});
  CHECK(vals(flip(g(), {0, -1})) == std::vector<double>{5, 4, 3, 2, 1, 0});
  CHECK(vals(flip(g(), {})) == std::vector<double>{0, 1, 2, 3, 4, 5});
  {
    BackendOverride r(ref_backend());
    CHECK(vals(flip(g(), {0, 1})) == std::vector<double>{5, 4, 3, 2, 1, 0});
  }
  Tensor x = g();
  x.requires_grad_(true);
  (flip(x, {1}) * tensor({{1., 2., 3.}, {4., 5., 6.}})).sum().backward();
  CHECK(vals(x.grad()) == std::vector<double>{3, 2, 1, 6, 5, 4});
  CHECK_THROWS_MATCHES(flip(g(), {1, -1}), ValueError,
                       Catch::Matchers::Message("flip: dim 1 appears more than once in the dims"));
  CHECK_THROWS_AS(flip(g(), {2}), IndexError);
}

TEST_CASE("flip of a computed value is one kernel with its reader", "[indexing]") {
  Tensor x = rand({16, 9});
  x.eval();
  reset_cpu_jit_stats();
  Tensor y = Tensor(flip(Tensor(x * 2.0).relu(), {1}) + 1.0);
  y.eval();
  if (cpu_backend().name() == "cpu") CHECK(cpu_jit_stats().kernels_launched == 1);
  std::vector<double> xv = vals(x), yv = vals(y);
  for (size_t i = 0; i < 16; ++i)
    for (size_t j = 0; j < 9; ++j) CHECK(yv[i * 9 + j] == static_cast<double>(std::max(0.0f, 2.0f * static_cast<float>(xv[i * 9 + 8 - j])) + 1.0f));
}

TEST_CASE("take_along_dim broadcasts the other dims and gathers along dim", "[indexing][autograd]") {
  Tensor s = tensor({{10., 30., 20.}, {5., 4., 6.}});
  CHECK(vals(take_along_dim(s, s.argmax(1, true), 1)) == std::vector<double>{30, 6});
  // idx [1, 2] broadcasts over s's two rows.
  CHECK(vals(take_along_dim(s, tensor({{2, 0}}), 1)) == std::vector<double>{20, 10, 6, 5});
  // No dim: both flattened.
  CHECK(vals(take_along_dim(s, tensor({5, 0, 1}))) == std::vector<double>{6, 10, 30});
  Tensor x = s.detach();
  x.requires_grad_(true);
  take_along_dim(x, tensor({{2, 2}, {0, 1}}), 1).sum().backward();
  CHECK(vals(x.grad()) == std::vector<double>{0, 0, 2, 1, 1, 0});
  CHECK_THROWS_AS(take_along_dim(s, tensor({{3}}), 1), IndexError);
  CHECK_THROWS_MATCHES(take_along_dim(s, tensor({{1.}}), 1), DTypeError,
                       Catch::Matchers::Message("take_along_dim: the index must be an integer tensor, got f32"));
  CHECK_THROWS_AS(take_along_dim(s, tensor({1}), 1), ShapeError);
}

TEST_CASE("allclose and equal as torch's", "[compare]") {
  Tensor a = tensor({1., 2., 3.});
  CHECK(allclose(a, tensor({1., 2., 3.00001})));
  CHECK_FALSE(allclose(a, tensor({1., 2., 3.001})));
  CHECK(allclose(a, tensor({1., 2., 3.001}), 1e-3));
  CHECK(allclose(a, tensor({1.1, 2., 3.}), 0, 0.2));
  CHECK(allclose(a, tensor({2.})) == false);
  CHECK(allclose(tensor({2., 2.}), tensor({2.})));  // broadcasts
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  CHECK(allclose(tensor({inf, -inf}), tensor({inf, -inf})));
  CHECK_FALSE(allclose(tensor({inf}), tensor({-inf})));
  CHECK_FALSE(allclose(tensor({nan}), tensor({nan})));
  CHECK(allclose(tensor({nan, 1.}), tensor({nan, 1.}), 1e-5, 1e-8, true));
  CHECK(allclose(tensor({1, 2}), tensor({1., 2.})));
  CHECK_THROWS_AS(allclose(a, tensor({1., 2.})), ShapeError);
  CHECK(equal(a, tensor({1., 2., 3.})));
  CHECK_FALSE(equal(a, tensor({1., 2., 3.00001})));
  CHECK_FALSE(equal(a, tensor({{1., 2., 3.}})));  // shapes differ
  CHECK_FALSE(equal(tensor({nan}), tensor({nan})));
}
