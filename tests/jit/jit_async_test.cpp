// Background compiles (TESSEL_JIT_ASYNC, codegen/cpu/jit_async.h): a launch
// whose kernel is in no cache is computed by the ref interpreter while the
// kernel compiles on a compile thread. Results must not depend on it, a
// failed compile must surface, and a program may end with compiles in flight.
// Each process compiles into an empty kernel cache of its own, so its first
// kernels really compile.
#include "tests/support/tensor_testing.h"

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

#include "codegen/cpu/cpu_backend.h"
#include "dsl/nn/nn.h"
#include "dsl/train/optimizer.h"
#include "runtime/errors.h"
#include "tessel/config.h"

using namespace tessel;
using namespace tessel::testing;

#if TESSEL_HAS_LLVM

namespace {

// An empty kernel cache for this process, set before its first compile and
// removed at exit (after the cache, made later, has flushed into it).
void fresh_cache() {
  struct Dir {
    std::string path;
    Dir() {
      char tmpl[] = "/tmp/tessel-jit-async-test-XXXXXX";
      REQUIRE(mkdtemp(tmpl) != nullptr);
      path = tmpl;
      setenv("TESSEL_CACHE_DIR", path.c_str(), 1);
    }
    ~Dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static Dir dir;
}

// Restores the process's choice at the end of a test.
struct AsyncSetting {
  bool prev = jit_async();
  explicit AsyncSetting(bool on) { set_jit_async(on); }
  ~AsyncSetting() { set_jit_async(prev); }
};

struct CompileHook {
  explicit CompileHook(std::function<void(std::string_view)> h) { cpujit::set_compile_hook_for_testing(std::move(h)); }
  ~CompileHook() { cpujit::set_compile_hook_for_testing({}); }
};

std::vector<uint32_t> bits_of(const Tensor& t) {
  std::vector<float> v = t.contiguous().to_vector<float>();
  std::vector<uint32_t> out(v.size());
  std::memcpy(out.data(), v.data(), v.size() * sizeof(float));
  return out;
}

std::vector<uint64_t> bits_of64(const Tensor& t) {
  std::vector<double> v = t.contiguous().to_vector<double>();
  std::vector<uint64_t> out(v.size());
  std::memcpy(out.data(), v.data(), v.size() * sizeof(double));
  return out;
}

struct Training {
  std::vector<std::vector<uint32_t>> losses;  // per step
  std::vector<std::vector<uint32_t>> weights;  // after the last step
  std::vector<CpuJitStats> before, after;      // per step
};

// `steps` SGD steps of a small MLP from fixed weights and batch on the
// compiled backend; with `wait_before_last`, jit_wait_idle() before the last.
Training train_mlp(int steps, bool wait_before_last) {
  BackendOverride o(*cpu_jit_backend());
  manual_seed(11);
  nn::Sequential net(nn::Linear(24, 40), nn::ReLU(), nn::Linear(40, 7));
  Tensor x, y;
  {
    BackendOverride r(ref_backend());
    x = rand({32, 24});
    x.eval();
    std::vector<int64_t> labels(32);
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>((i * 5 + 3) % 7);
    y = from_vector<int64_t>(labels, Shape{32});
  }
  auto params = net->parameters();
  for (auto& p : params) p.eval();
  optim::SGD opt(params, optim::SGDOptions{.lr = 0.1});
  Training t;
  for (int s = 0; s < steps; ++s) {
    if (wait_before_last && s == steps - 1) jit_wait_idle();
    t.before.push_back(cpu_jit_stats());
    Tensor loss = cross_entropy(net(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    std::vector<Tensor> outs{loss};
    for (auto& p : params) outs.push_back(p);
    realize(outs);
    t.after.push_back(cpu_jit_stats());
    t.losses.push_back(bits_of(loss));
  }
  for (auto& p : params) t.weights.push_back(bits_of(p));
  return t;
}

}  // namespace

TEST_CASE("async JIT: training steps are bit-identical to synchronous compiles", "[jit]") {
  fresh_cache();
  jit_wait_idle();
  Training async_run, sync_run;
  {
    AsyncSetting a(true);
    async_run = train_mlp(4, /*wait_before_last=*/true);
  }
  // Step 1 met kernels that were in no cache: the interpreter ran them.
  CHECK(async_run.after[0].kernels_interpreted > async_run.before[0].kernels_interpreted);
  // Once every compile is done, a step runs compiled kernels only.
  const CpuJitStats& b = async_run.before[3];
  const CpuJitStats& e = async_run.after[3];
  CHECK(e.kernels_interpreted == b.kernels_interpreted);
  CHECK(e.kernels_compiled == b.kernels_compiled);
  CHECK(e.kernels_launched > b.kernels_launched);
  {
    AsyncSetting a(false);
    sync_run = train_mlp(4, false);
  }
  CHECK(sync_run.after[3].kernels_interpreted == sync_run.before[0].kernels_interpreted);
  REQUIRE(async_run.losses.size() == sync_run.losses.size());
  for (size_t s = 0; s < async_run.losses.size(); ++s) {
    INFO("step " << s + 1);
    CHECK(async_run.losses[s] == sync_run.losses[s]);
  }
  REQUIRE(async_run.weights.size() == sync_run.weights.size());
  for (size_t i = 0; i < async_run.weights.size(); ++i) {
    INFO("parameter " << i);
    CHECK(async_run.weights[i] == sync_run.weights[i]);
  }
}

TEST_CASE("async JIT: a kernel whose compile fails reports the compile's error", "[jit]") {
  fresh_cache();
  jit_wait_idle();
  BackendOverride o(*cpu_jit_backend());
  Tensor x;
  {
    BackendOverride r(ref_backend());
    manual_seed(3);
    x = rand({6, 9}, DType::f64);
    x.eval();
  }
  auto on_ref = [&](const std::function<Tensor()>& f) {
    BackendOverride r(ref_backend());
    return bits_of64(f());
  };
  CompileHook hook([](std::string_view text) {
    throw CompileError("this test's compiles fail; kernel:\n" + std::string(text));
  });
  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const CompileError& e) {
      return std::string(e.what());
    }
    return std::string("no CompileError");
  };
  auto y_of = [&] { return Tensor(sin(x) * 3.0 + 1.0); };
  auto z_of = [&] { return Tensor(cos(x) * 2.0 - 1.0); };

  // Compiled before the launch: the launch throws.
  std::string sync_y, sync_z;
  {
    AsyncSetting a(false);
    sync_y = message([&] { y_of().eval(); });
    sync_z = message([&] { z_of().eval(); });
  }
  REQUIRE(sync_y.find("this test's compiles fail") != std::string::npos);
  REQUIRE(sync_z.find("this test's compiles fail") != std::string::npos);
  REQUIRE(sync_y != sync_z);  // each names its kernel

  AsyncSetting a(true);
  // In the background: the value comes from the interpreter, and the error
  // from jit_wait_idle, once.
  Tensor y = y_of();
  y.eval();
  CHECK(bits_of64(y) == on_ref(y_of));
  CHECK(message([] { jit_wait_idle(); }) == sync_y);
  CHECK_NOTHROW(jit_wait_idle());

  // Or from the next launch that needs the kernel.
  std::string async_z;
  for (int i = 0; async_z.empty(); ++i) {
    REQUIRE(i < 20000);  // 20 s
    try {
      Tensor z = z_of();
      z.eval();
      CHECK(bits_of64(z) == on_ref(z_of));
    } catch (const CompileError& e) {
      async_z = e.what();
    }
    if (async_z.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  CHECK(async_z == sync_z);
  // After that it compiles before its launch, as without background compiles:
  // the same error while compiles fail, the kernel once they work.
  CHECK(message([&] { z_of().eval(); }) == sync_z);
  cpujit::set_compile_hook_for_testing({});
  const CpuJitStats s0 = cpu_jit_stats();
  Tensor z = z_of();
  z.eval();
  const CpuJitStats s1 = cpu_jit_stats();
  CHECK(s1.kernels_interpreted == s0.kernels_interpreted);
  CHECK(s1.kernels_compiled > s0.kernels_compiled);
  CHECK(bits_of64(z) == on_ref(z_of));
  jit_wait_idle();
}

TEST_CASE("async JIT: a program may end while kernels compile", "[jit]") {
  fresh_cache();
  AsyncSetting a(true);
  BackendOverride o(*cpu_jit_backend());
  Tensor x;
  {
    BackendOverride r(ref_backend());
    manual_seed(5);
    x = rand({4, 33});
    x.eval();
  }
  // Several kernels queued at once; the test (and, run alone, the process)
  // ends without waiting for them.
  const CpuJitStats s0 = cpu_jit_stats();
  Tensor t = tanh(x) * 0.5 + 2.0;
  Tensor u = exp(x) - x * 4.0;
  Tensor v = (x * x).sum({1});
  realize({t, u, v});
  const CpuJitStats s1 = cpu_jit_stats();
  CHECK(s1.kernels_interpreted > s0.kernels_interpreted);
  BackendOverride r(ref_backend());
  CHECK(bits_of(t) == bits_of(Tensor(tanh(x) * 0.5 + 2.0)));
  CHECK(bits_of(u) == bits_of(Tensor(exp(x) - x * 4.0)));
  CHECK(bits_of(v) == bits_of(Tensor((x * x).sum({1}))));
}

#endif  // TESSEL_HAS_LLVM
