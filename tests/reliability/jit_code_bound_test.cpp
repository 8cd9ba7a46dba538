// The JIT's code memory is bounded (TESSEL_JIT_MAX_KERNELS, set to 8 for this
// program by CMake): past the bound every kernel's code is dropped and the
// kernels still in use are linked again from the kernel cache. Plans and
// expression replays made before a drop keep giving the right values, also
// with two threads compiling and replaying while the code is dropped, and the
// process's resident memory stops growing with the number of distinct kernels.
#include "tests/support/tensor_testing.h"

#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "codegen/cpu/cpu_backend.h"
#include "dsl/deferred_expr.h"
#include "tessel/config.h"

using namespace tessel;
using namespace tessel::testing;

#if TESSEL_HAS_LLVM

namespace {

constexpr int kBound = 8;

// Kernel number `code` (0..1023): ten steps, each `* 1.5` or `+ 0.25` by one
// bit of the code, so each code is its own fused kernel.
Tensor distinct_kernel(const Tensor& x, int code) {
  Tensor y = x;
  for (int j = 0; j < 10; ++j) {
    if (code >> j & 1)
      y = y * 1.5;
    else
      y = y + 0.25;
  }
  return y;
}
double distinct_value(double x, int code) {
  for (int j = 0; j < 10; ++j) x = (code >> j & 1) ? x * 1.5 : x + 0.25;
  return x;
}

void check_distinct(int code) {
  Tensor x = make({1.0, -2.0, 0.5}, {3}, DType::f64);
  x.eval();
  std::vector<double> got = vals(distinct_kernel(x, code));
  INFO("kernel code " << code);
  require_close(got, {distinct_value(1.0, code), distinct_value(-2.0, code), distinct_value(0.5, code)}, 1e-12, 1e-12);
}

long rss_kb() {
  std::ifstream f("/proc/self/statm");
  long size = 0, resident = 0;
  f >> size >> resident;
  return resident * 4;
}

}  // namespace

TEST_CASE("past TESSEL_JIT_MAX_KERNELS kernels the code is dropped and every value stays right", "[reliability][jit]") {
  REQUIRE(cpu_backend().name() == "cpu");
  const char* bound = std::getenv("TESSEL_JIT_MAX_KERNELS");
  REQUIRE(bound != nullptr);
  REQUIRE(std::string(bound) == std::to_string(kBound));
  const CpuJitStats before = cpu_jit_stats();
  for (int code = 0; code < 100; ++code) check_distinct(code);
  const CpuJitStats after = cpu_jit_stats();
  // 100 kernels, at most 8 linked at a time: at least 100 / 8 - 1 drops.
  CHECK(after.code_drops - before.code_drops >= 11);
  CHECK(after.kernels_linked <= static_cast<std::uint64_t>(kBound));
  CHECK(after.kernels_linked >= 1);
  // The same kernels again: linked from the cache, compiled no more.
  const std::uint64_t compiled = cpu_jit_stats().kernels_compiled;
  for (int code = 0; code < 100; ++code) check_distinct(code);
  CHECK(cpu_jit_stats().kernels_compiled == compiled);
}

TEST_CASE("plans and expression replays made before a drop give the right values after it", "[reliability][jit]") {
  REQUIRE(cpu_backend().name() == "cpu");
  Tensor a = make({1.0, -2.0, 3.0, -4.0}, {4}, DType::f64);
  Tensor b = make({0.5, 0.5, -1.0, 2.0}, {4}, DType::f64);
  a.eval();
  b.eval();
  const std::uint64_t drops = cpu_jit_stats().code_drops;
  for (int round = 0; round < 30; ++round) {
    INFO("round " << round);
    // An expression template over realized leaves: after its first call it
    // replays recorded launches without IR.
    Tensor e = relu(a * b + 1.0) * 2.0;
    CHECK(vals(e) == std::vector<double>{3.0, 0.0, 0.0, 0.0});
    // A realization with a reduction: replayed from the plan cache.
    Tensor s = (a * a + b).sum();
    CHECK(s.item<double>() == Approx(32.0));
    // Two new kernels every round: a drop every few rounds.
    check_distinct(200 + 2 * round);
    check_distinct(201 + 2 * round);
  }
  CHECK(cpu_jit_stats().code_drops - drops >= 5);
}

TEST_CASE("two threads compiling and replaying while the code is dropped", "[reliability][jit]") {
  REQUIRE(cpu_backend().name() == "cpu");
  const std::uint64_t drops = cpu_jit_stats().code_drops;
  std::atomic<int> wrong{0};
  auto work = [&](int thread) {
    Tensor a = make({1.0, 2.0, -3.0}, {3}, DType::f64);
    a.eval();
    for (int round = 0; round < 60; ++round) {
      Tensor r = relu(a * 3.0 - 1.0) + a;  // replayed
      if (vals(r) != std::vector<double>{3.0, 7.0, -3.0}) ++wrong;
      Tensor x = make({1.0, -2.0, 0.5}, {3}, DType::f64);
      x.eval();
      const int code = 400 + thread * 100 + round;
      std::vector<double> got = vals(distinct_kernel(x, code));
      if (std::abs(got[1] - distinct_value(-2.0, code)) > 1e-9 * std::abs(distinct_value(-2.0, code)) + 1e-12) ++wrong;
    }
  };
  std::thread t0(work, 0), t1(work, 1);
  t0.join();
  t1.join();
  CHECK(wrong == 0);
  CHECK(cpu_jit_stats().code_drops - drops >= 10);
}

TEST_CASE("resident memory stops growing with the number of distinct kernels", "[reliability][jit]") {
  REQUIRE(cpu_backend().name() == "cpu");
  for (int code = 600; code < 640; ++code) check_distinct(code);  // settle into the bound
  const long before = rss_kb();
  for (int code = 640; code < 1024; ++code) check_distinct(code);
  // Measured: 384 more kernels without a bound add ~30 MiB (about 80 KiB
  // each: code and data pages, LLVM's tables, the cached object); with 8
  // linked at a time, nothing measurable.
  INFO("resident KiB before " << before << ", after " << rss_kb());
  CHECK(rss_kb() - before < 10 * 1024);
}

#endif  // TESSEL_HAS_LLVM
