#include "codegen/cpu/cpu_backend.h"

#include "tessel/config.h"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <unordered_map>

#include "codegen/blas/gemm.h"
#include "codegen/executor.h"
#include "codegen/lower.h"
#include "codegen/schedule.h"
#include "runtime/errors.h"
#include "runtime/precompiled_kernels.h"

#if TESSEL_HAS_LLVM
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include "codegen/cpu/llvm_emitter.h"
#include "runtime/orc_jit.h"
#endif

namespace tessel {

namespace {
std::mutex g_stats_mu;
CpuJitStats g_stats;
}  // namespace

CpuJitStats cpu_jit_stats() {
  std::lock_guard<std::mutex> l(g_stats_mu);
  return g_stats;
}
void reset_cpu_jit_stats() {
  std::lock_guard<std::mutex> l(g_stats_mu);
  g_stats = {};
}

#if !TESSEL_HAS_LLVM
Backend* cpu_jit_backend() { return nullptr; }
#else

namespace {

using ir::BufferView;
using ir::Node;
using ir::Op;

void bump(std::uint64_t CpuJitStats::*field, std::uint64_t n = 1) {
  std::lock_guard<std::mutex> l(g_stats_mu);
  g_stats.*field += n;
}

BufferView alloc_dense(DType dt, const Shape& s) {
  BufferView v;
  v.storage = Storage::allocate(static_cast<size_t>(std::max<int64_t>(s.numel(), 1)) * dtype_size(dt));
  v.strides = contiguous_strides(s);
  return v;
}

std::string dump_dir() {
  const char* e = std::getenv("TESSEL_DUMP");
  return e ? e : "";
}

void dump_file(const std::string& name, const std::string& text) {
  std::error_code ec;
  std::filesystem::create_directories(dump_dir(), ec);
  std::ofstream(std::filesystem::path(dump_dir()) / name) << text;
}

// Compiled kernels by structure: a cached launch hashes and compares the
// kernel IR itself and builds no canonical text (that costs more than the
// rest of a small launch).
struct KernelTable {
  std::mutex mu;
  std::unordered_map<kir::Kernel, cpujit::KernelFn*, kir::KernelHash> fns;
};
KernelTable& table() {
  static KernelTable t;
  return t;
}

// pass emit_llvm (+ compile through the kernel cache)
cpujit::KernelFn* compiled(const kir::Kernel& k) {
  {
    std::lock_guard<std::mutex> l(table().mu);
    if (auto it = table().fns.find(k); it != table().fns.end()) return it->second;
  }
  std::string text = k.text();
  // Kernels linked in ahead of time (codegen/aot) come first; with TESSEL_JIT=off nothing else may.
  if (const precompiled::Entry* pk = precompiled::find(text); pk && pk->cpu_fn) {
    precompiled::note_hit(false);
    auto* fn = reinterpret_cast<cpujit::KernelFn*>(pk->cpu_fn);
    std::lock_guard<std::mutex> l(table().mu);
    table().fns.emplace(k, fn);
    return fn;
  }
  if (precompiled::size() > 0) precompiled::note_miss();
  if (precompiled::jit_disabled()) precompiled::throw_jit_disabled("cpu", text);
  // No vector math library: its results differ from libm's in the last bit,
  // and compiled results must equal the ref interpreter's exactly.
  static OrcJit jit([] {
    OrcJitOptions o;
    o.vector_math = VectorMath::none;
    return o;
  }());
  KernelKey key = jit.make_key(text);
  std::string symbol = "tessel_k_" + key.to_hex();
  JitKernel jk = jit.get_or_compile(key, symbol, [&](llvm::LLVMContext& ctx) { return cpujit::emit_llvm(k, symbol, ctx); });
  if (!dump_dir().empty()) {
    dump_file(symbol + ".kir", text);
    llvm::LLVMContext ctx;
    dump_file(symbol + ".ll", cpujit::module_text(*cpujit::emit_llvm(k, symbol, ctx)));
  }
  {
    std::lock_guard<std::mutex> l(g_stats_mu);
    if (jk.origin == CacheOrigin::compiled) {
      ++g_stats.kernels_compiled;
      g_stats.compile_ms += jk.compile_ms;
    } else if (jk.origin == CacheOrigin::disk) {
      ++g_stats.kernels_from_disk;
    }
  }
  if (detail::trace_enabled("jit"))
    detail::trace_line("jit", fmt::format("kernel {}: {} (compile {:.2f} ms, load {:.2f} ms)", symbol,
                                          jk.origin == CacheOrigin::compiled ? "compiled"
                                          : jk.origin == CacheOrigin::disk   ? "from disk cache"
                                                                             : "in memory",
                                          jk.compile_ms, jk.load_ms));
  auto* fn = jk.as<cpujit::KernelFn>();
  std::lock_guard<std::mutex> l(table().mu);
  table().fns.emplace(k, fn);
  return fn;
}

// pass launch: rows [r0, r1) of a lowered kernel.
void run_rows(const lower::Lowered& l, cpujit::KernelFn* fn, int64_t r0, int64_t r1) {
  // Offsets travel in the launch arguments: pass each storage's element 0.
  void* small[32];
  std::vector<void*> large;
  void** bufs = small;
  if (l.buffers.size() > std::size(small)) {
    large.resize(l.buffers.size());
    bufs = large.data();
  }
  for (size_t i = 0; i < l.buffers.size(); ++i) bufs[i] = l.buffers[i].storage->data();
  if (r1 > r0) fn(bufs, l.args.data(), r0, r1);
}

// A node the kernels do not compute, evaluated by the ref interpreter over
// its arguments' values (a clone, so the real node keeps its laziness).
BufferView by_ref(const Node& n, const std::vector<BufferView>& args) {
  auto clone = std::make_shared<Node>(n);
  clone->buffer.reset();
  for (size_t i = 0; i < n.args.size(); ++i) {
    auto leaf = std::make_shared<Node>();
    leaf->op = Op::Input;
    leaf->dtype = n.args[i]->dtype;
    leaf->shape = n.args[i]->shape;
    leaf->buffer = args[i];
    clone->args[i] = leaf;
  }
  clone->requires_grad = false;
  ref_backend().realize({clone}, false);
  return *clone->buffer;
}

// Bands of a matmul with an epilogue hold about this many bytes of product:
// BLAS writes a band, the epilogue reads it back while it is still in L2.
constexpr int64_t kEpilogueBandBytes = 256 * 1024;

class CpuExecutor final : public exec::StepExecutor {
 public:
  BufferView alloc(DType t, const Shape& s) override { return alloc_dense(t, s); }

  void launch(const lower::Lowered& l, exec::Role, const Node*) override {
    run_rows(l, compiled(l.kernel), 0, l.rows);
    bump(&CpuJitStats::kernels_launched);
  }

  BufferView host_eval(const Node& n, const std::vector<BufferView>& args) override {
    bump(&CpuJitStats::fallbacks);
    return by_ref(n, args);
  }

  BufferView matmul(const Node& n, const std::vector<BufferView>& args) override {
    bump(&CpuJitStats::matmuls);
    return by_ref(n, args);
  }

  void matmul_epilogue(const Node& mm, const std::vector<BufferView>& args, const BufferView& out,
                       const lower::Lowered& epi, const Node&) override {
    cpujit::KernelFn* fn = compiled(epi.kernel);
    const Shape& sa = mm.args[0]->shape;
    const int64_t M = sa.dims[0], K = sa.dims[1], N = mm.shape.dims[1];
    auto operand = [&](size_t i) {
      auto op = gemm::operand(mm.args[i]->shape, args[i]);
      TESSEL_ASSERT("run_schedule", op.has_value());  // epilogue operands come in BLAS form
      return *op;
    };
    gemm::Operand a = operand(0), b = operand(1);
    const int64_t es = static_cast<int64_t>(dtype_size(mm.dtype));
    auto at = [&](const BufferView& v) { return static_cast<std::byte*>(v.storage->data()) + v.offset * es; };
    int64_t band = M;
    if (gemm::uses_blas(mm.dtype, M, N, K)) band = std::max<int64_t>(8, kEpilogueBandBytes / std::max<int64_t>(N * es, 1));
    for (int64_t r0 = 0; r0 < M; r0 += band) {
      int64_t r1 = std::min(M, r0 + band);
      gemm::rows(mm.dtype, a, b, at(a.v), at(b.v), at(out), M, N, K, r0, r1);
      run_rows(epi, fn, r0, r1);
    }
    bump(&CpuJitStats::matmuls);
    bump(&CpuJitStats::matmul_epilogues);
    bump(&CpuJitStats::kernels_launched);
  }

  void on_view() override { bump(&CpuJitStats::views); }
};

class CpuBackend final : public Backend {
 public:
  std::string_view name() const override { return "cpu"; }

  void realize(const std::vector<ir::NodePtr>& roots, bool keep_grad_values) override {
    bump(&CpuJitStats::realizations);
    sched::Schedule S = sched::schedule(roots, {.max_inputs = 16, .keep_grad_values = keep_grad_values});
    static std::atomic<int> dump_seq{0};
    if (!dump_dir().empty())
      dump_file(fmt::format("schedule_{}.txt", dump_seq++), ir::to_string(roots) + "\n" + S.to_string());
    CpuExecutor ex;
    exec::run_schedule(ex, roots, S, keep_grad_values);
  }
};

CpuBackend& instance() {
  static CpuBackend b;
  return b;
}

// The default CPU backend wherever LLVM is built in (TESSEL_BACKEND=ref
// forces the interpreter).
const bool g_registered = [] {
  register_cpu_backend(&instance());
  return true;
}();

}  // namespace

Backend* cpu_jit_backend() {
  (void)g_registered;
  return &instance();
}

#endif  // TESSEL_HAS_LLVM

}  // namespace tessel
