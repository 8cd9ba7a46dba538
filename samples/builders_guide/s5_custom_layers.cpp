// Builders' Guide, section 5: custom layers (S5.1-S5.2).
// Each block below reproduces one snippet of the chapter, in order.
#include <cmath>

#include "dsl/tessel.h"

using namespace tessel;

static const char* py_bool(bool b) { return b ? "True" : "False"; }

// Snippet: class CenteredLayer(nn.Module): forward returns X - X.mean()
struct CenteredLayerImpl : nn::Module {
  CenteredLayerImpl() : Module("CenteredLayer") {}
  Tensor forward(const Tensor& X) override { return X - X.mean(); }
};
TESSEL_MODULE(CenteredLayer);

// Snippet: class MyLinear(nn.Module): weight = nn.Parameter(torch.randn(in_units, units)),
//          bias = nn.Parameter(torch.randn(units,)); forward relu(X @ weight + bias).
// The chapter reads `self.weight.data` in forward, which cuts the layer out of
// autograd; using the parameters themselves keeps it trainable.
struct MyLinearImpl : nn::Module {
  nn::Parameter weight, bias;
  MyLinearImpl(int64_t in_units, int64_t units) : Module("MyLinear") {
    weight = register_parameter("weight", randn({in_units, units}));
    bias = register_parameter("bias", randn({units}));
  }
  Tensor forward(const Tensor& X) override { return relu(X % weight + bias); }
};
TESSEL_MODULE(MyLinear);

int main() {
  manual_seed(0);

  // Snippet: layer = CenteredLayer(); layer(torch.tensor([1.0, 2, 3, 4, 5]))
  CenteredLayer layer;
  fmt::print("{}\n", layer(tensor({1.0, 2, 3, 4, 5})));

  // Snippet: net = nn.Sequential(nn.LazyLinear(128), CenteredLayer())
  // (the chapter's next lines: Y = net(torch.rand(4, 8)); Y.mean())
  nn::Sequential net(nn::LazyLinear(128), CenteredLayer());
  Tensor Y = net(rand({4, 8}));
  fmt::print("S5.1 Y.shape: {}\n", Y.shape());
  fmt::print("S5.1 |Y.mean()| < 1e-6: {}\n", py_bool(std::abs(Y.mean().item()) < 1e-6));

  // Snippet: linear = MyLinear(5, 3); linear.weight
  MyLinear linear(5, 3);
  fmt::print("S5.2 linear.weight:\n{}\n", linear->weight.str());

  // Snippet: net = nn.Sequential(MyLinear(64, 8), MyLinear(8, 1)); net(torch.rand(2, 64))
  nn::Sequential net2(MyLinear(64, 8), MyLinear(8, 1));
  Tensor out = net2(rand({2, 64}));
  fmt::print("S5.2 {}\n", out);
  fmt::print("S5.2 shape: {}\n", out.shape());
  fmt::print("S5.2 net:\n{}\n", net2->repr());
  std::string names;
  for (auto& [name, p] : net2->named_parameters()) names += fmt::format("{}{} {}", names.empty() ? "" : ", ", name, p.shape());
  fmt::print("S5.2 parameters: {}\n", names);
}
