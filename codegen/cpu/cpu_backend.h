// The compiled CPU backend ("cpu"): realizes IR by fused kernels compiled with
// LLVM ORC (see schedule.h for the passes). Present only when built with
// LLVM; the counters exist in every build so tests can read them.
#pragma once

#include <cstdint>

#include "codegen/backend.h"

namespace tessel {

struct CpuJitStats {
  std::uint64_t realizations = 0;      // realize() calls
  std::uint64_t kernels_launched = 0;  // fused kernels run (elementwise + reduction + copies)
  std::uint64_t kernels_compiled = 0;  // of those, compiled by LLVM now (not from a cache)
  std::uint64_t kernels_from_disk = 0; // of those, loaded from the disk cache
  std::uint64_t matmuls = 0;
  std::uint64_t matmul_epilogues = 0;  // of those, with a fused elementwise epilogue (one kernel launch each)
  std::uint64_t fallbacks = 0;         // nodes left to the ref interpreter
  std::uint64_t views = 0;
  double compile_ms = 0;               // LLVM time of kernels_compiled
  std::uint64_t code_drops = 0;        // times every kernel's code was dropped (TESSEL_JIT_MAX_KERNELS reached)
  std::uint64_t kernels_linked = 0;    // kernels whose code is in memory now (not reset)
};
CpuJitStats cpu_jit_stats();
void reset_cpu_jit_stats();

/// The compiled CPU backend, or null in a build without LLVM.
Backend* cpu_jit_backend();

}  // namespace tessel
