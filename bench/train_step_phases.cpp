// train_step_phases: the train_step_b256 figure's tessel step alone, timed
// by phase, with the compiled backend's counters per step -- where a
// training step's time goes.
//
//   build-bench/bench/train_step_phases [steps] [batch] [hidden]
//
// A batch and hidden width of 1 leave the step's arithmetic near nothing:
// what remains is the host's cost of a step (graph, plan lookup, launches).
#include <cblas.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "codegen/backend.h"
#include "codegen/cpu/cpu_backend.h"
#include "dsl/tessel.h"
#include "dsl/train/optimizer.h"
#include "runtime/thread_pool.h"

using namespace tessel;

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 400;
  set_num_threads(1);  // one thread everywhere, as run_benchmarks
  openblas_set_num_threads(1);
  BackendOverride o(*cpu_jit_backend());
  const int64_t B = argc > 2 ? std::atoll(argv[2]) : 256;
  const int64_t hidden = argc > 3 ? std::atoll(argv[3]) : 256;
  manual_seed(0);
  nn::Sequential net(nn::Linear(784, hidden), nn::ReLU(), nn::Linear(hidden, 10));
  manual_seed(1);  // the batch of run_benchmarks' train_step_b256
  Tensor x = rand({B, 784});
  x.eval();
  std::vector<int64_t> labels(B);
  std::mt19937 r(0);
  for (auto& l : labels) l = static_cast<int64_t>(r() % 10);
  Tensor y = from_vector<int64_t>(labels, Shape{B});
  auto params = net->parameters();
  optim::SGD opt(params, optim::SGDOptions{.lr = 0.1});
  using Clock = std::chrono::steady_clock;
  double t[5] = {};
  auto step = [&](bool timed) {
    auto t0 = Clock::now();
    Tensor loss = cross_entropy(net(x), y);
    auto t1 = Clock::now();
    opt.zero_grad();
    loss.backward();
    auto t2 = Clock::now();
    opt.step();
    auto t3 = Clock::now();
    std::vector<Tensor> outs{loss};
    for (auto& p : params) outs.push_back(p);
    realize(outs);
    auto t4 = Clock::now();
    if (!timed) return;
    t[0] += std::chrono::duration<double, std::milli>(t1 - t0).count();
    t[1] += std::chrono::duration<double, std::milli>(t2 - t1).count();
    t[2] += std::chrono::duration<double, std::milli>(t3 - t2).count();
    t[3] += std::chrono::duration<double, std::milli>(t4 - t3).count();
    t[4] += std::chrono::duration<double, std::milli>(t4 - t0).count();
  };
  for (int i = 0; i < 20; ++i) step(false);
  jit_wait_idle();  // kernels compiling in the background run compiled from here on
  reset_cpu_jit_stats();
  for (int i = 0; i < steps; ++i) step(true);
  CpuJitStats s = cpu_jit_stats();
  std::printf("per step: forward build %.3f ms, zero_grad+backward %.3f ms, step %.3f ms, realize %.3f ms, total %.3f ms\n",
              t[0] / steps, t[1] / steps, t[2] / steps, t[3] / steps, t[4] / steps);
  std::printf("per step: realizations %.1f, kernels %.1f, matmuls %.1f (epilogues %.1f), views %.1f, fallbacks %.1f, "
              "compiled %.2f\n",
              double(s.realizations) / steps, double(s.kernels_launched) / steps, double(s.matmuls) / steps,
              double(s.matmul_epilogues) / steps, double(s.views) / steps, double(s.fallbacks) / steps,
              double(s.kernels_compiled) / steps);
}
