// Builders' Guide, section 1: layers and modules (S1.1-S1.6).
// Each block below reproduces one snippet of the chapter, in order.
#include "dsl/tessel.h"

using namespace tessel;

// Snippet "class MLP(nn.Module)": derive, register the children, write forward.
struct MLPImpl : nn::Module {
  nn::LazyLinear hidden{256}, out{10};
  MLPImpl() : Module("MLP") {
    register_module("hidden", hidden);
    register_module("out", out);
  }
  Tensor forward(const Tensor& X) override { return out(relu(hidden(X))); }
};
TESSEL_MODULE(MLP);

// Snippet "class MySequential(nn.Module)": add_module(str(idx), module), then
// forward walks children() in insertion order.
struct MySequentialImpl : nn::Module {
  template <class... M>
  explicit MySequentialImpl(M... modules) : Module("MySequential") {
    int idx = 0;
    (add_module(std::to_string(idx++), modules.ptr()), ...);
  }
  Tensor forward(const Tensor& X) override {
    Tensor h = X;
    for (auto& module : children()) h = (*module)(h);
    return h;
  }
};
TESSEL_MODULE(MySequential);

// Snippet "class FixedHiddenMLP(nn.Module)".
struct FixedHiddenMLPImpl : nn::Module {
  // Random weights that get no gradient and therefore stay constant in
  // training: a plain tensor member, not a registered parameter.
  Tensor rand_weight = rand({20, 20});
  nn::LazyLinear linear{20};
  FixedHiddenMLPImpl() : Module("FixedHiddenMLP") { register_module("linear", linear); }
  Tensor forward(const Tensor& input) override {
    Tensor X = linear(input);
    X = relu(X % rand_weight + 1);
    // Reusing the layer shares its parameters between the two uses.
    X = linear(X);
    // Control flow on a value: the comparison realizes the tree.
    while (X.abs().sum() > 1) X /= 2;
    return X.sum();
  }
};
TESSEL_MODULE(FixedHiddenMLP);

// Snippet "class NestMLP(nn.Module)".
struct NestMLPImpl : nn::Module {
  nn::Sequential net{nn::LazyLinear(64), nn::ReLU(), nn::LazyLinear(32), nn::ReLU()};
  nn::LazyLinear linear{16};
  NestMLPImpl() : Module("NestMLP") {
    register_module("net", net);
    register_module("linear", linear);
  }
  Tensor forward(const Tensor& X) override { return linear(net(X)); }
};
TESSEL_MODULE(NestMLP);

static const char* py_bool(bool b) { return b ? "True" : "False"; }

int main() {
  manual_seed(0);

  // Snippet: net = nn.Sequential(nn.LazyLinear(256), nn.ReLU(), nn.LazyLinear(10))
  //          X = torch.rand(2, 20); net(X).shape
  nn::Sequential net(nn::LazyLinear(256), nn::ReLU(), nn::LazyLinear(10));
  Tensor X = rand({2, 20});
  fmt::print("S1.1 net(X).shape: {}\n", net(X).shape());
  fmt::print("S1.1 net:\n{}\n", net->repr());

  // Snippet: class MLP(nn.Module) ... (an instance applied to X)
  MLP mlp;
  fmt::print("S1.2 MLP()(X).shape: {}\n", mlp(X).shape());
  fmt::print("S1.2 MLP:\n{}\n", mlp->repr());

  // Snippet: net = MySequential(nn.LazyLinear(256), nn.ReLU(), nn.LazyLinear(10)); net(X).shape
  MySequential myseq(nn::LazyLinear(256), nn::ReLU(), nn::LazyLinear(10));
  fmt::print("S1.3 MySequential(X).shape: {}\n", myseq(X).shape());
  std::string order;
  for (auto& [name, m] : myseq->named_children()) order += (order.empty() ? "" : " ") + name;
  fmt::print("S1.3 children in order: {}\n", order);

  // Snippet: class FixedHiddenMLP(nn.Module) ... (applied to X)
  FixedHiddenMLP fixed;
  Tensor y = fixed(X);
  fmt::print("S1.4 FixedHiddenMLP()(X): {}\n", y);
  fmt::print("S1.4 output is a scalar: {}\n", py_bool(y.dim() == 0));
  fmt::print("S1.4 |output| <= 1: {}\n", py_bool(std::abs(y.item()) <= 1.0));
  std::string names;
  for (auto& [name, p] : fixed->named_parameters()) names += (names.empty() ? "" : " ") + name;
  fmt::print("S1.4 parameters: {}\n", names);
  fmt::print("S1.4 rand_weight.requires_grad: {}\n", py_bool(fixed->rand_weight.requires_grad()));

  // Snippet: chimera = nn.Sequential(NestMLP(), nn.LazyLinear(20), FixedHiddenMLP()); chimera(X)
  nn::Sequential chimera(NestMLP(), nn::LazyLinear(20), FixedHiddenMLP());
  Tensor c = chimera(X);
  fmt::print("S1.5 chimera(X): {}\n", c);

  // The five duties of a module (a-e in the text): forward; an output width
  // that differs from the input's; gradients by backprop; parameters held and
  // exposed; parameters initialized.
  c.backward();
  auto first = chimera[0].as<NestMLP>()->linear->weight;
  fmt::print("S1.6 gradient reached NestMLP.linear.weight {}: {}\n", first.shape(),
             py_bool(first.grad().defined() && first.grad().shape() == first.shape()));
  fmt::print("S1.6 rand_weight has no gradient: {}\n",
             py_bool(!chimera[2].as<FixedHiddenMLP>()->rand_weight.grad().defined()));
  fmt::print("S1.6 chimera holds {} parameter tensors\n", chimera->parameters().size());
}
