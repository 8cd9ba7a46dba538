// nn::LayerNorm and layer_norm: values as torch gives them (worked out by
// hand), state-dict keys, gradients against the ref backend, errors, and the
// kernels an embedding -> layer_norm -> gelu forward launches.
#include "tests/support/tensor_testing.h"

#include <cmath>

#include "codegen/cpu/cpu_backend.h"

using namespace tessel;
using namespace tessel::testing;

TEST_CASE("layer_norm normalizes the last dims with the population variance", "[nn][layer_norm]") {
  // Row [1, 2, 3, 4]: mean 2.5, variance 1.25; row [2, 2, 2, 2]: variance 0, so zeros.
  Tensor x = tensor({{1., 2., 3., 4.}, {2., 2., 2., 2.}}, DType::f64);
  std::vector<double> y = vals(layer_norm(x, {4}, nullptr, nullptr, 1e-5));
  const double s = 1.0 / std::sqrt(1.25 + 1e-5);
  std::vector<double> want{-1.5 * s, -0.5 * s, 0.5 * s, 1.5 * s, 0, 0, 0, 0};
  for (size_t i = 0; i < 8; ++i) CHECK(y[i] == Approx(want[i]).epsilon(1e-14));
  // Over the last two dims: one mean and variance per leading index.
  Tensor z = layer_norm(x.reshape({1, 2, 4}), {2, 4});
  std::vector<double> zv = vals(z);
  double mean = 0;
  for (double v : zv) mean += v;
  CHECK(std::abs(mean) < 1e-12);
}

TEST_CASE("nn::LayerNorm: weight ones, bias zeros, PyTorch's keys and repr", "[nn][layer_norm]") {
  nn::LayerNorm ln(std::vector<int64_t>{3});
  CHECK(ln->state_dict().keys() == std::vector<std::string>{"weight", "bias"});
  CHECK(vals(ln->weight) == std::vector<double>{1, 1, 1});
  CHECK(vals(ln->bias) == std::vector<double>{0, 0, 0});
  CHECK(ln->extra_repr() == "(3), eps=1e-05, elementwise_affine=True");
  nn::LayerNorm plain(4, 1e-6, false);
  CHECK(plain->state_dict().keys().empty());
  // The affine applies after the normalization: [-1, 0, 1] * sqrt(1.5)-ish scaled by w, shifted by b.
  Tensor x = tensor({{0., 1., 2.}});
  ln->weight.detach() *= tensor({2., 2., 2.});
  ln->bias.detach() += tensor({1., 0., -1.});
  std::vector<double> y = vals(ln(x));
  const float s = 1.0f / std::sqrt(2.0f / 3.0f + 1e-5f);
  CHECK(y[0] == Approx(-2 * s + 1).epsilon(1e-6));
  CHECK(y[1] == Approx(0).margin(1e-6));
  CHECK(y[2] == Approx(2 * s - 1).epsilon(1e-6));
}

TEST_CASE("layer_norm gradients match the ref backend's", "[nn][layer_norm][autograd]") {
  manual_seed(5);
  Tensor x0 = randn({6, 8}, DType::f64), w0 = randn({8}, DType::f64), b0 = randn({8}, DType::f64);
  Tensor up = randn({6, 8}, DType::f64);
  auto grads = [&] {
    Tensor x = x0.clone(), w = w0.clone(), b = b0.clone();
    x.requires_grad_(true);
    w.requires_grad_(true);
    b.requires_grad_(true);
    mul(layer_norm(x, {8}, &w, &b), up).sum().backward();
    return std::vector<std::vector<double>>{vals(x.grad()), vals(w.grad()), vals(b.grad())};
  };
  auto got = grads();
  std::vector<std::vector<double>> want;
  {
    BackendOverride r(ref_backend());
    want = grads();
  }
  for (size_t k = 0; k < 3; ++k)
    for (size_t i = 0; i < got[k].size(); ++i) CHECK(got[k][i] == Approx(want[k][i]).epsilon(1e-10).margin(1e-12));
  // The input gradient of a layer norm sums to zero over each row.
  for (size_t r = 0; r < 6; ++r) {
    double s = 0;
    for (size_t c = 0; c < 8; ++c) s += got[0][r * 8 + c];
    CHECK(std::abs(s) < 1e-10);
  }
}

TEST_CASE("layer_norm errors name the shapes and what to do", "[nn][layer_norm][error]") {
  Tensor x = rand({2, 5});
  CHECK_THROWS_MATCHES(layer_norm(x, {4}), ShapeError,
                       Catch::Matchers::Message("layer_norm: normalized_shape [4] must match the last dims of the input (shape [2, 5])"));
  Tensor w = ones({4});
  CHECK_THROWS_MATCHES(layer_norm(x, {5}, &w), ShapeError,
                       Catch::Matchers::Message("layer_norm: weight has shape [4], expected normalized_shape [5]"));
  CHECK_THROWS_AS(layer_norm(tensor({{1, 2}}), {2}), DTypeError);
  CHECK_THROWS_AS(nn::LayerNorm(std::vector<int64_t>{}), ValueError);
}

TEST_CASE("embedding -> layer_norm -> gelu inference forward: one gather kernel and one row program", "[nn][layer_norm][jit]") {
  manual_seed(3);
  nn::Embedding wte(100, 32);
  nn::LayerNorm ln(32);
  Tensor ids = randint(0, 100, {8, 16});
  Tensor want;
  {
    BackendOverride r(ref_backend());
    want = gelu(ln(wte(ids)));
    want.eval();
  }
  // Inference (no autograd history to keep): the ids are scanned on the host,
  // the gather is one kernel, and mean, variance, normalize, affine and gelu
  // are one row program.
  Tensor got;
  {
    NoGradGuard no_grad;
    reset_cpu_jit_stats();
    got = gelu(ln(wte(ids)));
    got.eval();
  }
  if (cpu_backend().name() == "cpu") CHECK(cpu_jit_stats().kernels_launched == 2);
  CHECK(dims(got) == std::vector<int64_t>{8, 16, 32});
  std::vector<double> g = vals(got), w = vals(want);
  for (size_t i = 0; i < g.size(); ++i) CHECK(g[i] == Approx(w[i]).epsilon(1e-5).margin(1e-6));
}
