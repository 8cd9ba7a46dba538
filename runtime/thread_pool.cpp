#include "runtime/thread_pool.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "runtime/errors.h"

namespace tessel {

namespace detail {
thread_local bool t_in_parallel = false;
}  // namespace detail

namespace {

constexpr int kMaxThreads = 1024;
// Up to this many chunks per thread, claimed dynamically: a thread that the OS
// parks for a while (other work on the cores) holds up one small chunk, not a
// whole 1/T share, while chunks stay large enough to stream through memory.
constexpr std::int64_t kChunksPerThread = 4;

struct Job {
  detail::RangeFn fn;
  std::int64_t n;
  std::int64_t nchunks;
  std::atomic<std::int64_t> next{0};  // next chunk to claim
  std::atomic<std::int64_t> done{0};  // chunks finished (or skipped after an exception)
  std::atomic<bool> failed{false};
  std::exception_ptr error;  // the first exception; guarded by Pool::mu
  int inside = 0;            // workers that took this job and have not left it; guarded by Pool::mu

  Job(detail::RangeFn f, std::int64_t size, std::int64_t chunks) : fn(f), n(size), nchunks(chunks) {}
};

struct Pool {
  // Held by the thread whose loop runs on the workers (one loop at a time);
  // set_num_threads takes it to resize between loops.
  std::mutex launch_mu;
  std::mutex mu;
  std::condition_variable work_cv;  // workers: a new job or stop
  std::condition_variable done_cv;  // the caller: every chunk done, every worker out
  std::vector<std::thread> workers;
  bool stopping = false;
  Job* job = nullptr;
  std::uint64_t generation = 0;
  std::atomic<int> threads{0};  // 0: not read from the environment yet
  std::mutex config_mu;
};

void after_fork_in_child();

Pool*& pool_ptr() {
  static Pool* p = [] {
    // A forked child has none of the parent's workers: it starts a fresh pool.
    pthread_atfork(nullptr, nullptr, &after_fork_in_child);
    return new Pool;  // never destroyed: loops may run during static destruction
  }();
  return p;
}
Pool& pool() { return *pool_ptr(); }

void after_fork_in_child() {
  Pool* old = pool_ptr();
  auto* fresh = new Pool;
  fresh->threads.store(old->threads.load());
  // The old pool is abandoned, not destroyed: its thread handles name threads
  // that do not exist here, and its mutexes may have been held at the fork.
  pool_ptr() = fresh;
}

void run_chunks(Pool& p, Job& j) {
  const std::int64_t base = j.n / j.nchunks, rem = j.n % j.nchunks;
  for (;;) {
    const std::int64_t c = j.next.fetch_add(1, std::memory_order_relaxed);
    if (c >= j.nchunks) return;
    if (!j.failed.load(std::memory_order_relaxed)) {
      const std::int64_t b = c * base + std::min(c, rem);
      const std::int64_t e = b + base + (c < rem ? 1 : 0);
      try {
        j.fn(b, e);
      } catch (...) {
        std::lock_guard lock(p.mu);
        if (!j.error) j.error = std::current_exception();
        j.failed.store(true, std::memory_order_relaxed);
      }
    }
    j.done.fetch_add(1, std::memory_order_acq_rel);
  }
}

// `seen`: the generation when the worker was made. Read here instead, a job
// posted before the thread first ran would look already done to it.
void worker_main(Pool* p, std::uint64_t seen) {
  detail::t_in_parallel = true;  // loops inside a chunk run inline
  std::unique_lock lock(p->mu);
  for (;;) {
    p->work_cv.wait(lock, [&] { return p->stopping || (p->job && p->generation != seen); });
    if (p->stopping) return;
    seen = p->generation;
    Job& j = *p->job;
    ++j.inside;
    lock.unlock();
    run_chunks(*p, j);
    lock.lock();
    if (--j.inside == 0 && j.done.load(std::memory_order_acquire) == j.nchunks) p->done_cv.notify_one();
  }
}

// Both with launch_mu held.
void stop_workers(Pool& p) {
  {
    std::lock_guard lock(p.mu);
    p.stopping = true;
  }
  p.work_cv.notify_all();
  for (auto& w : p.workers) w.join();
  p.workers.clear();
  p.stopping = false;
}
void start_workers(Pool& p, int count) {
  if (static_cast<int>(p.workers.size()) == count) return;
  stop_workers(p);
  p.workers.reserve(static_cast<std::size_t>(count));
  std::uint64_t generation;
  {
    std::lock_guard lock(p.mu);
    generation = p.generation;
  }
  try {
    for (int i = 0; i < count; ++i) p.workers.emplace_back(worker_main, &p, generation);
  } catch (...) {
    stop_workers(p);
    throw;
  }
}

struct InParallel {
  InParallel() { detail::t_in_parallel = true; }
  ~InParallel() { detail::t_in_parallel = false; }
};

std::string what_to_do() {
  return fmt::format(
      "set it to a whole number from 1 to {} (1 runs every loop on the calling thread), or unset it to use "
      "all {} cores this process may run on",
      kMaxThreads, available_cores());
}

}  // namespace

int available_cores() {
  int n = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
  if (n <= 0) n = static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(n, 1, kMaxThreads);
}

int num_threads_from_env() {
  const char* v = std::getenv("TESSEL_NUM_THREADS");
  if (!v || !*v) return available_cores();
  const std::string_view s(v);
  long long n = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec == std::errc::invalid_argument || end != s.data() + s.size())
    throw ValueError(fmt::format("TESSEL_NUM_THREADS='{}' is not a thread count: {}", s, what_to_do()));
  if (ec == std::errc::result_out_of_range || n < 1 || n > kMaxThreads)
    throw ValueError(fmt::format("TESSEL_NUM_THREADS={} is out of range: {}", s, what_to_do()));
  return static_cast<int>(n);
}

int num_threads() {
  Pool& p = pool();
  if (int t = p.threads.load(std::memory_order_acquire)) return t;
  std::lock_guard lock(p.config_mu);
  int t = num_threads_from_env();  // throws on a bad value, and again on the next call
  int expected = 0;
  // A set_num_threads() that raced with this first read wins.
  if (!p.threads.compare_exchange_strong(expected, t)) t = expected;
  return t;
}

void set_num_threads(int n) {
  if (n < 1 || n > kMaxThreads)
    throw ValueError(fmt::format("set_num_threads({}): the thread count must be from 1 to {} (1 runs every loop "
                                 "on the calling thread)",
                                 n, kMaxThreads));
  if (detail::t_in_parallel)
    throw ValueError(fmt::format("set_num_threads({}) was called inside a parallel_for chunk: set the thread "
                                 "count before the loop starts",
                                 n));
  Pool& p = pool();
  std::lock_guard launch(p.launch_mu);  // after the loop in flight, if any
  if (static_cast<int>(p.workers.size()) != n - 1) stop_workers(p);  // started again on the next loop
  p.threads.store(n, std::memory_order_release);
}

bool in_parallel_region() { return detail::t_in_parallel; }

void detail::parallel_run(std::int64_t n, std::int64_t grain, RangeFn fn) {
  const int configured = num_threads();
  Pool& p = pool();
  std::unique_lock launch(p.launch_mu, std::defer_lock);
  if (configured == 1 || !launch.try_lock()) {
    // One thread, or another thread's loop holds the workers: waiting for it
    // could take longer than doing this loop here.
    fn(0, n);
    return;
  }
  const int threads = p.threads.load(std::memory_order_acquire);  // set_num_threads needs launch_mu: stable now
  if (threads == 1) {
    launch.unlock();
    fn(0, n);
    return;
  }
  start_workers(p, threads - 1);

  Job job(fn, n, std::min<std::int64_t>(n / grain, std::int64_t{threads} * kChunksPerThread));
  const std::int64_t wake = std::min<std::int64_t>(threads - 1, job.nchunks - 1);
  {
    std::lock_guard lock(p.mu);
    p.job = &job;
    ++p.generation;
  }
  if (wake == threads - 1) {
    p.work_cv.notify_all();
  } else {
    for (std::int64_t i = 0; i < wake; ++i) p.work_cv.notify_one();
  }
  {
    InParallel guard;
    run_chunks(p, job);
  }
  std::exception_ptr error;
  {
    std::unique_lock lock(p.mu);
    // Sleeps (no spinning) until the workers' last chunk ends and every worker
    // that took the job has let go of it: `job` lives on this stack.
    p.done_cv.wait(lock, [&] { return job.done.load(std::memory_order_acquire) == job.nchunks && job.inside == 0; });
    p.job = nullptr;
    error = job.error;
  }
  launch.unlock();
  if (error) std::rethrow_exception(error);
}

}  // namespace tessel
