// cross_entropy's ignore_index, label_smoothing and reduction, mse_loss's
// reduction, and the loss modules, against PyTorch's formulas worked by hand.
#include <catch2/catch.hpp>

#include <cmath>

#include "dsl/tessel.h"

using namespace tessel;

namespace {
// Rows {1, 2, 3}, {1, 1, 1}, {0, 0, 5}; labels 2, ignored, 0.
Tensor logits3() { return tensor({{1., 2., 3.}, {1., 1., 1.}, {0., 0., 5.}}); }
const double lse0 = std::log(std::exp(1) + std::exp(2) + std::exp(3));
const double lse2 = std::log(2 + std::exp(5));
const double nll0 = lse0 - 3, nll2 = lse2 - 0;
// mean over classes of -log p = lse - mean(logits)
const double smooth0 = lse0 - 2, smooth2 = lse2 - 5.0 / 3;
}  // namespace

TEST_CASE("cross_entropy ignore_index rows count for nothing, and the mean divides by the rest", "[loss]") {
  Tensor labels = tensor({2, -100, 0});
  CHECK(cross_entropy(logits3(), labels).item() == Approx((nll0 + nll2) / 2));
  CHECK(cross_entropy(logits3(), labels, {.reduction = "sum"}).item() == Approx(nll0 + nll2));
  auto each = cross_entropy(logits3(), labels, {.reduction = "none"}).to_vector<float>();
  REQUIRE(each.size() == 3);
  CHECK(each[0] == Approx(nll0));
  CHECK(each[1] == 0.f);
  CHECK(each[2] == Approx(nll2));
  // An ignore_index inside [0, C) ignores that class's rows.
  CHECK(cross_entropy(logits3(), tensor({2, 1, 1}), {.ignore_index = 1}).item() == Approx(nll0));
}

TEST_CASE("cross_entropy label_smoothing mixes nll with the mean over classes of -log p", "[loss]") {
  const double eps = 0.1;
  double l0 = (1 - eps) * nll0 + eps * smooth0, l2 = (1 - eps) * nll2 + eps * smooth2;
  Tensor labels = tensor({2, -100, 0});
  CHECK(cross_entropy(logits3(), labels, {.label_smoothing = eps}).item() == Approx((l0 + l2) / 2));
  CHECK(cross_entropy(logits3(), labels, {.label_smoothing = eps, .reduction = "sum"}).item() == Approx(l0 + l2));
  auto each = cross_entropy(logits3(), labels, {.label_smoothing = eps, .reduction = "none"}).to_vector<float>();
  CHECK(each[0] == Approx(l0));
  CHECK(each[1] == 0.f);
  CHECK(each[2] == Approx(l2));
}

TEST_CASE("cross_entropy gives ignored rows no gradient", "[loss][autograd]") {
  Tensor logits = logits3().requires_grad_();
  cross_entropy(logits, tensor({2, -100, 0})).backward();
  auto g = logits.grad().to_vector<float>();
  double z0 = std::exp(1) + std::exp(2) + std::exp(3);
  CHECK(g[2] == Approx((std::exp(3) / z0 - 1) / 2));  // (softmax - one-hot) / 2 counted rows
  CHECK(g[3] == 0.f);
  CHECK(g[4] == 0.f);
  CHECK(g[5] == 0.f);
}

TEST_CASE("cross_entropy with every row ignored is NaN under mean, as in PyTorch", "[loss]") {
  CHECK(std::isnan(cross_entropy(logits3(), tensor({-100, -100, -100})).item()));
  CHECK(cross_entropy(logits3(), tensor({-100, -100, -100}), {.reduction = "sum"}).item() == 0.0);
}

TEST_CASE("mse_loss reductions", "[loss]") {
  Tensor pred = tensor({1., 2., 4.}), target = tensor({0., 0., 1.});
  CHECK(mse_loss(pred, target).item() == Approx(14.0 / 3));
  CHECK(mse_loss(pred, target, "sum").item() == Approx(14.0));
  CHECK(mse_loss(pred, target, "none").to_vector<float>() == std::vector<float>{1.f, 4.f, 9.f});
}

TEST_CASE("CrossEntropyLoss and MSELoss modules call the functionals with their options", "[loss][nn]") {
  nn::CrossEntropyLoss ce({.ignore_index = -1, .label_smoothing = 0.1, .reduction = "sum"});
  double l0 = 0.9 * nll0 + 0.1 * smooth0, l2 = 0.9 * nll2 + 0.1 * smooth2;
  CHECK(ce(logits3(), tensor({2, -1, 0})).item() == Approx(l0 + l2));
  nn::CrossEntropyLoss plain;
  CHECK(plain(logits3(), tensor({2, 0, 0})).item() ==
        Approx((nll0 + (std::log(3.0)) + nll2) / 3));
  nn::MSELoss mse;
  CHECK(mse(tensor({1., 3.}), tensor({0., 0.})).item() == Approx(5.0));
  nn::MSELoss mse_sum({.reduction = "sum"});
  CHECK(mse_sum(tensor({1., 3.}), tensor({0., 0.})).item() == Approx(10.0));
  CHECK(ce->repr() == "CrossEntropyLoss(ignore_index=-1, label_smoothing=0.1, reduction=sum)");
}
