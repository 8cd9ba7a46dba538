// Symbolic models: parameters tied by symbol identity inside one expression type.
#include <catch2/catch.hpp>

#include "dsl/tessel.h"

using namespace tessel;

namespace {
auto mlp_expr() { return relu(param<"X"> % param<"W1"> + param<"b1">) % param<"W2"> + param<"b2">; }
}  // namespace

TEST_CASE("a symbolic MLP infers its parameter shapes from the first input", "[nn][symbolic]") {
  manual_seed(1);
  auto net = nn::symbolic(mlp_expr(), {.widths = {{"W1", 256}, {"W2", 10}}});
  CHECK(net->named_parameters().size() == 4);
  CHECK_FALSE(net->named_parameters()["W1"].is_initialized());
  Tensor y = net(rand({2, 20}));
  CHECK(y.shape() == Shape{2, 10});
  std::vector<std::string> shapes;
  for (auto& [n, p] : net->named_parameters()) shapes.push_back(n + " " + p.shape().str());
  CHECK(shapes == std::vector<std::string>{"W1 [20, 256]", "b1 [256]", "W2 [256, 10]", "b2 [10]"});
}

TEST_CASE("the same symbol twice is one parameter with summed gradients", "[nn][symbolic]") {
  auto e = param<"X"> % param<"W"> % param<"W">;
  auto net = nn::symbolic(e, {.widths = {{"W", 3}}});
  Tensor x = rand({2, 3});
  Tensor y = net(x).sum();
  CHECK(net->named_parameters().size() == 1);
  y.backward();
  Tensor W = net->named_parameters()["W"];
  // d/dW sum(x W W) = x^T 1 W^T + (x W)^T 1
  Tensor one = ones({2, 3});
  Tensor expect = add(matmul(matmul(x.t(), one), W.data().t()), matmul(matmul(x, W.data()).t(), one));
  auto g = W.grad().to_vector<float>(), ex = expect.to_vector<float>();
  for (size_t i = 0; i < g.size(); ++i) CHECK(g[i] == Approx(ex[i]).epsilon(1e-4));
}

TEST_CASE("the structural key comes from the type alone", "[nn][symbolic]") {
  constexpr uint64_t k1 = decltype(mlp_expr())::structural_key;
  constexpr uint64_t k2 = decltype(relu(param<"X"> % param<"W1"> + param<"b1">) % param<"W2"> + param<"b2">)::structural_key;
  constexpr uint64_t k3 = decltype(relu(param<"X"> % param<"W1"> + param<"b1">) % param<"W1"> + param<"b2">)::structural_key;
  static_assert(k1 == k2 && k1 != k3);
  CHECK(k1 == k2);
}

TEST_CASE("a missing width is a clear error", "[nn][symbolic][error]") {
  auto net = nn::symbolic(mlp_expr(), {.widths = {{"W1", 4}}});
  CHECK_THROWS_WITH(net(rand({2, 3})), Catch::Contains("output width of 'W2' is unknown"));
}

TEST_CASE("a symbolic model trains and saves like any module", "[nn][symbolic]") {
  manual_seed(2);
  auto net = nn::symbolic(mlp_expr(), {.widths = {{"W1", 8}, {"W2", 1}}});
  Tensor x = rand({16, 4}), t = rand({16, 1});
  net(x);
  auto sd = net->state_dict();
  CHECK(sd.keys() == std::vector<std::string>{"W1", "b1", "W2", "b2"});
  double first = 0, last = 0;
  for (int step = 0; step < 50; ++step) {
    Tensor d = net(x) - t;
    Tensor loss = (d * d).mean();
    if (step == 0) first = loss.item();
    last = loss.item();
    net->zero_grad();
    loss.backward();
    NoGradGuard g;
    for (auto& p : net->parameters()) p.data() -= p.grad() * 0.1;
  }
  CHECK(last < first);
}
