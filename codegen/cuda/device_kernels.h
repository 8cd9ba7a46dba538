// Internal to codegen/cuda: what the engines beside the step loop's kernels
// (codegen/cuda/attention_kernels.h) share with cuda_backend.cpp -- compiling
// generated CUDA source exactly as every generated kernel is compiled (NVRTC
// through the kernel cache, same flags, key and target arch, precompiled
// kernels first, TESSEL_JIT=off respected), loading it once per device, and
// the CudaStats counters.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "codegen/cuda/cuda_backend.h"
#include "runtime/cuda/driver.h"

namespace tessel::cudagen::detail {

/// The module of `source` (kernels named by the caller) loaded on GPU
/// `ordinal`, compiled on first use and kept for the process. `text` is the
/// kernels' canonical description: their key in the memory map of loaded
/// modules and in the precompiled registry (an entry found there is loaded
/// instead of compiling), and what TESSEL_JIT=off names when it refuses to
/// compile. Counts kernels_compiled / kernels_from_disk / compile_ms as the
/// step loop's kernels do.
const cuda::Module& load_source(int ordinal, std::string_view text, const std::string& source,
                                const std::string& name);

/// Adds one to a CudaStats counter.
void bump_stat(std::uint64_t CudaStats::*field);

}  // namespace tessel::cudagen::detail
