// Optimizers against their update rules written out by hand.
#include <catch2/catch.hpp>

#include <cmath>

#include "dsl/tessel.h"
#include "dsl/train/optimizer.h"

using namespace tessel;

namespace {
// One parameter [1, 2, 3] with gradient g = [0.5, -1, 2].
nn::Parameter param_with_grad(std::vector<float> g = {0.5f, -1.f, 2.f}) {
  nn::Parameter p(tensor({1., 2., 3.}));
  p.set_grad(from_vector<float>(g, {3}));
  return p;
}
std::vector<float> values(const Tensor& t) { return t.data().to_vector<float>(); }
}  // namespace

TEST_CASE("SGD: w -= lr * g", "[train][sgd]") {
  auto p = param_with_grad();
  optim::SGD opt({p}, {.lr = 0.1});
  opt.step();
  CHECK(values(p) == std::vector<float>{0.95f, 2.1f, 2.8f});
}

TEST_CASE("SGD with momentum keeps a velocity (PyTorch's rule)", "[train][sgd]") {
  auto p = param_with_grad({1, 1, 1});
  optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9});
  opt.step();  // buf = g = 1 -> w = 1 - 0.1
  opt.step();  // buf = 0.9 * 1 + 1 = 1.9 -> w = 0.9 - 0.19
  CHECK(values(p)[0] == Approx(0.71f));
}

TEST_CASE("SGD with nesterov and weight decay", "[train][sgd]") {
  auto p = param_with_grad({1, 1, 1});
  optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.5, .weight_decay = 0.1, .nesterov = true});
  opt.step();  // d = 1 + 0.1 * 1 = 1.1; buf = 1.1; d = 1.1 + 0.5 * 1.1 = 1.65; w = 1 - 0.165
  CHECK(values(p)[0] == Approx(0.835f));
}

TEST_CASE("SGD skips parameters without a gradient and zero_grad clears them", "[train][sgd]") {
  nn::Parameter p(tensor({1., 2.}));
  optim::SGD opt({p}, {.lr = 1});
  opt.step();
  CHECK(values(p) == std::vector<float>{1, 2});
  p.set_grad(ones({2}));
  opt.zero_grad();
  CHECK_FALSE(p.grad().defined());
}

TEST_CASE("Adam's first step moves each weight by lr against the gradient's sign", "[train][adam]") {
  auto p = param_with_grad();
  optim::Adam opt({p}, {.lr = 0.01});
  opt.step();  // m_hat = g, v_hat = g^2 -> step = lr * g / (|g| + eps)
  auto v = values(p);
  CHECK(v[0] == Approx(0.99f).epsilon(1e-5));
  CHECK(v[1] == Approx(2.01f).epsilon(1e-5));
  CHECK(v[2] == Approx(2.99f).epsilon(1e-5));
}

TEST_CASE("Adam's second step follows the bias-corrected moments", "[train][adam]") {
  auto p = param_with_grad({1, 1, 1});
  optim::Adam opt({p}, {.lr = 0.1, .beta1 = 0.9, .beta2 = 0.999});
  opt.step();
  p.set_grad(from_vector<float>({3, 3, 3}, {3}));
  opt.step();
  double m = 0.9 * 0.1 + 0.1 * 3, v = 0.999 * 0.001 + 0.001 * 9;
  double mhat = m / (1 - 0.81), vhat = v / (1 - 0.999 * 0.999);
  double expect = 1 - 0.1 - 0.1 * mhat / (std::sqrt(vhat) + 1e-8);
  CHECK(values(p)[0] == Approx(expect).epsilon(1e-5));
}

TEST_CASE("AdamW decays weights apart from the gradient", "[train][adam]") {
  auto p = param_with_grad({0, 0, 0});
  auto opt = optim::AdamW({p}, {.lr = 0.1, .weight_decay = 0.5});
  opt.step();  // zero gradient: only the decay w *= 1 - lr * wd
  CHECK(values(p) == std::vector<float>{0.95f, 1.9f, 2.85f});
}

TEST_CASE("clip_grad_norm_ scales gradients to the max norm and returns the old norm", "[train]") {
  nn::Parameter a(tensor({0., 0.})), b(tensor({0.}));
  a.set_grad(from_vector<float>({3, 0}, {2}));
  b.set_grad(from_vector<float>({4}, {1}));
  double norm = optim::clip_grad_norm_({a, b}, 1.0);
  CHECK(norm == Approx(5));
  CHECK(a.grad().to_vector<float>()[0] == Approx(0.6).epsilon(1e-5));
  CHECK(b.grad().to_vector<float>()[0] == Approx(0.8).epsilon(1e-5));
}

TEST_CASE("optimizer option mistakes are ValueErrors", "[train][error]") {
  nn::Parameter p(tensor({1.}));
  CHECK_THROWS_AS(optim::SGD({p}, {.lr = -1}), ValueError);
  CHECK_THROWS_WITH(optim::SGD({p}, {.lr = 0.1, .nesterov = true}), Catch::Contains("nesterov needs momentum"));
  CHECK_THROWS_WITH(optim::Adam({p}, {.beta1 = 1.0}), Catch::Contains("betas must be in [0, 1)"));
}

TEST_CASE("a few SGD steps reduce a regression loss", "[train]") {
  manual_seed(3);
  nn::Linear fc(3, 1);
  Tensor X = randn({64, 3});
  Tensor y = matmul(X, tensor({{1.}, {-2.}, {0.5}}));
  optim::SGD opt(fc->parameters(), {.lr = 0.1});
  double first = 0, last = 0;
  for (int i = 0; i < 100; ++i) {
    Tensor loss = mse_loss(fc(X), y);
    if (i == 0) first = loss.item();
    last = loss.item();
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  CHECK(last < 0.01 * first);
}
