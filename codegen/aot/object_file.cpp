#include "codegen/aot/object_file.h"

#include "tessel/config.h"

#include <fmt/format.h>

#include "runtime/errors.h"

#if TESSEL_HAS_LLVM
#include <llvm/ADT/StringMap.h>
#include <llvm/Analysis/TargetLibraryInfo.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Linker/Linker.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/Host.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Target/TargetOptions.h>

#include <mutex>

#include "codegen/cpu/llvm_emitter.h"
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

CpuObject compile_cpu_object(const std::vector<std::pair<const kir::Kernel*, std::string>>& kernels,
                             const std::string& cpu) {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
  const std::string triple = llvm::sys::getProcessTriple();
  std::string err;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(triple, err);
  if (!target) throw CompileError(fmt::format("aot: no LLVM target for {}: {}", triple, err));
  std::string cpu_name = cpu, features;
  if (cpu == "host") {
    cpu_name = llvm::sys::getHostCPUName().str();
    llvm::StringMap<bool> host;
    llvm::sys::getHostCPUFeatures(host);
    for (const auto& f : host) features += (features.empty() ? "" : ",") + std::string(f.second ? "+" : "-") + f.first().str();
  }
  llvm::TargetOptions to;
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(
      triple, cpu_name, features, to, llvm::Reloc::PIC_, llvm::CodeModel::Small, llvm::CodeGenOpt::Aggressive));
  if (!tm) throw CompileError(fmt::format("aot: cannot make a target machine for {} / {}", triple, cpu_name));

  llvm::LLVMContext ctx;
  auto all = std::make_unique<llvm::Module>("tessel_aot", ctx);
  all->setDataLayout(tm->createDataLayout());
  all->setTargetTriple(triple);
  llvm::Linker linker(*all);
  for (const auto& [k, symbol] : kernels) {
    std::unique_ptr<llvm::Module> m = cpujit::emit_llvm(*k, symbol, ctx);
    m->setDataLayout(tm->createDataLayout());
    m->setTargetTriple(triple);
    if (linker.linkInModule(std::move(m)))
      throw CompileError(fmt::format("aot: linking the module of kernel '{}' failed", symbol));
  }
  {
    std::string msg;
    llvm::raw_string_ostream os(msg);
    if (llvm::verifyModule(*all, &os)) throw CompileError(fmt::format("aot: invalid LLVM module (an emitter bug):\n{}", os.str()));
  }

  // The CPU JIT's pipeline (runtime/orc_jit.cpp) at O3 without a vector math table.
  llvm::TargetLibraryInfoImpl tlii{llvm::Triple(triple)};
  {
    llvm::PipelineTuningOptions pto;
    pto.LoopVectorization = pto.SLPVectorization = pto.LoopUnrolling = pto.LoopInterleaving = true;
    llvm::LoopAnalysisManager lam;
    llvm::FunctionAnalysisManager fam;
    llvm::CGSCCAnalysisManager cgam;
    llvm::ModuleAnalysisManager mam;
    llvm::PassBuilder pb(tm.get(), pto);
    fam.registerPass([&] { return llvm::TargetLibraryAnalysis(tlii); });
    pb.registerModuleAnalyses(mam);
    pb.registerCGSCCAnalyses(cgam);
    pb.registerFunctionAnalyses(fam);
    pb.registerLoopAnalyses(lam);
    pb.crossRegisterProxies(lam, fam, cgam, mam);
    llvm::ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3);
    mpm.run(*all, mam);
  }
  llvm::SmallVector<char, 0> buffer;
  {
    llvm::raw_svector_ostream os(buffer);
    llvm::legacy::PassManager cg;
    cg.add(new llvm::TargetLibraryInfoWrapperPass(tlii));
    if (tm->addPassesToEmitFile(cg, os, nullptr, llvm::CGFT_ObjectFile))
      throw CompileError("aot: the target cannot emit object files");
    cg.run(*all);
  }
  CpuObject out;
  out.bytes.assign(buffer.begin(), buffer.end());
  out.target = triple + ";" + cpu_name;
  out.compiler = "LLVM " LLVM_VERSION_STRING;
  return out;
}

#endif

}  // namespace tessel::aot
