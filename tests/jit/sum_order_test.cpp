// The order of floating sums (ir::kSumLanes, codegen/ir.h): element p of a
// reduction goes to partial sum p % 8, then 0 + partial 0 + ... + partial 7.
// The ref interpreter and the compiled kernels (vector groups along unit
// strides, element by element along strided rows, rows whose length is no
// multiple of 8) must give exactly that number, on random inputs spanning
// 2^-30 .. 2^30 and on one whose serial sum is another number.
#include "tests/support/tensor_testing.h"

#include <cstring>
#include <random>

#include "codegen/cpu/cpu_backend.h"
#include "codegen/ir.h"

using namespace tessel;
using namespace tessel::testing;

namespace {

// The defined order over `row` (the reduced elements in row-major order).
double lane_sum(const std::vector<double>& row) {
  double partial[ir::kSumLanes] = {};
  for (size_t p = 0; p < row.size(); ++p) partial[p % ir::kSumLanes] += row[p];
  double total = 0;
  for (double x : partial) total += x;
  return total;
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// `n` values of random sign and magnitude between 2^-30 and 2^30, from the
// printed seed of `suite`: sums of them round at every add.
std::vector<double> spread_values(const char* suite, size_t n) {
  const uint64_t seed = test_seed(suite);
  std::mt19937_64 g(seed);
  std::uniform_int_distribution<int> e(-30, 30);
  std::uniform_real_distribution<double> m(-1, 1);
  std::vector<double> v(n);
  for (double& x : v) x = std::ldexp(m(g), e(g));
  return v;
}

}  // namespace

TEST_CASE("floating sums add in 8 partial sums, the same bits on the ref interpreter and compiled", "[sum_order]") {
  Backend* jit = cpu_jit_backend();
  // [rows, a, b]: every row sums a * b elements; b = 37 is no multiple of 8, so
  // the partial an element goes to shifts from one inner run to the next.
  const int64_t rows = 3, A = 5, B = 37;
  const std::vector<double> v = spread_values("sum order", static_cast<size_t>(rows * A * B));
  Tensor x = make(v, {rows, A, B}, DType::f64);
  auto expected = [&](bool transposed) {
    std::vector<double> out;
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<double> row;
      if (!transposed) {
        for (int64_t i = 0; i < A * B; ++i) row.push_back(v[static_cast<size_t>(r * A * B + i)]);
      } else {  // x.transpose(1, 2): [rows, B, A], element (j, i) is x[r, i, j]
        for (int64_t j = 0; j < B; ++j)
          for (int64_t i = 0; i < A; ++i) row.push_back(v[static_cast<size_t>(r * A * B + i * B + j)]);
      }
      out.push_back(lane_sum(row));
    }
    return out;
  };
  for (bool transposed : {false, true}) {
    for (Backend* be : {&ref_backend(), jit}) {
      if (!be) continue;
      INFO("backend " << be->name() << (transposed ? " transposed (strided rows)" : ""));
      BackendOverride o(*be);
      Tensor in = transposed ? x.transpose(1, 2) : x;
      std::vector<double> got = vals(in.sum({1, 2})), want = expected(transposed);
      REQUIRE(got.size() == want.size());
      for (size_t r = 0; r < got.size(); ++r) CHECK(same_bits(got[r], want[r]));
      // The mean divides that sum by the count.
      std::vector<double> mean = vals(in.mean({1, 2}));
      for (size_t r = 0; r < got.size(); ++r) CHECK(same_bits(mean[r], want[r] / static_cast<double>(A * B)));
    }
  }
  // f32 inputs accumulate in f64 the same way, then round once.
  Tensor x32 = x.to(DType::f32);
  std::vector<double> v32 = vals(x32);
  for (Backend* be : {&ref_backend(), jit}) {
    if (!be) continue;
    BackendOverride o(*be);
    std::vector<double> got = vals(x32.sum({1, 2}));
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<double> row(v32.begin() + r * A * B, v32.begin() + (r + 1) * A * B);
      CHECK(got[static_cast<size_t>(r)] == static_cast<double>(static_cast<float>(lane_sum(row))));
    }
  }
}

TEST_CASE("2^53 and fifteen ones sum to 2^53 + 14 in partial sums (a serial sum gives 2^53)", "[sum_order]") {
  // Serially each 1 lands on a tie and rounds back to 2^53; in partial sums
  // 1..7 the ones add exactly (two each) and only partial 0's one is lost.
  std::vector<double> v(16, 1.0);
  v[0] = 9007199254740992.0;  // 2^53
  Tensor x = make(v, {16}, DType::f64);
  for (Backend* be : {&ref_backend(), cpu_jit_backend()}) {
    if (!be) continue;
    INFO("backend " << be->name());
    BackendOverride o(*be);
    CHECK(vals(x.sum())[0] == 9007199254741006.0);
    CHECK(vals(x.reshape({2, 8}).sum())[0] == 9007199254741006.0);  // over two axes: the same count
  }
}

TEST_CASE("sums over leading axes (column blocks) add each column in the defined order", "[sum_order]") {
  // x: [3, 37, 21] summed over axis 1 and over axes {0, 1}. Neighbouring
  // outputs are neighbours in memory and each one's row walks at stride 21,
  // so the compiled kernel reduces 8 columns at a time; 21 = 8 + 8 + 5 leaves
  // rows done one by one between blocks, and the outer dim of 3 wraps after them.
  Backend* jit = cpu_jit_backend();
  const int64_t A = 3, R = 37, J = 21;
  const std::vector<double> v = spread_values("column sums", static_cast<size_t>(A * R * J));
  auto at = [&](int64_t a, int64_t r, int64_t j) { return v[static_cast<size_t>((a * R + r) * J + j)]; };
  std::vector<double> over_r, over_ar;
  for (int64_t a = 0; a < A; ++a)
    for (int64_t j = 0; j < J; ++j) {
      std::vector<double> row;
      for (int64_t r = 0; r < R; ++r) row.push_back(at(a, r, j));
      over_r.push_back(lane_sum(row));
    }
  for (int64_t j = 0; j < J; ++j) {
    std::vector<double> row;
    for (int64_t a = 0; a < A; ++a)
      for (int64_t r = 0; r < R; ++r) row.push_back(at(a, r, j));
    over_ar.push_back(lane_sum(row));
  }
  Tensor x = make(v, {A, R, J}, DType::f64);
  for (Backend* be : {&ref_backend(), jit}) {
    if (!be) continue;
    INFO("backend " << be->name());  // the seed is printed by spread_values
    BackendOverride o(*be);
    std::vector<double> s1 = vals(x.sum({1})), s01 = vals(x.sum({0, 1})), m1 = vals(x.mean({1}));
    REQUIRE(s1.size() == over_r.size());
    REQUIRE(s01.size() == over_ar.size());
    for (size_t i = 0; i < s1.size(); ++i) {
      CHECK(same_bits(s1[i], over_r[i]));
      CHECK(same_bits(m1[i], over_r[i] / static_cast<double>(R)));
    }
    for (size_t i = 0; i < s01.size(); ++i) CHECK(same_bits(s01[i], over_ar[i]));
    // f32 in, accumulated in f64 and rounded once: the bias gradient's shape.
    Tensor x32 = x.to(DType::f32);
    std::vector<double> v32 = vals(x32), got = vals(x32.sum({0, 1}));
    for (int64_t j = 0; j < J; ++j) {
      std::vector<double> row;
      for (int64_t i = 0; i < A * R; ++i) row.push_back(v32[static_cast<size_t>(i * J + j)]);
      CHECK(got[static_cast<size_t>(j)] == static_cast<double>(static_cast<float>(lane_sum(row))));
    }
  }
}
