// The CPU backend's counters: what its realizations did. They exist in every
// build (with or without LLVM), so tests can read them.
#pragma once

#include <atomic>
#include <cstdint>

namespace tessel {

struct CpuJitStats {
  std::uint64_t realizations = 0;      // realize() calls
  std::uint64_t kernels_launched = 0;  // fused kernels run (elementwise + reduction + copies)
  std::uint64_t kernels_compiled = 0;  // of those, compiled by LLVM now (not from a cache)
  std::uint64_t kernels_from_disk = 0; // of those, loaded from the disk cache
  std::uint64_t kernels_interpreted = 0;  // launches the interpreter ran while their kernel compiled (jit_async.h)
  std::uint64_t matmuls = 0;
  std::uint64_t matmul_epilogues = 0;  // of those, with a fused elementwise epilogue (one kernel launch each)
  std::uint64_t convs = 0;             // convolution nodes (oneDNN for f32, else the ref loops)
  std::uint64_t attentions = 0;        // attention nodes (the fused kernel; forward and backward each one)
  std::uint64_t fallbacks = 0;         // nodes left to the ref interpreter
  std::uint64_t views = 0;
  std::uint64_t plan_replays = 0;      // of the realizations, replayed from the plan cache (not scheduled)
  double compile_ms = 0;               // LLVM time of kernels_compiled
  std::uint64_t code_drops = 0;        // times every kernel's code was dropped (TESSEL_JIT_MAX_KERNELS reached)
  std::uint64_t kernels_linked = 0;    // kernels whose code is in memory now (not reset)
};
CpuJitStats cpu_jit_stats();
void reset_cpu_jit_stats();

namespace cpujit {

// Relaxed atomics: a cached launch bumps counters without taking a lock.
struct AtomicStats {
  std::atomic<std::uint64_t> realizations{0}, kernels_launched{0}, kernels_compiled{0}, kernels_from_disk{0},
      kernels_interpreted{0}, matmuls{0}, matmul_epilogues{0}, convs{0}, attentions{0}, fallbacks{0}, views{0}, plan_replays{0}, code_drops{0};
  std::atomic<double> compile_ms{0};
};
extern AtomicStats g_stats;

inline void bump(std::atomic<std::uint64_t> AtomicStats::*field, std::uint64_t n = 1) {
  (g_stats.*field).fetch_add(n, std::memory_order_relaxed);
}

}  // namespace cpujit

}  // namespace tessel
