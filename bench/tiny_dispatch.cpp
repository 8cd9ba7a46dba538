// tiny_dispatch: per-call overhead, for profiling: the tiny_chain_dispatch
// figure's tessel side (building the tree, then realizing it) and the
// mlp_forward figure's model on one row (graph building, scheduling and
// launches with almost no arithmetic).
//
//   build-bench/bench/tiny_dispatch [calls]
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "codegen/backend.h"
#include "codegen/cpu/cpu_backend.h"
#include "dsl/tessel.h"
#include "runtime/thread_pool.h"

using namespace tessel;

int main(int argc, char** argv) {
  const long calls = argc > 1 ? std::atol(argv[1]) : 2000000;
  set_num_threads(1);
  BackendOverride o(*cpu_jit_backend());
  Tensor a = rand({2, 20}), b = rand({2, 20}), c = rand({2, 20}), d = rand({2, 20});
  for (Tensor* t : {&a, &b, &c, &d}) t->eval();
  auto time = [&](const char* what, auto&& f) {
    for (int i = 0; i < 1000; ++i) f();
    auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < calls; ++i) f();
    double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / calls;
    std::printf("%-28s %8.1f ns/call\n", what, ns);
  };
  time("build + eval", [&] {
    Tensor y = relu(a * b + c) * d;
    y.eval();
  });
  time("build only (recorded tree)", [&] { Tensor y = relu(a * b + c) * d; });
  nn::Sequential net(nn::Linear(784, 256), nn::ReLU(), nn::Linear(256, 10));
  Tensor x = rand({1, 784});
  x.eval();
  NoGradGuard no_grad;
  time("mlp 784-256-10 forward, 1 row", [&] { net(x).eval(); });
}
