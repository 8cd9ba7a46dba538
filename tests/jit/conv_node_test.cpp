// A convolution on the CPU is one IR node (and each gradient one more),
// computed by oneDNN in f32 and by direct loops in f64: kernel counts, the
// engines against each other, gradients of gradients.
#include "tests/support/tensor_testing.h"

#include "codegen/autodiff.h"
#include "codegen/cpu/cpu_backend.h"
#include "codegen/cpu/onednn_conv.h"
#include "dsl/convolution.h"
#include "dsl/normalization.h"

using namespace tessel;
using namespace tessel::testing;

namespace {

// f32 values from a fixed pattern (no random state to replay).
Tensor pattern(const Shape& s, double scale, double shift) {
  std::vector<float> v(static_cast<size_t>(s.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(std::sin(scale * static_cast<double>(i) + shift));
  return from_vector<float>(v, s);
}

std::vector<double> as_f64(const Tensor& t) { return t.to(DType::f64).to_vector<double>(); }

}  // namespace

TEST_CASE("conv2d on the CPU: one convolution node, and bias and relu are one kernel after it", "[jit][conv]") {
  Tensor x = pattern({2, 3, 9, 9}, 0.37, 0.1), w = pattern({4, 3, 3, 3}, 0.71, 0.4), b = pattern({4}, 1.3, 0.2);
  x.eval(), w.eval(), b.eval();
  NoGradGuard g;
  reset_cpu_jit_stats();
  Tensor y = relu(conv2d(x, w, b, {.padding = 1}));
  y.eval();
  const CpuJitStats s = cpu_jit_stats();
  CHECK(s.convs == 1);
  CHECK(s.kernels_launched == 1);
  CHECK(s.matmuls == 0);
  CHECK(s.fallbacks == 0);
  CHECK(y.shape() == Shape({2, 4, 9, 9}));
}

TEST_CASE("conv2d -> batch_norm(eval) -> relu is one convolution plus one kernel", "[jit][conv]") {
  Tensor x = pattern({2, 3, 8, 8}, 0.37, 0.1), w = pattern({5, 3, 3, 3}, 0.71, 0.4);
  Tensor rm = pattern({5}, 0.9, 0.3), rv = Tensor(pattern({5}, 1.1, 0.5) * 0.5 + 1.0), gamma = pattern({5}, 0.5, 1.0),
         beta = pattern({5}, 0.8, 2.0);
  for (Tensor* t : {&x, &w, &rm, &rv, &gamma, &beta}) t->eval();
  NoGradGuard g;
  reset_cpu_jit_stats();
  Tensor y = relu(batch_norm(conv2d(x, w, Tensor(), {.padding = 1}), rm, rv, gamma, beta, /*training=*/false));
  y.eval();
  const CpuJitStats s = cpu_jit_stats();
  CHECK(s.convs == 1);
  CHECK(s.kernels_launched <= 1);
  CHECK(s.fallbacks == 0);
  // The same in f64 by hand: relu((conv - rm) / sqrt(rv + eps) * gamma + beta).
  Tensor c = conv2d(x.to(DType::f64), w.to(DType::f64), Tensor(), {.padding = 1});
  auto ch = [](const Tensor& t) { return t.to(DType::f64).reshape({1, 5, 1, 1}); };
  Tensor want = relu(Tensor((c - ch(rm)) / sqrt(Tensor(ch(rv) + 1e-5)) * ch(gamma) + ch(beta)));
  require_close(as_f64(y), as_f64(want), 1e-5, 1e-5);
}

TEST_CASE("conv2d backward: one node per gradient, the bias gradient one reduction", "[jit][conv]") {
  Tensor x = pattern({2, 3, 7, 7}, 0.37, 0.1), w = pattern({4, 3, 3, 3}, 0.71, 0.4), b = pattern({4}, 1.3, 0.2);
  for (Tensor* t : {&x, &w, &b}) t->eval(), t->requires_grad_();
  Tensor y = conv2d(x, w, b, {.stride = 2, .padding = 1});
  Tensor gy = pattern(y.shape(), 0.23, 0.7);
  gy.eval();
  reset_cpu_jit_stats();
  y.backward(gy);
  realize({x.grad(), w.grad(), b.grad()});
  const CpuJitStats s = cpu_jit_stats();
  CHECK(s.convs == 3);  // the forward (realized now) and both gradients
  CHECK(s.fallbacks == 0);
  // Against the same graph in f64 (direct loops).
  Tensor x64 = x.detach().to(DType::f64), w64 = w.detach().to(DType::f64), b64 = b.detach().to(DType::f64);
  for (Tensor* t : {&x64, &w64, &b64}) t->requires_grad_();
  conv2d(x64, w64, b64, {.stride = 2, .padding = 1}).backward(gy.to(DType::f64));
  require_close(as_f64(x.grad()), as_f64(x64.grad()), 1e-5, 1e-5);
  require_close(as_f64(w.grad()), as_f64(w64.grad()), 1e-5, 1e-5);
  require_close(as_f64(b.grad()), as_f64(b64.grad()), 1e-5, 1e-5);
}

TEST_CASE("the convolution engines agree: oneDNN (f32) and the direct loops (f64), every option", "[jit][conv]") {
  if (!onednn::available()) WARN("oneDNN is not built in: both sides run the direct loops");
  struct Case {
    Shape x, w;
    Conv2dOptions o;
  };
  const std::vector<Case> cases = {
      {{2, 4, 9, 8}, {6, 4, 3, 3}, {.padding = 1}},
      {{1, 4, 10, 9}, {6, 2, 3, 2}, {.stride = {2, 1}, .padding = {1, 0}, .groups = 2}},
      {{2, 3, 11, 11}, {3, 1, 3, 3}, {.padding = "same", .dilation = 2, .groups = 3}},
      {{2, 3, 8, 8}, {4, 3, 2, 2}, {.padding = "same"}},  // asymmetric padding
      {{3, 2, 6, 7}, {5, 2, 1, 1}, {}},
  };
  for (const Case& c : cases) {
    INFO("x " << c.x.str() << " w " << c.w.str());
    Tensor x = pattern(c.x, 0.37, 0.1), w = pattern(c.w, 0.71, 0.4);
    x.requires_grad_(), w.requires_grad_();
    Tensor y = conv2d(x, w, Tensor(), c.o);
    Tensor gy = pattern(y.shape(), 0.23, 0.7);
    y.backward(gy);
    Tensor x64 = x.detach().to(DType::f64), w64 = w.detach().to(DType::f64);
    x64.requires_grad_(), w64.requires_grad_();
    Tensor y64 = conv2d(x64, w64, Tensor(), c.o);
    y64.backward(gy.to(DType::f64));
    require_close(as_f64(y), as_f64(y64), 1e-5, 1e-5);
    require_close(as_f64(x.grad()), as_f64(x64.grad()), 1e-5, 1e-5);
    require_close(as_f64(w.grad()), as_f64(w64.grad()), 1e-5, 1e-5);
  }
}

TEST_CASE("conv2d's gradient has a gradient: the three nodes differentiate into each other", "[jit][conv][autograd]") {
  // G(w) = d sum(conv2d(x, w) * W) / dx as a graph; d sum(G * V) / dw against
  // central differences of G (G is linear in w, so they are exact).
  const Shape xs({1, 2, 5, 5}), ws({3, 2, 3, 3});
  const Conv2dOptions o{.stride = 2, .padding = 1};
  Tensor x = pattern(xs, 0.37, 0.1).to(DType::f64), W = pattern({1, 3, 3, 3}, 0.29, 0.3).to(DType::f64),
         V = pattern(xs, 0.53, 0.9).to(DType::f64);
  const std::vector<double> w0 = as_f64(pattern(ws, 0.71, 0.4));
  auto first = [&](const std::vector<double>& at) {
    Tensor xl = x.detach(), w = from_vector<double>(at, ws);
    xl.requires_grad_();
    Tensor(conv2d(xl, w, Tensor(), o) * W).sum().backward();
    return xl.grad().to_vector<double>();
  };
  Tensor xl = x.detach(), w = from_vector<double>(w0, ws);
  xl.requires_grad_(), w.requires_grad_();
  Tensor loss = Tensor(conv2d(xl, w, Tensor(), o) * W).sum();
  ir::NodePtr G;
  for (auto& lg : autodiff::gradients(loss.node(), ir::constant(ir::ScalarValue::of(1.0), DType::f64), true))
    if (lg.leaf == xl.node().get()) G = lg.grad;
  REQUIRE(G);
  Tensor g = Tensor::from_node(G, cpu());
  REQUIRE(g.requires_grad());
  require_close(g.to_vector<double>(), first(w0), 1e-12, 1e-12);
  Tensor(g * V).sum().backward();
  const std::vector<double> analytic = w.grad().to_vector<double>(), v = V.to_vector<double>();
  const double h = 1e-6;
  for (size_t j = 0; j < w0.size(); ++j) {
    std::vector<double> plus = w0, minus = w0;
    plus[j] += h;
    minus[j] -= h;
    const std::vector<double> gp = first(plus), gm = first(minus);
    double numeric = 0;
    for (size_t i = 0; i < v.size(); ++i) numeric += v[i] * (gp[i] - gm[i]) / (2 * h);
    INFO("weight element " << j << ": analytic " << analytic[j] << ", numeric " << numeric);
    CHECK(std::fabs(analytic[j] - numeric) <= 1e-7 + 1e-6 * std::fabs(numeric));
  }
}
