// ModuleDict: insertion by name, lookup, order and state-dict keys.
#include <catch2/catch.hpp>

#include "dsl/tessel.h"

using namespace tessel;

TEST_CASE("ModuleDict keys are the names, in insertion order, nested under the dict's name", "[nn][containers]") {
  nn::ModuleDict heads;
  heads->insert("cls", nn::Linear(4, 3)).insert("box", nn::Linear(4, 2, false));
  CHECK(heads->size() == 2);
  CHECK(heads->keys() == std::vector<std::string>{"cls", "box"});
  CHECK(heads->state_dict().keys() == std::vector<std::string>{"cls.weight", "cls.bias", "box.weight"});
  nn::Sequential outer;
  outer->push_back(heads);
  CHECK(outer->state_dict().keys() == std::vector<std::string>{"0.cls.weight", "0.cls.bias", "0.box.weight"});
}

TEST_CASE("ModuleDict at, operator[], contains and items", "[nn][containers]") {
  nn::Linear cls(2, 1);
  nn::ModuleDict heads;
  heads->insert("cls", cls);
  heads->insert("act", nn::ReLU());
  CHECK(heads->at("cls").ptr() == cls.ptr());
  CHECK(heads["act"].is<nn::ReLU>());
  CHECK(heads->contains("cls"));
  CHECK_FALSE(heads->contains("box"));
  auto items = heads->items();
  REQUIRE(items.size() == 2);
  CHECK(items[0].first == "cls");
  CHECK(items[1].second.is<nn::ReLU>());
  cls->load_state_dict({{"weight", tensor({{2., 3.}})}, {"bias", tensor({1.})}});
  CHECK(heads->at("cls")(tensor({{1., 1.}})).to_vector<float>() == std::vector<float>{6.f});
}
