// Helpers shared by the core's test suites: reading tensors back as plain
// vectors, building tensors from plain vectors, and a seed that a run prints
// and that TESSEL_TEST_SEED can override (to replay a failing run).
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "codegen/backend.h"
#include "codegen/builders.h"
#include "dsl/tessel.h"

namespace tessel::testing {

inline std::vector<double> vals(const Tensor& t) { return t.to_vector<double>(); }
inline std::vector<int64_t> ivals(const Tensor& t) { return t.to_vector<int64_t>(); }
inline std::vector<int64_t> dims(const Tensor& t) { return t.shape().dims; }

/// A tensor of dtype `dt` holding `v` (converted through the ref cast rules).
inline Tensor make(const std::vector<double>& v, const Shape& s, DType dt = DType::f64) {
  Tensor t = from_vector<double>(v, s);
  return dt == DType::f64 ? t : t.to(dt).contiguous();
}

/// The run's seed: TESSEL_TEST_SEED when set, else a fresh one. Printed so a
/// failure can be replayed.
inline uint64_t test_seed(const char* suite) {
  uint64_t seed;
  if (const char* e = std::getenv("TESSEL_TEST_SEED")) seed = std::strtoull(e, nullptr, 0);
  else seed = std::random_device{}() ^ (static_cast<uint64_t>(std::random_device{}()) << 32);
  std::printf("[%s] seed = %llu (replay with TESSEL_TEST_SEED=%llu)\n", suite, static_cast<unsigned long long>(seed),
              static_cast<unsigned long long>(seed));
  std::fflush(stdout);
  return seed;
}

/// How many random cases a property test runs: `full` on the CPU or a real
/// GPU, `emulated` on the emulated device (tests/CMakeLists.txt sets
/// TESSEL_TEST_EMULATED_GPU there), where every new kernel is a host compile
/// of about a second. TESSEL_TEST_TRIALS overrides both. Printed with the seed.
inline int trial_count(const char* suite, int full, int emulated) {
  int n = full;
  if (const char* e = std::getenv("TESSEL_TEST_EMULATED_GPU"); e && std::strcmp(e, "1") == 0) n = emulated;
  if (const char* e = std::getenv("TESSEL_TEST_TRIALS")) {
    char* end = nullptr;
    const long v = std::strtol(e, &end, 10);
    // A run of zero cases passes having tested nothing: refuse it, and any non-number.
    if (end == e || *end != '\0' || v <= 0 || v > 1000000)
      throw std::invalid_argument(std::string("TESSEL_TEST_TRIALS must be a count from 1 to 1000000, got '") + e + "'");
    n = static_cast<int>(v);
  }
  std::printf("[%s] %d cases (TESSEL_TEST_TRIALS overrides)\n", suite, n);
  std::fflush(stdout);
  return n;
}

/// Asserts |a - b| <= atol + rtol * |b| elementwise, NaNs matching NaNs.
/// Reports the first element that differs (one assertion, not one per element:
/// the large cases hold millions).
inline void require_close(const std::vector<double>& a, const std::vector<double>& b, double rtol = 1e-12,
                          double atol = 1e-12) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    bool ok = std::isnan(b[i])   ? std::isnan(a[i])
              : std::isinf(b[i]) ? a[i] == b[i]
                                 : std::fabs(a[i] - b[i]) <= atol + rtol * std::fabs(b[i]);
    if (ok) continue;
    INFO("index " << i << " of " << a.size() << ": got " << a[i] << " expected " << b[i]);
    REQUIRE(ok);
  }
}

}  // namespace tessel::testing
