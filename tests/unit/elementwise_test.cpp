// Elementwise ops per dtype, checked against the same formula evaluated in
// the dtype's C++ type (so results must be bit-exact).
#include "tests/support/tensor_testing.h"

#include <algorithm>
#include <cmath>
#include <limits>

using namespace tessel;
using namespace tessel::testing;

namespace {

template <class T>
Tensor of(const std::vector<T>& v) {
  if constexpr (std::is_same_v<T, bool>) {
    std::vector<int64_t> w(v.begin(), v.end());
    return from_vector<int64_t>(w, {static_cast<int64_t>(v.size())}) != 0;
  } else {
    return from_vector<T>(v, {static_cast<int64_t>(v.size())});
  }
}

template <class T, class F>
std::vector<T> map1(const std::vector<T>& x, F f) {
  std::vector<T> r;
  for (T a : x) r.push_back(static_cast<T>(f(a)));
  return r;
}
template <class T, class F>
std::vector<T> map2(const std::vector<T>& x, const std::vector<T>& y, F f) {
  std::vector<T> r;
  for (size_t i = 0; i < x.size(); ++i) r.push_back(static_cast<T>(f(x[i], y[i])));
  return r;
}

template <class T>
void same(const Tensor& t, const std::vector<T>& expect) {
  REQUIRE(t.dtype() == dtype_of_v<T>);
  auto got = t.to_vector<T>();
  REQUIRE(got.size() == expect.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << ", expected " << expect[i]);
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(expect[i])) {
        CHECK(std::isnan(got[i]));
        continue;
      }
    }
    CHECK(got[i] == expect[i]);
  }
}

const std::vector<double> kX{-2.5, -1.0, 0.0, 0.5, 1.0, 3.25, 7.0};
const std::vector<double> kY{1.5, -4.0, 2.0, 0.5, -0.25, 3.0, 0.125};
const std::vector<double> kPos{0.125, 0.5, 1.0, 2.0, 3.5, 10.0, 1e-3};

template <class T>
std::vector<T> cvt(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

}  // namespace

TEMPLATE_TEST_CASE("add sub mul div on floats", "[elementwise]", float, double) {
  using T = TestType;
  auto x = cvt<T>(kX), y = cvt<T>(kY);
  Tensor a = of(x), b = of(y);
  same<T>(a + b, map2(x, y, [](T p, T q) { return p + q; }));
  same<T>(a - b, map2(x, y, [](T p, T q) { return p - q; }));
  same<T>(a * b, map2(x, y, [](T p, T q) { return p * q; }));
  same<T>(a / b, map2(x, y, [](T p, T q) { return p / q; }));
  same<T>(add(a, b), map2(x, y, [](T p, T q) { return p + q; }));
  same<T>(div(b, a), map2(y, x, [](T p, T q) { return p / q; }));
}

TEMPLATE_TEST_CASE("division by zero gives inf and nan on floats", "[elementwise]", float, double) {
  using T = TestType;
  Tensor a = of<T>({1, -1, 0}), z = of<T>({0, 0, 0});
  auto v = Tensor(a / z).template to_vector<T>();
  CHECK(v[0] == std::numeric_limits<T>::infinity());
  CHECK(v[1] == -std::numeric_limits<T>::infinity());
  CHECK(std::isnan(v[2]));
}

TEMPLATE_TEST_CASE("neg abs relu on floats", "[elementwise]", float, double) {
  using T = TestType;
  auto x = cvt<T>(kX);
  Tensor a = of(x);
  same<T>(-a, map1(x, [](T p) { return -p; }));
  same<T>(a.neg(), map1(x, [](T p) { return -p; }));
  same<T>(a.abs(), map1(x, [](T p) { return std::fabs(p); }));
  same<T>(abs(a), map1(x, [](T p) { return std::fabs(p); }));
  same<T>(a.relu(), map1(x, [](T p) { return p > 0 ? p : T(0); }));
  same<T>(relu(a), map1(x, [](T p) { return p > 0 ? p : T(0); }));
}

TEMPLATE_TEST_CASE("exp log sqrt tanh sigmoid on floats", "[elementwise]", float, double) {
  using T = TestType;
  auto x = cvt<T>(kX), p = cvt<T>(kPos);
  Tensor a = of(x), pa = of(p);
  same<T>(a.exp(), map1(x, [](T v) { return std::exp(v); }));
  same<T>(exp(a), map1(x, [](T v) { return std::exp(v); }));
  same<T>(pa.log(), map1(p, [](T v) { return std::log(v); }));
  same<T>(log(pa), map1(p, [](T v) { return std::log(v); }));
  same<T>(pa.sqrt(), map1(p, [](T v) { return std::sqrt(v); }));
  same<T>(a.tanh(), map1(x, [](T v) { return std::tanh(v); }));
  same<T>(a.sigmoid(), map1(x, [](T v) { return T(1) / (T(1) + std::exp(-v)); }));
  same<T>(sigmoid(a), map1(x, [](T v) { return T(1) / (T(1) + std::exp(-v)); }));
}

TEMPLATE_TEST_CASE("log and sqrt outside their domain", "[elementwise]", float, double) {
  using T = TestType;
  auto l = of<T>({0, -1}).log().template to_vector<T>();
  CHECK(l[0] == -std::numeric_limits<T>::infinity());
  CHECK(std::isnan(l[1]));
  CHECK(std::isnan(of<T>({-4}).sqrt().template item<double>()));
}

TEMPLATE_TEST_CASE("exact known values of transcendental ops", "[elementwise]", float, double) {
  using T = TestType;
  CHECK(of<T>({0}).exp().template item<double>() == 1.0);
  CHECK(of<T>({1}).log().template item<double>() == 0.0);
  CHECK(of<T>({0}).tanh().template item<double>() == 0.0);
  CHECK(of<T>({0}).sigmoid().template item<double>() == 0.5);
  CHECK(of<T>({16}).sqrt().template item<double>() == 4.0);
  CHECK(of<T>({-1000}).sigmoid().template item<double>() == 0.0);
  CHECK(of<T>({1000}).sigmoid().template item<double>() == 1.0);
  CHECK(of<T>({50}).tanh().template item<double>() == 1.0);
}

TEMPLATE_TEST_CASE("pow on floats: tensor and scalar exponents", "[elementwise]", float, double) {
  using T = TestType;
  auto p = cvt<T>(kPos), y = cvt<T>(kY);
  Tensor a = of(p), b = of(y);
  same<T>(a.pow(b), map2(p, y, [](T u, T v) { return std::pow(u, v); }));
  same<T>(pow(a, b), map2(p, y, [](T u, T v) { return std::pow(u, v); }));
  same<T>(a.pow(2), map1(p, [](T u) { return std::pow(u, T(2)); }));
  same<T>(pow(a, 0.5), map1(p, [](T u) { return std::pow(u, T(0.5)); }));
  CHECK(vals(of<T>({-2, 3}).pow(3)) == std::vector<double>{-8, 27});
  CHECK(vals(of<T>({-2, 3}).pow(0)) == std::vector<double>{1, 1});
}

TEMPLATE_TEST_CASE("maximum and minimum on floats propagate nan", "[elementwise]", float, double) {
  using T = TestType;
  auto x = cvt<T>(kX), y = cvt<T>(kY);
  Tensor a = of(x), b = of(y);
  same<T>(maximum(a, b), map2(x, y, [](T p, T q) { return std::max(p, q); }));
  same<T>(minimum(a, b), map2(x, y, [](T p, T q) { return std::min(p, q); }));
  T nan = std::numeric_limits<T>::quiet_NaN();
  Tensor n = of<T>({nan, 1, nan}), m = of<T>({1, nan, nan});
  for (Tensor r : {maximum(n, m), minimum(n, m), maximum(m, n)}) {
    auto v = r.template to_vector<T>();
    CHECK(std::isnan(v[0]));
    CHECK(std::isnan(v[1]));
    CHECK(std::isnan(v[2]));
  }
  CHECK(std::isnan(of<T>({nan}).relu().template item<double>()));
}

TEMPLATE_TEST_CASE("maximum and minimum with a scalar", "[elementwise]", float, double) {
  using T = TestType;
  auto x = cvt<T>(kX);
  Tensor a = of(x);
  same<T>(maximum(a, 0.5), map1(x, [](T p) { return std::max(p, T(0.5)); }));
  same<T>(minimum(a, 1), map1(x, [](T p) { return std::min(p, T(1)); }));
}

TEMPLATE_TEST_CASE("comparisons on floats", "[elementwise]", float, double) {
  using T = TestType;
  Tensor a = of<T>({1, 2, 3, std::numeric_limits<T>::quiet_NaN()}), b = of<T>({2, 2, 2, 2});
  CHECK(vals(a < b) == std::vector<double>{1, 0, 0, 0});
  CHECK(vals(a <= b) == std::vector<double>{1, 1, 0, 0});
  CHECK(vals(a > b) == std::vector<double>{0, 0, 1, 0});
  CHECK(vals(a >= b) == std::vector<double>{0, 1, 1, 0});
  CHECK(vals(a == b) == std::vector<double>{0, 1, 0, 0});
  CHECK(vals(a != b) == std::vector<double>{1, 0, 1, 1});
  CHECK(vals(2 < a) == std::vector<double>{0, 0, 1, 0});
}

TEMPLATE_TEST_CASE("add sub mul on integers are exact", "[elementwise]", int64_t, int32_t) {
  using T = TestType;
  std::vector<T> x{-7, -1, 0, 3, 100, 12345}, y{2, -3, 5, 3, -100, 7};
  Tensor a = of(x), b = of(y);
  same<T>(a + b, map2(x, y, [](T p, T q) { return p + q; }));
  same<T>(a - b, map2(x, y, [](T p, T q) { return p - q; }));
  same<T>(a * b, map2(x, y, [](T p, T q) { return p * q; }));
  same<T>(a * 3, map1(x, [](T p) { return p * 3; }));
  same<T>(10 - a, map1(x, [](T p) { return 10 - p; }));
}

TEMPLATE_TEST_CASE("neg abs relu maximum minimum on integers", "[elementwise]", int64_t, int32_t) {
  using T = TestType;
  std::vector<T> x{-7, -1, 0, 3, 100}, y{2, -3, 0, 3, 1000};
  Tensor a = of(x), b = of(y);
  same<T>(-a, map1(x, [](T p) { return -p; }));
  same<T>(a.abs(), map1(x, [](T p) { return p < 0 ? -p : p; }));
  same<T>(a.relu(), map1(x, [](T p) { return p > 0 ? p : 0; }));
  same<T>(maximum(a, b), map2(x, y, [](T p, T q) { return std::max(p, q); }));
  same<T>(minimum(a, b), map2(x, y, [](T p, T q) { return std::min(p, q); }));
}

TEMPLATE_TEST_CASE("pow on integers stays integer", "[elementwise]", int64_t, int32_t) {
  using T = TestType;
  Tensor a = of<T>({2, -3, 0, 1, 5});
  same<T>(a.pow(3), std::vector<T>{8, -27, 0, 1, 125});
  same<T>(a.pow(0), std::vector<T>{1, 1, 1, 1, 1});
  same<T>(pow(a, of<T>({10, 2, 5, 7, 1})), std::vector<T>{1024, 9, 0, 1, 5});
}

TEMPLATE_TEST_CASE("comparisons on integers", "[elementwise]", int64_t, int32_t) {
  using T = TestType;
  Tensor a = of<T>({1, 2, 3}), b = of<T>({3, 2, 1});
  CHECK(vals(a < b) == std::vector<double>{1, 0, 0});
  CHECK(vals(a == b) == std::vector<double>{0, 1, 0});
  CHECK(vals(a >= 2) == std::vector<double>{0, 1, 1});
  CHECK(vals(a != 2) == std::vector<double>{1, 0, 1});
}

TEST_CASE("int64 arithmetic beyond 2^53 is exact", "[elementwise]") {
  int64_t big = (int64_t{1} << 60) + 3;
  Tensor a = from_vector<int64_t>({big}, {1});
  CHECK((a + 2).item<int64_t>() == big + 2);
  CHECK((a - big).item<int64_t>() == 0);
  CHECK((a * 1).item<int64_t>() == big);
}

TEST_CASE("bool ops: not, and, or, add is or, mul is and", "[elementwise]") {
  Tensor a = of<bool>({true, true, false, false}), b = of<bool>({true, false, true, false});
  CHECK(vals(!a) == std::vector<double>{0, 0, 1, 1});
  CHECK(vals(logical_not(a)) == std::vector<double>{0, 0, 1, 1});
  CHECK(vals(a && b) == std::vector<double>{1, 0, 0, 0});
  CHECK(vals(a || b) == std::vector<double>{1, 1, 1, 0});
  CHECK(vals(a + b) == std::vector<double>{1, 1, 1, 0});
  CHECK(vals(a * b) == std::vector<double>{1, 0, 0, 0});
  CHECK(vals(a == b) == std::vector<double>{1, 0, 0, 1});
  CHECK(vals(a != b) == std::vector<double>{0, 1, 1, 0});
  CHECK(vals(maximum(a, b)) == std::vector<double>{1, 1, 1, 0});
  CHECK((a && b).dtype() == DType::b8);
}

TEST_CASE("logical ops on numbers treat nonzero as true", "[elementwise]") {
  Tensor a = tensor({0.0, 2.0, -1.0}), b = tensor({1, 0, 5});
  CHECK(vals(!a) == std::vector<double>{1, 0, 0});
  CHECK(vals(a && b) == std::vector<double>{0, 0, 1});
  CHECK(vals(a || b) == std::vector<double>{1, 1, 1});
}

TEST_CASE("where selects per element", "[elementwise]") {
  Tensor c = tensor({1, 0, 1, 0}) > 0;
  Tensor a = tensor({1., 2., 3., 4.}), b = tensor({-1., -2., -3., -4.});
  CHECK(vals(where(c, a, b)) == std::vector<double>{1, -2, 3, -4});
  CHECK(vals(where(c, a, 0.5)) == std::vector<double>{1, 0.5, 3, 0.5});
  CHECK(vals(where(c, 7, b)) == std::vector<double>{7, -2, 7, -4});
  CHECK(vals(where(a > 2, a, b)) == std::vector<double>{-1, -2, 3, 4});
  CHECK(ivals(where(c, tensor({1, 2, 3, 4}), tensor({0, 0, 0, 0}))) == std::vector<int64_t>{1, 0, 3, 0});
}

TEST_CASE("where with a float condition uses nonzero", "[elementwise]") {
  Tensor r = where(tensor({0.0, 0.5}), tensor({1., 1.}), tensor({2., 2.}));
  CHECK(vals(r) == std::vector<double>{2, 1});
}

TEST_CASE("expressions and methods build the same values", "[elementwise]") {
  Tensor x = tensor({{1., -2.}, {3., 0.5}}), w = tensor({{0.5, -1.}, {2., 0.25}}), b = tensor({1., -1.});
  Tensor e = relu(x * w + b);
  Tensor m = add(mul(x, w), b).relu();
  CHECK(vals(e) == vals(m));
  CHECK(vals(e) == std::vector<double>{1.5, 1, 7, 0});
}

TEST_CASE("scalar on the left of every operator", "[elementwise]") {
  Tensor x = tensor({1., 2., 4.});
  CHECK(vals(1 + x) == std::vector<double>{2, 3, 5});
  CHECK(vals(1 - x) == std::vector<double>{0, -1, -3});
  CHECK(vals(2 * x) == std::vector<double>{2, 4, 8});
  CHECK(vals(2 / x) == std::vector<double>{2, 1, 0.5});
  CHECK(vals(maximum(2, x)) == std::vector<double>{2, 2, 4});
}

TEST_CASE("ops on empty tensors give empty results", "[elementwise]") {
  Tensor e = zeros({0, 3});
  CHECK(Tensor(e + 1).numel() == 0);
  CHECK(dims(e.exp()) == std::vector<int64_t>{0, 3});
  CHECK(dims(e * ones({1, 3})) == std::vector<int64_t>{0, 3});
}

TEST_CASE("0-d tensors in elementwise ops", "[elementwise]") {
  Tensor s = full({}, 3.0);
  Tensor r = s * s + 1;
  CHECK(r.dim() == 0);
  CHECK(r.item<double>() == 10);
}

TEST_CASE("where with two scalar branches", "[elementwise]") {
  Tensor c = tensor({1, 0, 1}) > 0;
  Tensor f = where(c, 1.5, -2.0);
  CHECK(f.dtype() == DType::f32);
  CHECK(vals(f) == std::vector<double>{1.5, -2, 1.5});
  Tensor i = where(c, 1, 0);
  CHECK(i.dtype() == DType::i64);
  CHECK(ivals(i) == std::vector<int64_t>{1, 0, 1});
  CHECK(Tensor(where(c, 1, 0.5)).dtype() == DType::f32);
}

// The ref interpreter runs the common ops in loops of their own (the op
// fixed, operands dense or splat) and the rest through a switch per element;
// every path must give each element its definition, in the tensor's type.
TEST_CASE("the ref interpreter's fixed-op loops: dense, splat and strided operands, element by element",
          "[elementwise]") {
  BackendOverride ref(ref_backend());
  const int64_t R = 6, C = 37;  // rows longer than a vector, with a tail
  std::vector<float> xv(R * C), yv(R * C);
  for (int64_t i = 0; i < R * C; ++i) {
    xv[i] = static_cast<float>((i * 7919) % 23) - 11.5f;  // signs mixed, never 0
    yv[i] = static_cast<float>((i * 104729) % 19) - 9.0f;  // some exact 0
  }
  Tensor x = from_vector<float>(xv, Shape{R, C}), y = from_vector<float>(yv, Shape{R, C});
  auto at = [&](const std::vector<float>& v, int64_t r, int64_t c) { return v[r * C + c]; };
  auto each = [&](const Tensor& t, auto expect) {
    REQUIRE(t.dtype() == DType::f32);
    const std::vector<float> got = Tensor(t).to_vector<float>();
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c) {
        INFO("element " << r << "," << c);
        const float e = expect(r, c);
        REQUIRE(((got[r * C + c] == e) || (got[r * C + c] != got[r * C + c] && e != e)));
      }
  };
  each(x / y, [&](int64_t r, int64_t c) { return at(xv, r, c) / at(yv, r, c); });
  each(maximum(x, y), [&](int64_t r, int64_t c) { return std::max(at(xv, r, c), at(yv, r, c)); });
  each(x.relu(), [&](int64_t r, int64_t c) { return std::max(at(xv, r, c), 0.0f); });
  each(-x, [&](int64_t r, int64_t c) { return -at(xv, r, c); });
  each(x.exp(), [&](int64_t r, int64_t c) { return std::exp(at(xv, r, c)); });
  each(y.abs().log(), [&](int64_t r, int64_t c) { return std::log(std::fabs(at(yv, r, c))); });
  // A comparison against a splat, and the ReLU backward's where(mask, g, 0).
  each(where(x > 0.5, y, 0.0), [&](int64_t r, int64_t c) { return at(xv, r, c) > 0.5f ? at(yv, r, c) : 0.0f; });
  each(where(x < y, 2.0, x), [&](int64_t r, int64_t c) { return at(xv, r, c) < at(yv, r, c) ? 2.0f : at(xv, r, c); });
  // A transposed operand: the strided loop.
  Tensor xt = from_vector<float>(xv, Shape{C, R}).permute({1, 0});
  auto xt_at = [&](int64_t r, int64_t c) { return xv[c * R + r]; };
  each(where(xt == y, xt, y * 2), [&](int64_t r, int64_t c) {
    return xt_at(r, c) == at(yv, r, c) ? xt_at(r, c) : at(yv, r, c) * 2;
  });
  each(xt / y, [&](int64_t r, int64_t c) { return xt_at(r, c) / at(yv, r, c); });
  // Sums of halves of whole numbers are exact in any order: column and row sums.
  std::vector<float> col(C, 0.0f), row(R, 0.0f);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) col[c] += at(xv, r, c), row[r] += at(xv, r, c);
  CHECK(Tensor(x.sum({0})).to_vector<float>() == col);
  CHECK(Tensor(x.sum({1})).to_vector<float>() == row);
  std::vector<float> strided_row(R, 0.0f);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) strided_row[r] += xt_at(r, c);
  CHECK(Tensor(xt.sum({1})).to_vector<float>() == strided_row);
}
