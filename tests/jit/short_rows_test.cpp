// Fast loops for the rows a pool makes: loads at a constant stride of 2-4
// (its window views: kir::Kernel::interleave) and a short innermost dim
// stored contiguously (its backward's window columns: kir::Kernel::short_inner).
// Lowering marks a kernel from the launch it is made for; the kernels are
// compiled by hand here so each launch can match those strides or not, and
// cover any row range, and every element is checked against a loop.
#include "tests/support/tensor_testing.h"

#include "tessel/config.h"

#if TESSEL_HAS_LLVM

#include <vector>

#include "codegen/lower.h"
#include "tests/jit/hand_kernels.h"

using namespace tessel;
using testing::load;
using testing::op;

namespace {

// out[r, i] = a[at0 + r * row + i * step] - a[at1 + r * row + i * step], rank 2.
kir::Kernel pair_difference() {
  kir::Kernel k;
  k.params = {{DType::f32, true}, {DType::f32, false}};
  k.load_params = {1, 1};
  k.rank = 2;
  k.body = {load(0, DType::f32), load(1, DType::f32), op(ir::Op::Sub, DType::f32, {0, 1})};
  k.value = 2;
  return k;
}

// dims | store off, strides | load 0 off, strides | load 1 off, strides
std::vector<int64_t> pair_args(int64_t rows, int64_t n, int64_t row, int64_t step) {
  return {rows, n, 0, n, 1, 0, row, step, 1, row, step};
}

// out[r, j, e] = g[r, j] * w[e], rank 3, the innermost dim of extent E.
kir::Kernel spread() {
  kir::Kernel k;
  k.params = {{DType::f32, true}, {DType::f32, false}, {DType::f32, false}};
  k.load_params = {1, 2};
  k.rank = 3;
  k.body = {load(0, DType::f32), load(1, DType::f32), op(ir::Op::Mul, DType::f32, {0, 1})};
  k.value = 2;
  return k;
}

std::vector<int64_t> spread_args(int64_t R, int64_t J, int64_t E, int64_t g_step = 1) {
  return {R, J, E, 0, J * E, E, 1, 0, J * g_step, g_step, 0, 0, 0, 0, 1};
}

lower::Lowered lowered(kir::Kernel k, std::vector<int64_t> args) {
  lower::Lowered l;
  l.kernel = std::move(k);
  l.args = std::move(args);
  lower::mark_inner_strides(l);
  return l;
}

// Runs pair_difference over rows [begin, end) and checks every element.
void check_pair(cpujit::KernelFn* fn, int64_t rows, int64_t n, int64_t step) {
  const int64_t row = n * step + 3;
  std::vector<float> a(static_cast<size_t>(rows * row + 8)), out(static_cast<size_t>(rows * n), -7.0f);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>((i * 37) % 101) * 0.5f;
  void* bufs[] = {out.data(), a.data()};
  auto args = pair_args(rows, n, row, step);
  fn(bufs, args.data(), 0, rows);
  int64_t bad = -1;
  for (int64_t r = 0; r < rows && bad < 0; ++r)
    for (int64_t i = 0; i < n && bad < 0; ++i) {
      const float want = a[static_cast<size_t>(r * row + i * step)] - a[static_cast<size_t>(r * row + i * step + 1)];
      if (out[static_cast<size_t>(r * n + i)] != want) bad = r * n + i;
    }
  INFO("rows " << rows << " n " << n << " step " << step << ": first wrong element " << bad);
  CHECK(bad == -1);
}

// Runs spread over rows [begin, end) of its R * J rows; elements outside stay untouched.
void check_spread(cpujit::KernelFn* fn, int64_t R, int64_t J, int64_t E, int64_t begin, int64_t end, int64_t g_step = 1) {
  std::vector<float> g(static_cast<size_t>(R * J * g_step)), w(static_cast<size_t>(E)), out(static_cast<size_t>(R * J * E), -7.0f);
  for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(i % 23) + 1.0f;
  for (size_t e = 0; e < w.size(); ++e) w[e] = static_cast<float>(e) + 0.5f;
  void* bufs[] = {out.data(), g.data(), w.data()};
  auto args = spread_args(R, J, E, g_step);
  fn(bufs, args.data(), begin, end);
  int64_t bad = -1;
  for (int64_t row = 0; row < R * J && bad < 0; ++row)
    for (int64_t e = 0; e < E && bad < 0; ++e) {
      const bool inside = row >= begin && row < end;
      const float want = inside ? g[static_cast<size_t>(row * g_step)] * w[static_cast<size_t>(e)] : -7.0f;
      if (out[static_cast<size_t>(row * E + e)] != want) bad = row * E + e;
    }
  INFO("R " << R << " J " << J << " E " << E << " rows [" << begin << ", " << end << ") g step " << g_step
            << ": first wrong element " << bad);
  CHECK(bad == -1);
}

}  // namespace

TEST_CASE("lowering marks loads at a stride of 2-4 along rows of at least 4 with a contiguous store", "[jit]") {
  CHECK(lowered(pair_difference(), pair_args(3, 16, 40, 2)).kernel.interleave == std::vector<uint8_t>{2, 2});
  CHECK(lowered(pair_difference(), pair_args(3, 16, 60, 3)).kernel.interleave == std::vector<uint8_t>{3, 3});
  CHECK(lowered(pair_difference(), pair_args(3, 16, 40, 1)).kernel.interleave.empty());  // unit strides
  CHECK(lowered(pair_difference(), pair_args(3, 16, 90, 5)).kernel.interleave.empty());  // too far apart
  CHECK(lowered(pair_difference(), pair_args(3, 4, 40, 2)).kernel.interleave == std::vector<uint8_t>{2, 2});
  CHECK(lowered(pair_difference(), pair_args(3, 3, 40, 2)).kernel.interleave.empty());  // a row under 4
  auto strided_store = pair_args(3, 16, 40, 2);
  strided_store[4] = 2;
  CHECK(lowered(pair_difference(), strided_store).kernel.interleave.empty());
  kir::Kernel k = lowered(pair_difference(), pair_args(3, 16, 40, 2)).kernel;
  CHECK(k.text().find("  slot l0 p1 stride2\n") != std::string::npos);
  CHECK(k.hash() != pair_difference().hash());  // a kernel of its own in the cache
}

TEST_CASE("interleaved loads: every element right on the fast loop and on launches with other strides", "[jit]") {
  kir::Kernel k = lowered(pair_difference(), pair_args(5, 37, 80, 2)).kernel;
  REQUIRE(k.interleave == std::vector<uint8_t>{2, 2});
  cpujit::KernelFn* fn = testing::compile_by_hand(k);
  check_pair(fn, 5, 37, 2);  // the strides it was lowered for
  check_pair(fn, 3, 64, 2);
  check_pair(fn, 7, 5, 2);   // rows of a 4-lane vector and one more
  check_pair(fn, 4, 19, 3);  // another stride: the general loop
  check_pair(fn, 2, 9, 1);
}

TEST_CASE("lowering marks a short innermost dim stored contiguously under a run of at least 4", "[jit]") {
  kir::Kernel k = lowered(spread(), spread_args(3, 14, 2)).kernel;
  CHECK(k.short_inner == 2);
  // store (E, 1), g (1, 0), w (0, 1): the strides along the dim above and the innermost
  CHECK(k.short_inner_steps == std::vector<uint8_t>{2, 1, 1, 0, 0, 1});
  CHECK(k.text().find("  short inner 2, steps (2, 1) (1, 0) (0, 1)\n") != std::string::npos);
  CHECK(lowered(spread(), spread_args(3, 14, 4)).kernel.short_inner == 4);
  CHECK(lowered(spread(), spread_args(3, 14, 5)).kernel.short_inner == 0);  // not short
  CHECK(lowered(spread(), spread_args(3, 3, 2)).kernel.short_inner == 0);   // a run under 4
  CHECK(lowered(spread(), spread_args(3, 14, 2, 40)).kernel.short_inner == 0);  // a load too far apart
}

TEST_CASE("short inner dims: whole runs, runs cut by the launch's row range, and launches with other strides", "[jit]") {
  kir::Kernel k = lowered(spread(), spread_args(3, 14, 2)).kernel;
  REQUIRE(k.short_inner == 2);
  cpujit::KernelFn* fn = testing::compile_by_hand(k);
  check_spread(fn, 3, 14, 2, 0, 42);   // three whole runs
  check_spread(fn, 6, 5, 2, 0, 30);    // runs of 5
  check_spread(fn, 3, 14, 2, 3, 40);   // starts inside a run, ends inside one: those rows one by one
  check_spread(fn, 3, 14, 2, 14, 28);  // exactly the middle run
  check_spread(fn, 1, 14, 2, 0, 13);   // ends one row short of the run
  check_spread(fn, 3, 14, 3, 0, 42);   // another innermost extent: row by row
  check_spread(fn, 3, 14, 2, 0, 42, 2);  // another stride for g: row by row
}

#endif  // TESSEL_HAS_LLVM
