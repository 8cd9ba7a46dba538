// Builders' Guide, section 4: lazy initialization (S4.1-S4.4).
// Each block below reproduces one snippet of the chapter, in order.
#include "dsl/tessel.h"

using namespace tessel;

static const char* py_bool(bool b) { return b ? "True" : "False"; }

int main() {
  manual_seed(0);

  // Snippet: net = nn.Sequential(nn.LazyLinear(256), nn.ReLU(), nn.LazyLinear(10))
  nn::Sequential net(nn::LazyLinear(256), nn::ReLU(), nn::LazyLinear(10));
  fmt::print("S4.1 net:\n{}\n", net->repr());

  // Snippet: net[0].weight   ->  <UninitializedParameter>
  auto weight0 = [&] { return net[0].as<nn::Linear>()->weight; };
  fmt::print("S4.1 net[0].weight: {}\n", weight0().str());
  fmt::print("S4.1 is_initialized: {}\n", py_bool(weight0().is_initialized()));
  // Its data does not exist yet: asking for it is an error that says why.
  try {
    weight0().data();
    fmt::print("S4.1 reading the data worked (unexpected)\n");
  } catch (const Error& e) {
    fmt::print("S4.1 reading the data: {}\n", e.what());
  }

  // Snippet: X = torch.rand(2, 20); net(X); net[0].weight.shape
  Tensor X = rand({2, 20});
  net(X);
  fmt::print("S4.2 net[0].weight.shape: {}\n", weight0().shape());
  // Every shape was inferred, in order through the graph.
  for (auto& [name, p] : net->named_parameters()) fmt::print("S4.2 {} {}\n", name, p.shape());
  fmt::print("S4.2 net:\n{}\n", net->repr());

  // Snippet: def apply_init(self, inputs, init=None):
  //            self.forward(*inputs); if init is not None: self.net.apply(init)
  nn::Sequential fresh(nn::LazyLinear(256), nn::ReLU(), nn::LazyLinear(10));
  fresh->apply_init(X, [](nn::Module& module) {
    if (auto* linear = module.as_if<nn::LinearImpl>()) {
      nn::init::xavier_uniform_(linear->weight);
      nn::init::zeros_(linear->bias);
    }
  });
  auto first = fresh[0].as<nn::Linear>();
  fmt::print("S4.3 after apply_init: weight {}, bias {}\n", first->weight.shape(), first->bias.data().sum());
  fmt::print("S4.3 the dry run left no gradient: {}\n", py_bool(!first->weight.grad().defined()));

  // A later input of another width is an error naming the layer and both shapes.
  try {
    net(rand({2, 21}));
    fmt::print("S4.4 width 21 after 20 worked (unexpected)\n");
  } catch (const ShapeError& e) {
    fmt::print("S4.4 width 21 after 20: {}\n", e.what());
  }
}
