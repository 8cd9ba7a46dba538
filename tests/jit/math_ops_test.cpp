// The elementwise math ops past the basic set (sin ... isinf, and the
// composites gelu, silu, softplus, clamp): values from PyTorch's definitions
// evaluated in double, dtype rules, fusion into one kernel, and the CPU JIT
// equal to the ref interpreter bit for bit.
#include "tests/support/tensor_testing.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "codegen/cpu/cpu_backend.h"
#include "codegen/schedule.h"

using namespace tessel;
using namespace tessel::testing;

namespace {

const double kNan = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

Tensor f64(const std::vector<double>& v) { return from_vector<double>(v, {static_cast<int64_t>(v.size())}); }

std::vector<double> map(const std::vector<double>& v, double (*f)(double)) {
  std::vector<double> r;
  for (double x : v) r.push_back(f(x));
  return r;
}

const std::vector<double> kInputs = {-3.5, -1.25, -0.5, -1e-9, 0.0, 1e-9, 0.5, 1.0, 2.5, 7.0};

}  // namespace

TEST_CASE("sin cos erf log1p expm1 rsqrt reciprocal match the C library in f64", "[math_ops]") {
  Tensor x = f64(kInputs);
  require_close(vals(x.sin()), map(kInputs, [](double v) { return std::sin(v); }), 0, 0);
  require_close(vals(x.cos()), map(kInputs, [](double v) { return std::cos(v); }), 0, 0);
  require_close(vals(x.erf()), map(kInputs, [](double v) { return std::erf(v); }), 0, 0);
  require_close(vals(x.expm1()), map(kInputs, [](double v) { return std::expm1(v); }), 0, 0);
  require_close(vals(x.reciprocal()), map(kInputs, [](double v) { return 1 / v; }), 0, 0);
  Tensor p = f64({1e-12, 0.5, 1.0, 4.0, 100.0});
  require_close(vals(p.log1p()), {std::log1p(1e-12), std::log1p(0.5), std::log1p(1.0), std::log1p(4.0), std::log1p(100.0)}, 0, 0);
  require_close(vals(p.rsqrt()), {1e6, 1 / std::sqrt(0.5), 1.0, 0.5, 0.1}, 1e-15, 0);
  // Accurate near 0, where log(1 + x) and exp(x) - 1 lose every digit.
  CHECK(f64({1e-17}).log1p().item<double>() == 1e-17);
  CHECK(f64({1e-17}).expm1().item<double>() == 1e-17);
  CHECK(f64({0.0}).reciprocal().item<double>() == kInf);
}

TEST_CASE("sign floor ceil round follow torch", "[math_ops]") {
  Tensor x = f64({-2.5, -1.5, -0.5, 0.0, 0.5, 1.5, 2.5, 2.4, -2.6, kNan});
  // round: half to even, as torch.round; NaN stays NaN.
  require_close(vals(x.round()), {-2, -2, -0.0, 0, 0, 2, 2, 2, -3, kNan}, 0, 0);
  require_close(vals(x.floor()), {-3, -2, -1, 0, 0, 1, 2, 2, -3, kNan}, 0, 0);
  require_close(vals(x.ceil()), {-2, -1, -0.0, 0, 1, 2, 3, 3, -2, kNan}, 0, 0);
  // sign of NaN is 0, as torch.sign on the CPU.
  require_close(vals(x.sign()), {-1, -1, -1, 0, 1, 1, 1, 1, -1, 0}, 0, 0);
  Tensor i = tensor({-7, 0, 5});
  CHECK(i.sign().dtype() == DType::i64);
  CHECK(ivals(i.sign()) == std::vector<int64_t>{-1, 0, 1});
  for (Tensor r : {i.floor(), i.ceil(), i.round()}) {
    CHECK(r.dtype() == DType::i64);  // integers come back unchanged
    CHECK(ivals(r) == std::vector<int64_t>{-7, 0, 5});
  }
  Tensor h = make({2.5, -0.7}, {2}, DType::f16);
  CHECK(h.round().dtype() == DType::f16);
  CHECK(vals(h.round()) == std::vector<double>{2, -1});
}

TEST_CASE("isnan and isinf give bool tensors, all false for integers", "[math_ops]") {
  Tensor x = f64({1.0, kNan, kInf, -kInf, 0.0});
  Tensor n = x.isnan(), f = x.isinf();
  CHECK(n.dtype() == DType::b8);
  CHECK(f.dtype() == DType::b8);
  CHECK(ivals(n.to(DType::i64)) == std::vector<int64_t>{0, 1, 0, 0, 0});
  CHECK(ivals(f.to(DType::i64)) == std::vector<int64_t>{0, 0, 1, 1, 0});
  Tensor x32 = x.to(DType::f32);
  CHECK(ivals(x32.isnan().to(DType::i64)) == std::vector<int64_t>{0, 1, 0, 0, 0});
  CHECK(ivals(make({1, kInf}, {2}, DType::f16).isinf().to(DType::i64)) == std::vector<int64_t>{0, 1});
  Tensor i = tensor({1, 2, 3});
  CHECK(i.isnan().dtype() == DType::b8);
  CHECK_FALSE(i.isnan().any().item<bool>());
  CHECK_FALSE(i.isinf().any().item<bool>());
  Tensor w = f64({1.0}).requires_grad_();
  CHECK_FALSE(w.isnan().requires_grad());
}

TEST_CASE("integer inputs to sin and friends compute in f32, as torch", "[math_ops]") {
  Tensor i = tensor({0, 1, 2});
  for (Tensor r : {i.sin(), i.cos(), i.erf(), i.log1p(), i.expm1(), i.rsqrt(), i.reciprocal()})
    CHECK(r.dtype() == DType::f32);
  CHECK(vals(i.reciprocal())[2] == 0.5);
  CHECK(vals(i.sin())[1] == static_cast<double>(std::sin(1.0f)));
}

TEST_CASE("gelu silu softplus match torch's definitions", "[math_ops]") {
  Tensor x = f64(kInputs);
  require_close(vals(gelu(x)), map(kInputs, [](double v) { return v * 0.5 * (1 + std::erf(v * M_SQRT1_2)); }), 1e-15,
                1e-300);
  require_close(vals(gelu(x, "tanh")), map(kInputs, [](double v) {
                  return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
                }),
                1e-15, 1e-300);
  require_close(vals(silu(x)), map(kInputs, [](double v) { return v / (1 + std::exp(-v)); }), 1e-15, 1e-300);
  // Known values: torch.nn.functional.gelu(torch.tensor(1.0, dtype=torch.float64)) and friends.
  CHECK(gelu(f64({1.0})).item<double>() == Approx(0.8413447460685429).epsilon(1e-15));
  CHECK(gelu(f64({1.0}), "tanh").item<double>() == Approx(0.8411919906082768).epsilon(1e-15));
  CHECK(silu(f64({1.0})).item<double>() == Approx(0.7310585786300049).epsilon(1e-15));
  CHECK(softplus(f64({1.0})).item<double>() == Approx(1.3132616875182228).epsilon(1e-15));
  // beta scales the input and the result; past the threshold the value is x itself.
  CHECK(softplus(f64({1.0}), 2.0).item<double>() == Approx(std::log1p(std::exp(2.0)) / 2).epsilon(1e-15));
  require_close(vals(softplus(f64({30.0, 21.0, -50.0}))), {30.0, 21.0, std::log1p(std::exp(-50.0))}, 1e-15, 0);
  require_close(vals(softplus(f64({6.0, 4.0}), 2.0, 10.0)), {6.0, std::log1p(std::exp(8.0)) / 2}, 1e-15, 0);
  // Past the threshold the gradient is 1, and no overflow reaches it.
  Tensor big = f64({1000.0, 0.0}).requires_grad_();
  softplus(big).sum().backward();
  require_close(vals(big.grad()), {1.0, 0.5}, 1e-15, 0);
}

TEST_CASE("clamp follows torch.clamp: optional bounds, NaN kept, min above max gives max", "[math_ops]") {
  Tensor x = f64({-2.0, -1.0, 0.5, 1.0, 3.0, kNan});
  require_close(vals(x.clamp(-1.0, 1.0)), {-1, -1, 0.5, 1, 1, kNan}, 0, 0);
  require_close(vals(x.clamp(0.0)), {0, 0, 0.5, 1, 3, kNan}, 0, 0);
  require_close(vals(x.clamp(std::nullopt, 0.0)), {-2, -1, 0, 0, 0, kNan}, 0, 0);
  require_close(vals(x.clamp(2.0, 1.0)), {1, 1, 1, 1, 1, kNan}, 0, 0);
  Tensor i = tensor({-5, 3, 9});
  CHECK(i.clamp(0, 5).dtype() == DType::i64);
  CHECK(ivals(i.clamp(0, 5)) == std::vector<int64_t>{0, 3, 5});
  CHECK(i.clamp(0.5).dtype() == DType::f32);  // a float bound promotes, as torch
  // The gradient is 1 where min <= x <= max, bounds included (torch's clamp_backward).
  Tensor w = f64({-2.0, -1.0, 0.0, 1.0, 2.0}).requires_grad_();
  w.clamp(-1.0, 1.0).sum().backward();
  require_close(vals(w.grad()), {0, 1, 1, 1, 0}, 0, 0);
}

TEST_CASE("new unary ops name their backward as torch", "[math_ops]") {
  Tensor x = f64({0.5}).requires_grad_();
  CHECK(x.sin().grad_fn_name() == "SinBackward0");
  CHECK(x.erf().grad_fn_name() == "ErfBackward0");
  CHECK(x.log1p().grad_fn_name() == "Log1PBackward0");
  CHECK(x.expm1().grad_fn_name() == "Expm1Backward0");
  CHECK(x.rsqrt().grad_fn_name() == "RsqrtBackward0");
  CHECK(x.reciprocal().grad_fn_name() == "ReciprocalBackward0");
  CHECK(x.round().grad_fn_name() == "RoundBackward0");
}

TEST_CASE("the new ops and activations fuse with their neighbours into one kernel", "[math_ops]") {
  Tensor x = rand({8, 16}), w = rand({16}), b = rand({16});
  auto kernels = [](const Tensor& y) {
    sched::Schedule s = sched::schedule({y.node()});
    INFO(s.to_string());
    return s.kernels();
  };
  Tensor a = Tensor(gelu(x) * w + b);
  CHECK(kernels(a) == 1);
  Tensor c = Tensor(silu(x) * softplus(x) + gelu(x, "tanh") * x.clamp(-0.5, 0.5));
  CHECK(kernels(c) == 1);
  Tensor e = Tensor(Tensor(x.sin() * x.cos() + x.erf()).log1p().expm1().reciprocal().rsqrt().floor().ceil().round().sign() +
                    where(x.isnan() || x.isinf(), x, w));
  CHECK(kernels(e) == 1);
  // gelu reads its input twice (x * cdf(x)); both readers are in gelu's
  // kernel, so the pre-activation is computed there once, not stored.
  Tensor h = gelu(x * w + b);
  CHECK(kernels(h) == 1);
}

TEST_CASE("the CPU JIT computes every new op bit for bit as the ref interpreter", "[math_ops]") {
  Backend* jit = cpu_jit_backend();
  if (!jit) {
    WARN("built without the CPU JIT: skipped");
    return;
  }
  uint64_t seed = test_seed("math ops jit vs ref");
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(-6, 6);
  for (DType t : {DType::f32, DType::f64, DType::i64}) {
    std::vector<double> v(1000);
    for (double& e : v) e = u(g);
    v[0] = kNan, v[1] = kInf, v[2] = -kInf, v[3] = 0.5, v[4] = 1.5, v[5] = -2.5, v[6] = 0;
    if (t == DType::i64) v.resize(7, 3), v[0] = 1, v[1] = -4, v[2] = 9;
    Tensor x = make(v, {static_cast<int64_t>(v.size())}, t);
    auto all_ops = [&](const Tensor& a) {
      std::vector<Tensor> r{a.sin(),  a.cos(),   a.erf(),  a.log1p(), a.expm1(), a.rsqrt(), a.reciprocal(),
                            a.sign(), a.floor(), a.ceil(), a.round(), a.isnan().to(t), a.isinf().to(t),
                            a.clamp(-1, 2)};
      if (t != DType::i64) {
        r.push_back(gelu(a));
        r.push_back(gelu(a, "tanh"));
        r.push_back(silu(a));
        r.push_back(softplus(a, 1.5, 4.0));
      }
      return r;
    };
    std::vector<Tensor> want, got;
    {
      BackendOverride o(ref_backend());
      want = all_ops(x);
      for (Tensor& r : want) r.eval();
    }
    {
      BackendOverride o(*jit);
      got = all_ops(x);
      for (Tensor& r : got) r.eval();
    }
    for (size_t k = 0; k < want.size(); ++k) {
      INFO("op " << k << " dtype " << dtype_name(t));
      std::vector<double> a = vals(got[k]), b = vals(want[k]);
      REQUIRE(a.size() == b.size());
      size_t i = 0;
      while (i < a.size() && (std::memcmp(&a[i], &b[i], sizeof(double)) == 0 || (std::isnan(a[i]) && std::isnan(b[i]))))
        ++i;
      if (i < a.size()) FAIL_CHECK("element " << i << " input " << v[i] << ": jit " << a[i] << " ref " << b[i]);
    }
  }
}
