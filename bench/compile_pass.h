// The compile_latency figure's work, shared by run_benchmarks and the
// LibTorch-free bench/compile_latency tool so both measure the same thing:
// 12 structurally distinct trees on 64x33, each realized cold (new kernels)
// and then warm, on the compiled CPU backend.
#pragma once

#include <time.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "bench/harness.h"
#include "codegen/backend.h"
#include "codegen/cpu/cpu_backend.h"
#include "dsl/tessel.h"
#include "tessel/config.h"
#if TESSEL_HAS_LLVM
#include "runtime/orc_jit.h"
#endif

namespace bench {

// CPU time of the calling thread: compiles run on it, and it is less
// disturbed than wall time by other work on a shared machine.
inline double thread_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) / 1e6;
}

// Distinct fused kernels: each tree differs in structure, so each needs its own compile.
inline std::vector<std::function<tessel::Tensor(const tessel::Tensor&, const tessel::Tensor&, const tessel::Tensor&)>>
compile_trees() {
  using tessel::Tensor;
  using T = const Tensor&;
  return {
      [](T a, T b, T c) { return Tensor(relu(a * b + c) * a); },
      [](T a, T b, T c) { return Tensor(a + b); },
      [](T a, T b, T c) { return Tensor(a.exp() - b * c); },
      [](T a, T b, T c) { return Tensor(Tensor(a * b).tanh() + c); },
      [](T a, T b, T c) { return Tensor(a.sigmoid() * b - c); },
      [](T a, T b, T c) { return Tensor((a - b) * (a - b) + c.abs()); },
      [](T a, T b, T c) { return Tensor(a * b + c).sum({1}); },
      [](T a, T b, T c) { return softmax(a + b, 1); },
      [](T a, T b, T c) { return log_softmax(a * c, 1); },
      [](T a, T b, T c) { return Tensor((a - b) * (a - b)).mean({1}); },
      [](T a, T b, T c) { return Tensor(a * b).max(1); },
      [](T a, T b, T c) { return Tensor(Tensor(a + 1.0).log() * b.sqrt() + c); },
  };
}

struct CompileRun {
  std::vector<double> per_kernel_ms;  // cold realization minus a warm one, per new kernel
  std::vector<double> per_kernel_cpu_ms;  // the same in CPU time of this thread
  std::vector<double> llvm_ms;        // LLVM's own time per compiled kernel (from the backend's counters)
  // Per compiled kernel, by phase (from the JIT's counters), one entry per tree that compiled.
  std::vector<double> emit_ms, target_machine_ms, optimize_ms, codegen_ms, link_ms;
  uint64_t compiled = 0, from_disk = 0, kernels = 0;
  double startup_ms = 0;
};

inline CompileRun compile_pass() {
  using namespace tessel;
  CompileRun run;
  Tensor a, b, c;
  {  // inputs from the interpreter, so the JIT has compiled nothing before the timings
    BackendOverride r(ref_backend());
    manual_seed(7);
    a = rand({64, 33}), b = rand({64, 33}), c = rand({64, 33});
    a.eval(), b.eval(), c.eval();
  }
  BackendOverride o(*cpu_jit_backend());
  // The latency of a compile on the launching thread: no background compiles.
  struct Synchronous {
    bool prev = jit_async();
    Synchronous() { set_jit_async(false); }
    ~Synchronous() { set_jit_async(prev); }
  } synchronous;
  {  // the first kernel of a process also starts the JIT: counted apart
    double t0 = now_ms();
    Tensor w = a * 3.0 - b;
    w.eval();
    run.startup_ms = now_ms() - t0;
  }
  for (auto& tree : compile_trees()) {
    auto s0 = cpu_jit_stats();
#if TESSEL_HAS_LLVM
    OrcJitStats p0 = OrcJit::process_stats();
#endif
    double t0 = now_ms(), c0 = thread_cpu_ms();
    tree(a, b, c).eval();
    double cold = now_ms() - t0, cold_cpu = thread_cpu_ms() - c0;
    auto s1 = cpu_jit_stats();
#if TESSEL_HAS_LLVM
    OrcJitStats p1 = OrcJit::process_stats();
#endif
    std::vector<double> warm, warm_cpu;
    for (int i = 0; i < 7; ++i) {
      double t = now_ms(), tc = thread_cpu_ms();
      tree(a, b, c).eval();
      warm.push_back(now_ms() - t);
      warm_cpu.push_back(thread_cpu_ms() - tc);
    }
    uint64_t compiled = s1.kernels_compiled - s0.kernels_compiled;
    uint64_t disk = s1.kernels_from_disk - s0.kernels_from_disk;
    uint64_t fresh = compiled + disk;
    run.compiled += compiled;
    run.from_disk += disk;
    run.kernels += fresh;
    if (fresh == 0) continue;
    run.per_kernel_ms.push_back((cold - median(warm)) / static_cast<double>(fresh));
    run.per_kernel_cpu_ms.push_back((cold_cpu - median(warm_cpu)) / static_cast<double>(fresh));
    if (compiled) {
      const double k = static_cast<double>(compiled);
      run.llvm_ms.push_back((s1.compile_ms - s0.compile_ms) / k);
#if TESSEL_HAS_LLVM
      run.emit_ms.push_back((p1.emit_ms_total - p0.emit_ms_total) / k);
      run.target_machine_ms.push_back((p1.target_machine_ms_total - p0.target_machine_ms_total) / k);
      run.optimize_ms.push_back((p1.optimize_ms_total - p0.optimize_ms_total) / k);
      run.codegen_ms.push_back((p1.codegen_ms_total - p0.codegen_ms_total) / k);
      run.link_ms.push_back((p1.link_ms_total - p0.link_ms_total) / k);
#endif
    }
  }
  return run;
}

}  // namespace bench
