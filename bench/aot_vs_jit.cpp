// aot_vs_jit: first-call latency and steady-state time of a model whose
// kernels were exported ahead of time (linked in, TESSEL_JIT=off) vs the same
// model JIT-compiled from an empty kernel cache (TESSEL_PRECOMPILED=off).
// Each side runs in its own process, so neither inherits the other's kernels.
//
//   aot_vs_jit                 # runs both sides, prints a table
//   aot_vs_jit --mode aot|jit  # one side: "first_ms steady_us"
// Built twice from this file: with AOT_VS_JIT_GENERATOR it is the build-time
// generator of the kernels the benchmark links.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "dsl/aot.h"
#include "dsl/nn/symbolic.h"
#include "dsl/tessel.h"

using namespace tessel;
using Clock = std::chrono::steady_clock;

namespace {

auto make_mlp() {
  return nn::symbolic(relu(param<"X"> % param<"W1"> + param<"b1">) % param<"W2"> + param<"b2">,
                      {.widths = {{"W1", 512}, {"W2", 10}}});
}

// One inference step: the MLP and a softmax over its logits.
template <class Net>
Tensor step(Net& net, const Tensor& x) {
  Tensor y = net(x);
  Tensor d = y - y.max(1, true);
  Tensor e = d.exp();
  Tensor s = e / e.sum({1}, true);
  s.eval();
  return s;
}

Tensor input() {
  manual_seed(3);
  Tensor x = randn({256, 64});
  BackendOverride interp(ref_backend());
  x.eval();
  return x;
}

}  // namespace

#ifdef AOT_VS_JIT_GENERATOR
int main(int argc, char** argv) {
  aot::GeneratorArgs g = aot::parse_generator_args(argc, argv);
  auto net = make_mlp();
  Tensor x = input();
  aot::materialize_lazy(*net, {x});
  aot::Manifest m = aot::export_kernels([&](const Tensor& in) { return step(net, in); }, {x}, g.out, g.options);
  fmt::print("aot_vs_jit: {} kernels exported\n", m.kernels.size());
}
#else
int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--mode") {
    auto net = make_mlp();
    Tensor x = input();
    {
      BackendOverride interp(ref_backend());  // weight init is not what we measure
      aot::materialize_lazy(*net, {x});
    }
    auto t0 = Clock::now();
    step(net, x);
    double first_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    std::vector<double> us;
    for (int i = 0; i < 200; ++i) {
      auto t = Clock::now();
      step(net, x);
      us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t).count());
    }
    std::nth_element(us.begin(), us.begin() + us.size() / 2, us.end());
    fmt::print("{:.3f} {:.1f}\n", first_ms, us[us.size() / 2]);
    return 0;
  }
  namespace fs = std::filesystem;
  fs::path cache = fs::temp_directory_path() / fmt::format("tessel_aot_vs_jit_{}", ::getpid());
  auto run = [&](const std::string& mode, int rep) {
    fs::remove_all(cache);  // a fresh, empty cache folder every time
    std::string env = mode == "aot" ? "TESSEL_JIT=off" : "TESSEL_PRECOMPILED=off";
    std::string cmd = fmt::format("{} TESSEL_CACHE_DIR={}_{} '{}' --mode {}", env, cache.string(), rep, argv[0], mode);
    FILE* p = popen(cmd.c_str(), "r");
    double first = 0, steady = 0;
    if (!p || std::fscanf(p, "%lf %lf", &first, &steady) != 2) throw std::runtime_error("child failed: " + cmd);
    pclose(p);
    fs::remove_all(fmt::format("{}_{}", cache.string(), rep));
    return std::pair{first, steady};
  };
  std::vector<double> af, as, jf, js;
  for (int rep = 0; rep < 5; ++rep) {
    auto [a1, a2] = run("aot", rep);
    auto [j1, j2] = run("jit", rep);
    af.push_back(a1), as.push_back(a2), jf.push_back(j1), js.push_back(j2);
  }
  auto med = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  fmt::print("MLP 64->512->10 + softmax, batch 256; median of 5 processes (steady: median of 200 calls each)\n");
  fmt::print("{:<6} {:>14} {:>16}\n", "", "first call ms", "steady-state us");
  fmt::print("{:<6} {:>14.2f} {:>16.1f}\n", "AOT", med(af), med(as));
  fmt::print("{:<6} {:>14.2f} {:>16.1f}\n", "JIT", med(jf), med(js));
  fmt::print("first call: AOT {:.1f}x faster; steady state: AOT/JIT = {:.2f}\n", med(jf) / med(af), med(as) / med(js));
  return 0;
}
#endif
