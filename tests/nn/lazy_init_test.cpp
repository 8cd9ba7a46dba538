// S4: lazy initialization and shape propagation.
#include <catch2/catch.hpp>

#include "dsl/tessel.h"

using namespace tessel;

TEST_CASE("S4.1 a lazy weight is uninitialized before the first forward", "[nn][S4.1]") {
  nn::Sequential net(nn::LazyLinear(256), nn::ReLU(), nn::LazyLinear(10));
  auto w = net[0].as<nn::Linear>()->weight;
  CHECK_FALSE(w.is_initialized());
  CHECK(w.str() == "<UninitializedParameter>");
  CHECK_THROWS_AS(w.shape(), ValueError);
  CHECK_THROWS_WITH(w.data(), Catch::Contains("UninitializedParameter") && Catch::Contains("forward"));
}

TEST_CASE("S4.2 the first forward infers every shape in order", "[nn][S4.2]") {
  nn::Sequential net(nn::LazyLinear(256), nn::ReLU(), nn::LazyLinear(10));
  net(rand({2, 20}));
  std::vector<std::string> shapes;
  for (auto& [n, p] : net->named_parameters()) shapes.push_back(n + " " + p.shape().str());
  CHECK(shapes == std::vector<std::string>{"0.weight [256, 20]", "0.bias [256]", "2.weight [10, 256]", "2.bias [10]"});
}

TEST_CASE("S4.3 apply_init: dry run, then init", "[nn][S4.3]") {
  nn::Sequential net(nn::LazyLinear(256), nn::ReLU(), nn::LazyLinear(10));
  net->apply_init(rand({2, 20}), [](nn::Module& m) {
    if (auto* l = m.as_if<nn::LinearImpl>()) nn::init::constant_(l->weight, 0.5);
  });
  CHECK(net[0].as<nn::Linear>()->weight.shape() == Shape{256, 20});
  CHECK(net[2].as<nn::Linear>()->weight.data()[0][0].item() == 0.5);
  CHECK_FALSE(net[0].as<nn::Linear>()->weight.grad().defined());
}

TEST_CASE("S4.4 a wrong later input width names the layer and both shapes", "[nn][S4.4][error]") {
  nn::Sequential net(nn::LazyLinear(256), nn::ReLU(), nn::LazyLinear(10));
  net(rand({2, 20}));
  CHECK_THROWS_AS(net(rand({2, 21})), ShapeError);
  CHECK_THROWS_WITH(net(rand({2, 21})), Catch::Contains("net.0") && Catch::Contains("20") &&
                                             Catch::Contains("[2, 21]"));
}
