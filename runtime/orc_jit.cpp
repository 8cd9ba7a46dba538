#include "runtime/orc_jit.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string_view>
#include <mutex>
#include <optional>

#include <fmt/format.h>

#include <llvm/ADT/SmallVector.h>
#include <llvm/ADT/StringMap.h>
#include <llvm/ADT/Triple.h>
#include <llvm/Analysis/LoopInfo.h>
#include <llvm/Analysis/ScalarEvolution.h>
#include <llvm/Analysis/ScalarEvolutionExpressions.h>
#include <llvm/Analysis/TargetLibraryInfo.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Operator.h>
#include <llvm/IR/PassManager.h>
#include <llvm/IR/Verifier.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Transforms/InstCombine/InstCombine.h>
#include <llvm/Transforms/Scalar/EarlyCSE.h>
#include <llvm/Transforms/Scalar/LICM.h>
#include <llvm/Transforms/Scalar/LoopPassManager.h>
#include <llvm/Transforms/Scalar/LoopRotation.h>
#include <llvm/Transforms/Scalar/SROA.h>
#include <llvm/Transforms/Scalar/SimplifyCFG.h>
#include <llvm/Transforms/Utils/LCSSA.h>
#include <llvm/Transforms/Utils/LoopSimplify.h>
#include <llvm/Transforms/Utils/LoopUtils.h>
#include <llvm/Transforms/Vectorize/LoopVectorize.h>
#include <llvm/Transforms/Utils/InjectTLIMappings.h>
#include <llvm/Transforms/Vectorize/SLPVectorizer.h>
#include <llvm/Object/ObjectFile.h>
#include <llvm/Object/SymbolSize.h>
#include <llvm/Support/CommandLine.h>
#include <llvm/Support/DynamicLibrary.h>
#include <llvm/Support/Host.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>

#include "runtime/errors.h"
#include "runtime/perf_map.h"
#include "runtime/trace.h"

namespace tessel {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// x86 codegen turns a select whose operand is a load inside a loop into a
// branch (its cmov converter). Kernel selects (where, a pool's running
// choice) test data, so such branches mispredict about half the time: a max
// pool's index kernel ran at 13 ns per element that way. The option exists
// only where the x86 backend is linked in; elsewhere nothing is changed.
void keep_selects_branch_free() {
  auto& options = llvm::cl::getRegisteredOptions();
  auto it = options.find("x86-cmov-converter");
  if (it != options.end())
    if (auto* converter = static_cast<llvm::cl::opt<bool>*>(it->second)) converter->setValue(false);
}

void init_llvm() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    llvm::InitializeNativeTargetAsmParser();
    keep_selects_branch_free();
  });
}

[[noreturn]] void fail(std::string_view what, llvm::Error err) {
  throw CompileError(fmt::format("CPU JIT: {}: {}", what, llvm::toString(std::move(err))));
}

template <class T>
T take(llvm::Expected<T> v, std::string_view what) {
  if (!v) fail(what, v.takeError());
  return std::move(*v);
}

template <class T>
T& take(llvm::Expected<T&> v, std::string_view what) {
  if (!v) fail(what, v.takeError());
  return *v;
}

void check(llvm::Error err, std::string_view what) {
  if (err) fail(what, std::move(err));
}

const char* veclib_name(VectorMath v) {
  switch (v) {
    case VectorMath::automatic: return "auto";
    case VectorMath::none: return "none";
    case VectorMath::libmvec: return "libmvec";
    case VectorMath::sleef: return "sleef";
  }
  return "?";
}

// ---- vector math --------------------------------------------------------
//
// libmvec is the default: it ships with glibc (nothing to install) and, on
// this machine's AVX-512 Xeon, beat SLEEF 3.5's 1-ulp functions by 1.4-3x
// (exp 0.44 vs 0.60, log 0.49 vs 1.35, tanh 1.57 vs 2.73 ns/element at 256
// bits). SLEEF stays selectable where it is installed.
//
// LLVM 15 knows glibc's libmvec only for exp/log/sin/cos/pow without the
// AVX-512 variants, and no SLEEF names for x86 at all, so tessel hands the
// vectorizer its own table (TargetLibraryInfoImpl::addVectorizableFunctions).
// A variant is listed only if the host can pass its vector type in one
// register (else the call ABI would not match) and the library defines it.

struct MathFn {
  const char* name;  // libm name of the double version; float adds "f"
  bool intrinsic;    // also reachable as llvm.<name>.f32 / .f64
  int arity;
};

constexpr MathFn kMathFns[] = {
    {"exp", true, 1},    {"exp2", true, 1},  {"expm1", false, 1}, {"log", true, 1},
    {"log2", true, 1},   {"log10", true, 1}, {"log1p", false, 1}, {"sin", true, 1},
    {"cos", true, 1},    {"tan", false, 1},  {"tanh", false, 1},  {"sinh", false, 1},
    {"cosh", false, 1},  {"asin", false, 1}, {"acos", false, 1},  {"atan", false, 1},
    {"erf", false, 1},   {"pow", true, 2},   {"atan2", false, 2},
};

struct VecTable {
  // VecDesc holds StringRefs: the strings live here, in a deque-like stable store.
  std::vector<std::unique_ptr<std::string>> strings;
  std::vector<llvm::VecDesc> descs;

  llvm::StringRef keep(std::string s) {
    strings.push_back(std::make_unique<std::string>(std::move(s)));
    return *strings.back();
  }
};

// The vector variant of `fn` for `lanes` lanes of f32 (single) or f64, or "".
std::string vector_name(VectorMath lib, const MathFn& fn, bool single, int lanes) {
  const int bits = lanes * (single ? 32 : 64);
  if (lib == VectorMath::sleef) {
    return fmt::format("Sleef_{}{}{}_u10", fn.name, single ? "f" : "d", lanes);
  }
  if (lib == VectorMath::libmvec) {
    const char isa = bits == 128 ? 'b' : bits == 256 ? 'd' : 'e';
    return fmt::format("_ZGV{}N{}{}_{}{}", isa, lanes, fn.arity == 2 ? "vv" : "v", fn.name,
                       single ? "f" : "");
  }
  return {};
}

const char* library_soname(VectorMath lib) {
  switch (lib) {
    case VectorMath::sleef: return "libsleef.so.3";
    case VectorMath::libmvec: return "libmvec.so.1";
    default: return nullptr;
  }
}

void build_vec_table(VectorMath lib, const llvm::StringMap<bool>& features, VecTable& out) {
  const char* soname = library_soname(lib);
  if (!soname) return;
  std::string err;
  auto dl = llvm::sys::DynamicLibrary::getPermanentLibrary(soname, &err);
  if (!dl.isValid()) return;
  auto has = [&](const char* f) {
    auto it = features.find(f);
    return it != features.end() && it->second;
  };
  std::vector<int> widths{128};  // x86-64 always has SSE2
  // libmvec's 256-bit variants need AVX2, SLEEF's dispatch down to AVX.
  if (lib == VectorMath::sleef ? has("avx") : has("avx2")) widths.push_back(256);
  if (has("avx512f")) widths.push_back(512);
  for (const MathFn& fn : kMathFns) {
    for (bool single : {true, false}) {
      const std::string scalar = std::string(fn.name) + (single ? "f" : "");
      for (int bits : widths) {
        const int lanes = bits / (single ? 32 : 64);
        std::string vname = vector_name(lib, fn, single, lanes);
        if (!dl.getAddressOfSymbol(vname.c_str())) continue;
        llvm::StringRef v = out.keep(vname);
        auto vf = llvm::ElementCount::getFixed(lanes);
        out.descs.push_back({out.keep(scalar), v, vf});
        if (fn.intrinsic)
          out.descs.push_back(
              {out.keep(fmt::format("llvm.{}.{}", fn.name, single ? "f32" : "f64")), v, vf});
      }
    }
  }
}

struct Loaded {
  llvm::orc::JITDylib* dylib = nullptr;
  std::string symbol;
  void* address = nullptr;
  CacheOrigin origin = CacheOrigin::memory;
  double compile_ms = 0;
  double load_ms = 0;
};

struct ModulePair {
  std::unique_ptr<llvm::LLVMContext> context;
  std::unique_ptr<llvm::Module> module;
};

// ---- what the lean pipeline leaves out ----------------------------------
//
// bench/compile_latency on the 2-core VM (loaded, so CPU time): 16 ms per
// kernel with the first lean pipeline, ~80% of it code generation; 9.3 ms
// with these cuts and a reused target machine. The hot loops compile to the
// same instructions (checked on relu(a*b+c)*d), and bench/chain_vs_hand and
// strided, broadcast, reduction and softmax kernels ran at the same speed.
//
// - Fused kernels run their innermost dimension twice: a unit-stride loop
//   written to be vectorized, and a general one for strides known only at run
//   time. The loop vectorizer versioned the general loop on "stride == 1" and
//   vectorized it again: a second copy of the unit-stride loop behind run-time
//   checks, which never runs (the kernel takes the unit-stride branch when
//   every stride is 1) and took ~40% of the code generation time. Loops whose
//   accesses move by a run-time stride are left scalar.
// - No interleaving (unrolling) of vectorized loops: the kernels stream
//   through memory, where it gained nothing measurable, and it nearly doubled
//   the work of loop strength reduction in the code generator (~1.2 ms a
//   kernel). Loop strength reduction itself stays: scalar strided loops
//   (broadcasts) ran 2x slower without it.
// - No IndVarSimplify (~0.6 ms): the emitter's loops already count an i64
//   from 0, and the vector loops came out the same without it.

struct KeepStridedLoopsScalar : llvm::PassInfoMixin<KeepStridedLoopsScalar> {
  llvm::PreservedAnalyses run(llvm::Function& f, llvm::FunctionAnalysisManager& am) {
    auto& loops = am.getResult<llvm::LoopAnalysis>(f);
    auto& se = am.getResult<llvm::ScalarEvolutionAnalysis>(f);
    for (llvm::Loop* loop : loops.getLoopsInPreorder()) {
      if (!loop->isInnermost() || !run_time_stride(*loop, se)) continue;
      llvm::addStringMetadataToLoop(loop, "llvm.loop.vectorize.width", 1);
      llvm::addStringMetadataToLoop(loop, "llvm.loop.interleave.count", 1);
    }
    return llvm::PreservedAnalyses::all();  // only loop metadata changed
  }

  // Some load or store address steps by an amount SCEV cannot fold to a constant.
  static bool run_time_stride(const llvm::Loop& loop, llvm::ScalarEvolution& se) {
    for (llvm::BasicBlock* bb : loop.blocks())
      for (llvm::Instruction& inst : *bb)
        if (llvm::Value* ptr = llvm::getLoadStorePointerOperand(&inst))
          if (auto* rec = llvm::dyn_cast<llvm::SCEVAddRecExpr>(se.getSCEV(ptr));
              rec && rec->getLoop() == &loop && !llvm::isa<llvm::SCEVConstant>(rec->getStepRecurrence(se)))
            return true;
    return false;
  }
};

void accumulate(OrcJitStats& into, const OrcJitStats& d) {
  into.objects_linked += d.objects_linked;
  into.compiles += d.compiles;
  into.compile_ms_total += d.compile_ms_total;
  into.emit_ms_total += d.emit_ms_total;
  into.target_machine_ms_total += d.target_machine_ms_total;
  into.optimize_ms_total += d.optimize_ms_total;
  into.codegen_ms_total += d.codegen_ms_total;
  into.link_ms_total += d.link_ms_total;
}

std::mutex g_process_stats_mu;
OrcJitStats g_process_stats;  // every OrcJit of the process

}  // namespace

std::string llvm_version() { return "LLVM " LLVM_VERSION_STRING; }

std::string host_target() {
  llvm::StringMap<bool> features;
  llvm::sys::getHostCPUFeatures(features);
  std::vector<std::string> on;
  for (const auto& f : features)
    if (f.second) on.push_back("+" + f.first().str());
  std::sort(on.begin(), on.end());
  return fmt::format("{};{};{}", llvm::sys::getProcessTriple(),
                     llvm::sys::getHostCPUName().str(), fmt::join(on, ","));
}

struct OrcJit::Impl {
  OrcJitOptions opts;
  std::shared_ptr<KernelCache> cache_owner;
  KernelCache* cache = nullptr;
  std::optional<llvm::orc::JITTargetMachineBuilder> jtmb;
  llvm::CodeGenOpt::Level codegen_level = llvm::CodeGenOpt::Default;  // jtmb's
  std::unique_ptr<llvm::orc::LLJIT> jit;
  VectorMath vecmath = VectorMath::none;
  VecTable vectable;
  std::string options_str;
  std::string target;
  CompileOnce<Loaded> loaded;
  std::atomic<std::uint64_t> dylib_counter{0};
  std::mutex stats_mu;
  OrcJitStats totals;
  // Target machines kept between compiles: making one builds the subtarget's
  // tables again (~0.6 ms). A compile borrows one; they are not safe to share
  // between threads, so concurrent compiles each get their own.
  std::mutex tm_mu;
  std::vector<std::unique_ptr<llvm::TargetMachine>> idle_tms;

  std::unique_ptr<llvm::TargetMachine> borrow_tm() {
    {
      std::lock_guard lock(tm_mu);
      if (!idle_tms.empty()) {
        auto tm = std::move(idle_tms.back());
        idle_tms.pop_back();
        return tm;
      }
    }
    return take(jtmb->createTargetMachine(), "creating the target machine");
  }
  void give_back(std::unique_ptr<llvm::TargetMachine> tm) {
    std::lock_guard lock(tm_mu);
    idle_tms.push_back(std::move(tm));
  }

  void add_stats(const OrcJitStats& delta) {
    {
      std::lock_guard lock(stats_mu);
      accumulate(totals, delta);
    }
    std::lock_guard lock(g_process_stats_mu);
    accumulate(g_process_stats, delta);
  }
  // `phases`, if given, gets the target machine, optimize and codegen times.
  std::vector<char> compile_object(llvm::Module& m, OrcJitStats* phases = nullptr);
  // The pipeline and code generation, for `tm`; `phases` as above.
  std::vector<char> compile_object(llvm::Module& m, llvm::TargetMachine& tm, OrcJitStats* phases);
  std::unique_ptr<llvm::TargetMachine> object_target_machine(const ObjectTarget& target) const;
  void name_for_profilers(llvm::orc::JITDylib& jd, const std::vector<char>& object, const std::string& hex);
  JitKernel obtain(const KernelKey& key, std::string_view symbol,
                   const std::function<ModulePair()>& produce);
};

OrcJit::OrcJit(OrcJitOptions options) : impl_(std::make_unique<Impl>()) {
  init_llvm();
  Impl& I = *impl_;
  I.opts = std::move(options);
  I.opts.opt_level = std::clamp(I.opts.opt_level, 0, 3);
  // TESSEL_JIT_PIPELINE=o3 restores the full pipeline (to compare speed and compile time).
  if (const char* e = std::getenv("TESSEL_JIT_PIPELINE"); e && std::string_view(e) == "o3") I.opts.lean = false;
  I.cache_owner = I.opts.cache;
  I.cache = I.cache_owner ? I.cache_owner.get() : &KernelCache::global();

  I.jtmb = take(llvm::orc::JITTargetMachineBuilder::detectHost(), "detecting the host CPU");
  // detectHost() fills in the host's CPU name and features, so the code uses
  // every vector extension this machine has (AVX2, AVX-512, ...).
  static constexpr llvm::CodeGenOpt::Level kLevels[] = {
      llvm::CodeGenOpt::None, llvm::CodeGenOpt::Less, llvm::CodeGenOpt::Default,
      llvm::CodeGenOpt::Aggressive};
  I.codegen_level = I.opts.lean && I.opts.opt_level >= 2 ? llvm::CodeGenOpt::Default : kLevels[I.opts.opt_level];
  I.jtmb->setCodeGenOptLevel(I.codegen_level);
  // Code model and relocations stay at LLVM's JIT defaults (large code model):
  // the objects we cache are linked wherever the JIT's memory manager puts
  // them, possibly far from the libraries they call.
  I.target = host_target();

  I.jit = take(llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(*I.jtmb).create(),
               "creating the LLJIT");
  const char prefix = I.jit->getDataLayout().getGlobalPrefix();
  I.jit->getMainJITDylib().addGenerator(take(
      llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(prefix),
      "looking up process symbols"));

  // Resolve the vector math library: the first one that loads wins.
  llvm::StringMap<bool> features;
  llvm::sys::getHostCPUFeatures(features);
  std::vector<VectorMath> candidates;
  if (I.opts.vector_math == VectorMath::automatic)
    candidates = {VectorMath::libmvec, VectorMath::sleef};
  else if (I.opts.vector_math != VectorMath::none)
    candidates = {I.opts.vector_math};
  for (VectorMath lib : candidates) {
    VecTable table;
    build_vec_table(lib, features, table);
    if (table.descs.empty()) continue;
    auto gen = llvm::orc::DynamicLibrarySearchGenerator::Load(library_soname(lib), prefix);
    if (!gen) {
      llvm::consumeError(gen.takeError());
      continue;
    }
    I.jit->getMainJITDylib().addGenerator(std::move(*gen));
    I.vecmath = lib;
    I.vectable = std::move(table);
    break;
  }
  if (I.opts.vector_math != VectorMath::automatic && I.opts.vector_math != VectorMath::none &&
      I.vecmath != I.opts.vector_math && detail::trace_enabled("jit"))
    detail::trace_line("jit", fmt::format("vector math library '{}' not available; using none",
                                          veclib_name(I.opts.vector_math)));

  // "lean2": the lean pipeline's second version; a cache keeps objects of the first apart.
  I.options_str = fmt::format("O{};veclib={};fast={};vw={}{}", I.opts.opt_level,
                              veclib_name(I.vecmath), I.opts.fast_math ? 1 : 0,
                              I.opts.prefer_vector_width,
                              I.opts.lean && I.opts.opt_level >= 2 ? ";lean2" : "");
}

OrcJit::~OrcJit() = default;

OrcJit& OrcJit::global() {
  static OrcJit jit;
  return jit;
}

KernelKey OrcJit::make_key(std::string_view source, std::string_view extra_options) const {
  std::string options = impl_->options_str;
  if (!extra_options.empty()) {
    options += ';';
    options += extra_options;
  }
  return tessel::make_key(source, options, llvm_version(), impl_->target);
}

const std::string& OrcJit::options_string() const { return impl_->options_str; }
VectorMath OrcJit::vector_math() const { return impl_->vecmath; }
KernelCache& OrcJit::cache() const { return *impl_->cache; }

OrcJitStats OrcJit::stats() const {
  std::lock_guard lock(impl_->stats_mu);
  return impl_->totals;
}

OrcJitStats OrcJit::process_stats() {
  std::lock_guard lock(g_process_stats_mu);
  return g_process_stats;
}

std::size_t OrcJit::linked_kernels() const { return impl_->loaded.size(); }

namespace {
// Unlinked kernels' JITDylibs: removing them from the session releases their
// code and data memory.
struct UnlinkedCode {
  llvm::orc::ExecutionSession* session = nullptr;
  std::vector<std::shared_ptr<const Loaded>> kernels;
  ~UnlinkedCode() {
    for (const auto& k : kernels)
      if (k->dylib) llvm::consumeError(session->removeJITDylib(*k->dylib));
  }
};
}  // namespace

std::shared_ptr<void> OrcJit::unlink_all() {
  auto out = std::make_shared<UnlinkedCode>();
  out->session = &impl_->jit->getExecutionSession();
  out->kernels = impl_->loaded.take_finished();
  return out;
}

std::vector<char> OrcJit::compile_object(llvm::Module& module) {
  return impl_->compile_object(module);
}

std::vector<char> OrcJit::compile_object(llvm::Module& module, const ObjectTarget& target) {
  return impl_->compile_object(module, *impl_->object_target_machine(target), nullptr);
}

// Not one of the JIT's target machines: those use the large code model and
// static relocations (JIT memory may sit far from the libraries it calls),
// and an object for ordinary executables needs neither.
std::unique_ptr<llvm::TargetMachine> OrcJit::Impl::object_target_machine(const ObjectTarget& target) const {
  const std::string triple = llvm::sys::getProcessTriple();
  std::string err;
  const llvm::Target* t = llvm::TargetRegistry::lookupTarget(triple, err);
  if (!t) throw CompileError(fmt::format("CPU JIT: no LLVM target for {}: {}", triple, err));
  std::string cpu = target.cpu, features;
  if (cpu == "host") {
    cpu = llvm::sys::getHostCPUName().str();
    llvm::StringMap<bool> host;
    llvm::sys::getHostCPUFeatures(host);
    for (const auto& f : host) features += (features.empty() ? "" : ",") + std::string(f.second ? "+" : "-") + f.first().str();
  }
  std::unique_ptr<llvm::TargetMachine> tm(t->createTargetMachine(triple, cpu, features, llvm::TargetOptions(),
                                                                 llvm::Reloc::PIC_, llvm::CodeModel::Small,
                                                                 codegen_level));
  if (!tm) throw CompileError(fmt::format("CPU JIT: cannot make a target machine for {} / {}", triple, cpu));
  return tm;
}

std::vector<char> OrcJit::Impl::compile_object(llvm::Module& m, OrcJitStats* phases) {
  auto t0 = Clock::now();
  std::unique_ptr<llvm::TargetMachine> tm = borrow_tm();
  struct GiveBack {
    Impl* self;
    std::unique_ptr<llvm::TargetMachine>& tm;
    ~GiveBack() { self->give_back(std::move(tm)); }
  } give_back_at_exit{this, tm};
  if (phases) phases->target_machine_ms_total = ms_since(t0);
  return compile_object(m, *tm, phases);
}

std::vector<char> OrcJit::Impl::compile_object(llvm::Module& m, llvm::TargetMachine& tm, OrcJitStats* phases) {
  auto t0 = Clock::now();
  m.setDataLayout(tm.createDataLayout());
  m.setTargetTriple(tm.getTargetTriple().str());

  {
    std::string msg;
    llvm::raw_string_ostream os(msg);
    if (llvm::verifyModule(m, &os))
      throw CompileError(fmt::format("CPU JIT: LLVM module '{}' is invalid (a bug in the "
                                     "emitter):\n{}",
                                     m.getName().str(), os.str()));
  }

  for (llvm::Function& f : m) {
    if (f.isDeclaration()) continue;
    if (opts.prefer_vector_width > 0)
      f.addFnAttr("prefer-vector-width", std::to_string(opts.prefer_vector_width));
    if (opts.fast_math) {
      for (const char* a : {"unsafe-fp-math", "no-infs-fp-math", "no-nans-fp-math",
                            "no-signed-zeros-fp-math", "approx-func-fp-math"})
        f.addFnAttr(a, "true");
      for (llvm::BasicBlock& bb : f)
        for (llvm::Instruction& inst : bb)
          if (llvm::isa<llvm::FPMathOperator>(inst)) inst.setFast(true);
    }
  }

  llvm::Triple triple(m.getTargetTriple());
  llvm::TargetLibraryInfoImpl tlii(triple);
  if (!vectable.descs.empty()) tlii.addVectorizableFunctions(vectable.descs);

  // The new pass manager's O3 pipeline, with the loop and SLP vectorizers.
  {
    llvm::PipelineTuningOptions pto;
    pto.LoopVectorization = opts.opt_level >= 2;
    pto.SLPVectorization = opts.opt_level >= 2;
    pto.LoopUnrolling = opts.opt_level >= 2;
    pto.LoopInterleaving = opts.opt_level >= 2;
    llvm::LoopAnalysisManager lam;
    llvm::FunctionAnalysisManager fam;
    llvm::CGSCCAnalysisManager cgam;
    llvm::ModuleAnalysisManager mam;
    llvm::PassBuilder pb(&tm, pto);
    fam.registerPass([&] { return llvm::TargetLibraryAnalysis(tlii); });
    pb.registerModuleAnalyses(mam);
    pb.registerCGSCCAnalyses(cgam);
    pb.registerFunctionAnalyses(fam);
    pb.registerLoopAnalyses(lam);
    pb.crossRegisterProxies(lam, fam, cgam, mam);
    static const llvm::OptimizationLevel kLevels[] = {
        llvm::OptimizationLevel::O0, llvm::OptimizationLevel::O1, llvm::OptimizationLevel::O2,
        llvm::OptimizationLevel::O3};
    llvm::ModulePassManager mpm;
    if (opts.lean && opts.opt_level >= 2) {
      llvm::FunctionPassManager fpm;
      fpm.addPass(llvm::SROAPass());
      fpm.addPass(llvm::EarlyCSEPass(/*UseMemorySSA=*/false));
      fpm.addPass(llvm::InstCombinePass());
      fpm.addPass(llvm::SimplifyCFGPass());
      fpm.addPass(llvm::LoopSimplifyPass());
      fpm.addPass(llvm::LCSSAPass());
      {
        llvm::LoopPassManager lpm;
        lpm.addPass(llvm::LoopRotatePass());
        lpm.addPass(llvm::LICMPass(llvm::LICMOptions()));
        fpm.addPass(llvm::createFunctionToLoopPassAdaptor(std::move(lpm), /*UseMemorySSA=*/true));
      }
      // The vector-library mappings (libmvec/SLEEF) reach the vectorizers
      // only through this pass, as in LLVM's default pipeline.
      fpm.addPass(llvm::InjectTLIMappings());
      fpm.addPass(KeepStridedLoopsScalar());
      fpm.addPass(llvm::LoopVectorizePass(
          llvm::LoopVectorizeOptions(/*InterleaveOnlyWhenForced=*/true, /*VectorizeOnlyWhenForced=*/false)));
      fpm.addPass(llvm::SLPVectorizerPass());
      fpm.addPass(llvm::EarlyCSEPass(/*UseMemorySSA=*/false));
      fpm.addPass(llvm::InstCombinePass());
      fpm.addPass(llvm::SimplifyCFGPass());
      mpm.addPass(llvm::createModuleToFunctionPassAdaptor(std::move(fpm)));
    } else {
      mpm = opts.opt_level == 0 ? pb.buildO0DefaultPipeline(llvm::OptimizationLevel::O0)
                                : pb.buildPerModuleDefaultPipeline(kLevels[opts.opt_level]);
    }
    mpm.run(m, mam);
  }
  if (phases) phases->optimize_ms_total = ms_since(t0);
  t0 = Clock::now();

  // Code generation still runs on the legacy pass manager in LLVM 15.
  llvm::SmallVector<char, 0> buffer;
  {
    llvm::raw_svector_ostream os(buffer);
    llvm::legacy::PassManager cg;
    cg.add(new llvm::TargetLibraryInfoWrapperPass(tlii));
    if (tm.addPassesToEmitFile(cg, os, nullptr, llvm::CGFT_ObjectFile))
      throw CompileError("CPU JIT: the target cannot emit object files");
    cg.run(m);
  }
  if (phases) phases->codegen_ms_total = ms_since(t0);
  return std::vector<char>(buffer.begin(), buffer.end());
}

// Names every function of a linked kernel object in the profiler's map
// (TESSEL_PERF_MAP): sizes from the object's symbol table, addresses from the JIT.
void OrcJit::Impl::name_for_profilers(llvm::orc::JITDylib& jd, const std::vector<char>& object,
                                      const std::string& hex) {
  auto file = llvm::object::ObjectFile::createObjectFile(
      llvm::MemoryBufferRef(llvm::StringRef(object.data(), object.size()), "kernel"));
  if (!file) {
    llvm::consumeError(file.takeError());
    return;
  }
  for (const auto& [sym, size] : llvm::object::computeSymbolSizes(**file)) {
    auto type = sym.getType();
    auto name = sym.getName();
    if (!type || !name || *type != llvm::object::SymbolRef::ST_Function) {
      if (!type) llvm::consumeError(type.takeError());
      if (!name) llvm::consumeError(name.takeError());
      continue;
    }
    auto addr = jit->lookup(jd, *name);
    if (!addr) {
      llvm::consumeError(addr.takeError());
      continue;
    }
    // Kernel symbols carry their key already (tessel_k_<key>); a helper symbol gets it added.
    const std::string named = name->contains(hex) ? name->str() : fmt::format("{}@{}", name->str(), hex);
    detail::perf_map_add(addr->getValue(), size, named);
  }
}

JitKernel OrcJit::Impl::obtain(const KernelKey& key, std::string_view symbol,
                               const std::function<ModulePair()>& produce) {
  bool ran = false;
  std::shared_ptr<const Loaded> loaded = this->loaded.get_or_compile(
      key,
      [&]() -> Loaded {
        Loaded out;
        out.symbol = std::string(symbol);
        CacheOrigin origin = CacheOrigin::memory;
        OrcJitStats delta;
        auto fetch = [&] {
          return cache->get_or_compile(
              key,
              [&] {
                auto t0 = Clock::now();
                ModulePair mp = produce();
                if (!mp.module)
                  throw CompileError(fmt::format("CPU JIT: no module was built for kernel {}",
                                                 key.to_hex()));
                delta.emit_ms_total = ms_since(t0);
                t0 = Clock::now();
                std::vector<char> bytes = compile_object(*mp.module, &delta);
                out.compile_ms = ms_since(t0);
                mp.module.reset();  // before its context
                return bytes;
              },
              &origin);
        };
        // Each kernel gets its own JITDylib, so kernels may reuse symbol names.
        const std::string hex = key.to_hex();
        auto link = [&](const KernelCache::BytesPtr& object) {
          llvm::orc::JITDylib& jd = take(
              jit->createJITDylib(fmt::format("tessel_{}_{}", hex, dylib_counter.fetch_add(1))),
              "creating a JITDylib");
          jd.addToLinkOrder(jit->getMainJITDylib());
          check(jit->addObjectFile(jd, llvm::MemoryBuffer::getMemBufferCopy(
                                           llvm::StringRef(object->data(), object->size()),
                                           "tessel_" + hex + ".o")),
                fmt::format("adding the object of kernel {}", hex));
          return std::pair<llvm::orc::JITDylib*, llvm::orc::ExecutorAddr>(
              &jd, take(jit->lookup(jd, out.symbol), fmt::format("looking up '{}' in kernel {}", out.symbol, hex)));
        };
        KernelCache::BytesPtr object = fetch();
        auto t1 = Clock::now();
        std::pair<llvm::orc::JITDylib*, llvm::orc::ExecutorAddr> linked;
        try {
          linked = link(object);
        } catch (const CompileError& e) {
          if (origin == CacheOrigin::compiled) throw;
          // A cached object that passed its checksum but does not link or lacks
          // the symbol (written under the same key by a different build): drop
          // it and compile, never run it.
          if (detail::trace_enabled("jit"))
            detail::trace_line("jit", fmt::format("kernel {}: cached object unusable ({}); recompiling", hex, e.what()));
          cache->erase(key);
          object = fetch();
          t1 = Clock::now();
          linked = link(object);
        }
        out.origin = origin;
        if (origin == CacheOrigin::compiled) {
          delta.compiles = 1;
          delta.compile_ms_total = out.compile_ms;
        }
        llvm::orc::JITDylib& jd = *linked.first;
        llvm::orc::ExecutorAddr addr = linked.second;
        if (detail::perf_map_enabled()) name_for_profilers(jd, *object, hex);
        out.dylib = &jd;
        out.address = addr.toPtr<void*>();
        out.load_ms = ms_since(t1);
        delta.objects_linked = 1;
        delta.link_ms_total = out.load_ms;
        add_stats(delta);
        return out;
      },
      &ran);

  JitKernel k;
  k.origin = ran ? loaded->origin : CacheOrigin::memory;
  k.compile_ms = ran ? loaded->compile_ms : 0;
  k.load_ms = ran ? loaded->load_ms : 0;
  if (symbol == loaded->symbol) {
    k.address = loaded->address;
  } else {
    llvm::orc::ExecutorAddr addr =
        take(jit->lookup(*loaded->dylib, llvm::StringRef(symbol.data(), symbol.size())),
             fmt::format("looking up '{}' in kernel {}", symbol, key.to_hex()));
    k.address = addr.toPtr<void*>();
  }
  return k;
}

JitKernel OrcJit::get_or_compile(const KernelKey& key, std::string_view symbol,
                                 const ModuleBuilder& build) {
  return impl_->obtain(key, symbol, [&] {
    ModulePair mp;
    mp.context = std::make_unique<llvm::LLVMContext>();
    mp.module = build(*mp.context);
    return mp;
  });
}

JitKernel OrcJit::add_module(const KernelKey& key, std::string_view symbol,
                             std::unique_ptr<llvm::LLVMContext> context,
                             std::unique_ptr<llvm::Module> module) {
  if (module && context && &module->getContext() != context.get())
    throw ValueError("OrcJit::add_module: the module does not live in the given context");
  ModulePair mp{std::move(context), std::move(module)};
  JitKernel k = impl_->obtain(key, symbol, [&] { return std::move(mp); });
  mp.module.reset();
  return k;
}

}  // namespace tessel
