#include "codegen/cpu/kernel_table.h"

#include <fmt/format.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>

#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include "codegen/cpu/dump.h"
#include "codegen/cpu/jit_code_lifetime.h"
#include "codegen/cpu/jit_stats.h"
#include "codegen/cpu/plan_cache.h"
#include "runtime/errors.h"
#include "runtime/orc_jit.h"
#include "runtime/precompiled_kernels.h"
#include "runtime/trace.h"

namespace tessel::cpujit {

namespace {

// Compiled kernels by structure: a cached launch hashes and compares the
// kernel IR itself and builds no canonical text (that costs more than the
// rest of a small launch).
struct KernelTable {
  std::mutex mu;
  std::unordered_map<kir::Kernel, cpujit::KernelFn*, kir::KernelHash> fns;
};
// One table per emitter variant: plain, streaming, then writing over load param p.
constexpr int kMaxAliasParam = 61;
constexpr int kNumTables = 2 + kMaxAliasParam + 1;
KernelTable* tables() {
  static KernelTable t[kNumTables];
  return t;
}
KernelTable& table(const cpujit::EmitOptions& o) {
  TESSEL_ASSERT("cpu launch", o.output_alias_param <= kMaxAliasParam && !(o.streaming && o.output_alias_param >= 0));
  return tables()[o.output_alias_param >= 0 ? 2 + o.output_alias_param : o.streaming ? 1 : 0];
}

// No vector math library: its results differ from libm's in the last bit,
// and compiled results must equal the ref interpreter's exactly.
OrcJit& cpu_jit() {
  static OrcJit jit([] {
    OrcJitOptions o;
    o.vector_math = VectorMath::none;
    return o;
  }());
  return jit;
}

// Each linked kernel holds pages of code and data (~48 KB resident, and
// memory maps, of which a process gets ~65,000): past this many, every
// kernel's code is dropped at once and the kernels in use are linked again
// from the kernel cache (TESSEL_JIT_MAX_KERNELS; 0: no bound).
std::size_t max_linked_kernels() {
  static const std::size_t n = [] {
    const char* e = std::getenv("TESSEL_JIT_MAX_KERNELS");
    if (!e || !*e) return std::size_t{4096};
    char* end = nullptr;
    unsigned long long v = std::strtoull(e, &end, 10);
    if (*end != '\0') throw ValueError(fmt::format("TESSEL_JIT_MAX_KERNELS='{}' is not a number of kernels; "
                                                    "set it to a count such as 4096, or 0 for no bound", e));
    return static_cast<std::size_t>(v);
  }();
  return n;
}

// A new code generation (jit_code_lifetime.h): unlinks every kernel and
// forgets every pointer into them, tables and plans alike.
void drop_jit_code() {
  static std::mutex one_at_a_time;
  std::lock_guard lock(one_at_a_time);
  OrcJit& jit = cpu_jit();
  const std::size_t linked = jit.linked_kernels();
  if (linked < max_linked_kernels()) return;  // another thread just did
  cpujit::new_code_generation([&](cpujit::Garbage& g) {
    g.push_back(jit.unlink_all());
    for (int i = 0; i < kNumTables; ++i) {
      std::lock_guard l(tables()[i].mu);
      tables()[i].fns.clear();
    }
    drop_plans(g);
  });
  // The objects themselves stay on disk, where relinking reads them.
  if (jit.cache().disk_enabled()) {
    jit.cache().flush();
    jit.cache().clear_memory();
  }
  bump(&AtomicStats::code_drops);
  if (detail::trace_enabled("jit"))
    detail::trace_line("jit", fmt::format("dropped the code of {} linked kernels (TESSEL_JIT_MAX_KERNELS={}); "
                                          "kernels still in use are linked again from the cache",
                                          linked, max_linked_kernels()));
}

}  // namespace

std::uint64_t jit_kernels_linked() { return cpu_jit().linked_kernels(); }

cpujit::KernelFn* compiled(const kir::Kernel& k, const cpujit::EmitOptions& options) {
  KernelTable& T = table(options);
  {
    std::lock_guard<std::mutex> l(T.mu);
    if (auto it = T.fns.find(k); it != T.fns.end()) return it->second;
  }
  std::string text = k.text();
  auto remember = [&](std::uint64_t gen, cpujit::KernelFn* fn) {
    cpujit::insert_if_current(gen, [&] {
      std::lock_guard<std::mutex> l(T.mu);
      T.fns.emplace(k, fn);
    });
    return fn;
  };
  // Kernels linked in ahead of time (codegen/aot) come first; with TESSEL_JIT=off nothing else may.
  // (Their plain variant serves streaming launches; epilogues do not write over
  // their product while ahead-of-time kernels are linked in.)
  if (const precompiled::Entry* pk = options.output_alias_param < 0 ? precompiled::find(text) : nullptr;
      pk && pk->cpu_fn) {
    precompiled::note_hit(false);
    return remember(cpujit::code_generation(), reinterpret_cast<cpujit::KernelFn*>(pk->cpu_fn));
  }
  if (precompiled::size() > 0) precompiled::note_miss();
  if (precompiled::jit_disabled()) precompiled::throw_jit_disabled("cpu", text);
  OrcJit& jit = cpu_jit();
  if (max_linked_kernels() > 0 && jit.linked_kernels() >= max_linked_kernels()) drop_jit_code();
  const std::uint64_t gen = cpujit::code_generation();
  KernelKey key = jit.make_key(text, cpujit::kEmitterVersion + cpujit::variant_key(options));
  std::string symbol = "tessel_k_" + key.to_hex();
  JitKernel jk =
      jit.get_or_compile(key, symbol, [&](llvm::LLVMContext& ctx) { return cpujit::emit_llvm(k, symbol, ctx, options); });
  if (!dump_dir().empty()) {
    dump_file(symbol + ".kir", text);
    llvm::LLVMContext ctx;
    dump_file(symbol + ".ll", cpujit::module_text(*cpujit::emit_llvm(k, symbol, ctx, options)));
  }
  if (jk.origin == CacheOrigin::compiled) {
    bump(&AtomicStats::kernels_compiled);
    g_stats.compile_ms.fetch_add(jk.compile_ms, std::memory_order_relaxed);
  } else if (jk.origin == CacheOrigin::disk) {
    bump(&AtomicStats::kernels_from_disk);
  }
  if (detail::trace_enabled("jit"))
    detail::trace_line("jit", fmt::format("kernel {}: {} (compile {:.2f} ms, load {:.2f} ms)", symbol,
                                          jk.origin == CacheOrigin::compiled ? "compiled"
                                          : jk.origin == CacheOrigin::disk   ? "from disk cache"
                                                                             : "in memory",
                                          jk.compile_ms, jk.load_ms));
  return remember(gen, jk.as<cpujit::KernelFn>());
}

}  // namespace tessel::cpujit
