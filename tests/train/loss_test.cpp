// Losses and softmax against values worked out by hand.
#include <catch2/catch.hpp>

#include <cmath>

#include "dsl/tessel.h"

using namespace tessel;

TEST_CASE("cross_entropy is the mean negative log-softmax of the labelled class", "[loss]") {
  Tensor logits = tensor({{1., 2., 3.}, {1., 1., 1.}});
  Tensor labels = tensor({2, 0});
  double row0 = -(3 - std::log(std::exp(1) + std::exp(2) + std::exp(3)));
  double row1 = std::log(3.0);
  CHECK(cross_entropy(logits, labels).item() == Approx((row0 + row1) / 2));
}

TEST_CASE("cross_entropy's gradient is softmax minus one-hot, over N", "[loss][autograd]") {
  Tensor logits = tensor({{1., 2., 3.}}).requires_grad_();
  cross_entropy(logits, tensor({0})).backward();
  auto g = logits.grad().to_vector<float>();
  double z = std::exp(1) + std::exp(2) + std::exp(3);
  CHECK(g[0] == Approx(std::exp(1) / z - 1));
  CHECK(g[2] == Approx(std::exp(3) / z));
}

TEST_CASE("cross_entropy is stable for large logits", "[loss]") {
  Tensor logits = tensor({{1000., 0.}});
  CHECK(cross_entropy(logits, tensor({0})).item() == Approx(0).margin(1e-6));
}

TEST_CASE("cross_entropy shape mistakes are ShapeErrors", "[loss][error]") {
  CHECK_THROWS_WITH(cross_entropy(zeros({2, 3}), tensor({0})), Catch::Contains("labels must be [N] = [2]"));
  CHECK_THROWS_AS(cross_entropy(zeros({3}), tensor({0})), ShapeError);
  CHECK_THROWS_AS(cross_entropy(zeros({1, 3}), tensor({0.5})), DTypeError);
}

TEST_CASE("mse_loss and softmax", "[loss]") {
  CHECK(mse_loss(tensor({1., 2.}), tensor({0., 0.})).item() == Approx(2.5));
  auto p = softmax(tensor({{0., std::log(3.)}}), 1).to_vector<float>();
  CHECK(p[0] == Approx(0.25));
  CHECK(p[1] == Approx(0.75));
  auto lp = log_softmax(tensor({{0., std::log(3.)}}), 1).to_vector<float>();
  CHECK(lp[0] == Approx(std::log(0.25)));
}
