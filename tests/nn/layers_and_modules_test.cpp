// S1: layers and modules.
#include <catch2/catch.hpp>

#include "dsl/tessel.h"

using namespace tessel;

namespace {

struct MLPImpl : nn::Module {
  nn::LazyLinear hidden{256}, out{10};
  MLPImpl() : Module("MLP") {
    register_module("hidden", hidden);
    register_module("out", out);
  }
  Tensor forward(const Tensor& x) override { return out(relu(hidden(x))); }
};
TESSEL_MODULE(MLP);

struct MySequentialImpl : nn::Module {
  template <class... M>
  explicit MySequentialImpl(M... ms) : Module("MySequential") {
    int i = 0;
    ((add_module(std::to_string(i++), ms.ptr())), ...);
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = x;
    for (auto& m : children()) h = (*m)(h);
    return h;
  }
};
TESSEL_MODULE(MySequential);

struct FixedHiddenMLPImpl : nn::Module {
  Tensor rand_weight = rand({20, 20});  // a constant: not a parameter, no gradient
  nn::LazyLinear linear{20};
  FixedHiddenMLPImpl() : Module("FixedHiddenMLP") { register_module("linear", linear); }
  Tensor forward(const Tensor& x) override {
    Tensor X = linear(x);
    X = relu(X % rand_weight + 1);
    X = linear(X);  // the same layer again: shared parameters
    while (X.abs().sum() > 1) X /= 2;
    return X.sum();
  }
};
TESSEL_MODULE(FixedHiddenMLP);

struct NestMLPImpl : nn::Module {
  nn::Sequential net{nn::LazyLinear(64), nn::ReLU(), nn::LazyLinear(32), nn::ReLU()};
  nn::LazyLinear linear{16};
  NestMLPImpl() : Module("NestMLP") {
    register_module("net", net);
    register_module("linear", linear);
  }
  Tensor forward(const Tensor& x) override { return linear(net(x)); }
};
TESSEL_MODULE(NestMLP);

}  // namespace

TEST_CASE("S1.1 Sequential of lazy layers maps [2,20] to [2,10]", "[nn][S1.1]") {
  manual_seed(1);
  nn::Sequential net(nn::LazyLinear(256), nn::ReLU(), nn::LazyLinear(10));
  Tensor X = rand({2, 20});
  CHECK(net(X).shape() == Shape{2, 10});
}

TEST_CASE("S1.1 Sequential repr reads like PyTorch before and after the first forward", "[nn][S1.1]") {
  nn::Sequential net(nn::LazyLinear(256), nn::ReLU(), nn::LazyLinear(10));
  CHECK(net->repr() ==
        "Sequential(\n"
        "  (0): LazyLinear(in_features=0, out_features=256, bias=True)\n"
        "  (1): ReLU()\n"
        "  (2): LazyLinear(in_features=0, out_features=10, bias=True)\n"
        ")");
  net(rand({2, 20}));
  CHECK(net->repr() ==
        "Sequential(\n"
        "  (0): Linear(in_features=20, out_features=256, bias=True)\n"
        "  (1): ReLU()\n"
        "  (2): Linear(in_features=256, out_features=10, bias=True)\n"
        ")");
}

TEST_CASE("S1.2 a user module with two lazy layers", "[nn][S1.2]") {
  MLP net;
  Tensor y = net(rand({2, 20}));
  CHECK(y.shape() == Shape{2, 10});
  auto names = net->named_parameters().keys();
  CHECK(names == std::vector<std::string>{"hidden.weight", "hidden.bias", "out.weight", "out.bias"});
}

TEST_CASE("S1.3 a user container walks children in insertion order", "[nn][S1.3]") {
  MySequential net(nn::LazyLinear(256), nn::ReLU(), nn::LazyLinear(10));
  CHECK(net(rand({2, 20})).shape() == Shape{2, 10});
  auto kids = net->named_children().keys();
  CHECK(kids == std::vector<std::string>{"0", "1", "2"});
}

TEST_CASE("S1.4 FixedHiddenMLP: constant weight, shared layer, control flow, scalar result", "[nn][S1.4]") {
  manual_seed(2);
  FixedHiddenMLP net;
  Tensor y = net(rand({2, 20}));
  CHECK(y.dim() == 0);
  CHECK(std::abs(y.item()) <= 1.0);
  // Only the shared linear layer's two parameters are parameters.
  CHECK(net->named_parameters().keys() == std::vector<std::string>{"linear.weight", "linear.bias"});
  y.backward();
  CHECK(net->linear->weight.grad().defined());
  CHECK(net->linear->weight.grad().shape() == Shape{20, 20});
  CHECK_FALSE(net->rand_weight.requires_grad());
  CHECK_FALSE(net->rand_weight.grad().defined());
}

TEST_CASE("S1.5 nested modules give a scalar with autograd history", "[nn][S1.5]") {
  manual_seed(3);
  nn::Sequential chimera(NestMLP(), nn::LazyLinear(20), FixedHiddenMLP());
  Tensor y = chimera(rand({2, 20}));
  CHECK(y.dim() == 0);
  CHECK(y.grad_fn_name() == "SumBackward0");
  CHECK_THAT(y.str(), Catch::Matches(R"(tensor\(-?\d\.\d{4}, grad_fn=<SumBackward0>\))"));
}

TEST_CASE("S1.6 gradients reach inputs and parameters", "[nn][S1.6]") {
  manual_seed(4);
  nn::Linear fc(3, 2);
  Tensor x = rand({4, 3}).requires_grad_();
  Tensor y = fc(x).sum();
  y.backward();
  // d(sum(x W^T + b))/dx = column sums of W, for every row.
  auto W = fc->weight.data().to_vector<float>();
  auto gx = x.grad().to_vector<float>();
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 3; ++c) CHECK(gx[r * 3 + c] == Approx(W[c] + W[3 + c]));
  CHECK(fc->bias.grad().to_vector<float>() == std::vector<float>{4, 4});
}

TEST_CASE("activation modules GELU SiLU Tanh Sigmoid compute their functions and print as PyTorch", "[nn]") {
  Tensor x = from_vector<double>({-1.0, 0.0, 2.0}, {3});
  nn::Sequential net(nn::Linear(3, 3), nn::GELU(), nn::SiLU(), nn::Tanh(), nn::Sigmoid(), nn::GELU("tanh"));
  CHECK(net->repr() ==
        "Sequential(\n"
        "  (0): Linear(in_features=3, out_features=3, bias=True)\n"
        "  (1): GELU(approximate='none')\n"
        "  (2): SiLU()\n"
        "  (3): Tanh()\n"
        "  (4): Sigmoid()\n"
        "  (5): GELU(approximate='tanh')\n"
        ")");
  auto same = [](const Tensor& a, const Tensor& b) { CHECK(a.to_vector<double>() == b.to_vector<double>()); };
  same(nn::GELU()(x), gelu(x));
  same(nn::GELU("tanh")(x), gelu(x, "tanh"));
  same(nn::SiLU()(x), silu(x));
  same(nn::Tanh()(x), x.tanh());
  same(nn::Sigmoid()(x), x.sigmoid());
  CHECK(nn::GELU()(x).to_vector<double>()[2] == Approx(2.0 * 0.5 * (1 + std::erf(2.0 / std::sqrt(2.0)))));
}
