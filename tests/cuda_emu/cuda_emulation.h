// Test-only: runs CUDA C++ kernels on the host.
//
// Include this header, then the kernel's CUDA source (prelude included), and
// the host compiler builds it; emu::launch runs the grid:
//
//   #include "cuda_emulation.h"
//   #include "elementwise.cuh"            // extern "C" __global__ void scale(float*, float, long long)
//   emu::launch(scale, dim3(blocks), dim3(256), x.data(), 2.0f, (long long)x.size());
//
// The model, after HIP-CPU and hipCPU:
//   - blocks run one at a time on each worker OS thread (several workers run
//     blocks in parallel); the threads of a block are fibers on that worker;
//   - a fiber runs until it reaches a barrier (__syncthreads, a warp shuffle,
//     __syncwarp, a vote) or exits, then the next runnable fiber of the block
//     runs; the last thread to arrive releases the barrier;
//   - __shared__ is `static thread_local`: one instance per worker thread, which
//     all fibers of the running block share (fibers never leave their thread);
//   - threadIdx/blockIdx/blockDim/gridDim are thread_local variables the
//     scheduler sets before resuming a fiber;
//   - warp shuffles exchange through a per-warp buffer (double-buffered by
//     barrier generation) and a barrier among the lanes named in the mask.
// Misuse that is undefined on a GPU is reported as emu::EmulationError: a
// __syncthreads some threads of the block never reach (e.g. after an early
// return), a shuffle whose mask names an exited lane or reads a lane outside
// its mask, mismatched masks, a block larger than 1024 threads.
//
// Threads of a block run in index order by default, so a missing barrier
// shows up as reading a later thread's stale value; LaunchOptions{.reverse_thread_order
// = true} runs them backwards to catch the other direction.
#pragma once

#include <math.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#define TESSEL_CUDA_EMULATION 1

// ---------------------------------------------------------------------------
// Built-in types and variables
// ---------------------------------------------------------------------------

struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};

inline thread_local uint3 threadIdx{0, 0, 0};
inline thread_local uint3 blockIdx{0, 0, 0};
inline thread_local dim3 blockDim{1, 1, 1};
inline thread_local dim3 gridDim{1, 1, 1};
inline constexpr int warpSize = 32;

// ---------------------------------------------------------------------------
// Qualifiers
// ---------------------------------------------------------------------------

#define __global__
#define __device__
#define __host__
#define __constant__
#define __forceinline__ inline __attribute__((always_inline))
// No __noinline__: libstdc++ spells __attribute__((__noinline__)), which such a macro would break.
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
// One instance per worker thread = per running block (see above).
#define __shared__ static thread_local
// The prelude's spelling of `extern __shared__ T name[]`.
#define TS_DYNAMIC_SHARED(T, name) T* name = ::emu::detail::dynamic_shared<T>()
// The prelude's vector loads/stores: a misaligned one faults on a GPU.
#define TS_CHECK_ALIGNED(p, bytes) ::emu::detail::check_aligned(p, bytes)

namespace emu {

/// A kernel did something whose result is undefined on a GPU, or a launch was invalid.
struct EmulationError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct LaunchOptions {
  /// Bytes behind TS_DYNAMIC_SHARED (the launch's dynamic shared memory).
  std::size_t dynamic_shared_bytes = 0;
  /// Run the threads of a block from the last to the first.
  bool reverse_thread_order = false;
  /// OS threads running blocks; 0: $TESSEL_EMU_THREADS, else min(hardware threads, 8).
  unsigned workers = 0;
  /// Stack of each emulated thread (virtual; untouched pages cost nothing).
  std::size_t stack_bytes = 256 * 1024;
};

namespace detail {

// ---------------------------------------------------------------------------
// Context switch. On x86-64 a hand-written switch saves only the callee-saved
// registers (glibc's swapcontext makes a sigprocmask syscall per switch, which
// dominates a million-thread grid); elsewhere ucontext.
// ---------------------------------------------------------------------------

#if defined(__x86_64__)
extern "C" void tessel_emu_switch(void** save_sp, void* load_sp);
asm(R"(
  .pushsection .text.tessel_emu_switch,"axG",@progbits,tessel_emu_switch,comdat
  .weak tessel_emu_switch
  .hidden tessel_emu_switch
  .type tessel_emu_switch,@function
tessel_emu_switch:
  .cfi_startproc
  endbr64
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $16, %rsp
  stmxcsr 8(%rsp)
  fnstcw (%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  fldcw (%rsp)
  ldmxcsr 8(%rsp)
  addq $16, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .cfi_endproc
  .size tessel_emu_switch, .-tessel_emu_switch
  .popsection
)");

struct Context {
  void* sp = nullptr;
};

inline void context_make(Context& c, char* stack, std::size_t size, void (*entry)()) {
  auto top = reinterpret_cast<std::uintptr_t>(stack + size) & ~std::uintptr_t(15);
  auto* slot = reinterpret_cast<std::uint64_t*>(top);
  slot[-1] = 0;                                          // entry's return address: never used
  slot[-2] = reinterpret_cast<std::uint64_t>(entry);     // popped by `ret`
  for (int i = 3; i <= 8; ++i) slot[-i] = 0;             // rbp rbx r12 r13 r14 r15
  std::uint32_t mxcsr;
  std::uint16_t fpucw;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpucw));
  slot[-9] = mxcsr;   // at sp + 8
  slot[-10] = fpucw;  // at sp
  c.sp = &slot[-10];
}
inline void context_switch(Context& from, Context& to) { tessel_emu_switch(&from.sp, to.sp); }
#else
struct Context {
  ucontext_t uc;
};
inline void context_make(Context& c, char* stack, std::size_t size, void (*entry)()) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = size;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, entry, 0);
}
inline void context_switch(Context& from, Context& to) { swapcontext(&from.uc, &to.uc); }
#endif

// ---------------------------------------------------------------------------
// Per-worker block runner
// ---------------------------------------------------------------------------

enum class State : std::uint8_t { runnable, at_block_barrier, at_warp_barrier, done };

struct Fiber {
  Context ctx;
  char* stack = nullptr;
  uint3 idx{0, 0, 0};
  unsigned linear = 0, warp = 0, lane = 0;
  State state = State::runnable;
  const char* waiting_in = "";  // the intrinsic a waiting fiber is in, for deadlock messages
};

struct Warp {
  unsigned existing = 0;  // lanes that exist in this block
  unsigned exited = 0;
  unsigned arrived = 0;   // lanes waiting at the current warp barrier
  unsigned mask = 0;      // the mask they named
  unsigned gen = 0;
  alignas(16) unsigned char slots[2][32][16];
};

struct KernelBody {
  void (*fn)(void*) = nullptr;
  void* ctx = nullptr;
};

// Fiber stacks. A block of n threads needs n stacks, each with a guard page
// below it: one mapping of kMaxFibers slots. Mapping one, protecting its
// guard pages and first touching its stacks cost more than running a small
// kernel (an mprotect per slot, ~15 us per fresh page), and the emulated
// driver runs every launch on new threads. So a worker thread takes a mapping
// from a pool when it first runs blocks and gives it back when it exits, and
// the next launch's threads find its pages already touched. Each library
// holding this header has a pool of its own; the emulated driver hands every
// kernel library it loads one process-wide pool (tessel_emu_share_stack_pool
// below), so stacks do not pile up per library.
inline constexpr unsigned kMaxFibers = 1024;

inline std::size_t page_bytes() { return static_cast<std::size_t>(sysconf(_SC_PAGESIZE)); }

inline std::atomic<unsigned long long> g_stack_mappings{0};  // map_stacks calls that mapped (for tests)

// kMaxFibers slots of a guard page then `stack` bytes; null if it cannot be mapped.
inline char* map_stacks(std::size_t stack) {
  const std::size_t page = page_bytes(), slot = stack + page;
  void* m = mmap(nullptr, slot * kMaxFibers, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  char* base = static_cast<char*>(m);
  for (unsigned i = 0; i < kMaxFibers; ++i) mprotect(base + i * slot, page, PROT_NONE);
  ++g_stack_mappings;
  return base;
}

struct StackPool {
  std::mutex mu;
  std::vector<std::pair<char*, std::size_t>> idle;  // mapping, stack bytes of its slots
};
inline StackPool& local_stack_pool() {
  static StackPool pool;  // mappings live as long as the process
  return pool;
}
inline char* take_local_stacks(std::size_t stack) {
  StackPool& p = local_stack_pool();
  {
    std::lock_guard lock(p.mu);
    for (auto it = p.idle.begin(); it != p.idle.end(); ++it)
      if (it->second == stack) {
        char* m = it->first;
        p.idle.erase(it);
        return m;
      }
  }
  return map_stacks(stack);
}
inline void give_local_stacks(char* mapping, std::size_t stack) {
  StackPool& p = local_stack_pool();
  std::lock_guard lock(p.mu);
  p.idle.emplace_back(mapping, stack);
}

using TakeStacks = char* (*)(std::size_t stack);
using GiveStacks = void (*)(char* mapping, std::size_t stack);
inline TakeStacks g_take_stacks = &take_local_stacks;
inline GiveStacks g_give_stacks = &give_local_stacks;

struct Runner {
  // stacks: one pooled mapping of kMaxFibers slots, a guard page below each fiber's stack
  char* mapping = nullptr;
  std::size_t stack_bytes = 0, slot_bytes = 0;

  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  Context scheduler;
  Fiber* current = nullptr;
  unsigned nthreads = 0, remaining = 0;
  unsigned bar_arrived = 0, bar_gen = 0;
  int bar_count[2] = {0, 0};
  KernelBody body;
  std::exception_ptr error;
  std::vector<unsigned char> dyn_shared_storage;
  unsigned char* dyn_shared = nullptr;
#if defined(__SANITIZE_ADDRESS__)
  const void* sched_stack_bottom = nullptr;
  std::size_t sched_stack_size = 0;
  bool stacks_dirty = false;  // fibers abandoned mid-kernel left poisoned frames
#endif

  Runner() = default;
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;
  ~Runner() { give_back(); }

  void give_back() {
    if (mapping) g_give_stacks(mapping, stack_bytes);
    mapping = nullptr;
  }
  void reserve_stacks(unsigned n, std::size_t stack) {
    const std::size_t page = page_bytes();
    stack = (stack + page - 1) / page * page;
    if (n > kMaxFibers) throw EmulationError("emu: more than 1024 threads in a block");
    if (mapping && stack == stack_bytes) return;
    give_back();
    mapping = g_take_stacks(stack);
    if (!mapping) throw EmulationError("emu: cannot map fiber stacks");
    stack_bytes = stack;
    slot_bytes = stack + page;
#if defined(__SANITIZE_ADDRESS__)
    stacks_dirty = true;  // another runner's fibers may have left poisoned frames there
#endif
  }
  char* stack_of(unsigned i) const { return mapping + i * slot_bytes + (slot_bytes - stack_bytes); }
};

inline thread_local Runner* tls_runner = nullptr;

inline Runner& runner(const char* what) {
  if (!tls_runner) throw EmulationError(std::string(what) + " called outside an emulated kernel");
  return *tls_runner;
}

#if defined(__SANITIZE_ADDRESS__)
#define TESSEL_EMU_ASAN_START(save, bottom, size) __sanitizer_start_switch_fiber(save, bottom, size)
#define TESSEL_EMU_ASAN_FINISH(save, bottom, size) __sanitizer_finish_switch_fiber(save, bottom, size)
#else
#define TESSEL_EMU_ASAN_START(save, bottom, size) ((void)0)
#define TESSEL_EMU_ASAN_FINISH(save, bottom, size) ((void)0)
#endif

// Suspends the current fiber; the scheduler resumes it once it is runnable again.
inline void yield_to_scheduler(Runner& r) {
  Fiber& f = *r.current;
#if defined(__SANITIZE_ADDRESS__)
  void* fake = nullptr;
  TESSEL_EMU_ASAN_START(&fake, r.sched_stack_bottom, r.sched_stack_size);
#endif
  context_switch(f.ctx, r.scheduler);
#if defined(__SANITIZE_ADDRESS__)
  TESSEL_EMU_ASAN_FINISH(fake, nullptr, nullptr);
#endif
}

inline void fiber_entry() {
  Runner& r = *tls_runner;
#if defined(__SANITIZE_ADDRESS__)
  TESSEL_EMU_ASAN_FINISH(nullptr, &r.sched_stack_bottom, &r.sched_stack_size);
#endif
  try {
    r.body.fn(r.body.ctx);
  } catch (...) {
    if (!r.error) r.error = std::current_exception();
  }
  Fiber& f = *r.current;
  f.state = State::done;
  r.warps[f.warp].exited |= 1u << f.lane;
  --r.remaining;
  TESSEL_EMU_ASAN_START(nullptr, r.sched_stack_bottom, r.sched_stack_size);
  Context dead;
  context_switch(dead, r.scheduler);
  std::abort();  // a finished fiber is never resumed
}

inline std::string block_name(uint3 b) {
  return "(" + std::to_string(b.x) + "," + std::to_string(b.y) + "," + std::to_string(b.z) + ")";
}

inline std::string lanes_string(unsigned bits) {
  std::string s;
  for (unsigned l = 0; l < 32; ++l)
    if (bits & (1u << l)) s += (s.empty() ? "" : ",") + std::to_string(l);
  return "{" + s + "}";
}

inline std::string hex(unsigned v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

[[noreturn]] inline void report_deadlock(Runner& r) {
  unsigned at_block = 0, done = 0;
  for (const Fiber& f : r.fibers) {
    at_block += f.state == State::at_block_barrier;
    done += f.state == State::done;
  }
  std::string where = "block " + block_name(blockIdx);
  if (at_block > 0) {
    throw EmulationError("emu: __syncthreads() in " + where + " is reached by " + std::to_string(at_block) + " of " +
                         std::to_string(r.nthreads) + " threads; " + std::to_string(done) +
                         " exited without reaching it and the rest wait elsewhere (a barrier in divergent code, "
                         "e.g. after an early return, is undefined on a GPU)");
  }
  for (std::size_t w = 0; w < r.warps.size(); ++w) {
    const Warp& wp = r.warps[w];
    if (!wp.arrived) continue;
    const char* op = "";
    for (const Fiber& f : r.fibers)
      if (f.warp == w && f.state == State::at_warp_barrier) op = f.waiting_in;
    throw EmulationError("emu: " + std::string(op) + "(mask " + hex(wp.mask) + ") in warp " + std::to_string(w) +
                         " of " + where + ": lanes " + lanes_string(wp.arrived) + " wait, lanes " +
                         lanes_string(wp.mask & ~wp.arrived & wp.exited) + " exited and lanes " +
                         lanes_string(wp.mask & ~wp.arrived & ~wp.exited) +
                         " wait elsewhere (every lane in the mask must reach the same intrinsic)");
  }
  throw EmulationError("emu: threads of " + where + " wait on each other forever");
}

inline void run_block(Runner& r, uint3 block, bool reverse) {
  blockIdx = block;
  r.error = nullptr;
  r.remaining = r.nthreads;
  r.bar_arrived = 0;
  r.bar_gen = 0;
  r.bar_count[0] = r.bar_count[1] = 0;
  for (Warp& w : r.warps) {
    w.exited = w.arrived = w.mask = w.gen = 0;
  }
#if defined(__SANITIZE_ADDRESS__)
  // A fiber's last frame (fiber_entry) never returns, so ASan's redzones of it
  // stay poisoned; so do whole stacks of fibers abandoned by an error.
  const std::size_t unpoison = r.stacks_dirty ? r.stack_bytes : std::min<std::size_t>(r.stack_bytes, 16384);
  for (unsigned i = 0; i < r.nthreads; ++i)
    ASAN_UNPOISON_MEMORY_REGION(r.fibers[i].stack + r.stack_bytes - unpoison, unpoison);
  r.stacks_dirty = true;
#endif
  for (unsigned i = 0; i < r.nthreads; ++i) {
    Fiber& f = r.fibers[i];
    f.state = State::runnable;
    context_make(f.ctx, f.stack, r.stack_bytes, &fiber_entry);
  }
  while (r.remaining > 0) {
    bool progressed = false;
    for (unsigned k = 0; k < r.nthreads; ++k) {
      Fiber& f = r.fibers[reverse ? r.nthreads - 1 - k : k];
      if (f.state != State::runnable) continue;
      progressed = true;
      r.current = &f;
      threadIdx = f.idx;
#if defined(__SANITIZE_ADDRESS__)
      void* fake = nullptr;
      TESSEL_EMU_ASAN_START(&fake, f.stack, r.stack_bytes);
#endif
      context_switch(r.scheduler, f.ctx);
#if defined(__SANITIZE_ADDRESS__)
      TESSEL_EMU_ASAN_FINISH(fake, nullptr, nullptr);
#endif
      if (r.error) std::rethrow_exception(r.error);
    }
    if (!progressed) report_deadlock(r);
  }
  r.current = nullptr;
#if defined(__SANITIZE_ADDRESS__)
  r.stacks_dirty = false;
#endif
}

// ---------------------------------------------------------------------------
// Barriers
// ---------------------------------------------------------------------------

// __syncthreads and its counting variants: returns how many threads passed a
// non-zero predicate. Counts are double-buffered by barrier generation, so a
// fast thread that reaches the next barrier does not clobber what slower ones
// still read.
inline int block_barrier(int predicate) {
  Runner& r = runner("__syncthreads");
  const unsigned parity = r.bar_gen & 1u;
  r.bar_count[parity] += predicate != 0;
  if (++r.bar_arrived == r.nthreads) {
    r.bar_arrived = 0;
    ++r.bar_gen;
    r.bar_count[parity ^ 1u] = 0;
    for (Fiber& f : r.fibers)
      if (f.state == State::at_block_barrier) f.state = State::runnable;
  } else {
    r.current->state = State::at_block_barrier;
    r.current->waiting_in = "__syncthreads";
    yield_to_scheduler(r);
  }
  return r.bar_count[parity];
}

// A barrier among the lanes of the caller's warp named in `mask`; returns the
// exchange-buffer parity of this generation.
inline unsigned warp_barrier(unsigned mask, const char* op) {
  Runner& r = runner(op);
  Fiber& f = *r.current;
  Warp& w = r.warps[f.warp];
  const unsigned me = 1u << f.lane;
  if (!(mask & me))
    throw EmulationError(std::string("emu: ") + op + "(mask " + hex(mask) + ") called by lane " +
                         std::to_string(f.lane) + ", which the mask does not name");
  if (mask & ~w.existing)
    throw EmulationError(std::string("emu: ") + op + "(mask " + hex(mask) + ") names lanes " +
                         lanes_string(mask & ~w.existing) + " that do not exist in warp " + std::to_string(f.warp) +
                         " (blockDim " + std::to_string(blockDim.x) + "x" + std::to_string(blockDim.y) + "x" +
                         std::to_string(blockDim.z) + ")");
  if (w.arrived && w.mask != mask)
    throw EmulationError(std::string("emu: ") + op + " in warp " + std::to_string(f.warp) + ": lane " +
                         std::to_string(f.lane) + " passes mask " + hex(mask) + " while lanes " +
                         lanes_string(w.arrived) + " passed " + hex(w.mask));
  const unsigned parity = w.gen & 1u;
  w.mask = mask;
  w.arrived |= me;
  if (w.arrived == mask) {
    w.arrived = 0;
    ++w.gen;
    const unsigned first = f.warp * 32, last = std::min(first + 32, r.nthreads);
    for (unsigned i = first; i < last; ++i)
      if (r.fibers[i].state == State::at_warp_barrier) r.fibers[i].state = State::runnable;
  } else {
    f.state = State::at_warp_barrier;
    f.waiting_in = op;
    yield_to_scheduler(r);
  }
  return parity;
}

// Lane `src` of the caller's warp as the value it passed, or `own` when the
// source is outside the caller's `width`-lane segment.
template <class T>
T shuffle(unsigned mask, T v, int src, bool out_of_segment, const char* op) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 16, "shuffle of a type a GPU cannot shuffle");
  Runner& r = runner(op);
  Fiber& f = *r.current;
  Warp& w = r.warps[f.warp];
  std::memcpy(w.slots[w.gen & 1u][f.lane], &v, sizeof(T));
  const unsigned parity = warp_barrier(mask, op);
  if (out_of_segment) return v;
  if (src < 0 || src > 31 || !(mask & (1u << src)))
    throw EmulationError(std::string("emu: ") + op + "(mask " + hex(mask) + ") in lane " + std::to_string(f.lane) +
                         " reads lane " + std::to_string(src) + ", which the mask does not name (undefined on a GPU)");
  T out;
  std::memcpy(&out, w.slots[parity][src], sizeof(T));
  return out;
}

inline unsigned ballot(unsigned mask, int pred, const char* op) {
  Runner& r = runner(op);
  Fiber& f = *r.current;
  Warp& w = r.warps[f.warp];
  const int p = pred != 0;
  std::memcpy(w.slots[w.gen & 1u][f.lane], &p, sizeof p);
  const unsigned parity = warp_barrier(mask, op);
  unsigned bits = 0;
  for (unsigned l = 0; l < 32; ++l) {
    if (!(mask & (1u << l))) continue;
    int q;
    std::memcpy(&q, w.slots[parity][l], sizeof q);
    if (q) bits |= 1u << l;
  }
  return bits;
}

template <class T>
T* dynamic_shared() {
  Runner& r = runner("dynamic shared memory");
  return reinterpret_cast<T*>(r.dyn_shared);
}

inline void check_aligned(const volatile void* p, std::size_t bytes) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  if (a % bytes != 0)
    throw EmulationError("emu: a " + std::to_string(bytes) + "-byte vector access at an address " +
                         std::to_string(a % bytes) + " bytes past alignment (misaligned address on a GPU)");
}

inline unsigned default_workers() {
  if (const char* e = std::getenv("TESSEL_EMU_THREADS")) {
    int n = std::atoi(e);
    if (n > 0) return static_cast<unsigned>(n);
  }
  unsigned hw = std::thread::hardware_concurrency();
  return std::clamp(hw, 1u, 8u);
}

// Runs blocks [0, nblocks) of the launch on this thread until none are left.
inline void work(const LaunchOptions& opt, dim3 grid, dim3 block, KernelBody body, std::atomic<std::uint64_t>& next,
                 std::uint64_t nblocks, std::atomic<bool>& stop) {
  static thread_local Runner local;
  Runner& r = local;
  const unsigned n = block.x * block.y * block.z;
  r.reserve_stacks(n, opt.stack_bytes);
  r.nthreads = n;
  r.fibers.resize(n);
  r.warps.assign((n + 31) / 32, Warp{});
  for (unsigned i = 0; i < n; ++i) {
    Fiber& f = r.fibers[i];
    f.linear = i;
    f.warp = i / 32;
    f.lane = i % 32;
    f.idx = uint3{i % block.x, (i / block.x) % block.y, i / (block.x * block.y)};
    f.stack = r.stack_of(i);
    r.warps[f.warp].existing |= 1u << f.lane;
  }
  r.body = body;
  r.dyn_shared_storage.assign(opt.dynamic_shared_bytes + 16, 0);
  r.dyn_shared = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<std::uintptr_t>(r.dyn_shared_storage.data()) + 15) & ~std::uintptr_t(15));
  gridDim = grid;
  blockDim = block;
  Runner* saved = tls_runner;
  tls_runner = &r;
  try {
    for (;;) {
      if (stop.load(std::memory_order_relaxed)) break;
      const std::uint64_t b = next.fetch_add(1, std::memory_order_relaxed);
      if (b >= nblocks) break;
      const uint3 bi{static_cast<unsigned>(b % grid.x), static_cast<unsigned>(b / grid.x % grid.y),
                     static_cast<unsigned>(b / (std::uint64_t(grid.x) * grid.y))};
      run_block(r, bi, opt.reverse_thread_order);
    }
  } catch (...) {
    tls_runner = saved;
    throw;
  }
  tls_runner = saved;
}

inline void run_grid(const LaunchOptions& opt, dim3 grid, dim3 block, KernelBody body) {
  const std::uint64_t threads = std::uint64_t(block.x) * block.y * block.z;
  if (threads == 0 || grid.x == 0 || grid.y == 0 || grid.z == 0)
    throw EmulationError("emu::launch: a grid or block dimension is 0 (cudaErrorInvalidConfiguration on a GPU)");
  if (threads > 1024 || block.z > 64)
    throw EmulationError("emu::launch: " + std::to_string(threads) +
                         " threads per block; a GPU allows at most 1024 (and blockDim.z <= 64)");
  if (grid.y > 65535 || grid.z > 65535 || grid.x > 2147483647u)
    throw EmulationError("emu::launch: grid exceeds the GPU limits (x < 2^31, y and z <= 65535)");
  if (tls_runner) throw EmulationError("emu::launch from inside an emulated kernel is not supported");
  const std::uint64_t nblocks = std::uint64_t(grid.x) * grid.y * grid.z;
  unsigned workers = opt.workers ? opt.workers : default_workers();
  if (workers > nblocks) workers = static_cast<unsigned>(nblocks);

  std::atomic<std::uint64_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::exception_ptr first;
  auto guarded = [&] {
    try {
      work(opt, grid, block, body, next, nblocks, stop);
    } catch (...) {
      std::lock_guard lock(mu);
      if (!first) first = std::current_exception();
      stop = true;
    }
  };
  std::vector<std::thread> pool;
  for (unsigned i = 1; i < workers; ++i) pool.emplace_back(guarded);
  guarded();
  for (std::thread& t : pool) t.join();
  if (first) std::rethrow_exception(first);
}

template <class F, class Tuple>
struct Bound {
  F kernel;
  Tuple params;
  static void call(void* self) {
    auto* b = static_cast<Bound*>(self);
    std::apply(b->kernel, b->params);  // the kernel takes its copies, as on a GPU
  }
};

}  // namespace detail

/// Runs `kernel` over `grid` x `block` threads with `args` converted to its parameter types.
template <class... P, class... A>
void launch(const LaunchOptions& options, void (*kernel)(P...), dim3 grid, dim3 block, A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "emu::launch: argument count differs from the kernel's parameters");
  using Tuple = std::tuple<std::decay_t<P>...>;
  detail::Bound<void (*)(P...), Tuple> bound{kernel, Tuple(static_cast<std::decay_t<P>>(std::forward<A>(args))...)};
  detail::run_grid(options, grid, block, {&decltype(bound)::call, &bound});
}

template <class... P, class... A>
void launch(void (*kernel)(P...), dim3 grid, dim3 block, A&&... args) {
  launch(LaunchOptions{}, kernel, grid, block, std::forward<A>(args)...);
}

}  // namespace emu

// ---------------------------------------------------------------------------
// Synchronization, warp intrinsics
// ---------------------------------------------------------------------------

inline void __syncthreads() { ::emu::detail::block_barrier(0); }
inline int __syncthreads_count(int p) { return ::emu::detail::block_barrier(p); }
inline int __syncthreads_and(int p) {
  return ::emu::detail::block_barrier(p) == static_cast<int>(::emu::detail::runner("__syncthreads_and").nthreads);
}
inline int __syncthreads_or(int p) { return ::emu::detail::block_barrier(p) != 0; }
inline void __syncwarp(unsigned mask = 0xffffffffu) { ::emu::detail::warp_barrier(mask, "__syncwarp"); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }

template <class T>
T __shfl_sync(unsigned mask, T var, int src_lane, int width = warpSize) {
  const unsigned lane = ::emu::detail::runner("__shfl_sync").current->lane;
  const int base = static_cast<int>(lane) & ~(width - 1);
  return ::emu::detail::shuffle(mask, var, base + (src_lane & (width - 1)), false, "__shfl_sync");
}
template <class T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
  const unsigned lane = ::emu::detail::runner("__shfl_down_sync").current->lane;
  const bool out = static_cast<int>((lane & (width - 1)) + delta) >= width;
  return ::emu::detail::shuffle(mask, var, static_cast<int>(lane + delta), out, "__shfl_down_sync");
}
template <class T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
  const unsigned lane = ::emu::detail::runner("__shfl_up_sync").current->lane;
  const bool out = (lane & (width - 1)) < delta;
  return ::emu::detail::shuffle(mask, var, static_cast<int>(lane) - static_cast<int>(delta), out, "__shfl_up_sync");
}
template <class T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = warpSize) {
  const unsigned lane = ::emu::detail::runner("__shfl_xor_sync").current->lane;
  const int src = static_cast<int>(lane) ^ lane_mask;
  const bool out = (src & ~(width - 1)) != (static_cast<int>(lane) & ~(width - 1));
  return ::emu::detail::shuffle(mask, var, src, out, "__shfl_xor_sync");
}
inline unsigned __ballot_sync(unsigned mask, int pred) { return ::emu::detail::ballot(mask, pred, "__ballot_sync"); }
inline int __any_sync(unsigned mask, int pred) { return ::emu::detail::ballot(mask, pred, "__any_sync") != 0; }
inline int __all_sync(unsigned mask, int pred) { return ::emu::detail::ballot(mask, pred, "__all_sync") == mask; }
inline unsigned __activemask() {
  ::emu::detail::Runner& r = ::emu::detail::runner("__activemask");
  const ::emu::detail::Warp& w = r.warps[r.current->warp];
  return w.existing & ~w.exited;
}

// ---------------------------------------------------------------------------
// Atomics (blocks run on several OS threads, so these are real atomics)
// ---------------------------------------------------------------------------

namespace emu::detail {
template <class T>
T atomic_add(T* p, T v) {
  return std::atomic_ref<T>(*p).fetch_add(v, std::memory_order_relaxed);
}
template <class T, class F>
T atomic_update(T* p, F f) {
  std::atomic_ref<T> a(*p);
  T old = a.load(std::memory_order_relaxed);
  while (!a.compare_exchange_weak(old, f(old), std::memory_order_relaxed)) {
  }
  return old;
}
}  // namespace emu::detail

inline int atomicAdd(int* p, int v) { return ::emu::detail::atomic_add(p, v); }
inline unsigned atomicAdd(unsigned* p, unsigned v) { return ::emu::detail::atomic_add(p, v); }
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  return ::emu::detail::atomic_add(p, v);
}
inline float atomicAdd(float* p, float v) { return ::emu::detail::atomic_add(p, v); }
inline double atomicAdd(double* p, double v) { return ::emu::detail::atomic_add(p, v); }
inline int atomicSub(int* p, int v) { return ::emu::detail::atomic_add(p, -v); }
inline unsigned atomicSub(unsigned* p, unsigned v) { return ::emu::detail::atomic_add(p, 0u - v); }
template <class T>
T atomicExch(T* p, T v) {
  return std::atomic_ref<T>(*p).exchange(v, std::memory_order_relaxed);
}
template <class T>
T atomicCAS(T* p, T compare, T v) {
  std::atomic_ref<T>(*p).compare_exchange_strong(compare, v, std::memory_order_relaxed);
  return compare;  // the old value either way
}
template <class T>
T atomicMax(T* p, T v) {
  static_assert(std::is_integral_v<T>, "CUDA has atomicMax only for integers");
  return ::emu::detail::atomic_update(p, [v](T old) { return old < v ? v : old; });
}
template <class T>
T atomicMin(T* p, T v) {
  static_assert(std::is_integral_v<T>, "CUDA has atomicMin only for integers");
  return ::emu::detail::atomic_update(p, [v](T old) { return v < old ? v : old; });
}
template <class T>
T atomicAnd(T* p, T v) {
  return std::atomic_ref<T>(*p).fetch_and(v, std::memory_order_relaxed);
}
template <class T>
T atomicOr(T* p, T v) {
  return std::atomic_ref<T>(*p).fetch_or(v, std::memory_order_relaxed);
}
template <class T>
T atomicXor(T* p, T v) {
  return std::atomic_ref<T>(*p).fetch_xor(v, std::memory_order_relaxed);
}

// ---------------------------------------------------------------------------
// Loads, bit casts, integer intrinsics, math
// ---------------------------------------------------------------------------

template <class T>
T __ldg(const T* p) {
  return *p;
}

inline int __float_as_int(float f) { return std::bit_cast<int>(f); }
inline unsigned __float_as_uint(float f) { return std::bit_cast<unsigned>(f); }
inline float __int_as_float(int i) { return std::bit_cast<float>(i); }
inline float __uint_as_float(unsigned u) { return std::bit_cast<float>(u); }
inline long long __double_as_longlong(double d) { return std::bit_cast<long long>(d); }
inline double __longlong_as_double(long long i) { return std::bit_cast<double>(i); }

inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll(static_cast<unsigned long long>(x)); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
inline unsigned __umulhi(unsigned a, unsigned b) {
  return static_cast<unsigned>((static_cast<unsigned long long>(a) * b) >> 32);
}
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return static_cast<unsigned long long>((static_cast<unsigned __int128>(a) * b) >> 64);
}

// min/max as CUDA declares them (same-type overloads).
#define TESSEL_EMU_MINMAX(T)                        \
  inline T min(T a, T b) { return b < a ? b : a; } \
  inline T max(T a, T b) { return a < b ? b : a; }
TESSEL_EMU_MINMAX(int)
TESSEL_EMU_MINMAX(unsigned)
TESSEL_EMU_MINMAX(long)
TESSEL_EMU_MINMAX(unsigned long)
TESSEL_EMU_MINMAX(long long)
TESSEL_EMU_MINMAX(unsigned long long)
#undef TESSEL_EMU_MINMAX
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }

inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float rcbrtf(float x) { return 1.0f / cbrtf(x); }
inline float normcdff(float x) { return 0.5f * erfcf(-x * 0.70710678118654752f); }
inline double normcdf(double x) { return 0.5 * erfc(-x * 0.70710678118654752); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : (x == x ? x : 0.0f)); }
inline float __expf(float x) { return expf(x); }
inline float __exp10f(float x) { return powf(10.0f, x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __log10f(float x) { return log10f(x); }
inline float __powf(float a, float b) { return powf(a, b); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline float __tanhf(float x) { return tanhf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
inline int __float2int_rn(float x) { return static_cast<int>(lrintf(x)); }
inline int __float2int_rz(float x) { return static_cast<int>(x); }
inline long long __float2ll_rn(float x) { return llrintf(x); }
inline float __int2float_rn(int x) { return static_cast<float>(x); }
inline float __ll2float_rn(long long x) { return static_cast<float>(x); }

/// For the emulated driver, once it loads a kernel library: the library's
/// kernels take their fiber stacks from the driver's pool (one per process)
/// instead of the library's own.
// (`used`: emitted into every library, though nothing in it calls it.)
extern "C" __attribute__((visibility("default"), used)) inline void tessel_emu_share_stack_pool(
    emu::detail::TakeStacks take, emu::detail::GiveStacks give) {
  emu::detail::g_take_stacks = take;
  emu::detail::g_give_stacks = give;
}
