// Matmul epilogues: an elementwise consumer of a 2-D matmul (bias, activation)
// runs on each band of the product's rows right after BLAS writes it, as one
// kernel. Scheduling tests run in every build; the compiled ones need LLVM.
#include "tests/support/tensor_testing.h"

#include "codegen/cpu/cpu_backend.h"
#include "codegen/grad_mode.h"
#include "codegen/schedule.h"
#include "dsl/nn/nn.h"
#include "dsl/train/optimizer.h"
#include "runtime/host_allocator.h"
#include "tessel/config.h"

using namespace tessel;
using namespace tessel::testing;

namespace {

int epilogues(const sched::Schedule& s) {
  int n = 0;
  for (const sched::Step& st : s.steps) n += st.epilogue != nullptr;
  return n;
}

// op(A) [m, k] and op(B) [k, n], each stored transposed or not.
Tensor operand(int64_t rows, int64_t cols, bool transposed, DType t) {
  return transposed ? rand({cols, rows}, t).t() : rand({rows, cols}, t);
}

// net(x) as the ref interpreter computes it.
Tensor ref_value(nn::Sequential net, const Tensor& x) {
  BackendOverride r(ref_backend());
  Tensor y = net(x);
  y.eval();
  return y;
}

}  // namespace

TEST_CASE("schedule: Linear -> ReLU -> Linear is two matmuls with fused epilogues", "[jit]") {
  manual_seed(1);
  nn::Sequential net(nn::LazyLinear(16), nn::ReLU(), nn::LazyLinear(10));
  NoGradGuard g;
  Tensor y = net(rand({8, 20}));
  sched::Schedule s = sched::schedule({y.node()});
  INFO(s.to_string());
  CHECK(s.matmuls() == 2);
  CHECK(epilogues(s) == 2);
  CHECK(s.kernels() == 2);
  REQUIRE(s.steps.size() == 2);
  CHECK(s.steps[0].epilogue->op == ir::Op::Relu);  // relu(x W1^T + b1), bias add fused into it
  CHECK(s.steps[1].epilogue == y.node().get());    // h W2^T + b2
  CHECK(s.to_string().find("+ epilogue relu.f32[8, 16] -- matmul epilogue") != std::string::npos);

  sched::Options off;
  off.fuse = false;
  sched::Schedule plain = sched::schedule({y.node()}, off);
  CHECK(plain.matmuls() == 2);
  CHECK(epilogues(plain) == 0);
}

TEST_CASE("schedule: in training a Linear's bias add and ReLU join its matmul", "[jit]") {
  // Training keeps what backward reads: the ReLU's output (its derivative
  // reads that), not the bias add before it, so add and ReLU are one epilogue.
  manual_seed(1);
  nn::Sequential net(nn::Linear(20, 16), nn::ReLU(), nn::Linear(16, 10));
  Tensor t = net(rand({8, 20}));
  sched::Schedule train = sched::schedule({t.node()}, {.keep_grad_values = true});
  INFO(train.to_string());
  CHECK(train.matmuls() == 2);
  CHECK(epilogues(train) == 2);
  CHECK(train.kernels() == 2);
  std::vector<ir::Op> tails;
  for (const sched::Step& st : train.steps)
    if (st.kind == sched::StepKind::MatMul) tails.push_back(st.epilogue ? st.epilogue->op : ir::Op::Input);
  CHECK(tails == std::vector<ir::Op>{ir::Op::Relu, ir::Op::Add});
}

TEST_CASE("schedule: what does not take an epilogue", "[jit]") {
  Tensor a = rand({4, 6}), b = rand({6, 5}), c = rand({5});
  SECTION("a product read twice is materialized for both readers") {
    Tensor m = a % b;
    Tensor y = m.relu() + m.sum({1}, true);
    sched::Schedule s = sched::schedule({y.node()});
    INFO(s.to_string());
    CHECK(epilogues(s) == 0);
    CHECK(s.materialized.at(m.node().get()) == "used by 2 consumers");
  }
  SECTION("a product that is itself a root") {
    Tensor m = a % b;
    Tensor y = m + c;
    sched::Schedule s = sched::schedule({m.node(), y.node()});
    CHECK(epilogues(s) == 0);
  }
  SECTION("a batched product") {
    Tensor y = Tensor(rand({3, 4, 6}) % rand({3, 6, 5})).relu();
    sched::Schedule s = sched::schedule({y.node()});
    CHECK(s.matmuls() == 1);
    CHECK(epilogues(s) == 0);
  }
  SECTION("a consumer that reads the product through a transpose") {
    Tensor y = Tensor(a % b).t().relu();
    sched::Schedule s = sched::schedule({y.node()});
    CHECK(epilogues(s) == 0);
  }
  SECTION("a flip or a shift of the product reads it at computed positions: no epilogue writes over it") {
    const std::vector<double> mv = [&] {
      BackendOverride r(ref_backend());
      return vals(a % b);
    }();
    Tensor f = flip(a % b, {0});
    CHECK(epilogues(sched::schedule({f.node()})) == 0);
    std::vector<double> want;
    for (size_t r = 4; r-- > 0;)
      for (size_t j = 0; j < 5; ++j) want.push_back(mv[r * 5 + j]);
    require_close(vals(f), want, 1e-6, 1e-6);
    Tensor p = pad(a % b, {1, -1});  // one column to the right, zeros coming in
    CHECK(epilogues(sched::schedule({p.node()})) == 0);
    want.clear();
    for (size_t r = 0; r < 4; ++r)
      for (size_t j = 0; j < 5; ++j) want.push_back(j == 0 ? 0.0 : mv[r * 5 + j - 1]);
    require_close(vals(p), want, 1e-6, 1e-6);
  }
  SECTION("integer products stay plain") {
    Tensor y = Tensor(arange(0, 24).reshape({4, 6}).to(DType::i64) % arange(0, 30).reshape({6, 5}).to(DType::i64)) + 1;
    sched::Schedule s = sched::schedule({y.node()});
    CHECK(epilogues(s) == 0);
  }
}

#if TESSEL_HAS_LLVM

TEST_CASE("compiled: Linear -> ReLU -> Linear forward launches two epilogue kernels", "[jit]") {
  manual_seed(2);
  nn::Sequential net(nn::LazyLinear(256), nn::ReLU(), nn::LazyLinear(10));
  Tensor x = rand({4000, 784});  // the first product is 4 MB: several bands for any L2 up to 4 MB
  x.eval();
  {
    NoGradGuard g;
    BackendOverride r(ref_backend());
    net(x).eval();  // sizes the lazy layers
  }
  NoGradGuard g;
  Tensor want = ref_value(net, x);
  BackendOverride o(*cpu_jit_backend());
  net(x).eval();  // compile
  reset_cpu_jit_stats();
  Tensor y = net(x);
  y.eval();
  CpuJitStats s = cpu_jit_stats();
  CHECK(s.matmuls == 2);
  CHECK(s.matmul_epilogues == 2);
  CHECK(s.kernels_launched == 2);
  CHECK(s.kernels_compiled == 0);
  CHECK(s.fallbacks == 0);
  CHECK(y.shape() == Shape({4000, 10}));
  require_close(vals(y), vals(want), 1e-5, 1e-5);
}

TEST_CASE("compiled: epilogues on odd sizes and transposed operands equal the ref backend", "[jit]") {
  struct Case {
    int64_t m, k, n;
  };
  const Case cases[] = {{1, 1, 1}, {3, 5, 257}, {1000, 40, 33}, {1000, 64, 300}, {257, 129, 65}};
  for (DType t : {DType::f32, DType::f64})
    for (const Case& c : cases)
      for (int layout = 0; layout < 4; ++layout) {
        Tensor a = operand(c.m, c.k, layout & 1, t), b = operand(c.k, c.n, layout & 2, t);
        Tensor bias = rand({c.n}, t), col = rand({c.m, 1}, t);
        auto f = [&] { return Tensor(Tensor(a % b + bias).relu() * col - 0.5); };
        Tensor want;
        {
          BackendOverride r(ref_backend());
          want = f();
          want.eval();
        }
        BackendOverride o(*cpu_jit_backend());
        reset_cpu_jit_stats();
        Tensor got = f();
        got.eval();
        INFO(dtype_name(t) << " [" << c.m << ", " << c.k << "] x [" << c.k << ", " << c.n << "] layout " << layout);
        CHECK(cpu_jit_stats().matmul_epilogues == 1);
        CHECK(cpu_jit_stats().fallbacks == 0);
        double tol = t == DType::f32 ? 1e-5 : 1e-12;
        require_close(vals(got), vals(want), tol, tol);
      }
}

TEST_CASE("compiled: backward through a fused epilogue gives the ref gradients", "[jit]") {
  manual_seed(3);
  nn::Sequential net(nn::Linear(33, 64), nn::ReLU(), nn::Linear(64, 7));
  Tensor x = rand({129, 33});
  auto grads = [&](Backend& be) {
    BackendOverride o(be);
    net->zero_grad();
    Tensor loss = Tensor(net(x) * net(x)).mean();
    loss.backward();
    std::vector<std::vector<double>> g{{loss.item<double>()}};
    for (auto& [name, p] : net->named_parameters()) g.push_back(vals(p.grad()));
    return g;
  };
  auto want = grads(ref_backend());
  auto got = grads(*cpu_jit_backend());
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) require_close(got[i], want[i], 1e-5, 1e-5);
}

TEST_CASE("compiled: an epilogue writes over the product it reads", "[jit]") {
  // relu(x W1^T + b1) lands in the product's own buffer: one buffer per layer.
  manual_seed(4);
  nn::Sequential net(nn::Linear(300, 200), nn::ReLU(), nn::Linear(200, 30));
  Tensor x = rand({500, 300});
  x.eval();
  NoGradGuard g;
  Tensor want = ref_value(net, x);
  BackendOverride o(*cpu_jit_backend());
  for (int i = 0; i < 2; ++i) net(x).eval();  // compile, warm the allocator
  reset_cpu_jit_stats();
  const uint64_t before = host_allocator_stats().allocations;
  Tensor y = net(x);
  y.eval();
  CHECK(host_allocator_stats().allocations - before == 2);
  CHECK(cpu_jit_stats().matmul_epilogues == 2);
  require_close(vals(y), vals(want), 1e-5, 1e-5);
}

TEST_CASE("compiled: a training step runs the forward pass once", "[jit]") {
  // backward realizes the loss (and the forward values users hold) with the
  // gradients; otherwise the optimizer's first in-place write to a weight
  // would run the forward pass again to keep them, as they read that weight.
  BackendOverride o(*cpu_jit_backend());
  manual_seed(3);
  nn::Sequential net(nn::Linear(20, 16), nn::ReLU(), nn::Linear(16, 10));
  optim::SGD opt(net->parameters(), optim::SGDOptions{.lr = 0.1});
  Tensor x = rand({8, 20}), t = rand({8, 10});
  x.eval();
  t.eval();
  for (int step = 0; step < 2; ++step) {
    reset_cpu_jit_stats();
    Tensor out = net(x);  // held, as a loop that reports accuracy holds its logits
    Tensor loss = mse_loss(out, t);
    opt.zero_grad();
    loss.backward();
    CHECK(loss.is_realized());
    CHECK(out.is_realized());  // from the same pass, before the step overwrites the weights
    opt.step();
    out.argmax(1).eval();  // what an accuracy reads after the step: no forward pass again (matmuls below)
    CpuJitStats s = cpu_jit_stats();
    CHECK(s.matmuls == 5);  // forward 2; backward: both weight gradients and the hidden layer's
  }
}

#endif
