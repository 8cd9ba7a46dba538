// The CPU thread pool: every index once for many (n, grain, threads), small
// and nested loops inline on the caller, chunks truly concurrent, exceptions
// rethrown on the caller, TESSEL_NUM_THREADS parsing and its errors, a pool
// that survives fork(), and idle workers that use no CPU.
#include <catch2/catch.hpp>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/errors.h"
#include "runtime/thread_pool.h"

using tessel::num_threads;
using tessel::parallel_for;
using tessel::set_num_threads;
using tessel::ValueError;

namespace {

using Chunk = std::pair<std::int64_t, std::int64_t>;

struct Recorded {
  std::vector<Chunk> chunks;
  std::vector<int> hits;  // calls that covered each index
};

Recorded record(std::int64_t n, std::int64_t grain) {
  Recorded r;
  std::mutex mu;
  std::vector<std::atomic<int>> hits(static_cast<std::size_t>(std::max<std::int64_t>(n, 0)));
  parallel_for(n, grain, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) hits[static_cast<std::size_t>(i)].fetch_add(1);
    std::lock_guard lock(mu);
    r.chunks.emplace_back(b, e);
  });
  for (auto& h : hits) r.hits.push_back(h.load());
  std::sort(r.chunks.begin(), r.chunks.end());
  return r;
}

// Waits until `counter` reaches `target`: true, or false after 20 s (a
// chunk that never got its own thread).
bool wait_for(const std::atomic<int>& counter, int target) {
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (counter.load() < target) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

// Sets an environment variable for one scope and restores it after.
struct ScopedEnv {
  std::string name;
  std::optional<std::string> old;
  ScopedEnv(const char* n, const char* value) : name(n) {
    if (const char* o = std::getenv(n)) old = o;
    if (value)
      ::setenv(n, value, 1);
    else
      ::unsetenv(n);
  }
  ~ScopedEnv() {
    if (old)
      ::setenv(name.c_str(), old->c_str(), 1);
    else
      ::unsetenv(name.c_str());
  }
};

double process_cpu_ms() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto ms = [](const timeval& t) { return t.tv_sec * 1e3 + t.tv_usec / 1e3; };
  return ms(u.ru_utime) + ms(u.ru_stime);
}

// Output of this test program run with one hidden test case and extra environment.
std::string run_child(const std::string& env, const std::string& test_name) {
  std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
  std::string cmd = env + " '" + exe + "' '" + test_name + "' 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  ::pclose(p);
  return out;
}

}  // namespace

TEST_CASE("parallel_for covers every index exactly once", "[thread_pool]") {
  for (int threads : {1, 2, 3, 4, 8}) {
    set_num_threads(threads);
    REQUIRE(num_threads() == threads);
    for (std::int64_t n : {0, 1, 2, 3, 7, 64, 100, 1000, 4097, 100003}) {
      for (std::int64_t grain : {-3, 0, 1, 2, 7, 64, 1000, 5000}) {
        INFO("threads " << threads << " n " << n << " grain " << grain);
        Recorded r = record(n, grain);
        for (std::int64_t i = 0; i < n; ++i) {
          INFO("index " << i);
          REQUIRE(r.hits[static_cast<std::size_t>(i)] == 1);
        }
        if (n == 0) {
          REQUIRE(r.chunks.empty());
          continue;
        }
        const std::int64_t g = std::max<std::int64_t>(grain, 1);
        if (n < 2 * g || threads == 1) {
          REQUIRE(r.chunks == std::vector<Chunk>{{0, n}});
          continue;
        }
        // Ranges are disjoint, in order, and none is smaller than the grain.
        REQUIRE(r.chunks.size() >= 2);
        REQUIRE(static_cast<std::int64_t>(r.chunks.size()) <= n / g);
        std::int64_t next = 0;
        for (auto [b, e] : r.chunks) {
          REQUIRE(b == next);
          REQUIRE(e - b >= g);
          next = e;
        }
        REQUIRE(next == n);
      }
    }
  }
}

TEST_CASE("a negative n runs nothing", "[thread_pool]") {
  set_num_threads(2);
  int calls = 0;
  parallel_for(-5, 1, [&](std::int64_t, std::int64_t) { ++calls; });
  REQUIRE(calls == 0);
}

TEST_CASE("a loop of one chunk runs inline on the calling thread", "[thread_pool]") {
  set_num_threads(4);
  const auto me = std::this_thread::get_id();
  for (auto [n, grain] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {10, 10}, {10, 6}, {5, 100}, {19, 10}}) {
    INFO("n " << n << " grain " << grain);
    std::vector<Chunk> calls;
    std::thread::id where;
    bool flagged = true;
    parallel_for(n, grain, [&](std::int64_t b, std::int64_t e) {
      calls.emplace_back(b, e);  // no lock: one call on this thread
      where = std::this_thread::get_id();
      flagged = tessel::in_parallel_region();
    });
    REQUIRE(calls == std::vector<Chunk>{{0, n}});
    REQUIRE(where == me);
    REQUIRE_FALSE(flagged);  // an inline loop leaves nested loops free to use the pool
  }
}

TEST_CASE("chunks run on several threads at the same time, the caller among them", "[thread_pool]") {
  for (int threads : {2, 4}) {
    set_num_threads(threads);
    // Each chunk waits for all to have started: that only ends if every chunk has its own thread.
    std::atomic<int> started{0};
    std::atomic<int> timed_out{0};
    std::mutex mu;
    std::set<std::thread::id> ids;
    parallel_for(threads, 1, [&](std::int64_t b, std::int64_t e) {
      {
        std::lock_guard lock(mu);
        ids.insert(std::this_thread::get_id());
      }
      started.fetch_add(static_cast<int>(e - b));
      if (!wait_for(started, threads)) timed_out.fetch_add(1);
    });
    INFO("threads " << threads);
    REQUIRE(timed_out.load() == 0);
    REQUIRE(static_cast<int>(ids.size()) == threads);
    REQUIRE(ids.count(std::this_thread::get_id()) == 1);
  }
}

TEST_CASE("nested parallel_for runs inline in its chunk", "[thread_pool]") {
  set_num_threads(4);
  std::atomic<int> bad{0}, inner_calls{0};
  std::vector<std::atomic<int>> inner_hits(8 * 1000);
  parallel_for(8, 1, [&](std::int64_t b, std::int64_t e) {
    if (!tessel::in_parallel_region()) bad.fetch_add(1);
    const auto me = std::this_thread::get_id();
    for (std::int64_t row = b; row < e; ++row) {
      parallel_for(1000, 1, [&](std::int64_t ib, std::int64_t ie) {
        inner_calls.fetch_add(1);
        if (std::this_thread::get_id() != me || ib != 0 || ie != 1000) bad.fetch_add(1);
        for (std::int64_t i = ib; i < ie; ++i) inner_hits[static_cast<std::size_t>(row * 1000 + i)].fetch_add(1);
      });
    }
  });
  REQUIRE(bad.load() == 0);
  REQUIRE(inner_calls.load() == 8);
  for (auto& h : inner_hits) REQUIRE(h.load() == 1);
  REQUIRE_FALSE(tessel::in_parallel_region());
}

TEST_CASE("an exception in a chunk is rethrown on the caller", "[thread_pool]") {
  set_num_threads(2);
  SECTION("thrown on the calling thread's chunk or a worker's, with its type and message") {
    for (bool on_worker : {false, true}) {
      const auto caller = std::this_thread::get_id();
      std::atomic<int> started{0};
      auto loop = [&] {
        parallel_for(2, 1, [&](std::int64_t b, std::int64_t) {
          started.fetch_add(1);
          wait_for(started, 2);  // both chunks on their own threads
          bool mine = std::this_thread::get_id() == caller;
          if (mine != on_worker) throw ValueError("chunk " + std::to_string(b) + " failed");
        });
      };
      INFO("on a worker: " << on_worker);
      REQUIRE_THROWS_AS(loop(), ValueError);
      started = 0;
      REQUIRE_THROWS_WITH(loop(), Catch::Matchers::Matches("chunk [01] failed"));
    }
  }
  SECTION("chunks not started yet are skipped") {
    std::atomic<int> started{0};
    std::atomic<bool> thrown{false};
    auto loop = [&] {
      parallel_for(1000, 1, [&](std::int64_t, std::int64_t) {  // 8 chunks of 125 on 2 threads
        if (started.fetch_add(1) == 0) {
          thrown = true;
          throw std::runtime_error("first chunk");
        }
        // Give the failing chunk time to be recorded before this thread claims another.
        while (!thrown.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      });
    };
    REQUIRE_THROWS_WITH(loop(), "first chunk");
    REQUIRE(started.load() >= 1);
    REQUIRE(started.load() < 8);
  }
  // The pool works normally afterwards.
  Recorded r = record(10000, 10);
  for (int h : r.hits) REQUIRE(h == 1);
  REQUIRE(r.chunks.size() > 1);
}

TEST_CASE("a loop started while another thread's loop holds the pool runs inline", "[thread_pool]") {
  set_num_threads(2);
  std::atomic<int> in_first{0};
  std::atomic<bool> release{false};
  std::thread other([&] {
    parallel_for(2, 1, [&](std::int64_t, std::int64_t) {
      in_first.fetch_add(1);
      while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
  });
  const bool held = wait_for(in_first, 2);  // the other loop holds both threads
  Recorded r = record(1000, 1);  // would wait forever for the pool if it did not run here
  release = true;
  other.join();
  REQUIRE(held);
  REQUIRE(r.chunks == std::vector<Chunk>{{0, 1000}});
  for (int h : r.hits) REQUIRE(h == 1);
}

TEST_CASE("loops from several threads at once each cover their range", "[thread_pool]") {
  set_num_threads(3);
  std::atomic<int> wrong{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 3; ++t)
    callers.emplace_back([&, t] {
      for (int rep = 0; rep < 200; ++rep) {
        const std::int64_t n = 500 + 37 * t + rep;
        Recorded r = record(n, 3);
        for (int h : r.hits)
          if (h != 1) wrong.fetch_add(1);
      }
    });
  for (auto& c : callers) c.join();
  REQUIRE(wrong.load() == 0);
}

TEST_CASE("a compiled kernel launched over row ranges", "[thread_pool]") {
  // The shape of a CPU backend launch: fn(bufs, args, row_begin, row_end).
  using KernelFn = void(void** bufs, const std::int64_t* args, std::int64_t row_begin, std::int64_t row_end);
  KernelFn* kernel = [](void** bufs, const std::int64_t* args, std::int64_t rb, std::int64_t re) {
    auto* out = static_cast<float*>(bufs[0]);
    auto* in = static_cast<const float*>(bufs[1]);
    const std::int64_t cols = args[0];
    for (std::int64_t r = rb; r < re; ++r)
      for (std::int64_t c = 0; c < cols; ++c) out[r * cols + c] = in[r * cols + c] * 2.0f + static_cast<float>(r);
  };
  set_num_threads(2);
  const std::int64_t rows = 513, cols = 67;
  std::vector<float> in(rows * cols), out(rows * cols, -1.0f);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i) * 0.5f;
  void* bufs[] = {out.data(), in.data()};
  const std::int64_t args[] = {cols};
  parallel_for(rows, 16, [&](std::int64_t b, std::int64_t e) { kernel(bufs, args, b, e); });
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c)
      REQUIRE(out[r * cols + c] == in[r * cols + c] * 2.0f + static_cast<float>(r));
}

TEST_CASE("set_num_threads rejects counts it cannot use", "[thread_pool][error]") {
  set_num_threads(2);
  REQUIRE_THROWS_AS(set_num_threads(0), ValueError);
  REQUIRE_THROWS_WITH(set_num_threads(-1), Catch::Matchers::Contains("from 1 to 1024"));
  REQUIRE_THROWS_AS(set_num_threads(1025), ValueError);
  REQUIRE(num_threads() == 2);  // unchanged by the failed calls
  // Inside a chunk it would wait for its own loop: an error instead.
  REQUIRE_THROWS_WITH(parallel_for(4, 1, [](std::int64_t, std::int64_t) { set_num_threads(3); }),
                      Catch::Matchers::Contains("inside a parallel_for chunk"));
  REQUIRE(num_threads() == 2);
  set_num_threads(1);
  REQUIRE(num_threads() == 1);
}

TEST_CASE("TESSEL_NUM_THREADS: whole numbers from 1 to 1024, else a ValueError naming it", "[thread_pool][error]") {
  REQUIRE(tessel::available_cores() >= 1);
  {
    ScopedEnv e("TESSEL_NUM_THREADS", nullptr);
    REQUIRE(tessel::num_threads_from_env() == tessel::available_cores());
  }
  {
    ScopedEnv e("TESSEL_NUM_THREADS", "");
    REQUIRE(tessel::num_threads_from_env() == tessel::available_cores());
  }
  for (auto [text, n] : {std::pair<const char*, int>{"1", 1}, {"3", 3}, {"64", 64}, {"1024", 1024}}) {
    ScopedEnv e("TESSEL_NUM_THREADS", text);
    REQUIRE(tessel::num_threads_from_env() == n);
  }
  for (const char* bad : {"abc", "4x", " 4", "4 ", "2.5", "+2", "0x4"}) {
    INFO(bad);
    ScopedEnv e("TESSEL_NUM_THREADS", bad);
    REQUIRE_THROWS_AS(tessel::num_threads_from_env(), ValueError);
    REQUIRE_THROWS_WITH(tessel::num_threads_from_env(),
                        Catch::Matchers::StartsWith("TESSEL_NUM_THREADS='" + std::string(bad) + "' is not a thread count") &&
                            Catch::Matchers::Contains("set it to a whole number from 1 to 1024") &&
                            Catch::Matchers::Contains("or unset it"));
  }
  for (const char* bad : {"0", "-2", "1025", "99999999999999999999999"}) {
    INFO(bad);
    ScopedEnv e("TESSEL_NUM_THREADS", bad);
    REQUIRE_THROWS_WITH(tessel::num_threads_from_env(),
                        Catch::Matchers::StartsWith("TESSEL_NUM_THREADS=" + std::string(bad) + " is out of range") &&
                            Catch::Matchers::Contains("whole number from 1 to 1024"));
  }
}

// Run by the next test in a fresh process: the pool's first use reads TESSEL_NUM_THREADS.
TEST_CASE("thread pool child: first loop", "[.child]") {
  try {
    Recorded r = record(1000, 1);
    bool once = std::all_of(r.hits.begin(), r.hits.end(), [](int h) { return h == 1; });
    std::printf("threads=%d chunks=%zu covered=%d\n", num_threads(), r.chunks.size(), once ? 1 : 0);
  } catch (const ValueError& e) {
    std::printf("error=%s\n", e.what());
  }
}

TEST_CASE("the first loop of a process uses TESSEL_NUM_THREADS, or fails with its error", "[thread_pool][error]") {
  const std::string child = "thread pool child: first loop";
  REQUIRE_THAT(run_child("TESSEL_NUM_THREADS=3", child), Catch::Matchers::Contains("threads=3 chunks=12 covered=1"));
  REQUIRE_THAT(run_child("TESSEL_NUM_THREADS=1", child), Catch::Matchers::Contains("threads=1 chunks=1 covered=1"));
  REQUIRE_THAT(run_child("TESSEL_NUM_THREADS=abc", child),
               Catch::Matchers::Contains("error=TESSEL_NUM_THREADS='abc' is not a thread count: set it to a whole "
                                         "number from 1 to 1024"));
  REQUIRE_THAT(run_child("TESSEL_NUM_THREADS=0", child),
               Catch::Matchers::Contains("error=TESSEL_NUM_THREADS=0 is out of range"));
}

TEST_CASE("a forked child gets a working pool", "[thread_pool]") {
  set_num_threads(3);
  Recorded before = record(3000, 1);  // workers exist in this process now
  REQUIRE(before.chunks.size() == 12);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::alarm(20);  // a child waiting for the parent's workers would hang: killed, and the test fails
    std::vector<std::atomic<int>> hits(3000);
    std::atomic<int> calls{0};
    parallel_for(3000, 1, [&](std::int64_t b, std::int64_t e) {
      calls.fetch_add(1);
      for (std::int64_t i = b; i < e; ++i) hits[static_cast<std::size_t>(i)].fetch_add(1);
    });
    bool ok = calls.load() == 12 && num_threads() == 3;
    for (auto& h : hits) ok = ok && h.load() == 1;
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
}

TEST_CASE("idle workers use no CPU", "[thread_pool]") {
  // More workers than this machine has cores: spinning ones would show at once.
  set_num_threads(std::max(4, tessel::available_cores()));
  std::vector<double> sink(1 << 16);
  for (int rep = 0; rep < 50; ++rep)
    parallel_for(static_cast<std::int64_t>(sink.size()), 256, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) sink[static_cast<std::size_t>(i)] += static_cast<double>(i) * rep;
    });
  REQUIRE(sink[12345] == 12345.0 * (49 * 50 / 2));
  const double cpu0 = process_cpu_ms();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const double idle_cpu = process_cpu_ms() - cpu0;
  INFO("CPU time of the process over 200 ms idle: " << idle_cpu << " ms");
  REQUIRE(idle_cpu < 20.0);
}
