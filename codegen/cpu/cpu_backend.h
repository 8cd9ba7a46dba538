// The compiled CPU backend ("cpu"): realizes IR by fused kernels compiled with
// LLVM ORC (see schedule.h for the passes). Present only when built with
// LLVM; the counters and the background-compile switches exist in every
// build so tests can read them.
#pragma once

#include "codegen/backend.h"
#include "codegen/cpu/jit_async.h"
#include "codegen/cpu/jit_stats.h"

namespace tessel {

/// The compiled CPU backend, or null in a build without LLVM.
Backend* cpu_jit_backend();

}  // namespace tessel
