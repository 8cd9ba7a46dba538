// S5: custom layers.
#include <catch2/catch.hpp>

#include <cmath>

#include "dsl/tessel.h"

using namespace tessel;

namespace {

struct CenteredLayerImpl : nn::Module {
  CenteredLayerImpl() : Module("CenteredLayer") {}
  Tensor forward(const Tensor& X) override { return X - X.mean(); }
};
TESSEL_MODULE(CenteredLayer);

struct MyLinearImpl : nn::Module {
  nn::Parameter weight, bias;
  MyLinearImpl(int64_t in_units, int64_t units) : Module("MyLinear") {
    weight = register_parameter("weight", randn({in_units, units}));
    bias = register_parameter("bias", randn({units}));
  }
  Tensor forward(const Tensor& X) override { return relu(X % weight + bias); }
};
TESSEL_MODULE(MyLinear);

}  // namespace

TEST_CASE("S5.1 CenteredLayer subtracts the mean", "[nn][S5.1]") {
  CenteredLayer layer;
  Tensor y = layer(tensor({1., 2., 3., 4., 5.}));
  CHECK(y.str() == "tensor([-2., -1.,  0.,  1.,  2.])");
}

TEST_CASE("S5.1 inside a Sequential the output mean is ~0", "[nn][S5.1]") {
  manual_seed(11);
  nn::Sequential net(nn::LazyLinear(128), CenteredLayer());
  Tensor Y = net(rand({4, 8}));
  CHECK(std::abs(Y.mean().item()) < 1e-6);
}

TEST_CASE("S5.2 MyLinear holds parameters that require grad", "[nn][S5.2]") {
  manual_seed(12);
  MyLinear linear(5, 3);
  CHECK(linear->weight.shape() == Shape{5, 3});
  CHECK_THAT(linear->weight.str(), Catch::EndsWith("requires_grad=True)"));
  Tensor y = linear(rand({2, 5}));
  CHECK(y.shape() == Shape{2, 3});
  for (float v : y.to_vector<float>()) CHECK(v >= 0);
}

TEST_CASE("S5.2 Sequential of MyLinear layers maps [2,64] to [2,1]", "[nn][S5.2]") {
  nn::Sequential net(MyLinear(64, 8), MyLinear(8, 1));
  CHECK(net(rand({2, 64})).shape() == Shape{2, 1});
}

TEST_CASE("Dropout is identity in eval mode and scales in train mode", "[nn]") {
  manual_seed(13);
  nn::Dropout drop(0.5);
  Tensor x = ones({1000});
  auto y = drop(x).to_vector<float>();
  int zeros = 0;
  for (float v : y) {
    CHECK((v == 0 || v == 2));
    zeros += v == 0;
  }
  CHECK(zeros > 400);
  CHECK(zeros < 600);
  drop->eval();
  CHECK(drop(x).to_vector<float>() == std::vector<float>(1000, 1.f));
}

TEST_CASE("Softmax rows sum to one and Flatten keeps the batch dim", "[nn]") {
  nn::Softmax sm(1);
  auto p = sm(tensor({{1., 2., 3.}, {0., 0., 0.}})).sum({1}).to_vector<float>();
  CHECK(p[0] == Approx(1));
  CHECK(p[1] == Approx(1));
  nn::Flatten f;
  CHECK(f(rand({2, 1, 28, 28})).shape() == Shape{2, 784});
}
