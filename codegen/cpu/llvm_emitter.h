// kir::Kernel -> LLVM IR (one function), for the CPU backend. No LLVM header
// here: the types are only declared.
//
// The function is `void <symbol>(void** bufs, const int64_t* args, int64_t begin, int64_t end)`:
// bufs[p] points at param p's element 0, args are the launch arguments
// (kernel_ir.h) and [begin, end) is the range of outer rows to run, so a
// thread pool can split it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "codegen/kernel_ir.h"

namespace llvm {
class LLVMContext;
class Module;
}  // namespace llvm

namespace tessel::cpujit {

using KernelFn = void(void** bufs, const int64_t* args, int64_t begin, int64_t end);

/// Changes whenever the code emitted for a kernel changes, so cached objects
/// of an older emitter are not reused (part of the kernel cache key).
inline constexpr const char* kEmitterVersion = "emit2-stream";

std::unique_ptr<llvm::Module> emit_llvm(const kir::Kernel& k, const std::string& symbol, llvm::LLVMContext& ctx);

/// The module's textual LLVM IR (for TESSEL_DUMP).
std::string module_text(const llvm::Module& m);

}  // namespace tessel::cpujit
