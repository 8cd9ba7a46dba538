#include "codegen/aot/object_file.h"

#include "tessel/config.h"

#include <fmt/format.h>

#include "runtime/errors.h"

#if TESSEL_HAS_LLVM
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Linker/Linker.h>
#include <llvm/Support/Host.h>

#include "codegen/cpu/llvm_emitter.h"
#include "runtime/orc_jit.h"
#endif

namespace tessel::aot {

#if !TESSEL_HAS_LLVM

bool cpu_objects_available() { return false; }
CpuObject compile_cpu_object(const std::vector<std::pair<const kir::Kernel*, std::string>>&, const std::string&) {
  throw CompileError("aot: this build of tessel has no LLVM, so it cannot write CPU kernel objects "
                     "(export with options.cpu = false, or rebuild with LLVM 15)");
}

#else

bool cpu_objects_available() { return true; }

namespace {
// The CPU JIT's compiler at O3 with its full pipeline (not the lean one),
// without a vector math library or fast math, so the results equal the JIT's
// and the ref interpreter's. It only compiles: nothing is linked or cached.
OrcJit& aot_compiler() {
  static OrcJit jit([] {
    KernelCache::Options memory_only;
    memory_only.use_disk = false;
    OrcJitOptions o;
    o.cache = std::make_shared<KernelCache>(memory_only);
    o.opt_level = 3;
    o.vector_math = VectorMath::none;
    o.lean = false;
    return o;
  }());
  return jit;
}
}  // namespace

CpuObject compile_cpu_object(const std::vector<std::pair<const kir::Kernel*, std::string>>& kernels,
                             const std::string& cpu) {
  OrcJit& jit = aot_compiler();
  llvm::LLVMContext ctx;
  auto all = std::make_unique<llvm::Module>("tessel_aot", ctx);
  llvm::Linker linker(*all);
  for (const auto& [k, symbol] : kernels) {
    if (linker.linkInModule(cpujit::emit_llvm(*k, symbol, ctx)))
      throw CompileError(fmt::format("aot: linking the module of kernel '{}' failed", symbol));
  }
  CpuObject out;
  out.bytes = jit.compile_object(*all, {.cpu = cpu});  // sets the module's target and data layout
  out.target = all->getTargetTriple() + ";" + (cpu == "host" ? llvm::sys::getHostCPUName().str() : cpu);
  out.compiler = llvm_version();
  return out;
}

#endif

}  // namespace tessel::aot
