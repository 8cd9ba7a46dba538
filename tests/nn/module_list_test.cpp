// ModuleList: registration, indexing, iteration and state-dict keys.
#include <catch2/catch.hpp>

#include "dsl/tessel.h"

using namespace tessel;

namespace {
struct StackImpl : nn::Module {
  nn::ModuleList layers;
  StackImpl() : Module("Stack") {
    layers->append(nn::Linear(2, 3)).append(nn::Linear(3, 1));
    register_module("layers", layers);
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = x;
    for (auto& layer : *layers) h = layer(h);
    return h;
  }
};
TESSEL_MODULE(Stack);
}  // namespace

TEST_CASE("ModuleList keys are the positions, nested under the list's name", "[nn][containers]") {
  nn::ModuleList list(nn::Linear(4, 2), nn::ReLU(), nn::Linear(2, 1));
  CHECK(list->size() == 3);
  CHECK(list->state_dict().keys() == std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"});
  Stack net;
  CHECK(net->state_dict().keys() ==
        std::vector<std::string>{"layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias"});
  CHECK(net->parameters().size() == 4);
  CHECK(net->layers[1]->path() == "net.layers.1");
}

TEST_CASE("ModuleList indexing, negative indices and iteration give the registered modules", "[nn][containers]") {
  nn::Linear a(2, 2), b(2, 3);
  nn::ModuleList list;
  list->append(a);
  list->append(b);
  CHECK(list[0].ptr() == a.ptr());
  CHECK(list[-1].ptr() == b.ptr());
  CHECK(list[1].as<nn::Linear>().is_same(b));
  std::vector<nn::Module*> seen;
  for (auto& m : *list) seen.push_back(m.ptr().get());
  CHECK(seen == std::vector<nn::Module*>{a.get(), b.get()});
}

TEST_CASE("ModuleList extend appends the same modules, which share parameters", "[nn][containers]") {
  nn::Linear shared(2, 2);
  nn::ModuleList first(shared), second;
  second->extend(*first);
  second->extend(*second);
  CHECK(second->size() == 2);
  CHECK(second[1].ptr() == shared.ptr());
  CHECK(second->parameters().size() == 2);  // tied: each parameter once
}

TEST_CASE("ModuleList forward through an owner computes the chained layers", "[nn][containers]") {
  Stack net;
  net->load_state_dict({{"layers.0.weight", tensor({{1., 0.}, {0., 1.}, {1., 1.}})},
                        {"layers.0.bias", tensor({0., 0., 1.})},
                        {"layers.1.weight", tensor({{1., 2., 3.}})},
                        {"layers.1.bias", tensor({-1.})}});
  // h = [1, 2, 4]; y = 1 + 4 + 12 - 1
  CHECK(net(tensor({{1., 2.}})).to_vector<float>() == std::vector<float>{16.f});
}
