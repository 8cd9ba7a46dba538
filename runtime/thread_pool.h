// The CPU thread pool: parallel loops over index ranges, for kernels and
// programs. Workers sleep on a condition variable between jobs (they never
// spin), so an idle pool costs no CPU and leaves the cores to OpenBLAS and to
// whatever else runs on the machine.
//
//   // a compiled kernel over its rows, 4096 rows or more per chunk:
//   tessel::parallel_for(rows, 4096, [&](std::int64_t begin, std::int64_t end) {
//     kernel(bufs, args, begin, end);
//   });
//
// Threads: TESSEL_NUM_THREADS (a whole number >= 1; default: the cores this
// process may run on), or set_num_threads() at run time. 1 runs everything on
// the calling thread.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

namespace tessel {

/// Threads parallel_for uses, the caller included: set_num_threads()'s last
/// value, else TESSEL_NUM_THREADS, else the cores this process may run on.
/// Throws ValueError if TESSEL_NUM_THREADS is not a whole number in 1..1024.
int num_threads();

/// Uses `n` threads (the caller and n - 1 workers) from the next parallel_for
/// on; waits for a parallel_for in flight on another thread. 1: every loop runs
/// on the calling thread and the workers exit. ValueError if `n` < 1 or > 1024,
/// or when called from inside a parallel_for chunk.
///
///   tessel::set_num_threads(1);   // single-threaded figures in a benchmark
void set_num_threads(int n);

/// The cores this process may run on (sched_getaffinity; else
/// std::thread::hardware_concurrency; at least 1): the default of num_threads().
int available_cores();

/// Parses TESSEL_NUM_THREADS as it is now: the thread count it asks for, or
/// available_cores() when it is unset or empty. ValueError naming the variable
/// for anything but a whole number in 1..1024.
int num_threads_from_env();

/// True on a pool worker, and on a caller while its parallel_for runs chunks.
bool in_parallel_region();

namespace detail {

// A non-owning reference to a callable fn(begin, end): no allocation per loop.
class RangeFn {
 public:
  template <class F>
  explicit RangeFn(const F& f)
      : obj_(static_cast<const void*>(&f)), call_([](const void* o, std::int64_t b, std::int64_t e) {
          (*static_cast<const F*>(o))(b, e);
        }) {}
  void operator()(std::int64_t b, std::int64_t e) const { call_(obj_, b, e); }

 private:
  const void* obj_;
  void (*call_)(const void*, std::int64_t, std::int64_t);
};

extern thread_local bool t_in_parallel;

void parallel_run(std::int64_t n, std::int64_t grain, RangeFn fn);

}  // namespace detail

/// Calls fn(begin, end) over disjoint ranges that cover [0, n) exactly once,
/// on up to num_threads() threads; the calling thread runs chunks too and
/// returns when all are done. Every range holds at least `grain` indices
/// (grain < 1 counts as 1), so pick grain so that a range is worth a thread
/// wake-up (tens of microseconds of work).
///
/// Runs fn(0, n) on the calling thread, with no synchronization at all, when
/// n < 2 * grain (one chunk), inside another parallel_for (nested loops run
/// inline), with one thread, or while another thread's loop holds the pool.
/// n <= 0 calls nothing. If chunks throw, chunks not yet started are skipped
/// and the first exception is rethrown here after the others finished.
///
///   std::vector<float> y(n);
///   tessel::parallel_for(n, 1 << 14, [&](std::int64_t b, std::int64_t e) {
///     for (std::int64_t i = b; i < e; ++i) y[i] = std::sqrt(x[i]);
///   });
template <class F>
void parallel_for(std::int64_t n, std::int64_t grain, const F& fn) {
  static_assert(std::is_invocable_v<const F&, std::int64_t, std::int64_t>,
                "parallel_for: fn must be callable as fn(int64_t begin, int64_t end)");
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  if (n / grain < 2 || detail::t_in_parallel) {
    fn(std::int64_t{0}, n);
    return;
  }
  detail::parallel_run(n, grain, detail::RangeFn(fn));
}

}  // namespace tessel
