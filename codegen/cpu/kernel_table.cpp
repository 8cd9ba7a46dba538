#include "codegen/cpu/kernel_table.h"

#include <fmt/format.h>

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include "codegen/cpu/dump.h"
#include "codegen/cpu/jit_async.h"
#include "codegen/cpu/jit_code_lifetime.h"
#include "codegen/cpu/jit_stats.h"
#include "codegen/cpu/plan_cache.h"
#include "runtime/errors.h"
#include "runtime/orc_jit.h"
#include "runtime/precompiled_kernels.h"
#include "runtime/thread_pool.h"
#include "runtime/trace.h"

namespace tessel::cpujit {

namespace {

// Compiled kernels by structure: a cached launch hashes and compares the
// kernel IR itself and builds no canonical text (that costs more than the
// rest of a small launch).
struct KernelTable {
  std::mutex mu;
  std::unordered_map<kir::Kernel, cpujit::KernelFn*, kir::KernelHash> fns;
  // Kernels queued or compiling on a compile thread (no error), and those
  // whose background compile failed (the error, and whether a launch or
  // jit_wait_idle has thrown it).
  struct Background {
    std::exception_ptr error;
    bool reported = false;
  };
  std::unordered_map<kir::Kernel, Background, kir::KernelHash> background;
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

// Called before each real compile (tests make compiles fail with it).
std::mutex& hook_mu() {
  static auto* m = new std::mutex;
  return *m;
}
std::function<void(std::string_view)>& compile_hook() {
  static auto* h = new std::function<void(std::string_view)>;
  return *h;
}

cpujit::KernelFn* remember(KernelTable& T, const kir::Kernel& k, std::uint64_t gen, cpujit::KernelFn* fn) {
  cpujit::insert_if_current(gen, [&] {
    std::lock_guard<std::mutex> l(T.mu);
    T.fns.emplace(k, fn);
  });
  return fn;
}

cpujit::KernelFn* lookup(KernelTable& T, const kir::Kernel& k) {
  std::lock_guard<std::mutex> l(T.mu);
  auto it = T.fns.find(k);
  return it == T.fns.end() ? nullptr : it->second;
}

// Kernels linked in ahead of time (codegen/aot) come first; with TESSEL_JIT=off nothing else may.
// (Their plain variant serves streaming launches; epilogues do not write over
// their product while ahead-of-time kernels are linked in.)
cpujit::KernelFn* ahead_of_time(KernelTable& T, const kir::Kernel& k, const cpujit::EmitOptions& options,
                                const std::string& text) {
  if (const precompiled::Entry* pk = options.output_alias_param < 0 ? precompiled::find(text) : nullptr;
      pk && pk->cpu_fn) {
    precompiled::note_hit(false);
    return remember(T, k, cpujit::code_generation(), reinterpret_cast<cpujit::KernelFn*>(pk->cpu_fn));
  }
  if (precompiled::size() > 0) precompiled::note_miss();
  if (precompiled::jit_disabled()) precompiled::throw_jit_disabled("cpu", text);
  return nullptr;
}

KernelKey key_of(const std::string& text, const cpujit::EmitOptions& options) {
  return cpu_jit().make_key(text, cpujit::kEmitterVersion + cpujit::variant_key(options));
}

// The kernel from the kernel cache, or compiled now; on the launching thread
// or a compile thread.
cpujit::KernelFn* compile_now(KernelTable& T, const kir::Kernel& k, const cpujit::EmitOptions& options,
                              const std::string& text) {
  OrcJit& jit = cpu_jit();
  if (max_linked_kernels() > 0 && jit.linked_kernels() >= max_linked_kernels()) drop_jit_code();
  const std::uint64_t gen = cpujit::code_generation();
  KernelKey key = key_of(text, options);
  std::string symbol = "tessel_k_" + key.to_hex();
  JitKernel jk = jit.get_or_compile(key, symbol, [&](llvm::LLVMContext& ctx) {
    std::function<void(std::string_view)> hook;
    {
      std::lock_guard<std::mutex> l(hook_mu());
      hook = compile_hook();
    }
    if (hook) hook(text);
    return cpujit::emit_llvm(k, symbol, ctx, options);
  });
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
  return remember(T, k, gen, jk.as<cpujit::KernelFn>());
}

// TESSEL_JIT_ASYNC, read once; set_jit_async() overrides it.
bool async_from_env() {
  static const bool on = [] {
    const char* e = std::getenv("TESSEL_JIT_ASYNC");
    if (!e || !*e) return true;
    const std::string v = e;
    if (v == "1" || v == "on") return true;
    if (v == "0" || v == "off") return false;
    throw ValueError(fmt::format("TESSEL_JIT_ASYNC='{}' is neither on nor off; set it to 1 (compile new kernels in the "
                                 "background, the default) or 0 (compile them before their launch)",
                                 e));
  }();
  return on;
}
std::atomic<int> g_async_override{-1};

// The compile threads. They must stop before exit destroys anything a
// compile uses, LLVM's own statics included, many of which a compile makes on
// first use (and exit destroys those first): a process ending from its main
// thread runs that thread's thread_local destructors before any static one,
// so a thread_local of the main thread (StopAtExit) stops them, dropping the
// queued jobs and joining each thread once its compile in flight is done.
// The queue's own destructor (made after the JIT and the kernel cache, so run
// before theirs) does the same for an exit from another thread.
class CompileQueue {
 public:
  struct Job {
    KernelTable* table;
    kir::Kernel kernel;
    cpujit::EmitOptions options;
    std::string text;
  };

  static CompileQueue* get();
  // Later calls compile in place: the queue is gone (static destruction).
  static bool gone() { return g_gone.load(std::memory_order_acquire); }
  static CompileQueue* existing() { return g_live.load(std::memory_order_acquire); }

  CompileQueue() = default;
  ~CompileQueue() {
    stop();
    g_live.store(nullptr, std::memory_order_release);
  }

  // From now on every kernel compiles before its launch.
  void stop() {
    g_gone.store(true, std::memory_order_release);
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> l(mu_);
      stopping_ = true;
      jobs_.clear();
      threads.swap(threads_);
    }
    work_.notify_all();
    for (std::thread& t : threads) t.join();
    idle_.notify_all();
  }

  // False once stopping: the caller compiles in place.
  bool submit(Job job) {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_) return false;
    jobs_.push_back(std::move(job));
    // One compile thread per spare core (up to 4): the launching thread keeps one.
    const size_t want = static_cast<size_t>(std::clamp(available_cores() - 1, 1, 4));
    if (threads_.size() < std::min(want, jobs_.size() + static_cast<size_t>(running_)))
      threads_.emplace_back([this] { work(); });
    work_.notify_one();
    return true;
  }

  void wait_idle() {
    std::unique_lock<std::mutex> l(mu_);
    idle_.wait(l, [&] { return jobs_.empty() && running_ == 0; });
  }

 private:
  void work() {
    pthread_setname_np(pthread_self(), "tessel-jit");
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> l(mu_);
        work_.wait(l, [&] { return stopping_ || !jobs_.empty(); });
        if (stopping_) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
        ++running_;
      }
      std::exception_ptr error;
      try {
        cpujit::CodeInUse in_use;
        compile_now(*job.table, job.kernel, job.options, job.text);
      } catch (...) {
        error = std::current_exception();  // thrown by the next launch that needs it, or by jit_wait_idle
      }
      {
        KernelTable& T = *job.table;
        std::lock_guard<std::mutex> l(T.mu);
        if (error) T.background[job.kernel] = {error, false};
        else T.background.erase(job.kernel);
      }
      {
        std::lock_guard<std::mutex> l(mu_);
        --running_;
      }
      idle_.notify_all();
    }
  }

  static inline std::atomic<bool> g_gone{false};
  static inline std::atomic<CompileQueue*> g_live{nullptr};
  std::mutex mu_;
  std::condition_variable work_, idle_;
  std::deque<Job> jobs_;
  int running_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

struct StopAtExit {
  ~StopAtExit() {
    if (gettid() != getpid()) return;  // another thread's end does not end the process
    if (CompileQueue* q = CompileQueue::existing()) q->stop();
  }
};
// Made on the main thread while the program starts, whichever thread compiles.
thread_local StopAtExit t_stop_at_exit;
[[maybe_unused]] const bool g_stop_at_exit_made = (static_cast<void>(&t_stop_at_exit), true);

CompileQueue* CompileQueue::get() {
  static CompileQueue* q = [] {
    cpu_jit();  // with its kernel cache: made first, so destroyed after the queue
    static CompileQueue queue;
    g_live.store(&queue, std::memory_order_release);
    return &queue;
  }();
  return gone() ? nullptr : q;
}

}  // namespace

std::uint64_t jit_kernels_linked() { return cpu_jit().linked_kernels(); }

cpujit::KernelFn* compiled(const kir::Kernel& k, const cpujit::EmitOptions& options) {
  KernelTable& T = table(options);
  if (cpujit::KernelFn* fn = lookup(T, k)) return fn;
  std::string text = k.text();
  if (cpujit::KernelFn* fn = ahead_of_time(T, k, options, text)) return fn;
  return compile_now(T, k, options, text);
}

cpujit::KernelFn* compiled_if_ready(const kir::Kernel& k, const cpujit::EmitOptions& options) {
  if (!jit_async() || CompileQueue::gone()) return compiled(k, options);
  KernelTable& T = table(options);
  bool failed_before = false;
  {
    std::lock_guard<std::mutex> l(T.mu);
    if (auto it = T.fns.find(k); it != T.fns.end()) return it->second;
    if (auto it = T.background.find(k); it != T.background.end()) {
      if (!it->second.error) return nullptr;  // still compiling
      if (!it->second.reported) {
        it->second.reported = true;
        std::rethrow_exception(it->second.error);
      }
      failed_before = true;  // thrown once: from now on compiled in place, as compiled() would
    }
  }
  std::string text = k.text();
  if (cpujit::KernelFn* fn = ahead_of_time(T, k, options, text)) return fn;
  if (failed_before) return compile_now(T, k, options, text);
  // An object in the disk cache only needs linking: not worth the interpreter.
  KernelCache& cache = cpu_jit().cache();
  const KernelKey key = key_of(text, options);
  std::error_code ec;
  if (cache.disk_enabled() && std::filesystem::exists(cache.entry_path(key), ec)) return compile_now(T, k, options, text);
  {
    std::lock_guard<std::mutex> l(T.mu);
    if (auto it = T.fns.find(k); it != T.fns.end()) return it->second;
    if (!T.background.emplace(k, KernelTable::Background{}).second) return nullptr;  // queued meanwhile
  }
  CompileQueue* q = CompileQueue::get();
  if (!q || !q->submit({&T, k, options, text})) {
    {
      std::lock_guard<std::mutex> l(T.mu);
      T.background.erase(k);
    }
    return compile_now(T, k, options, text);
  }
  if (detail::trace_enabled("jit"))
    detail::trace_line("jit", fmt::format("kernel tessel_k_{}: compiling in the background; the interpreter computes "
                                          "its launches meanwhile",
                                          key.to_hex()));
  return nullptr;
}

}  // namespace tessel::cpujit

namespace tessel {

bool jit_async() {
  const int o = cpujit::g_async_override.load(std::memory_order_relaxed);
  return o >= 0 ? o != 0 : cpujit::async_from_env();
}

void set_jit_async(bool on) { cpujit::g_async_override.store(on ? 1 : 0, std::memory_order_relaxed); }

void jit_wait_idle() {
  if (cpujit::CompileQueue* q = cpujit::CompileQueue::existing()) q->wait_idle();
  for (int i = 0; i < cpujit::kNumTables; ++i) {
    cpujit::KernelTable& T = cpujit::tables()[i];
    std::lock_guard<std::mutex> l(T.mu);
    for (auto& [k, b] : T.background)
      if (b.error && !b.reported) {
        b.reported = true;
        std::rethrow_exception(b.error);
      }
  }
}

void cpujit::set_compile_hook_for_testing(std::function<void(std::string_view)> hook) {
  std::lock_guard<std::mutex> l(hook_mu());
  compile_hook() = std::move(hook);
}

}  // namespace tessel
