#include "codegen/cpu/cpu_backend.h"

#include "tessel/config.h"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <unordered_map>

#include <xxhash.h>

#include "codegen/blas/gemm.h"
#include "codegen/executor.h"
#include "codegen/lower.h"
#include "codegen/schedule.h"
#include "runtime/errors.h"
#include "runtime/precompiled_kernels.h"
#include "runtime/thread_pool.h"

#if TESSEL_HAS_LLVM
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include "codegen/cpu/jit_code_lifetime.h"
#include "codegen/cpu/llvm_emitter.h"
#include "runtime/orc_jit.h"
#endif

namespace tessel {

namespace {
// Relaxed atomics: a cached launch bumps counters without taking a lock.
struct AtomicStats {
  std::atomic<std::uint64_t> realizations{0}, kernels_launched{0}, kernels_compiled{0}, kernels_from_disk{0},
      matmuls{0}, matmul_epilogues{0}, fallbacks{0}, views{0}, code_drops{0};
  std::atomic<double> compile_ms{0};
};
AtomicStats g_stats;
std::uint64_t jit_kernels_linked();  // 0 without LLVM
}  // namespace

CpuJitStats cpu_jit_stats() {
  constexpr auto r = std::memory_order_relaxed;
  CpuJitStats s;
  s.realizations = g_stats.realizations.load(r);
  s.kernels_launched = g_stats.kernels_launched.load(r);
  s.kernels_compiled = g_stats.kernels_compiled.load(r);
  s.kernels_from_disk = g_stats.kernels_from_disk.load(r);
  s.matmuls = g_stats.matmuls.load(r);
  s.matmul_epilogues = g_stats.matmul_epilogues.load(r);
  s.fallbacks = g_stats.fallbacks.load(r);
  s.code_drops = g_stats.code_drops.load(r);
  s.kernels_linked = jit_kernels_linked();
  s.views = g_stats.views.load(r);
  s.compile_ms = g_stats.compile_ms.load(r);
  return s;
}
void reset_cpu_jit_stats() {
  constexpr auto r = std::memory_order_relaxed;
  for (auto* c : {&g_stats.realizations, &g_stats.kernels_launched, &g_stats.kernels_compiled,
                  &g_stats.kernels_from_disk, &g_stats.matmuls, &g_stats.matmul_epilogues, &g_stats.fallbacks,
                  &g_stats.views, &g_stats.code_drops})
    c->store(0, r);
  g_stats.compile_ms.store(0, r);
}

#if !TESSEL_HAS_LLVM
Backend* cpu_jit_backend() { return nullptr; }
namespace {
std::uint64_t jit_kernels_linked() { return 0; }
}  // namespace
#else

namespace {

using ir::BufferView;
using ir::Node;
using ir::Op;

void bump(std::atomic<std::uint64_t> AtomicStats::*field, std::uint64_t n = 1) {
  (g_stats.*field).fetch_add(n, std::memory_order_relaxed);
}

std::string dump_dir() {
  const char* e = std::getenv("TESSEL_DUMP");
  return e ? e : "";
}
// Read once: a cached realization must not scan the environment. (Paths that
// compile or schedule still read TESSEL_DUMP live, so setting it at run time
// dumps every kernel compiled from then on.)
bool dump_at_start() {
  static const bool on = !dump_dir().empty();
  return on;
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

std::uint64_t jit_kernels_linked() { return cpu_jit().linked_kernels(); }

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

struct PlanCache;
PlanCache& plan_cache();
void drop_plans(cpujit::Garbage& g);

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

// pass emit_llvm (+ compile through the kernel cache), in the variant `options`
// asks for (llvm_emitter.h: streaming stores, an epilogue over its product).
// The caller is inside a CodeInUse.
cpujit::KernelFn* compiled(const kir::Kernel& k, const cpujit::EmitOptions& options = {}) {
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

// pass launch: rows [r0, r1) of a kernel over `bufs`.
// Threads: a chunk of work should be worth a wake-up (tens of microseconds),
// so a kernel runs on the calling thread, with no synchronization at all,
// unless it has at least two chunks of kMinChunkElems domain elements.
// Every output element is computed by exactly one call with the same code,
// so results do not depend on the thread count.
constexpr int64_t kMinChunkElems = int64_t{1} << 16;

// The buffers a kernel reads: each storage's element 0 (offsets travel in the
// launch arguments).
struct BufPtrs {
  void* small[32];
  std::vector<void*> large;
  void** ptrs = small;
  explicit BufPtrs(size_t n) {
    if (n > std::size(small)) {
      large.resize(n);
      ptrs = large.data();
    }
  }
};

// Launches `fn` over all rows, split across the thread pool when large.
// `args` is the kernel's launch-argument vector (kernel_ir.h); only a plain
// elementwise kernel (reduce_rank 0) with few rows is split along its last
// dim, which rewrites the dims and offsets of its store and load slots.
void launch_kernel(cpujit::KernelFn* fn, void** bufs, const int64_t* args, size_t nargs, const kir::Kernel& k,
                   int64_t rows) {
  if (rows <= 0) return;
  const size_t R = static_cast<size_t>(k.rank);
  int64_t domain = 1;
  for (size_t d = 0; d < R; ++d) domain *= args[d];
  if (domain < 2 * kMinChunkElems) {
    fn(bufs, args, 0, rows);
    return;
  }
  const int64_t per_row = domain / rows;
  const int64_t row_grain = std::max<int64_t>(1, (kMinChunkElems + per_row - 1) / per_row);
  if (k.reduce_rank > 0 || rows / row_grain >= 2 * num_threads()) {
    parallel_for(rows, row_grain, [&](int64_t b, int64_t e) { fn(bufs, args, b, e); });
    return;
  }
  // Few long rows (a 1-D tensor is one row): split the last dim into windows.
  const size_t slots = k.moving_slots();  // the store, loads and coordinates
  const int64_t cols = args[R - 1];
  const int64_t col_grain = std::max<int64_t>(1, kMinChunkElems / std::max<int64_t>(rows, 1));
  parallel_for(cols, col_grain, [&](int64_t b, int64_t e) {
    std::vector<int64_t> a(args, args + nargs);
    a[R - 1] = e - b;
    for (size_t sl = 0; sl < slots; ++sl) {
      size_t base = k.slot_base(static_cast<int>(sl));
      a[base] += b * a[base + R];  // offset += start * (stride of the last dim)
    }
    fn(bufs, a.data(), 0, rows);
  });
}

void run_lowered(const lower::Lowered& l, cpujit::KernelFn* fn) {
  BufPtrs bufs(l.buffers.size());
  for (size_t i = 0; i < l.buffers.size(); ++i) bufs.ptrs[i] = l.buffers[i].storage->data();
  launch_kernel(fn, bufs.ptrs, l.args.data(), l.args.size(), l.kernel, l.rows);
}


// Bands of a matmul with an epilogue hold about half of L2 of product: BLAS
// writes a band, the epilogue reads it back while it is still in L2. Bands
// are not smaller than that: each BLAS call packs B again (measured: 256 KiB
// bands made a [1024,784]x[784,256] product + epilogue 10% slower than one
// sgemm and a separate loop; half of a 2 MiB L2 matches it).
int64_t epilogue_band_bytes() {
  static const int64_t bytes = [] {
    long l2 = ::sysconf(_SC_LEVEL2_CACHE_SIZE);
    return l2 > 0 ? std::max<int64_t>(l2 / 2, 256 * 1024) : int64_t{1} << 20;
  }();
  return bytes;
}

// What one launch did, for the plan cache: the kernel, its arguments and the
// storages it read and wrote.
struct Recorded {
  cpujit::KernelFn* fn;
  cpujit::EmitOptions variant;
  const Node* node;  // null for copies
  lower::Lowered l;
};

// Whether every load of param p reads with the store's offset and strides
// (so an epilogue may write over p's memory element for element).
bool same_slot_layout(const lower::Lowered& l, size_t p) {
  const kir::Kernel& k = l.kernel;
  const size_t R = static_cast<size_t>(k.rank);
  const size_t store = k.slot_base(0);
  for (size_t s = 0; s < k.load_params.size(); ++s) {
    if (static_cast<size_t>(k.load_params[s]) != p) continue;
    const size_t load = k.slot_base(static_cast<int>(s + 1));
    for (size_t i = 0; i <= R; ++i)
      if (l.args[load + i] != l.args[store + i]) return false;
  }
  return true;
}

class CpuExecutor final : public exec::StepExecutor {
 public:
  // Set while a realization is recorded for the plan cache; anything a plan
  // cannot replay (copies, matmuls, fallbacks, views) clears `plannable`.
  std::vector<Recorded>* record = nullptr;
  bool plannable = true;

  BufferView alloc(DType t, const Shape& s) override { return host_dense(t, s); }
  // Not while ahead-of-time kernels are linked in: they have no such variant,
  // and a program built with them must not compile.
  bool epilogue_over_product() const override { return precompiled::size() == 0 && !precompiled::jit_disabled(); }

  void launch(const lower::Lowered& l, exec::Role role, const Node* node) override {
    const cpujit::EmitOptions variant{.streaming = cpujit::wants_streaming(l.kernel, l.args.data(), l.rows)};
    cpujit::KernelFn* fn = compiled(l.kernel, variant);
    run_lowered(l, fn);
    bump(&AtomicStats::kernels_launched);
    if (record) {
      if (node && (role == exec::Role::elementwise || role == exec::Role::reduce)) record->push_back({fn, variant, node, l});
      else plannable = false;
    }
  }

  BufferView host_eval(const Node& n, const std::vector<BufferView>& args) override {
    plannable = false;
    bump(&AtomicStats::fallbacks);
    return eval_with_ref(n, args);
  }

  BufferView matmul(const Node& n, const std::vector<BufferView>& args) override {
    plannable = false;
    bump(&AtomicStats::matmuls);
    return eval_with_ref(n, args);
  }

  void matmul_epilogue(const Node& mm, const std::vector<BufferView>& args, const BufferView& out,
                       const lower::Lowered& epi, const Node&) override {
    plannable = false;
    // Written over the product (epilogue_over_product): the product's load
    // param shares the output's memory, offset and strides.
    cpujit::EmitOptions variant;
    for (size_t p = 1; p < epi.buffers.size(); ++p)
      if (epi.buffers[p].storage == epi.buffers[0].storage) {
        TESSEL_ASSERT("matmul epilogue", variant.output_alias_param < 0 && same_slot_layout(epi, p));
        variant.output_alias_param = static_cast<int>(p);
      }
    cpujit::KernelFn* fn = compiled(epi.kernel, variant);
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
    if (gemm::uses_blas(mm.dtype, M, N, K)) band = std::max<int64_t>(8, epilogue_band_bytes() / std::max<int64_t>(N * es, 1));
    BufPtrs bufs(epi.buffers.size());
    for (size_t i = 0; i < epi.buffers.size(); ++i) bufs.ptrs[i] = epi.buffers[i].storage->data();
    // Bands are independent (disjoint rows of the product and of the
    // epilogue's output): the pool runs them, each band's product and
    // epilogue on one thread. One band (small products) runs inline.
    const int64_t bands = (M + band - 1) / band;
    parallel_for(bands, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t i = b0; i < b1; ++i) {
        int64_t r0 = i * band, r1 = std::min(M, r0 + band);
        gemm::rows(mm.dtype, a, b, at(a.v), at(b.v), at(out), M, N, K, r0, r1);
        if (r1 > r0) fn(bufs.ptrs, epi.args.data(), r0, r1);
      }
    });
    bump(&AtomicStats::matmuls);
    bump(&AtomicStats::matmul_epilogues);
    bump(&AtomicStats::kernels_launched);
  }

  void on_view() override {
    plannable = false;
    bump(&AtomicStats::views);
  }
};

// ---- the plan cache -------------------------------------------------------
// A loop realizes DAGs of the same form again and again. Scheduling and
// lowering one again costs microseconds -- far more than launching a small
// kernel -- so a realization made of fused kernels only is recorded as a plan:
// per kernel the compiled function, its launch arguments, and where each
// buffer comes from. The key holds everything scheduling and lowering read
// (ops, dtypes, shapes, attributes, the DAG's sharing, which nodes need
// gradients, leaves' offsets and strides and which leaves share storage,
// which constants are equal), so a hit replays exactly the launches a fresh
// schedule would make; only constant values, read from the nodes, and the
// storages differ.

constexpr size_t kMaxPlanNodes = 64;  // larger DAGs take the general path
constexpr size_t kMaxPlans = 4096;    // beyond this, new forms are not planned


struct PlanStep {
  cpujit::KernelFn* fn = nullptr;                       // from the plan's code generation
  cpujit::EmitOptions variant;                          // to find fn again in a later one
  kir::Kernel kernel;                                   // for the launch shape (rank, slots)
  std::vector<int64_t> args;                            // as recorded
  std::vector<std::pair<uint32_t, uint32_t>> consts;    // (argument index, node with that constant's value)
  std::vector<int32_t> bufs;                            // per param: node index (>= 0) or step output -1 - s
  int64_t rows = 0;
  size_t nbytes = 0;                                    // dense output
};

struct Plan {
  std::vector<int64_t> key;
  bool replayable = false;
  std::vector<PlanStep> steps;
  std::vector<std::tuple<uint32_t, uint32_t, Strides>> sets;  // (node, step, strides): the node's buffer
};

// Plans of the current code generation; dropped with the code they call.
struct PlanCache {
  std::mutex mu;
  std::unordered_map<uint64_t, std::unique_ptr<Plan>> plans;  // by key hash; a colliding key is not planned
};
PlanCache& plan_cache() {
  static PlanCache* c = new PlanCache;  // never destroyed: threads may still replay at exit
  return *c;
}
void drop_plans(cpujit::Garbage& g) {
  PlanCache& C = plan_cache();
  std::lock_guard<std::mutex> l(C.mu);
  // Threads of the old generation may still be replaying one: freed with the code.
  g.push_back(std::make_shared<decltype(C.plans)>(std::move(C.plans)));
  C.plans.clear();
}

// The DAG below the roots in post-order (stopping at realized nodes, as the
// topo pass does) and its key. Thread-local scratch: no allocation per call.
struct Walk {
  std::vector<Node*> order;
  std::vector<std::pair<Node*, size_t>> stack;
  std::vector<int64_t> key;

  int index_of(const Node* n) const {
    for (size_t i = order.size(); i-- > 0;)
      if (order[i] == n) return static_cast<int>(i);
    return -1;
  }
  bool seen(const Node* n) const {
    if (index_of(n) >= 0) return true;
    for (auto& [m, next] : stack)
      if (m == n) return true;
    return false;
  }

  // False when the DAG is too large to plan.
  bool build(const std::vector<ir::NodePtr>& roots, bool keep_grad_values) {
    order.clear();
    stack.clear();
    key.clear();
    for (const auto& r : roots) {
      if (seen(r.get())) continue;
      stack.push_back({r.get(), 0});
      while (!stack.empty()) {
        auto& [n, next] = stack.back();
        if (!n->realized() && next < n->args.size()) {
          Node* a = n->args[next++].get();
          if (!seen(a)) stack.push_back({a, 0});
          continue;
        }
        if (order.size() == kMaxPlanNodes) return false;
        order.push_back(n);
        stack.pop_back();
      }
    }
    key.push_back(keep_grad_values);
    for (size_t i = 0; i < order.size(); ++i) {
      const Node& n = *order[i];
      bool realized = n.realized();
      key.push_back(static_cast<int64_t>(n.op) | static_cast<int64_t>(n.dtype) << 8 | int64_t{realized} << 16 |
                    int64_t{n.requires_grad} << 17 | int64_t{n.keepdim} << 18 |
                    static_cast<int64_t>(n.args.size()) << 20 | static_cast<int64_t>(n.shape.dims.size()) << 32 |
                    static_cast<int64_t>(n.axes.size()) << 44);
      key.insert(key.end(), n.shape.dims.begin(), n.shape.dims.end());
      key.insert(key.end(), n.axes.begin(), n.axes.end());
      if (realized) {
        const BufferView& v = *n.buffer;
        key.push_back(v.offset);
        key.push_back(static_cast<int64_t>(v.strides.size()));
        key.insert(key.end(), v.strides.begin(), v.strides.end());
        size_t same = i;  // the first leaf over the same storage
        for (size_t j = 0; j < i; ++j)
          if (order[j]->realized() && order[j]->buffer->storage == v.storage) {
            same = j;
            break;
          }
        key.push_back(static_cast<int64_t>(same));
      } else {
        for (auto& a : n.args) key.push_back(index_of(a.get()));
      }
      if (n.op == Op::Constant && !realized) {  // values are arguments; which constants are equal is structure
        size_t same = i;
        int64_t bits = lower::constant_bits(n);
        for (size_t j = 0; j < i; ++j)
          if (order[j]->op == Op::Constant && !order[j]->realized() && order[j]->dtype == n.dtype &&
              lower::constant_bits(*order[j]) == bits) {
            same = j;
            break;
          }
        key.push_back(static_cast<int64_t>(same));
      }
    }
    key.push_back(static_cast<int64_t>(roots.size()));
    for (const auto& r : roots) key.push_back(index_of(r.get()));
    return true;
  }
};

// A plan from a recorded realization; replayable stays false when some
// buffer or constant cannot be traced back to the DAG.
void make_plan(Plan& P, const std::vector<Node*>& order, const std::vector<bool>& was_realized,
               const std::vector<Recorded>& rec) {
  auto leaf_of = [&](const Storage* st) -> int32_t {
    for (size_t j = 0; j < order.size(); ++j)
      if (was_realized[j] && order[j]->buffer->storage.get() == st) return static_cast<int32_t>(j);
    return -1;
  };
  auto step_of = [&](const Storage* st, size_t upto) -> int32_t {
    for (size_t s = 0; s < upto; ++s)
      if (P.steps[s].nbytes && rec[s].l.buffers[0].storage.get() == st) return static_cast<int32_t>(s);
    return -1;
  };
  for (size_t s = 0; s < rec.size(); ++s) {
    const lower::Lowered& l = rec[s].l;
    PlanStep st;
    st.fn = rec[s].fn;
    st.variant = rec[s].variant;
    st.kernel = l.kernel;
    st.args = l.args;
    st.rows = l.rows;
    const Node& n = *rec[s].node;
    st.nbytes = static_cast<size_t>(std::max<int64_t>(n.numel(), 1)) * dtype_size(n.dtype);
    if (l.buffers.empty() || l.buffers[0].storage->nbytes() < st.nbytes) return;
    st.bufs.push_back(-1 - static_cast<int32_t>(s));
    for (size_t p = 1; p < l.buffers.size(); ++p) {
      const Storage* sp = l.buffers[p].storage.get();
      int32_t src = leaf_of(sp);
      if (src < 0) {
        int32_t from = step_of(sp, s);
        if (from < 0) return;
        src = -1 - from;
      }
      st.bufs.push_back(src);
    }
    const size_t cb = l.kernel.const_base();
    for (size_t c = 0; c < l.kernel.const_types.size(); ++c) {
      int64_t bits = l.args[cb + c];
      int found = -1;
      for (size_t j = 0; j < order.size() && found < 0; ++j)
        if (order[j]->op == Op::Constant && !was_realized[j] && order[j]->dtype == l.kernel.const_types[c] &&
            lower::constant_bits(*order[j]) == bits)
          found = static_cast<int>(j);
      if (found < 0) return;
      st.consts.push_back({static_cast<uint32_t>(cb + c), static_cast<uint32_t>(found)});
    }
    P.steps.push_back(std::move(st));
  }
  // The nodes this realization gave values: roots (and values kept for backward).
  for (size_t j = 0; j < order.size(); ++j) {
    if (was_realized[j] || !order[j]->realized()) continue;
    const BufferView& v = *order[j]->buffer;
    int32_t s = step_of(v.storage.get(), P.steps.size());
    if (s < 0 || v.offset != 0 || v.strides != contiguous_strides(order[j]->shape)) return;
    P.sets.emplace_back(static_cast<uint32_t>(j), static_cast<uint32_t>(s), v.strides);
  }
  P.replayable = true;
}

// Runs recorded steps with kernels `fns` (null: each step's own fn):
// `leaf_data(b)` is the memory of buffer source b >= 0, `patch(step, args)`
// may rewrite launch arguments; the steps' outputs land in `outs`.
template <class LeafData, class Patch>
void run_steps(const std::vector<PlanStep>& steps, cpujit::KernelFn* const* fns, std::shared_ptr<Storage>* outs,
               LeafData&& leaf_data, Patch&& patch) {
  for (size_t s = 0; s < steps.size(); ++s) {
    const PlanStep& st = steps[s];
    outs[s] = Storage::allocate(st.nbytes);
    BufPtrs bufs(st.bufs.size());
    for (size_t p = 0; p < st.bufs.size(); ++p) {
      int32_t b = st.bufs[p];
      bufs.ptrs[p] = b >= 0 ? leaf_data(b) : outs[static_cast<size_t>(-1 - b)]->data();
    }
    int64_t small_args[64];
    std::vector<int64_t> large_args;
    int64_t* args = small_args;
    if (st.args.size() > std::size(small_args)) {
      large_args.resize(st.args.size());
      args = large_args.data();
    }
    std::copy(st.args.begin(), st.args.end(), args);
    patch(st, args);
    launch_kernel(fns ? fns[s] : st.fn, bufs.ptrs, args, st.args.size(), st.kernel, st.rows);
    bump(&AtomicStats::kernels_launched);
  }
}

// Step outputs: on the stack for the usual few steps.
struct StepOutputs {
  static constexpr size_t kSmall = 8;
  std::shared_ptr<Storage> small[kSmall];
  std::vector<std::shared_ptr<Storage>> large;
  std::shared_ptr<Storage>* data;
  explicit StepOutputs(size_t n) : data(small) {
    if (n > kSmall) {
      large.resize(n);
      data = large.data();
    }
  }
};

void replay(const Plan& P, const std::vector<Node*>& order) {
  StepOutputs outs(P.steps.size());
  run_steps(
      P.steps, nullptr, outs.data, [&](int32_t b) { return order[static_cast<size_t>(b)]->buffer->storage->data(); },
      [&](const PlanStep& st, int64_t* args) {
        for (auto [pos, node] : st.consts) args[pos] = lower::constant_bits(*order[node]);
      });
  for (const auto& [node, step, strides] : P.sets) {
    BufferView v;
    v.storage = outs.data[step];
    v.strides = strides;
    order[node]->buffer = std::move(v);
  }
}

// A plan over a caller's leaves: buffer sources >= 0 index the caller's leaf
// list, and the recorded constants stand (the caller's key holds their values).
// Expression caches keep it for the life of the program, across code
// generations: its kernels are looked up again when the generation changes.
class CpuLeafReplay final : public LeafReplay {
 public:
  std::vector<PlanStep> steps;
  uint32_t out_step = 0;
  Strides out_strides;

  // `gen`: the code generation the steps' fns belong to.
  explicit CpuLeafReplay(std::uint64_t gen) : resolved_(new Resolved{gen, {}}) {}
  ~CpuLeafReplay() override { delete resolved_.load(std::memory_order_relaxed); }

  // Call once `steps` is final.
  void take_fns() {
    for (const PlanStep& st : steps) resolved_.load(std::memory_order_relaxed)->fns.push_back(st.fn);
  }

  ir::BufferView run(const ir::BufferView* const* leaves) const override {
    cpujit::CodeInUse in_use;
    const Resolved* r = resolved_.load(std::memory_order_acquire);
    if (r->gen != cpujit::code_generation()) r = resolve();
    StepOutputs outs(steps.size());
    run_steps(
        steps, r->fns.data(), outs.data, [&](int32_t b) { return leaves[b]->storage->data(); },
        [](const PlanStep&, int64_t*) {});
    BufferView v;
    v.storage = std::move(outs.data[out_step]);
    v.strides = out_strides;
    return v;
  }

 private:
  struct Resolved {
    std::uint64_t gen;
    std::vector<cpujit::KernelFn*> fns;  // per step
  };
  mutable std::atomic<Resolved*> resolved_;
  mutable std::mutex mu_;

  // The steps' kernels in the current generation. Other threads may still
  // read the old array: it is freed once they are done.
  const Resolved* resolve() const {
    std::lock_guard<std::mutex> l(mu_);
    Resolved* cur = resolved_.load(std::memory_order_relaxed);
    const std::uint64_t gen = cpujit::code_generation();
    if (cur->gen == gen) return cur;
    auto next = std::make_unique<Resolved>(Resolved{gen, {}});
    for (const PlanStep& st : steps) next->fns.push_back(compiled(st.kernel, st.variant));
    resolved_.store(next.get(), std::memory_order_release);
    cpujit::free_when_unused(std::shared_ptr<Resolved>(cur));
    return next.release();
  }
};

class CpuBackend final : public Backend {
 public:
  std::string_view name() const override { return "cpu"; }

  void realize(const std::vector<ir::NodePtr>& roots, bool keep_grad_values) override {
    bump(&AtomicStats::realizations);
    cpujit::CodeInUse in_use;
    const std::uint64_t gen = cpujit::code_generation();
    // Traces and dumps describe every schedule: those runs take the general path.
    const bool planning = !dump_at_start() && !detail::trace_enabled("jit");
    thread_local Walk walk;
    uint64_t hash = 0;
    bool keyed = planning && walk.build(roots, keep_grad_values);
    if (keyed) {
      hash = XXH3_64bits(walk.key.data(), walk.key.size() * sizeof(int64_t));
      // Each thread remembers its last few plans without the cache's lock;
      // plans of an older code generation are no longer in the cache.
      struct Recent {
        uint64_t hash = 0;
        uint64_t gen = 0;
        const Plan* plan = nullptr;
      };
      thread_local Recent recent[4] = {};
      Recent& slot = recent[hash & 3];
      const Plan* hit = slot.hash == hash && slot.gen == gen ? slot.plan : nullptr;
      if (!hit) {
        PlanCache& C = plan_cache();
        std::lock_guard<std::mutex> l(C.mu);
        auto it = C.plans.find(hash);
        if (it != C.plans.end()) hit = it->second.get();
      }
      if (hit && hit->key != walk.key) {
        hit = nullptr;
        keyed = false;  // a hash collision: this form is not planned
      }
      if (hit) slot = {hash, gen, hit};
      if (hit && hit->replayable) {
        replay(*hit, walk.order);
        return;
      }
      if (hit) keyed = false;  // known not to be replayable
    }
    sched::Schedule S = sched::schedule(roots, {.max_inputs = 16, .keep_grad_values = keep_grad_values});
    static std::atomic<int> dump_seq{0};
    if (!dump_dir().empty())
      dump_file(fmt::format("schedule_{}.txt", dump_seq++), ir::to_string(roots) + "\n" + S.to_string());
    CpuExecutor ex;
    std::vector<Recorded> rec;
    std::vector<bool> was_realized;
    // This realization's own copy of the walk: the thread's scratch is reused
    // by any realization a launch might make.
    std::vector<Node*> order;
    std::vector<int64_t> key;
    bool kernels_only = keyed;
    if (keyed) {
      for (const sched::Step& st : S.steps)
        kernels_only = kernels_only && (st.kind == sched::StepKind::Kernel || st.kind == sched::StepKind::Reduce) &&
                       !st.epilogue;
      if (kernels_only) ex.record = &rec;
      order = walk.order;
      key = walk.key;
      was_realized.reserve(order.size());
      for (Node* n : order) was_realized.push_back(n->realized());
    }
    exec::run_schedule(ex, roots, S, keep_grad_values);
    if (!keyed) return;
    // Forms that cannot be replayed are remembered too, so they are not recorded again.
    auto plan = std::make_unique<Plan>();
    plan->key = std::move(key);
    if (kernels_only && ex.plannable) make_plan(*plan, order, was_realized, rec);
    // Not if the code was dropped meanwhile: the plan would call old kernels.
    cpujit::insert_if_current(gen, [&] {
      PlanCache& C = plan_cache();
      std::lock_guard<std::mutex> l(C.mu);
      if (C.plans.size() < kMaxPlans) C.plans.emplace(hash, std::move(plan));
    });
  }

  std::unique_ptr<LeafReplay> realize_recorded(const ir::NodePtr& root, const std::vector<ir::NodePtr>& leaves) override {
    cpujit::CodeInUse in_use;
    const std::uint64_t gen = cpujit::code_generation();  // the found plan's, or older (then run() looks again)
    Walk w;  // its own: realize() reuses the thread's
    const bool keyed = !dump_at_start() && !detail::trace_enabled("jit") && w.build({root}, false);
    realize({root}, false);
    if (!keyed) return nullptr;
    const uint64_t hash = XXH3_64bits(w.key.data(), w.key.size() * sizeof(int64_t));
    const Plan* P = nullptr;
    {
      PlanCache& C = plan_cache();
      std::lock_guard<std::mutex> l(C.mu);
      auto it = C.plans.find(hash);
      if (it != C.plans.end()) P = it->second.get();
    }
    if (!P || P->key != w.key || !P->replayable || P->sets.size() != 1) return nullptr;
    const auto& [node, step, strides] = P->sets[0];
    if (static_cast<int>(node) != w.index_of(root.get())) return nullptr;
    auto r = std::make_unique<CpuLeafReplay>(gen);
    r->out_step = step;
    r->out_strides = strides;
    for (const PlanStep& st : P->steps) {
      PlanStep c = st;
      for (int32_t& b : c.bufs) {
        if (b < 0) continue;
        auto it = std::find_if(leaves.begin(), leaves.end(),
                               [&](const ir::NodePtr& n) { return n.get() == w.order[static_cast<size_t>(b)]; });
        if (it == leaves.end()) return nullptr;  // reads a value the caller does not pass
        b = static_cast<int32_t>(it - leaves.begin());
      }
      // The plan may come from an earlier realization with other constant
      // values: this DAG's values are the ones the caller's key holds.
      for (auto [pos, n] : c.consts) c.args[pos] = lower::constant_bits(*w.order[n]);
      c.consts.clear();
      r->steps.push_back(std::move(c));
    }
    r->take_fns();
    return r;
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
