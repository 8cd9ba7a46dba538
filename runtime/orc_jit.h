// The CPU JIT: LLVM modules in, host function pointers out, through the
// kernel cache. Built only when TESSEL_HAS_LLVM; this header includes no LLVM
// header, so including it costs nothing.
//
//   OrcJit& jit = OrcJit::global();
//   KernelKey key = jit.make_key(kernel_ir_text);
//   JitKernel k = jit.get_or_compile(key, "fused_0", [&](llvm::LLVMContext& ctx) {
//     return emit_llvm(kernel_ir, ctx);   // std::unique_ptr<llvm::Module>
//   });
//   k.as<void(float*, const float*, std::int64_t)>()(out, in, n);
//
// A kernel whose object file is in the cache (memory or disk) skips IR
// emission, optimization and code generation: the object is linked as is.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/kernel_cache.h"

namespace llvm {
class LLVMContext;
class Module;
}  // namespace llvm

namespace tessel {

/// "LLVM 15.0.6": the compiler part of kernel keys.
std::string llvm_version();
/// Triple, CPU name and the host's enabled CPU features, e.g.
/// "x86_64-pc-linux-gnu;sapphirerapids;+avx,+avx2,+avx512f,...": the target part of kernel keys.
std::string host_target();

/// Vector math library for calls to exp, log, tanh, sin, ... in vectorized loops.
enum class VectorMath {
  automatic,  ///< glibc's libmvec if it loads, else SLEEF, else none
  none,       ///< scalar calls stay scalar (the loop may still vectorize around them)
  libmvec,    ///< glibc's libmvec (_ZGVdN8v_expf, ...)
  sleef,      ///< SLEEF 3 (Sleef_expf8_u10, ...), 1-ulp variants, if libsleef.so.3 is installed
};

struct OrcJitOptions {
  /// Where compiled objects are kept; null: KernelCache::global().
  std::shared_ptr<KernelCache> cache;
  /// LLVM optimization level, 0..3.
  int opt_level = 3;
  VectorMath vector_math = VectorMath::automatic;
  /// Marks every floating-point operation `fast` (reassociation, no NaN/Inf,
  /// ...) before optimizing; off by default, so results match the scalar order.
  bool fast_math = false;
  /// Widest vectors the vectorizers may use in bits (e.g. 512 for AVX-512);
  /// 0 keeps LLVM's choice for the CPU (256 on recent Xeons).
  int prefer_vector_width = 0;
  /// At opt_level >= 2: a short function pass list (clean-up, loop
  /// canonicalization, loop and SLP vectorization) and the Default code
  /// generator level instead of the full O3 pipeline and Aggressive code
  /// generation. Fused kernels are a few loops over loads and arithmetic; the
  /// full pipeline (inlining, unswitching, ...) finds nothing more in them and
  /// costs most of the compile time. Loops that step by a stride known only at
  /// run time stay scalar, and vector loops are not interleaved (see
  /// orc_jit.cpp for what each cut saves).
  bool lean = true;
};

/// One kernel function in the JIT.
struct JitKernel {
  void* address = nullptr;
  /// How this call got it: already in this process, read from the disk cache,
  /// or compiled now.
  CacheOrigin origin = CacheOrigin::memory;
  /// LLVM optimization + code generation (0 unless compiled now).
  double compile_ms = 0;
  /// Linking the object into the JIT and looking the symbol up (0 if it
  /// was already linked).
  double load_ms = 0;

  template <class Fn>
  Fn* as() const {
    return reinterpret_cast<Fn*>(address);
  }
};

struct OrcJitStats {
  std::uint64_t objects_linked = 0;  ///< objects added to the JIT
  std::uint64_t compiles = 0;        ///< modules optimized and compiled by this JIT
  double compile_ms_total = 0;       ///< target machine + optimize + codegen of those compiles
  // Where compile time goes, summed over the compiles (ms):
  double emit_ms_total = 0;            ///< building the modules (the ModuleBuilder callbacks)
  double target_machine_ms_total = 0;  ///< creating target machines
  double optimize_ms_total = 0;        ///< verifier and optimization pipeline
  double codegen_ms_total = 0;         ///< instruction selection to the object file
  double link_ms_total = 0;            ///< adding objects to the JIT, linking and symbol lookup (all links)
};

/// LLVM ORC LLJIT for the host CPU: O3 with loop and SLP vectorization for the
/// host's CPU name and features (AVX2, AVX-512, ...), objects cached by key.
/// Thread-safe; one kernel per key is compiled and linked once per OrcJit.
class OrcJit {
 public:
  /// Builds the kernel's module in `ctx`; called only on a cache miss.
  using ModuleBuilder = std::function<std::unique_ptr<llvm::Module>(llvm::LLVMContext& ctx)>;

  explicit OrcJit(OrcJitOptions options = {});
  ~OrcJit();
  OrcJit(const OrcJit&) = delete;
  OrcJit& operator=(const OrcJit&) = delete;

  /// The process-wide JIT (default options), made on first use.
  static OrcJit& global();

  /// The key of a kernel whose canonical source is `source`, compiled by this
  /// JIT: adds the JIT's own options, llvm_version() and host_target().
  KernelKey make_key(std::string_view source, std::string_view extra_options = {}) const;

  /// The kernel function `symbol` of the object cached under `key`; on a miss
  /// builds the module with `build`, optimizes it, compiles it to an object
  /// file, stores that in the cache and links it. Concurrent calls for one key
  /// compile once. Throws CompileError when the module is invalid, codegen
  /// fails or `symbol` is not defined.
  JitKernel get_or_compile(const KernelKey& key, std::string_view symbol,
                           const ModuleBuilder& build);

  /// Same for a module already built; `module` must live in `context`. Both
  /// are consumed (and dropped unused on a cache hit).
  JitKernel add_module(const KernelKey& key, std::string_view symbol,
                       std::unique_ptr<llvm::LLVMContext> context,
                       std::unique_ptr<llvm::Module> module);

  /// Kernels linked into this JIT and not unlinked since.
  std::size_t linked_kernels() const;

  /// Takes every linked kernel out of the JIT (compiles in flight stay) and
  /// returns the owner of their code: the code stays mapped until the handle's
  /// last copy is gone, then its memory is released. Later calls for the same
  /// keys link the objects again from the kernel cache. The caller must make
  /// sure no function pointer from before is called after the handle dies.
  ///
  ///   std::shared_ptr<void> old = jit.unlink_all();
  ///   // ... wait until no thread runs old kernels ...
  ///   old.reset();   // code memory freed
  std::shared_ptr<void> unlink_all();

  /// Optimizes `module` in place and returns its object file, without
  /// touching the cache or the JIT (for ahead-of-time tools and tests).
  std::vector<char> compile_object(llvm::Module& module);

  /// The CPU an object from compile_object(module, target) is for.
  struct ObjectTarget {
    /// "host": this machine's CPU name and features; else an LLVM CPU name
    /// ("x86-64-v3") with that CPU's own features, for a portable object.
    std::string cpu = "host";
  };
  /// The same pipeline for an object linked into ordinary (PIE) executables
  /// and shared libraries rather than into the JIT: position-independent code
  /// with the small code model, for `target`'s CPU. Ahead-of-time export uses
  /// it, so its kernels are optimized exactly as this JIT's options say.
  ///
  ///   std::vector<char> o = jit.compile_object(*module, {.cpu = "x86-64-v3"});
  std::vector<char> compile_object(llvm::Module& module, const ObjectTarget& target);

  /// The options string folded into make_key, e.g. "O3;veclib=sleef;fast=0;vw=0".
  const std::string& options_string() const;
  /// The vector math library actually in use (automatic resolved).
  VectorMath vector_math() const;
  KernelCache& cache() const;
  OrcJitStats stats() const;
  /// The same, summed over every OrcJit of this process (the CPU backend's own
  /// JIT included), for benchmarks.
  static OrcJitStats process_stats();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessel
