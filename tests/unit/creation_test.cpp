// Tensor factories: shapes, dtypes and exact values.
#include "tests/support/tensor_testing.h"

using namespace tessel;
using namespace tessel::testing;

TEST_CASE("zeros: f32 by default, every element 0", "[creation]") {
  Tensor t = zeros({2, 3});
  CHECK(t.dtype() == DType::f32);
  CHECK(dims(t) == std::vector<int64_t>{2, 3});
  CHECK(t.numel() == 6);
  CHECK(vals(t) == std::vector<double>(6, 0.0));
}

TEST_CASE("zeros and ones in every dtype", "[creation]") {
  for (DType dt : kAllDTypes) {
    INFO(dtype_name(dt));
    Tensor z = zeros({3}, dt), o = ones({2, 2}, dt);
    CHECK(z.dtype() == dt);
    CHECK(o.dtype() == dt);
    CHECK(vals(z) == std::vector<double>(3, 0.0));
    CHECK(vals(o) == std::vector<double>(4, 1.0));
  }
}

TEST_CASE("full: the value converted to the dtype", "[creation]") {
  CHECK(vals(full({2}, 2.5, DType::f64)) == std::vector<double>{2.5, 2.5});
  CHECK(ivals(full({3}, 7, DType::i64)) == std::vector<int64_t>{7, 7, 7});
  CHECK(ivals(full({2}, -3, DType::i32)) == std::vector<int64_t>{-3, -3});
  CHECK(vals(full({2}, true, DType::b8)) == std::vector<double>{1, 1});
  CHECK(vals(full({1}, 0.1, DType::f32)) == std::vector<double>{static_cast<double>(0.1f)});
}

TEST_CASE("full with an empty shape is a 0-d tensor", "[creation]") {
  Tensor t = full({}, 4.25, DType::f64);
  CHECK(t.dim() == 0);
  CHECK(t.numel() == 1);
  CHECK(t.item<double>() == 4.25);
}

TEST_CASE("empty: shape, dtype and contiguous strides", "[creation]") {
  Tensor t = empty({2, 3, 4}, DType::i32);
  CHECK(t.dtype() == DType::i32);
  CHECK(dims(t) == std::vector<int64_t>{2, 3, 4});
  CHECK(t.strides() == Strides{12, 4, 1});
  CHECK(t.is_contiguous());
}

TEST_CASE("zero-size tensors", "[creation]") {
  Tensor a = zeros({0});
  CHECK(a.numel() == 0);
  CHECK(vals(a).empty());
  Tensor b = ones({2, 0, 3});
  CHECK(b.numel() == 0);
  CHECK(dims(b) == std::vector<int64_t>{2, 0, 3});
}

TEST_CASE("arange(n): int64 0..n-1", "[creation]") {
  Tensor t = arange(5);
  CHECK(t.dtype() == DType::i64);
  CHECK(ivals(t) == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(arange(0).numel() == 0);
}

TEST_CASE("arange(start, end, step): float32 values", "[creation]") {
  Tensor t = arange(0.0, 1.0, 0.25);
  CHECK(t.dtype() == DType::f32);
  CHECK(vals(t) == std::vector<double>{0, 0.25, 0.5, 0.75});
  CHECK(vals(arange(5.0, 0.0, -2.0)) == std::vector<double>{5, 3, 1});
  CHECK(vals(arange(1.0, 2.0, 0.3, DType::f64)) == std::vector<double>{1.0, 1.0 + 1 * 0.3, 1.0 + 2 * 0.3, 1.0 + 3 * 0.3});
  CHECK(arange(1.0, 2.0, 0.3, DType::f64).numel() == 4);
}

TEST_CASE("arange with an explicit dtype", "[creation]") {
  CHECK(ivals(arange(4, DType::i32)) == std::vector<int64_t>{0, 1, 2, 3});
  CHECK(arange(4, DType::i32).dtype() == DType::i32);
  CHECK(vals(arange(3, DType::f64)) == std::vector<double>{0, 1, 2});
}

TEST_CASE("tensor(): integer lists give int64", "[creation]") {
  Tensor t = tensor({{1, 2, 3}, {4, 5, 6}});
  CHECK(t.dtype() == DType::i64);
  CHECK(dims(t) == std::vector<int64_t>{2, 3});
  CHECK(ivals(t) == std::vector<int64_t>{1, 2, 3, 4, 5, 6});
}

TEST_CASE("tensor(): float lists give float32", "[creation]") {
  Tensor t = tensor({{1., 2.}, {3., 4.}});
  CHECK(t.dtype() == DType::f32);
  CHECK(vals(t) == std::vector<double>{1, 2, 3, 4});
}

TEST_CASE("tensor(): one float among ints makes the whole list float32", "[creation]") {
  Tensor t = tensor({1, 2.5, 3});
  CHECK(t.dtype() == DType::f32);
  CHECK(vals(t) == std::vector<double>{1, 2.5, 3});
}

TEST_CASE("tensor(): 3-d nesting and 0-d scalars", "[creation]") {
  Tensor t = tensor({{{1, 2}, {3, 4}}, {{5, 6}, {7, 8}}});
  CHECK(dims(t) == std::vector<int64_t>{2, 2, 2});
  CHECK(ivals(t) == std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8});
  Tensor s = tensor(5);
  CHECK(s.dim() == 0);
  CHECK(s.item<int64_t>() == 5);
  Tensor one = tensor({5});
  CHECK(dims(one) == std::vector<int64_t>{1});
}

TEST_CASE("tensor() with an explicit dtype", "[creation]") {
  Tensor t = tensor({1.5, -2.5}, DType::f64);
  CHECK(t.dtype() == DType::f64);
  CHECK(vals(t) == std::vector<double>{1.5, -2.5});
  Tensor i = tensor({1, 2}, DType::i32);
  CHECK(i.dtype() == DType::i32);
  CHECK(ivals(i) == std::vector<int64_t>{1, 2});
}

TEST_CASE("from_vector copies values in row-major order", "[creation]") {
  std::vector<float> f{1.5f, 2.5f, 3.5f, 4.5f, 5.5f, 6.5f};
  Tensor t = from_vector(f, {3, 2});
  CHECK(t.dtype() == DType::f32);
  CHECK(t.to_vector<float>() == f);
  f[0] = 100;  // a copy: the tensor does not see later changes
  CHECK(t.to_vector<float>()[0] == 1.5f);
  CHECK(from_vector<int32_t>({1, 2}, {2}).dtype() == DType::i32);
  CHECK(from_vector<int64_t>({1, 2}, {2}).dtype() == DType::i64);
  CHECK(from_vector<double>({1, 2}, {1, 2}).dtype() == DType::f64);
}

TEST_CASE("rand: floats in the half-open unit interval", "[creation]") {
  manual_seed(1);
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor r = rand({1000}, dt);
    CHECK(r.dtype() == dt);
    auto v = vals(r);
    double lo = 1, hi = 0, sum = 0;
    for (double x : v) {
      lo = std::min(lo, x);
      hi = std::max(hi, x);
      sum += x;
    }
    CHECK(lo >= 0);
    CHECK(hi < 1);
    CHECK(sum / 1000 == Approx(0.5).margin(0.05));
  }
}

TEST_CASE("randn: mean near 0 and variance near 1", "[creation]") {
  manual_seed(2);
  auto v = vals(randn({20000}, DType::f64));
  double m = 0, s = 0;
  for (double x : v) m += x;
  m /= v.size();
  for (double x : v) s += (x - m) * (x - m);
  s /= v.size();
  CHECK(m == Approx(0).margin(0.03));
  CHECK(s == Approx(1).margin(0.05));
}

TEST_CASE("uniform_ and normal_ fill in place", "[creation]") {
  manual_seed(3);
  Tensor t = zeros({500});
  t.uniform_(-2, 3);
  auto v = vals(t);
  for (double x : v) {
    CHECK(x >= -2);
    CHECK(x < 3);
  }
  Tensor n = zeros({4000}, DType::f64);
  n.normal_(10, 0.5);
  double m = 0;
  for (double x : vals(n)) m += x;
  CHECK(m / 4000 == Approx(10).margin(0.05));
}

TEST_CASE("clone of a created tensor owns new memory", "[creation]") {
  Tensor a = ones({3});
  Tensor b = a.clone();
  b[0] = 5;
  CHECK(vals(a) == std::vector<double>{1, 1, 1});
  CHECK(vals(b) == std::vector<double>{5, 1, 1});
}

TEST_CASE("full keeps int64 values beyond 2^53 exact", "[creation]") {
  int64_t big = (int64_t{1} << 60) + 1;
  CHECK(full({2}, big, DType::i64).to_vector<int64_t>() == std::vector<int64_t>{big, big});
  CHECK(full({1}, -big, DType::i64).item<int64_t>() == -big);
}

TEST_CASE("PyTorch's defaults: integer arange bounds give int64, bool lists give bool, a number base for pow",
          "[creation]") {
  Tensor r = arange(0, 5);
  CHECK(r.dtype() == DType::i64);
  CHECK(ivals(r) == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(ivals(arange(2, 11, 3)) == std::vector<int64_t>{2, 5, 8});
  CHECK(ivals(arange(5, 0, -2)) == std::vector<int64_t>{5, 3, 1});
  CHECK(arange(3, 3).numel() == 0);
  CHECK(arange(1, 4, 1, DType::f32).dtype() == DType::f32);
  REQUIRE_THROWS_AS(arange(0, 5, 0), ValueError);
  REQUIRE_THROWS_AS(arange(0, 5, -1), ValueError);

  Tensor b = tensor({true, false, true});
  CHECK(b.dtype() == DType::b8);
  CHECK(ivals(b) == std::vector<int64_t>{1, 0, 1});
  CHECK(tensor({{true}, {false}}).dtype() == DType::b8);
  CHECK(tensor({1, 0}).dtype() == DType::i64);

  Tensor x = tensor({0.0, 1.0, 3.0});
  Tensor p = pow(2, x);
  CHECK(p.dtype() == DType::f32);
  CHECK(vals(p) == std::vector<double>{1, 2, 8});
}
