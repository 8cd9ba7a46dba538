// Every kernel the CUDA backend generates for a few hundred random expression
// trees (elementwise, broadcast, non-contiguous leaves, reductions with their
// prologue/epilogue, multi-root and backward graphs) compiles under NVRTC to
// PTX for compute_80 and compute_90 and to CUBIN for sm_90 with an empty log,
// every variant with it: elementwise plain and vectorized, reductions in one
// pass and split across blocks (both passes).
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "host_executors.h"
#include "random_trees.h"
#include "runtime/cuda/nvrtc.h"
#include "runtime/errors.h"

using namespace cuda_codegen_test;

namespace {
uint64_t test_seed() {
  const char* e = std::getenv("TESSEL_TEST_SEED");
  return e ? std::strtoull(e, nullptr, 10) : 20240607u;
}
}  // namespace

TEST_CASE("generated CUDA kernels of random trees compile clean under NVRTC for compute_80, compute_90 and sm_90",
          "[nvrtc]") {
  if (!tessel::cuda::nvrtc_available()) {
    WARN("built without NVRTC: skipped");
    return;
  }
  const uint64_t seed = test_seed();
  std::printf("nvrtc generated kernels: seed %llu (TESSEL_TEST_SEED overrides)\n", static_cast<unsigned long long>(seed));
  CollectExecutor collect;
  for (int i = 0; i < 100; ++i) {
    TreeGen gen(seed, i);
    Case c = gen.make(i % 4);
    INFO(c.what);
    tessel::cudagen::realize_steps(collect, c.roots, false);
  }
  for (int64_t n : {1, 31, 33, 1000003}) {
    TreeGen gen(seed, 1000 + static_cast<int>(n % 997));
    for (bool red : {false, true}) {
      Case c = gen.make_sized(n, red);
      tessel::cudagen::realize_steps(collect, c.roots, false);
    }
  }
  {
    Case c = TreeGen(seed, 8000).make_every_unary_op();
    tessel::cudagen::realize_steps(collect, c.roots, false);
  }
  {
    Case c = TreeGen(seed, 8001).make_every_reduction();
    tessel::cudagen::realize_steps(collect, c.roots, false);
  }
  std::vector<const tessel::kir::Kernel*> ks;
  int reductions = 0, prods = 0;
  for (auto& [text, k] : collect.kernels) {
    ks.push_back(&k);
    reductions += k.reduce != tessel::kir::ReduceKind::None;
    prods += k.reduce == tessel::kir::ReduceKind::Prod;
  }
  REQUIRE(ks.size() >= 100);
  REQUIRE(reductions >= 20);
  REQUIRE(prods >= 2);  // f64 and i64 accumulators

  struct Target {
    int arch;
    bool cubin;
  };
  const Target targets[] = {{80, false}, {90, false}, {90, true}};
  std::mutex mu;
  std::vector<std::string> failures;
  std::vector<double> ms;
  int vector_f32 = 0;
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next++) < ks.size();) {
      tessel::cudagen::CudaSource src = tessel::cudagen::emit_cuda(*ks[i]);
      for (const Target& t : targets) {
        try {
          tessel::cuda::CompiledKernel out = tessel::cuda::compile(src.source, src.name, {.arch = t.arch, .cubin = t.cubin});
          std::lock_guard<std::mutex> l(mu);
          if (!out.log.empty() && out.log.find_first_not_of(" \n\r\t") != std::string::npos)
            failures.push_back(fmt::format("{} ({}_{}): log not empty:\n{}\n{}", src.name, t.cubin ? "sm" : "compute",
                                           t.arch, out.log, src.source.substr(src.source.find("// tessel kernel"))));
          if (t.cubin) {
            if (out.cubin.empty()) failures.push_back(src.name + ": no CUBIN");
          } else {
            // Every variant the launch may pick is in the module.
            using tessel::cudagen::Variant;
            const std::vector<Variant> vs = tessel::cudagen::variants(*ks[i]);
            const bool red = std::find(vs.begin(), vs.end(), Variant::vector) == vs.end();
            for (Variant v : vs)
              if (out.ptx.find(".entry " + tessel::cudagen::variant_name(src.name, v) + "(") == std::string::npos)
                failures.push_back(fmt::format("{}: no {} in the PTX", src.name, tessel::cudagen::variant_name(src.name, v)));
            // The vectorized variant of an all-f32 kernel reads and writes 16 bytes at a time.
            bool all_f32 = !red;
            for (const tessel::kir::Param& p : ks[i]->params) all_f32 = all_f32 && p.dtype == tessel::DType::f32;
            if (all_f32 && out.ptx.find("st.global.v4.f32") == std::string::npos &&
                out.ptx.find("st.global.v4.b32") == std::string::npos && out.ptx.find("st.global.v4.u32") == std::string::npos)
              failures.push_back(src.name + ": the vectorized variant stores no v4 vector");
            if (all_f32) ++vector_f32;
          }
          if (t.arch == 90 && !t.cubin) ms.push_back(out.compile_ms);
        } catch (const tessel::CompileError& e) {
          std::lock_guard<std::mutex> l(mu);
          failures.push_back(fmt::format("{}: {}\n{}", src.name, e.what(), src.source.substr(src.source.find("// tessel kernel"))));
        }
      }
    }
  };
  // Compile time measured alone (the threaded run below shares the cores).
  std::vector<double> alone;
  for (size_t i = 0; i < ks.size() && i < 15; ++i) {
    tessel::cudagen::CudaSource src = tessel::cudagen::emit_cuda(*ks[i * ks.size() / 15]);
    alone.push_back(tessel::cuda::compile(src.source, src.name, {.arch = 90}).compile_ms);
  }
  std::sort(alone.begin(), alone.end());
  std::printf("nvrtc generated kernels: median PTX compile alone %.1f ms (compute_90, %zu kernels)\n",
              alone[alone.size() / 2], alone.size());
  std::thread other(work);
  work();
  other.join();
  for (size_t i = 0; i < std::min<size_t>(failures.size(), 3); ++i) UNSCOPED_INFO(failures[i]);
  CHECK(failures.empty());
  CHECK(vector_f32 >= 10);
  std::sort(ms.begin(), ms.end());
  std::printf("nvrtc generated kernels: %zu kernels (%d reductions) x 3 targets; median PTX compile %.1f ms (compute_90, 2 threads)\n",
              ks.size(), reductions, ms.empty() ? 0.0 : ms[ms.size() / 2]);
}
