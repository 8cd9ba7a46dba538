// Running a compiled CPU kernel over its rows: on the calling thread when it
// is small, else split across the thread pool.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <vector>

#include "codegen/cpu/llvm_emitter.h"
#include "codegen/kernel_ir.h"
#include "codegen/lower.h"

namespace tessel::cpujit {

// The buffers a kernel reads: each storage's element 0 (offsets travel in the
// launch arguments).
struct BufPtrs {
  void* small[32];
  std::vector<void*> large;
  void** ptrs = small;
  explicit BufPtrs(size_t n) {
    if (n > std::size(small)) {
      large.resize(n);
      ptrs = large.data();
    }
  }
};

/// Launches `fn` over all rows, split across the thread pool when large.
/// `args` is the kernel's launch-argument vector (kernel_ir.h).
void launch_kernel(KernelFn* fn, void** bufs, const int64_t* args, size_t nargs, const kir::Kernel& k, int64_t rows);

/// Runs the lowered kernel `l` with its compiled function `fn`.
void run_lowered(const lower::Lowered& l, KernelFn* fn);

}  // namespace tessel::cpujit
