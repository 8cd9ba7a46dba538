// The attention kernels (codegen/cuda/attention_kernels.h) compile clean under
// NVRTC, the three kernels in each module, in every variant: f32 and f64,
// mask none / bool / additive, causal or not, dropout or not, head dims 16,
// 32 and 64 (one test case per dtype and head dim), plus D != Dv and the
// largest and odd head dims. Every variant compiles to PTX for compute_90;
// for compute_80 (PTX) and sm_90 (CUBIN) three variants per dtype and head
// dim that between them take every mask, causal and dropout setting (a flash
// kernel takes ~0.3 s to compile, ptxas ~2x that: every variant on every
// target is TESSEL_ATTENTION_NVRTC_ALL=1). A head dim over the limit is a
// clear CompileError. No GPU needed.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "codegen/cuda/attention_kernels.h"
#include "runtime/cuda/nvrtc.h"
#include "runtime/errors.h"

using namespace tessel;
using cudagen::AttentionSpec;

namespace {

struct Target {
  int arch;
  bool cubin;
};
constexpr Target kTargets[] = {{80, false}, {90, false}, {90, true}};

bool all_targets_always() {
  const char* e = std::getenv("TESSEL_ATTENTION_NVRTC_ALL");
  return e && *e && std::string(e) != "0";
}

// Whether spec i of a list is compiled for every target (else compute_90 PTX only).
using Covering = bool (*)(const AttentionSpec&);
bool every_target(const AttentionSpec&) { return true; }

// Compiles each spec (for every target where `covering` says so, else for
// compute_90 alone) on two threads; the failures, described.
std::vector<std::string> compile_all(const std::vector<AttentionSpec>& specs, Covering covering = every_target) {
  std::mutex mu;
  std::vector<std::string> failures;
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next++) < specs.size();) {
      const cudagen::AttentionSource src = cudagen::emit_attention(specs[i]);
      const bool all = all_targets_always() || covering(specs[i]);
      for (const Target& t : kTargets) {
        if (!all && (t.arch != 90 || t.cubin)) continue;
        const std::string where = fmt::format("{} ({}_{})", src.text, t.cubin ? "sm" : "compute", t.arch);
        try {
          cuda::CompiledKernel out = cuda::compile(src.source, src.name, {.arch = t.arch, .cubin = t.cubin});
          std::lock_guard<std::mutex> l(mu);
          if (out.log.find_first_not_of(" \n\r\t") != std::string::npos)
            failures.push_back(fmt::format("{}: log not empty:\n{}", where, out.log));
          if (t.cubin) {
            if (out.cubin.size() < 4 || std::string(out.cubin.data() + 1, 3) != "ELF")
              failures.push_back(where + ": no CUBIN");
          } else {
            if (out.ptx.find(".target sm_" + std::to_string(t.arch)) == std::string::npos)
              failures.push_back(where + ": PTX for another target");
            for (const std::string& k : {src.forward, src.grad_q, src.grad_kv})
              if (out.ptx.find(".entry " + k + "(") == std::string::npos) failures.push_back(where + ": no " + k);
          }
        } catch (const CompileError& e) {
          std::lock_guard<std::mutex> l(mu);
          failures.push_back(fmt::format("{}: {}", where, e.what()));
        }
      }
    }
  };
  std::thread other(work);
  work();
  other.join();
  return failures;
}

void check_all(const std::vector<AttentionSpec>& specs, Covering covering = every_target) {
  const std::vector<std::string> failures = compile_all(specs, covering);
  for (size_t i = 0; i < std::min<size_t>(failures.size(), 3); ++i) UNSCOPED_INFO(failures[i]);
  CHECK(failures.empty());
}

AttentionSpec spec(DType t, int64_t d, int64_t dv, ir::AttentionMask m, bool causal, bool dropout) {
  AttentionSpec s;
  s.dtype = t;
  s.d = d;
  s.dv = dv;
  s.mask = m;
  s.causal = causal;
  s.dropout = dropout;
  return s;
}

bool nvrtc_here() {
  if (cuda::nvrtc_available()) return true;
  WARN("built without NVRTC: skipped");
  return false;
}

constexpr ir::AttentionMask kMasks[] = {ir::AttentionMask::None, ir::AttentionMask::Bool, ir::AttentionMask::Additive};

// Three of the twelve flag combinations, which between them take every mask,
// causal and dropout setting: (none, causal, dropout), (bool, -, dropout), (additive, causal, -).
bool covering_three(const AttentionSpec& s) {
  switch (s.mask) {
    case ir::AttentionMask::None: return s.causal && s.dropout;
    case ir::AttentionMask::Bool: return !s.causal && s.dropout;
    case ir::AttentionMask::Additive: return s.causal && !s.dropout;
  }
  return false;
}

// Every mask x causal x dropout combination for one dtype and head dim.
std::vector<AttentionSpec> every_flag(DType t, int64_t d) {
  std::vector<AttentionSpec> specs;
  for (ir::AttentionMask m : kMasks)
    for (bool causal : {false, true})
      for (bool dropout : {false, true}) specs.push_back(spec(t, d, d, m, causal, dropout));
  return specs;
}

}  // namespace

// One test case per (dtype, head dim): ctest runs them in parallel.
TEST_CASE("attention kernels compile clean under NVRTC: f32 D=16 with every mask x causal x dropout", "[nvrtc]") {
  if (!nvrtc_here()) return;
  check_all(every_flag(DType::f32, 16), covering_three);
}
TEST_CASE("attention kernels compile clean under NVRTC: f32 D=32 with every mask x causal x dropout", "[nvrtc]") {
  if (!nvrtc_here()) return;
  check_all(every_flag(DType::f32, 32), covering_three);
}
TEST_CASE("attention kernels compile clean under NVRTC: f32 D=64 with every mask x causal x dropout", "[nvrtc]") {
  if (!nvrtc_here()) return;
  check_all(every_flag(DType::f32, 64), covering_three);
}
TEST_CASE("attention kernels compile clean under NVRTC: f64 D=16 with every mask x causal x dropout", "[nvrtc]") {
  if (!nvrtc_here()) return;
  check_all(every_flag(DType::f64, 16), covering_three);
}
TEST_CASE("attention kernels compile clean under NVRTC: f64 D=32 with every mask x causal x dropout", "[nvrtc]") {
  if (!nvrtc_here()) return;
  check_all(every_flag(DType::f64, 32), covering_three);
}
TEST_CASE("attention kernels compile clean under NVRTC: f64 D=64 with every mask x causal x dropout", "[nvrtc]") {
  if (!nvrtc_here()) return;
  check_all(every_flag(DType::f64, 64), covering_three);
}

TEST_CASE("attention kernels compile clean under NVRTC: D != Dv and the largest and odd head dims", "[nvrtc]") {
  if (!nvrtc_here()) return;
  check_all({spec(DType::f32, 16, 48, ir::AttentionMask::Bool, false, true),
             spec(DType::f64, 40, 8, ir::AttentionMask::Additive, true, false),
             spec(DType::f32, 256, 256, ir::AttentionMask::None, true, true),
             spec(DType::f64, 256, 256, ir::AttentionMask::Bool, false, false),
             spec(DType::f32, 1, 3, ir::AttentionMask::None, false, false)});
}

TEST_CASE("attention kernels: tiles fit the shared memory and head dims over the limit are a CompileError", "[nvrtc]") {
  for (DType t : {DType::f32, DType::f64})
    for (int64_t d : {1, 16, 64, 128, 256}) {
      const cudagen::AttentionTiles tiles = cudagen::attention_tiles(spec(t, d, d, ir::AttentionMask::None, false, false));
      const int64_t es = static_cast<int64_t>(dtype_size(t));
      CHECK(tiles.fwd_keys >= 1);
      CHECK(tiles.kv_queries >= 1);
      CHECK(tiles.fwd_keys * 2 * d * es <= 48 * 1024);
      CHECK(tiles.kv_queries * (2 * d + 2) * es <= 48 * 1024);
    }
  ir::AttentionGeometry g;
  g.d = 300;
  g.dv = 64;
  REQUIRE_THROWS_AS(cudagen::attention_spec(DType::f32, g), CompileError);
  REQUIRE_THROWS_WITH(cudagen::attention_spec(DType::f32, g), Catch::Contains("256") && Catch::Contains("300"));
  g.d = 64;
  g.dv = 257;
  REQUIRE_THROWS_WITH(cudagen::attention_spec(DType::f64, g), Catch::Contains("256") && Catch::Contains("257"));
  g.dv = 256;
  CHECK(cudagen::attention_spec(DType::f64, g).dv == 256);
  REQUIRE_THROWS_AS(cudagen::attention_spec(DType::f16, g), CompileError);
  REQUIRE_THROWS_AS(cudagen::emit_attention(spec(DType::f32, 512, 16, ir::AttentionMask::None, false, false)),
                    CompileError);
}
