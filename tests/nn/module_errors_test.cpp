// One test per module mistake: the exact error type and a useful message.
#include <catch2/catch.hpp>

#include "dsl/tessel.h"

using namespace tessel;

TEST_CASE("registering a duplicate name is a ModuleError", "[nn][error]") {
  nn::Module m("Box");
  m.register_parameter("w", rand({2}));
  CHECK_THROWS_AS(m.register_parameter("w", rand({2})), ModuleError);
  CHECK_THROWS_WITH(m.register_buffer("w", rand({2})), Catch::Contains("'w' is already registered"));
}

TEST_CASE("a dotted name is a ModuleError", "[nn][error]") {
  nn::Module m("Box");
  CHECK_THROWS_WITH(m.add_module("a.b", nn::ReLU().ptr()), Catch::Contains("must not contain '.'"));
}

TEST_CASE("reading an uninitialized parameter is a ValueError", "[nn][error]") {
  nn::LazyLinear l(4);
  CHECK_THROWS_AS(l->weight.to_vector<float>(), ValueError);
}

TEST_CASE("casting a module to the wrong type names both types", "[nn][error]") {
  nn::Sequential net(nn::LazyLinear(8), nn::ReLU());
  CHECK_THROWS_AS(net[1].as<nn::Linear>(), ModuleError);
  CHECK_THROWS_WITH(net[1].as<nn::Linear>(), Catch::Contains("net.1 is a ReLU") && Catch::Contains("LinearImpl"));
}

TEST_CASE("indexing past the end of a Sequential is an IndexError", "[nn][error]") {
  nn::Sequential net{nn::ReLU()};
  CHECK_THROWS_AS(net[3], IndexError);
}

TEST_CASE("a module without forward says so", "[nn][error]") {
  auto m = std::make_shared<nn::Module>("Empty");
  Tensor x = rand({1});
  CHECK_THROWS_WITH(m->forward(x), Catch::Contains("has no forward()"));
}
