// The CPU backend's compiled kernels: its JIT, and per emitter variant a table
// from kernel IR to function, so a cached launch finds its function without
// building the kernel's text. Past TESSEL_JIT_MAX_KERNELS linked kernels the
// code of all of them is dropped at once (a new code generation,
// jit_code_lifetime.h), tables and plans alike.
#pragma once

#include <cstdint>

#include "codegen/cpu/llvm_emitter.h"
#include "codegen/kernel_ir.h"

namespace tessel::cpujit {

/// `k`'s function: emit_llvm (+ compile through the kernel cache), in the
/// variant `options` asks for (llvm_emitter.h: streaming stores, an epilogue
/// over its product). The caller is inside a CodeInUse.
KernelFn* compiled(const kir::Kernel& k, const EmitOptions& options = {});

/// `k`'s function when it needs no compile now (a table hit, an ahead-of-time
/// kernel, an object in the disk cache: as compiled()); else, with
/// jit_async() on, queues its compile on a compile thread and returns null,
/// and the caller computes the launch another way (jit_async.h). With
/// jit_async() off, compiled(). A background compile that failed is rethrown
/// by the next call for that kernel; later calls compile in place (and throw
/// as compiled() does). The caller is inside a CodeInUse.
KernelFn* compiled_if_ready(const kir::Kernel& k, const EmitOptions& options = {});

/// Kernels whose code is linked into the CPU backend's JIT now.
std::uint64_t jit_kernels_linked();

}  // namespace tessel::cpujit
