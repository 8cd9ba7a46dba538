// chain_vs_hand: run_benchmarks' fused_chain_16M figure against its `hand`
// peer only, with no LibTorch or Google Benchmark: how close a fused tessel
// kernel comes to a hand-written -O3 -march=native loop.
//
//   build-bench/bench/chain_vs_hand               # 11 repetitions
//   build-bench/bench/chain_vs_hand --reps=21
//
// tessel: `Tensor y = relu(a*b+c)*d; y.eval();` on 16M f32 (the output comes
// from the caching allocator each call); hand: one fused loop into a buffer
// made once. Each repetition times 4 calls of each, in alternating order;
// reported are the medians over repetitions of wall and thread CPU time.
#include <fmt/format.h>
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "bench/hand.h"
#include "bench/harness.h"
#include "codegen/backend.h"
#include "codegen/cpu/cpu_backend.h"
#include "dsl/tessel.h"
#include "runtime/thread_pool.h"

using namespace tessel;

namespace {

double cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

std::string loadavg() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

struct Timing {
  std::vector<double> wall, cpu;
};

template <class F>
void time_calls(Timing& t, int calls, const F& f) {
  double w0 = bench::now_ms(), c0 = cpu_ms();
  for (int i = 0; i < calls; ++i) f();
  t.wall.push_back((bench::now_ms() - w0) / calls);
  t.cpu.push_back((cpu_ms() - c0) / calls);
}

}  // namespace

int main(int argc, char** argv) {
  tessel::set_num_threads(1);  // single-threaded, as in run_benchmarks
  int reps = 11;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--reps=", 0) == 0 && std::atoi(a.c_str() + 7) >= 1) {
      reps = std::atoi(a.c_str() + 7);
    } else {
      std::fprintf(stderr, "usage: chain_vs_hand [--reps=N]   (N >= 1; got '%s')\n", a.c_str());
      return 2;
    }
  }
  if (!cpu_jit_backend()) {
    std::fprintf(stderr, "chain_vs_hand: built without LLVM, there is no compiled backend to measure\n");
    return 1;
  }
  BackendOverride o(*cpu_jit_backend());
  const int64_t n = int64_t{16} << 20;
  manual_seed(3);
  Tensor a = rand({n}), b = rand({n}), c = rand({n}) - 0.5, d = rand({n});
  for (Tensor* t : {&a, &b, &c, &d}) t->eval();
  const float *pa = a.buffer().ptr<float>(), *pb = b.buffer().ptr<float>(), *pc = c.buffer().ptr<float>(),
              *pd = d.buffer().ptr<float>();
  std::vector<float> out(static_cast<size_t>(n));

  auto tessel_call = [&] {
    Tensor y = relu(a * b + c) * d;
    y.eval();
  };
  auto hand_call = [&] { bench::hand::chain(pa, pb, pc, pd, out.data(), n); };

  double diff = 0;
  {
    Tensor y = relu(a * b + c) * d;
    y.eval();
    hand_call();
    const float* py = y.buffer().ptr<float>();
    for (int64_t i = 0; i < n; ++i) diff = std::max(diff, static_cast<double>(std::fabs(py[i] - out[i])));
  }
  fmt::print("chain_vs_hand: relu(a*b+c)*d on {} f32, {} repetitions, load average at start {}\n", n, reps,
             loadavg());
  for (int i = 0; i < 2; ++i) tessel_call(), hand_call();  // warm-up: allocator pool, first touch

  Timing ts, th;
  for (int r = 0; r < reps; ++r) {
    if (r % 2 == 0) {
      time_calls(ts, 4, tessel_call);
      time_calls(th, 4, hand_call);
    } else {
      time_calls(th, 4, hand_call);
      time_calls(ts, 4, tessel_call);
    }
  }
  const double tw = bench::median(ts.wall), hw = bench::median(th.wall);
  const double tc = bench::median(ts.cpu), hc = bench::median(th.cpu);
  fmt::print("tessel {:.2f} ms (CPU {:.2f}), hand {:.2f} ms (CPU {:.2f}): ratio {:.3f} (CPU-time ratio {:.3f}), "
             "goal <= 1.10; max |diff| {:.3g}\n",
             tw, tc, hw, hc, tw / hw, tc / hc, diff);
  fmt::print("load average at end {}\n", loadavg());
  return 0;
}
