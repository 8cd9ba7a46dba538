// var, std, logsumexp, norm, max/min with indices and argmin: values
// against PyTorch's, worked out by hand, and the gradient routing of the
// values returned with indices.
#include "tests/support/tensor_testing.h"

#include <cmath>
#include <limits>

#include "dsl/reductions.h"

using namespace tessel;
using namespace tessel::testing;

namespace {
Tensor rows() { return tensor({{1.0, 2.0, 3.0, 4.0}, {2.0, 4.0, 4.0, 4.0}}); }
constexpr double kInf = std::numeric_limits<double>::infinity();
}  // namespace

TEST_CASE("var and std over a dim, unbiased by default as torch", "[reduce]") {
  // torch.var(x, 1) = [5/3, 1]; correction=0 gives [1.25, 0.75]
  require_close(vals(rows().var({1})), {5.0 / 3, 1.0}, 1e-6);
  require_close(vals(rows().var({1}, 0)), {1.25, 0.75}, 1e-6);
  require_close(vals(rows().var({1}, false)), {1.25, 0.75}, 1e-6);
  require_close(vals(rows().var({1}, true)), {5.0 / 3, 1.0}, 1e-6);
  require_close(vals(rows().std({1})), {std::sqrt(5.0 / 3), 1.0}, 1e-6);
  require_close(vals(std_dev(rows(), {-1}, 0.0)), {std::sqrt(1.25), std::sqrt(0.75)}, 1e-6);
  CHECK(dims(rows().var({1})) == std::vector<int64_t>{2});
  CHECK(rows().var({1}).dtype() == DType::f32);
}

TEST_CASE("var over everything and over dim 0 with keepdim", "[reduce]") {
  Tensor all = rows().var();  // mean 3, squared deviations add to 10
  CHECK(all.dim() == 0);
  CHECK(all.item<double>() == Approx(10.0 / 7));
  Tensor cols = var(rows(), {0}, 1.0, true);
  CHECK(dims(cols) == std::vector<int64_t>{1, 4});
  require_close(vals(cols), {0.5, 2.0, 0.5, 0.0}, 1e-6);
  // One element with correction 1: 0 / 0, NaN as torch.
  CHECK(std::isnan(tensor({3.0}).var().item<double>()));
}

TEST_CASE("var is two-pass: values near 1e8 with a small spread keep their digits", "[reduce]") {
  // 1e8 + {1, 2, 3, 4}: mean 1e8 + 2.5, squared deviations 5, unbiased 5/3.
  // E[x^2] - E[x]^2 would lose every digit here (x^2 ~ 1e16 is past 2^53).
  Tensor x = make({1e8 + 1, 1e8 + 2, 1e8 + 3, 1e8 + 4}, Shape({1, 4}));
  CHECK(x.var({1}).item<double>() == 5.0 / 3);
  CHECK(x.var({1}, 0).item<double>() == 1.25);
  CHECK(x.std({1}, 0).item<double>() == std::sqrt(1.25));
}

TEST_CASE("logsumexp is stable and keeps -inf and +inf rows", "[reduce]") {
  Tensor x = tensor({{0.0, 0.0}, {1000.0, 1000.0}, {-INFINITY, -INFINITY}, {INFINITY, 0.0}});
  std::vector<double> v = vals(logsumexp(x, {1}));
  REQUIRE(v.size() == 4);
  CHECK(v[0] == Approx(std::log(2.0)));
  CHECK(v[1] == Approx(1000.0 + std::log(2.0)));
  CHECK(v[2] == -kInf);
  CHECK(v[3] == kInf);
  Tensor k = make({1, 2, 3, 4, 5, 6}, Shape({2, 3})).logsumexp({0}, true);
  CHECK(dims(k) == std::vector<int64_t>{1, 3});
  require_close(vals(k), {4 + std::log1p(std::exp(-3.0)), 5 + std::log1p(std::exp(-3.0)),
                          6 + std::log1p(std::exp(-3.0))});
  CHECK(logsumexp(make({1, 2, 3}, Shape({3})), {}).item<double>() == Approx(3 + std::log(1 + std::exp(-1.0) + std::exp(-2.0))));
}

TEST_CASE("the gradient of a 2-norm or 3-norm of zeros is zero, as torch's", "[reduce]") {
  for (double p : {2.0, 3.0}) {
    INFO("p = " << p);
    Tensor z = tensor({{0., 0.}, {3., -4.}});
    z.requires_grad_(true);
    Tensor n = z.norm(p, {1});
    CHECK(vals(n)[0] == 0);
    n.sum().backward();
    std::vector<double> g = vals(z.grad());
    CHECK(g[0] == 0);
    CHECK(g[1] == 0);
    if (p == 2) {
      CHECK(g[2] == Approx(0.6));
      CHECK(g[3] == Approx(-0.8));
    }
  }
}

TEST_CASE("norm for p = 2, 1, inf, 0 and 3", "[reduce]") {
  Tensor x = make({3, -4, 0, 0}, Shape({2, 2}));
  CHECK(norm(x).item<double>() == 5);
  CHECK(vals(norm(x, 2.0, {1})) == std::vector<double>{5, 0});
  CHECK(vals(x.norm(1.0, {1})) == std::vector<double>{7, 0});
  CHECK(vals(x.norm(INFINITY, {1})) == std::vector<double>{4, 0});
  CHECK(vals(x.norm(-INFINITY, {0})) == std::vector<double>{0, 0});
  CHECK(vals(x.norm(0.0, {1}, true)) == std::vector<double>{2, 0});
  CHECK(dims(x.norm(0.0, {1}, true)) == std::vector<int64_t>{2, 1});
  CHECK(x.norm(3.0).item<double>() == Approx(std::cbrt(91.0)));
}

TEST_CASE("max_with_indices and min_with_indices give the first index on ties", "[reduce]") {
  Tensor x = tensor({{1.0, 3.0, 3.0}, {5.0, 2.0, 5.0}});
  auto [v, i] = x.max_with_indices(1);
  CHECK(vals(v) == std::vector<double>{3, 5});
  CHECK(ivals(i) == std::vector<int64_t>{1, 0});
  CHECK(i.dtype() == DType::i64);
  auto [mv, mi] = x.min_with_indices(0, true);
  CHECK(dims(mv) == std::vector<int64_t>{1, 3});
  CHECK(vals(mv) == std::vector<double>{1, 2, 3});
  CHECK(ivals(mi) == std::vector<int64_t>{0, 1, 0});
  // torch.max(x, 1) on ints keeps the dtype; NaN wins as torch's max does.
  auto [iv, ii] = tensor({{7, -2, 7}}).max_with_indices(-1);
  CHECK(ivals(iv) == std::vector<int64_t>{7});
  CHECK(ivals(ii) == std::vector<int64_t>{0});
  auto [nv, ni] = tensor({1.0, NAN, 5.0}).max_with_indices(0);
  CHECK(std::isnan(nv.item<double>()));
  CHECK(ni.item<int64_t>() == 1);
  // The values-only max(dim) keeps working beside it.
  CHECK(vals(x.max(1)) == std::vector<double>{3, 5});
}

TEST_CASE("argmin over a dim and over the flattened tensor", "[reduce]") {
  Tensor x = tensor({{2.0, 1.0, 1.0}, {0.5, 9.0, -3.0}});
  CHECK(ivals(x.argmin(1)) == std::vector<int64_t>{1, 2});
  CHECK(ivals(argmin(x, 0, true)) == std::vector<int64_t>{1, 0, 1});
  CHECK(x.argmin().item<int64_t>() == 5);
  int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  Tensor ints = from_vector<int64_t>({hi, 4, lo, lo}, Shape({4}));
  CHECK(ints.argmin(0).item<int64_t>() == 2);
  CHECK(from_vector<int64_t>({lo, hi, hi}, Shape({3})).argmin(0).item<int64_t>() == 0);
  CHECK(Tensor(tensor({1, 0, 0}) > 0).argmin(0).item<int64_t>() == 1);
  CHECK(tensor({3.0, NAN, NAN}).argmin(0).item<int64_t>() == 1);
}

TEST_CASE("the values of max_with_indices send their gradient to the index only", "[reduce]") {
  Tensor x = make({1, 3, 3, 5, 2, 5}, Shape({2, 3})).requires_grad_();
  x.max_with_indices(1).values.sum().backward();
  CHECK(vals(x.grad()) == std::vector<double>{0, 1, 0, 1, 0, 0});
  Tensor y = make({1, 3, 3, 5, 2, 5}, Shape({2, 3})).requires_grad_();
  y.max(1).sum().backward();  // max(dim) splits ties, unchanged
  CHECK(vals(y.grad()) == std::vector<double>{0, 0.5, 0.5, 0.5, 0, 0.5});
  Tensor z = make({1, 1, 3}, Shape({3})).requires_grad_();
  Tensor(z.min_with_indices(0).values * 2.0).backward();
  CHECK(vals(z.grad()) == std::vector<double>{2, 0, 0});
}
