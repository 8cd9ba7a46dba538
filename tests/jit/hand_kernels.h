// Kernels written by hand in the kernel IR and compiled through the CPU
// emitter and the JIT, for tests that drive a kernel's launch arguments
// directly (strides, offsets, row ranges) instead of through tensors.
//
//   kir::Kernel k;  // ... params, load_params, body of load() and op()
//   cpujit::KernelFn* fn = testing::compile_by_hand(k);
//   fn(bufs, args, /*begin row*/ 0, /*end row*/ rows);
#pragma once

#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <string>
#include <vector>

#include "codegen/cpu/llvm_emitter.h"
#include "codegen/kernel_ir.h"
#include "runtime/orc_jit.h"

namespace tessel::testing {

inline kir::Stmt load(int slot, DType t) { return {kir::StmtKind::Load, ir::Op::Add, t, {}, slot}; }
inline kir::Stmt op(ir::Op o, DType t, std::vector<int> args) {
  return {kir::StmtKind::Op, o, t, std::move(args), 0};
}

/// One JIT for the test process, without vector math (the kernels here need none).
inline OrcJit& hand_kernel_jit() {
  static OrcJit jit([] {
    OrcJitOptions o;
    o.vector_math = VectorMath::none;
    return o;
  }());
  return jit;
}

/// `k` compiled (or found in the kernel cache) under the backend's name for its key.
inline cpujit::KernelFn* compile_by_hand(const kir::Kernel& k, const cpujit::EmitOptions& options = {}) {
  OrcJit& jit = hand_kernel_jit();
  KernelKey key = jit.make_key(k.text(), cpujit::kEmitterVersion + cpujit::variant_key(options));
  std::string sym = "tessel_k_" + key.to_hex();  // the backend's name for this key: the cache is shared
  JitKernel j = jit.get_or_compile(key, sym, [&](llvm::LLVMContext& ctx) { return cpujit::emit_llvm(k, sym, ctx, options); });
  return reinterpret_cast<cpujit::KernelFn*>(j.address);
}

}  // namespace tessel::testing
