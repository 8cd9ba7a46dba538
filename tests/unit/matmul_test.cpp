// matmul against naive loops: 1-d, 2-d, batched, broadcast batch dims,
// transposed and sliced operands, every numeric dtype.
#include "tests/support/tensor_testing.h"

#include <random>

using namespace tessel;
using namespace tessel::testing;

namespace {

// Small integers: every product and sum is exact in f32, so BLAS and the
// naive loop agree bit for bit.
std::vector<double> small_ints(int64_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::vector<double> v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<double>(static_cast<int>(g() % 11) - 5);
  return v;
}

// Naive batched matmul on row-major data with explicit shapes [B..., n, k] x
// [B..., k, m] (batch shapes already equal).
std::vector<double> naive(const std::vector<double>& a, const std::vector<double>& b, int64_t batch, int64_t n,
                          int64_t k, int64_t m) {
  std::vector<double> c(static_cast<size_t>(batch * n * m), 0.0);
  for (int64_t z = 0; z < batch; ++z)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < m; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < k; ++p) acc += a[z * n * k + i * k + p] * b[z * k * m + p * m + j];
        c[z * n * m + i * m + j] = acc;
      }
  return c;
}

}  // namespace

TEST_CASE("matmul 2-d x 2-d", "[matmul]") {
  for (DType dt : {DType::f32, DType::f64, DType::i64, DType::i32}) {
    INFO(dtype_name(dt));
    auto a = small_ints(3 * 5, 1), b = small_ints(5 * 4, 2);
    Tensor c = make(a, {3, 5}, dt).matmul(make(b, {5, 4}, dt));
    CHECK(c.dtype() == dt);
    CHECK(dims(c) == std::vector<int64_t>{3, 4});
    CHECK(vals(c) == naive(a, b, 1, 3, 5, 4));
  }
}

TEST_CASE("matmul known values", "[matmul]") {
  Tensor a = tensor({{1., 2.}, {3., 4.}}), b = tensor({{5., 6.}, {7., 8.}});
  CHECK(vals(a.matmul(b)) == std::vector<double>{19, 22, 43, 50});
  CHECK(vals(a % b) == std::vector<double>{19, 22, 43, 50});
  CHECK(vals(matmul(a, b)) == std::vector<double>{19, 22, 43, 50});
}

TEST_CASE("matmul 1-d x 1-d is a 0-d dot product", "[matmul]") {
  Tensor d = tensor({1., 2., 3.}).matmul(tensor({4., 5., 6.}));
  CHECK(d.dim() == 0);
  CHECK(d.item<double>() == 32);
}

TEST_CASE("matmul 2-d x 1-d and 1-d x 2-d", "[matmul]") {
  Tensor m = tensor({{1., 2., 3.}, {4., 5., 6.}});
  Tensor mv = m.matmul(tensor({1., 0., -1.}));
  CHECK(dims(mv) == std::vector<int64_t>{2});
  CHECK(vals(mv) == std::vector<double>{-2, -2});
  Tensor vm = tensor({1., -1.}).matmul(m);
  CHECK(dims(vm) == std::vector<int64_t>{3});
  CHECK(vals(vm) == std::vector<double>{-3, -3, -3});
}

TEST_CASE("matmul batched 3-d x 3-d", "[matmul]") {
  for (DType dt : {DType::f32, DType::f64, DType::i64}) {
    INFO(dtype_name(dt));
    auto a = small_ints(4 * 2 * 3, 3), b = small_ints(4 * 3 * 5, 4);
    Tensor c = make(a, {4, 2, 3}, dt).matmul(make(b, {4, 3, 5}, dt));
    CHECK(dims(c) == std::vector<int64_t>{4, 2, 5});
    CHECK(vals(c) == naive(a, b, 4, 2, 3, 5));
  }
}

TEST_CASE("matmul 3-d x 2-d broadcasts the matrix over the batch", "[matmul]") {
  auto a = small_ints(3 * 2 * 4, 5), b = small_ints(4 * 3, 6);
  Tensor c = make(a, {3, 2, 4}).matmul(make(b, {4, 3}));
  CHECK(dims(c) == std::vector<int64_t>{3, 2, 3});
  std::vector<double> bb;
  for (int i = 0; i < 3; ++i) bb.insert(bb.end(), b.begin(), b.end());
  CHECK(vals(c) == naive(a, bb, 3, 2, 4, 3));
}

TEST_CASE("matmul with broadcast batch dims on both sides", "[matmul]") {
  // [2,1,n,k] @ [3,k,m] -> [2,3,n,m]
  int64_t n = 2, k = 3, m = 4;
  auto a = small_ints(2 * n * k, 7), b = small_ints(3 * k * m, 8);
  Tensor c = make(a, {2, 1, n, k}).matmul(make(b, {3, k, m}));
  CHECK(dims(c) == std::vector<int64_t>{2, 3, n, m});
  std::vector<double> aa, bb;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) {
      aa.insert(aa.end(), a.begin() + i * n * k, a.begin() + (i + 1) * n * k);
      bb.insert(bb.end(), b.begin() + j * k * m, b.begin() + (j + 1) * k * m);
    }
  CHECK(vals(c) == naive(aa, bb, 6, n, k, m));
}

TEST_CASE("matmul 1-d x 3-d", "[matmul]") {
  auto b = small_ints(2 * 3 * 4, 9);
  Tensor c = tensor({1., 2., 3.}, DType::f64).matmul(make(b, {2, 3, 4}));
  CHECK(dims(c) == std::vector<int64_t>{2, 4});
  CHECK(vals(c) == naive({1, 2, 3, 1, 2, 3}, b, 2, 1, 3, 4));
}

TEST_CASE("matmul with transposed operands", "[matmul]") {
  auto a = small_ints(5 * 3, 10), b = small_ints(4 * 5, 11);
  Tensor at = make(a, {5, 3}, DType::f32).t();  // [3,5], column-major view
  Tensor bt = make(b, {4, 5}, DType::f32).t();  // [5,4]
  std::vector<double> ad = vals(at), bd = vals(bt);
  CHECK(vals(at.matmul(bt)) == naive(ad, bd, 1, 3, 5, 4));
  CHECK(vals(at.matmul(bt.contiguous())) == naive(ad, bd, 1, 3, 5, 4));
  CHECK(vals(at.contiguous().matmul(bt)) == naive(ad, bd, 1, 3, 5, 4));
}

TEST_CASE("matmul with batched transposed operands", "[matmul]") {
  auto a = small_ints(2 * 3 * 4, 12), b = small_ints(2 * 5 * 4, 13);
  Tensor A = make(a, {2, 3, 4}), B = make(b, {2, 5, 4}).transpose(1, 2);  // [2,4,5]
  CHECK(vals(A.matmul(B)) == naive(a, vals(B), 2, 3, 4, 5));
  Tensor Ap = make(a, {3, 2, 4}).permute({1, 0, 2});  // batch stride not outermost
  CHECK(vals(Ap.matmul(B)) == naive(vals(Ap), vals(B), 2, 3, 4, 5));
}

TEST_CASE("matmul with strided (sliced) operands", "[matmul]") {
  auto a = small_ints(6 * 8, 14), b = small_ints(8 * 6, 15);
  Tensor A = make(a, {6, 8}).slice(1, 0, 8, 2);  // [6,4], column stride 2
  Tensor B = make(b, {8, 6}).slice(0, 1, 8, 2).slice(1, 0, 5);  // [4,5]
  CHECK(vals(A.matmul(B)) == naive(vals(A), vals(B), 1, 6, 4, 5));
}

TEST_CASE("matmul with an expanded operand", "[matmul]") {
  Tensor row = tensor({1., 2.}, DType::f64).expand({3, 2});
  Tensor m = tensor({{1., 0.}, {0., 1.}}, DType::f64);
  CHECK(vals(row.matmul(m)) == std::vector<double>{1, 2, 1, 2, 1, 2});
  CHECK(vals(m.matmul(row.t())) == std::vector<double>{1, 1, 1, 2, 2, 2});
}

TEST_CASE("matmul of lazy operands", "[matmul]") {
  Tensor a = tensor({{1., 2.}, {3., 4.}});
  Tensor c = Tensor(a * 2).matmul(a.t() + 1);
  // (2a) @ (a^T + 1)
  CHECK(vals(c) == std::vector<double>{2 * (1 * 2 + 2 * 3), 2 * (1 * 4 + 2 * 5), 2 * (3 * 2 + 4 * 3), 2 * (3 * 4 + 4 * 5)});
}

TEST_CASE("matmul with an empty inner dimension is all zeros", "[matmul]") {
  Tensor c = zeros({3, 0}).matmul(zeros({0, 2}));
  CHECK(dims(c) == std::vector<int64_t>{3, 2});
  CHECK(vals(c) == std::vector<double>(6, 0.0));
  CHECK(zeros({0, 4}).matmul(zeros({4, 2})).numel() == 0);
}

TEST_CASE("matmul of random f64 matrices within rounding of the naive loop", "[matmul]") {
  manual_seed(5);
  Tensor a = randn({17, 33}, DType::f64), b = randn({33, 9}, DType::f64);
  require_close(vals(a.matmul(b)), naive(vals(a), vals(b), 1, 17, 33, 9), 1e-12, 1e-12);
}

TEST_CASE("matmul of random f32 matrices within f32 rounding", "[matmul]") {
  manual_seed(6);
  Tensor a = randn({4, 16, 31}), b = randn({4, 31, 7});
  require_close(vals(a.matmul(b)), naive(vals(a), vals(b), 4, 16, 31, 7), 1e-4, 1e-5);
}

TEST_CASE("matmul of large operands (the BLAS path) in every layout", "[matmul]") {
  manual_seed(7);
  for (DType dt : {DType::f32, DType::f64}) {
    INFO(dtype_name(dt));
    Tensor a = randn({96, 80}, dt), b = randn({80, 70}, dt);
    std::vector<double> expect = naive(vals(a), vals(b), 1, 96, 80, 70);
    double tol = dt == DType::f32 ? 1e-4 : 1e-11;
    require_close(vals(a.matmul(b)), expect, tol, tol);
    Tensor at = a.t().contiguous().t(), bt = b.t().contiguous().t();  // column-major storage
    require_close(vals(at.matmul(b)), expect, tol, tol);
    require_close(vals(a.matmul(bt)), expect, tol, tol);
    require_close(vals(at.matmul(bt)), expect, tol, tol);
    Tensor as = randn({96, 160}, dt).slice(1, 0, 160, 2);  // a column stride of 2: copied first
    require_close(vals(as.matmul(b)), naive(vals(as), vals(b), 1, 96, 80, 70), tol, tol);
  }
}

TEST_CASE("batched matmul of large operands (the BLAS path)", "[matmul]") {
  manual_seed(8);
  Tensor a = randn({3, 70, 64}, DType::f64), b = randn({64, 66}, DType::f64);
  std::vector<double> bb;
  auto bv = vals(b);
  for (int i = 0; i < 3; ++i) bb.insert(bb.end(), bv.begin(), bv.end());
  require_close(vals(a.matmul(b)), naive(vals(a), bb, 3, 70, 64, 66), 1e-11, 1e-11);
}

TEST_CASE("products with a zero-size dimension are zeros or empty, fused epilogues included", "[matmul]") {
  Tensor k0 = Tensor(ones({3, 0}).matmul(ones({0, 4})) * 2.0);
  CHECK(k0.shape().dims == std::vector<int64_t>{3, 4});
  CHECK(tessel::testing::vals(k0) == std::vector<double>(12, 0.0));
  Tensor m0 = Tensor(ones({0, 5}).matmul(ones({5, 4})) + 1.0);
  CHECK(m0.shape().dims == std::vector<int64_t>{0, 4});
  CHECK(m0.numel() == 0);
  Tensor n0 = ones({2, 5}).matmul(ones({5, 0}));
  CHECK(n0.shape().dims == std::vector<int64_t>{2, 0});
  CHECK(n0.to_vector<double>().empty());
}
