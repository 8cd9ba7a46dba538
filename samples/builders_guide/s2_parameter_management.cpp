// Builders' Guide, section 2: parameter management (S2.1-S2.6).
// Each block below reproduces one snippet of the chapter, in order.
#include <type_traits>

#include "dsl/tessel.h"

using namespace tessel;

static const char* py_bool(bool b) { return b ? "True" : "False"; }

int main() {
  manual_seed(0);

  // Snippet: net = nn.Sequential(nn.LazyLinear(8), nn.ReLU(), nn.LazyLinear(1))
  //          X = torch.rand(size=(2, 4)); net(X).shape
  nn::Sequential net(nn::LazyLinear(8), nn::ReLU(), nn::LazyLinear(1));
  Tensor X = rand({2, 4});
  fmt::print("S2.1 net(X).shape: {}\n", net(X).shape());

  // Snippet: net[2].state_dict()
  auto sd = net[2]->state_dict();
  // PyTorch's state_dict() holds detached values; tessel's holds the
  // parameters themselves, so detach to print the same text.
  std::string items;
  for (auto& [name, t] : sd) items += fmt::format("{}('{}', {})", items.empty() ? "" : ", ", name, t.detach());
  fmt::print("S2.2 net[2].state_dict(): OrderedDict([{}])\n", items);
  for (auto& [name, t] : sd) fmt::print("S2.2 {} {}\n", name, t.shape());

  // Snippet: type(net[2].bias), net[2].bias.data
  nn::Linear last = net[2].as<nn::Linear>();
  nn::Parameter bias = last->bias;
  static_assert(!std::is_same_v<nn::Parameter, Tensor> && std::is_base_of_v<Tensor, nn::Parameter>,
                "a Parameter is its own type, derived from Tensor");
  fmt::print("S2.3 net[2].bias is a Parameter: {}\n", py_bool(bias.impl()->kind == TensorImpl::Kind::parameter));
  // fmt has no formatter for nn::Parameter (only Tensor), so print through str().
  fmt::print("S2.3 net[2].bias:\n{}\n", bias.str());
  fmt::print("S2.3 net[2].bias.data: {}\n", bias.data());
  fmt::print("S2.3 data shares the parameter's memory: {}\n",
             py_bool(bias.data().buffer().storage == bias.buffer().storage));

  // Snippet: net[2].weight.grad == None
  fmt::print("S2.4 net[2].weight.grad == None: {}\n", py_bool(!last->weight.grad().defined()));

  // Snippet: [(name, param.shape) for name, param in net.named_parameters()]
  for (auto& [name, param] : net->named_parameters()) fmt::print("{} {}\n", name, param.shape());

  // Snippet: shared = nn.LazyLinear(8)
  //          net = nn.Sequential(nn.LazyLinear(8), nn.ReLU(), shared, nn.ReLU(),
  //                              shared, nn.ReLU(), nn.LazyLinear(1))
  nn::LazyLinear shared(8);
  nn::Sequential tied(nn::LazyLinear(8), nn::ReLU(), shared, nn::ReLU(), shared, nn::ReLU(), nn::LazyLinear(1));
  // Snippet: net(X)
  tied(X);
  auto w2 = [&] { return tied[2].as<nn::Linear>()->weight; };
  auto w4 = [&] { return tied[4].as<nn::Linear>()->weight; };
  // Snippet: print(net[2].weight.data[0] == net[4].weight.data[0])
  fmt::print("S2.6 {}\n", w2().data()[0] == w4().data()[0]);
  // Snippet: net[2].weight.data[0, 0] = 100
  w2().data()[0][0] = 100;
  // Snippet: print(net[2].weight.data[0] == net[4].weight.data[0])
  fmt::print("S2.6 {}\n", w2().data()[0] == w4().data()[0]);
  fmt::print("S2.6 net[4].weight.data[0, 0]: {}\n", w4().data()[0][0]);
  fmt::print("S2.6 same object: {}\n", py_bool(w2().is_same(w4())));

  // The text after the snippet: in backward, the gradients of both uses are
  // summed into the one tied parameter; named_parameters lists it once, the
  // state dict under every name.
  tied(X).sum().backward();
  fmt::print("S2.6 one gradient for both uses {}: {}\n", w2().grad().shape(), py_bool(w2().grad().is_same(w4().grad())));
  std::string names;
  for (auto& [name, p] : tied->named_parameters()) names += (names.empty() ? "" : " ") + name;
  fmt::print("S2.6 named_parameters: {}\n", names);
  std::string keys;
  for (auto& [name, t] : tied->state_dict()) keys += (keys.empty() ? "" : " ") + name;
  fmt::print("S2.6 state_dict: {}\n", keys);
}
