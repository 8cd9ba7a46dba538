// S2: parameter management.
#include <catch2/catch.hpp>

#include "dsl/tessel.h"

using namespace tessel;

TEST_CASE("S2.1 Sequential(8, ReLU, 1) on [2,4] gives [2,1]", "[nn][S2.1]") {
  nn::Sequential net(nn::LazyLinear(8), nn::ReLU(), nn::LazyLinear(1));
  CHECK(net(rand({2, 4})).shape() == Shape{2, 1});
}

TEST_CASE("S2.2 net[2].state_dict() is ordered weight then bias", "[nn][S2.2]") {
  nn::Sequential net(nn::LazyLinear(8), nn::ReLU(), nn::LazyLinear(1));
  net(rand({2, 4}));
  auto sd = net[2]->state_dict();
  REQUIRE(sd.keys() == std::vector<std::string>{"weight", "bias"});
  CHECK(sd["weight"].shape() == Shape{1, 8});
  CHECK(sd["bias"].shape() == Shape{1});
}

TEST_CASE("S2.3 a Parameter is its own type and its data shares memory", "[nn][S2.3]") {
  nn::Sequential net(nn::LazyLinear(8), nn::ReLU(), nn::LazyLinear(1));
  net(rand({2, 4}));
  nn::Linear last = net[2].as<nn::Linear>();
  nn::Parameter b = last->bias;
  static_assert(!std::is_same_v<nn::Parameter, Tensor> && std::is_base_of_v<Tensor, nn::Parameter>);
  CHECK(b.requires_grad());
  Tensor d = b.data();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.buffer().storage == b.buffer().storage);
  CHECK_THAT(b.str(), Catch::StartsWith("Parameter containing:\ntensor(["));
  CHECK_THAT(b.str(), Catch::EndsWith("requires_grad=True)"));
}

TEST_CASE("S2.4 grad is undefined before backward", "[nn][S2.4]") {
  nn::Sequential net(nn::LazyLinear(8), nn::ReLU(), nn::LazyLinear(1));
  net(rand({2, 4}));
  CHECK_FALSE(net[2].as<nn::Linear>()->weight.grad().defined());
}

TEST_CASE("S2.5 named_parameters lists names and shapes in order", "[nn][S2.5]") {
  nn::Sequential net(nn::LazyLinear(8), nn::ReLU(), nn::LazyLinear(1));
  net(rand({2, 4}));
  std::vector<std::string> lines;
  for (auto& [name, p] : net->named_parameters()) lines.push_back(fmt::format("{} {}", name, p.shape()));
  CHECK(lines == std::vector<std::string>{"0.weight [8, 4]", "0.bias [8]", "2.weight [1, 8]", "2.bias [1]"});
}

TEST_CASE("S2.6 a shared layer is one set of parameters", "[nn][S2.6]") {
  manual_seed(5);
  nn::LazyLinear shared(8);
  nn::Sequential net(nn::LazyLinear(8), nn::ReLU(), shared, nn::ReLU(), shared, nn::ReLU(), nn::LazyLinear(1));
  Tensor X = rand({2, 4});
  net(X);
  auto w2 = net[2].as<nn::Linear>()->weight;
  auto w4 = net[4].as<nn::Linear>()->weight;
  CHECK(w2.is_same(w4));
  CHECK(w2.data()[0].to_vector<float>() == w4.data()[0].to_vector<float>());
  net[2].as<nn::Linear>()->weight.data()[0][0] = 100;
  CHECK(net[4].as<nn::Linear>()->weight.data()[0][0].item() == 100.0);
  // Listed once by named_parameters, under both names by state_dict.
  CHECK(net->named_parameters().keys() ==
        std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias", "6.weight", "6.bias"});
  CHECK(net->state_dict().size() == 8);
  auto sd = net->state_dict();
  CHECK(sd["4.weight"].buffer().storage == sd["2.weight"].buffer().storage);
  CHECK_FALSE(sd["2.weight"].requires_grad());  // values, not the parameters themselves
}

TEST_CASE("S2.6 gradients from both uses of a tied layer are summed", "[nn][S2.6]") {
  manual_seed(6);
  nn::Linear shared(3, 3);
  Tensor x = rand({2, 3});
  // Reference: untie by copying the same values into two layers.
  nn::Linear a(3, 3), b(3, 3);
  a->weight.data().copy_(shared->weight.data());
  a->bias.data().copy_(shared->bias.data());
  b->weight.data().copy_(shared->weight.data());
  b->bias.data().copy_(shared->bias.data());
  shared(shared(x)).sum().backward();
  b(a(x)).sum().backward();
  auto g = shared->weight.grad().to_vector<float>();
  auto ga = a->weight.grad().to_vector<float>(), gb = b->weight.grad().to_vector<float>();
  for (size_t i = 0; i < g.size(); ++i) CHECK(g[i] == Approx(ga[i] + gb[i]));
}

TEST_CASE("S2.6 a bare Parameter used twice is one input and gets summed gradients", "[nn][S2.6]") {
  nn::Parameter w(tensor({1., 2., 3.}));
  Tensor y = (w * w + w * 2).sum();
  y.backward();
  CHECK(w.grad().to_vector<float>() == std::vector<float>{4, 6, 8});  // 2w + 2
  // One leaf in the IR: the tree reads w once.
  Tensor e = w * w + w;
  CHECK(ir::to_string(e.node()).find("%1 = input") == std::string::npos);
}

TEST_CASE("zero_grad clears gradients", "[nn]") {
  nn::Linear fc(2, 2);
  fc(rand({1, 2})).sum().backward();
  CHECK(fc->weight.grad().defined());
  fc->zero_grad();
  CHECK_FALSE(fc->weight.grad().defined());
}
