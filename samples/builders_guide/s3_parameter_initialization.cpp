// Builders' Guide, section 3: parameter initialization (S3.1-S3.7).
// Each block below reproduces one snippet of the chapter, in order.
#include <cmath>

#include "dsl/tessel.h"

using namespace tessel;

static const char* py_bool(bool b) { return b ? "True" : "False"; }

// The chapter's net (from section 2), shapes inferred by one forward pass.
static nn::Sequential make_net() {
  nn::Sequential net(nn::LazyLinear(8), nn::ReLU(), nn::LazyLinear(1));
  net(rand({2, 4}));
  return net;
}

int main() {
  manual_seed(0);
  nn::Sequential net = make_net();
  auto weight = [&](int i) { return net[i].as<nn::Linear>()->weight; };
  auto bias = [&](int i) { return net[i].as<nn::Linear>()->bias; };

  // The text before the snippets: by default a linear layer's weight and bias
  // are uniform in [-1/sqrt(fan_in), 1/sqrt(fan_in)] (fan_in = 4 here: 0.5).
  double bound = 1 / std::sqrt(4.0), mx = 0;
  for (float v : weight(0).data().to_vector<float>()) mx = std::max(mx, std::abs(double(v)));
  for (float v : bias(0).data().to_vector<float>()) mx = std::max(mx, std::abs(double(v)));
  fmt::print("S3.1 default init within 1/sqrt(fan_in) = {}: {}\n", bound, py_bool(mx <= bound));

  // Snippet: def init_normal(module): if type(module) == nn.Linear:
  //            nn.init.normal_(module.weight, mean=0, std=0.01); nn.init.zeros_(module.bias)
  //          net.apply(init_normal); net[0].weight.data[0], net[0].bias.data[0]
  auto init_normal = [](nn::Module& module) {
    if (auto* linear = module.as_if<nn::LinearImpl>()) {
      nn::init::normal_(linear->weight, 0, 0.01);
      nn::init::zeros_(linear->bias);
    }
  };
  net->apply(init_normal);
  fmt::print("S3.2 init_normal: ({}, {})\n", weight(0).data()[0], bias(0).data()[0]);

  // Snippet: def init_constant(module): ... nn.init.constant_(module.weight, 1); nn.init.zeros_(module.bias)
  //          net.apply(init_constant); net[0].weight.data[0], net[0].bias.data[0]
  auto init_constant = [](nn::Module& module) {
    if (auto* linear = module.as_if<nn::LinearImpl>()) {
      nn::init::constant_(linear->weight, 1);
      nn::init::zeros_(linear->bias);
    }
  };
  net->apply(init_constant);
  fmt::print("S3.3 init_constant: ({}, {})\n", weight(0).data()[0], bias(0).data()[0]);

  // Snippet: def init_xavier(module): ... nn.init.xavier_uniform_(module.weight)
  //          def init_42(module): ... nn.init.constant_(module.weight, 42)
  //          net[0].apply(init_xavier); net[2].apply(init_42)
  //          print(net[0].weight.data[0]); print(net[2].weight.data)
  auto init_xavier = [](nn::Module& module) {
    if (auto* linear = module.as_if<nn::LinearImpl>()) nn::init::xavier_uniform_(linear->weight);
  };
  auto init_42 = [](nn::Module& module) {
    if (auto* linear = module.as_if<nn::LinearImpl>()) nn::init::constant_(linear->weight, 42);
  };
  net[0]->apply(init_xavier);
  net[2]->apply(init_42);
  fmt::print("S3.4 {}\n", weight(0).data()[0]);
  fmt::print("S3.4 {}\n", weight(2).data());
  double xavier = std::sqrt(6.0 / (4 + 8)), xmx = 0;
  for (float v : weight(0).data().to_vector<float>()) xmx = std::max(xmx, std::abs(double(v)));
  fmt::print("S3.4 xavier within sqrt(6 / (fan_in + fan_out)): {}\n", py_bool(xmx <= xavier));

  // Snippet: def my_init(module): if type(module) == nn.Linear:
  //            print("Init", *[(name, param.shape) for name, param in module.named_parameters()][0])
  //            nn.init.uniform_(module.weight, -10, 10)
  //            module.weight.data *= module.weight.data.abs() >= 5
  //          net.apply(my_init); net[0].weight[:2]
  auto my_init = [](nn::Module& module) {
    if (auto* linear = module.as_if<nn::LinearImpl>()) {
      auto [name, param] = *module.named_parameters().begin();
      fmt::print("Init {} {}\n", name, param.shape());
      nn::init::uniform_(linear->weight, -10, 10);
      linear->weight.data() *= linear->weight.data().abs() >= 5;
    }
  };
  net->apply(my_init);
  fmt::print("S3.5 net[0].weight[:2]:\n{}\n", weight(0).slice(0, 0, 2));
  bool band_zeroed = true;
  for (float v : weight(0).data().to_vector<float>()) band_zeroed &= v == 0 || std::abs(v) >= 5;
  fmt::print("S3.5 every weight is 0 or |w| >= 5: {}\n", py_bool(band_zeroed));

  // Snippet: net[0].weight.data[:] += 1; net[0].weight.data[0, 0] = 42; net[0].weight.data[0]
  auto before = weight(0).data()[0].clone();
  weight(0).data() += 1;
  weight(0).data()[0][0] = 42;
  fmt::print("S3.6 {}\n", weight(0).data()[0]);
  auto b = before.to_vector<float>(), a = weight(0).data()[0].to_vector<float>();
  bool plus_one = a[0] == 42;
  for (size_t i = 1; i < a.size(); ++i) plus_one &= a[i] == b[i] + 1;
  fmt::print("S3.6 row 0 is [42, w + 1, ...]: {}\n", py_bool(plus_one));

  // manual_seed makes a run reproducible: the same seed, the same weights.
  manual_seed(42);
  auto w1 = make_net()[0].as<nn::Linear>()->weight.data().to_vector<float>();
  manual_seed(42);
  auto w2 = make_net()[0].as<nn::Linear>()->weight.data().to_vector<float>();
  fmt::print("S3.7 same seed, same weights: {}\n", py_bool(w1 == w2));
}
