// What the programs built against ahead-of-time kernels share: the JITs
// switched off over a fresh, empty cache folder, the generator's reference
// values, bit-equality, and the proof that nothing was compiled.
//
//   TEST_CASE(...) {
//     aot_test::JitOff off("tessel_aot_gpt");
//     aot_test::Counters before;
//     ...
//     aot_test::require_equal(got, ref.at("logits"), "logits");
//     aot_test::require_no_compiles(before);
//   }
#pragma once

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "codegen/cpu/cpu_backend.h"
#include "dsl/io.h"
#include "runtime/kernel_cache.h"
#include "runtime/precompiled_kernels.h"
#include "tests/support/temp_dir.h"

namespace aot_test {

/// TESSEL_JIT=off for its lifetime, over a cache folder that is empty when
/// the process first makes one (named after `prefix`, removed at exit).
struct JitOff {
  explicit JitOff(const char* prefix) {
    setenv("TESSEL_CACHE_DIR", tessel::testing::process_temp_dir(prefix).c_str(), 1);
    setenv("TESSEL_JIT", "off", 1);
  }
  ~JitOff() { unsetenv("TESSEL_JIT"); }
  JitOff(const JitOff&) = delete;
  JitOff& operator=(const JitOff&) = delete;
};

/// The values the generator computed with the JIT, saved beside the export.
inline std::map<std::string, tessel::Tensor> reference(const char* dir) {
  std::map<std::string, tessel::Tensor> out;
  for (auto& [k, v] : tessel::load_dict(std::filesystem::path(dir) / "reference.safetensors")) out[k] = v;
  return out;
}

/// Bit-equality, element for element (as doubles: exact for f32 and i64):
/// the same LLVM pipeline, no fast math, so not even an ulp may differ.
inline void require_equal(const tessel::Tensor& got, const tessel::Tensor& want, const std::string& what) {
  INFO(what);
  REQUIRE(got.shape() == want.shape());
  REQUIRE(got.dtype() == want.dtype());
  std::vector<double> a = got.to_vector<double>(), b = want.to_vector<double>();
  int64_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i) bad += a[i] != b[i];
  REQUIRE(bad == 0);
}

/// The compile counters when a test starts.
struct Counters {
  tessel::CpuJitStats cpu = tessel::cpu_jit_stats();
  tessel::KernelCacheStats cache = tessel::KernelCache::global().stats();
};

/// No kernel compiled (each test case is a process of its own, so none at
/// all), loaded from disk or missed among the registered ones since `before`.
inline void require_no_compiles(const Counters& before) {
  const tessel::CpuJitStats cpu = tessel::cpu_jit_stats();
  const tessel::KernelCacheStats cache = tessel::KernelCache::global().stats();
  CHECK(cpu.kernels_compiled == 0);
  CHECK(cpu.kernels_compiled == before.cpu.kernels_compiled);
  CHECK(cpu.kernels_from_disk == before.cpu.kernels_from_disk);
  CHECK(cache.compiles == before.cache.compiles);
  CHECK(cache.misses == before.cache.misses);
  CHECK(cache.disk_hits == before.cache.disk_hits);
  CHECK(tessel::precompiled::stats().misses == 0);
}

}  // namespace aot_test
