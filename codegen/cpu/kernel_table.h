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

/// Kernels whose code is linked into the CPU backend's JIT now.
std::uint64_t jit_kernels_linked();

}  // namespace tessel::cpujit
