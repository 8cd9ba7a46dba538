// S3: parameter initialization.
#include <catch2/catch.hpp>

#include <cmath>
#include <sstream>

#include "dsl/tessel.h"

using namespace tessel;

namespace {
nn::Sequential make_net() {
  nn::Sequential net(nn::LazyLinear(8), nn::ReLU(), nn::LazyLinear(1));
  net(rand({2, 4}));
  return net;
}
}  // namespace

TEST_CASE("S3.1 default Linear init is uniform within 1/sqrt(fan_in)", "[nn][S3.1]") {
  manual_seed(7);
  nn::Linear fc(400, 300);
  auto w = fc->weight.data().to_vector<float>();
  double bound = 1 / std::sqrt(400.0), mx = 0;
  for (float v : w) mx = std::max(mx, std::abs(double(v)));
  CHECK(mx <= bound);
  CHECK(mx > 0.95 * bound);  // 120000 draws reach close to the bound
}

TEST_CASE("S3.2 apply visits every module, children first", "[nn][S3.2]") {
  auto net = make_net();
  std::vector<std::string> seen;
  net->apply([&](nn::Module& m) { seen.push_back(m.type_name()); });
  CHECK(seen == std::vector<std::string>{"Linear", "ReLU", "Linear", "Sequential"});
}

TEST_CASE("S3.3 normal_ and zeros_ on every Linear", "[nn][S3.3]") {
  manual_seed(8);
  auto net = make_net();
  net->apply([](nn::Module& m) {
    if (auto* l = m.as_if<nn::LinearImpl>()) {
      nn::init::normal_(l->weight, 0, 0.01);
      nn::init::zeros_(l->bias);
    }
  });
  auto b = net[0].as<nn::Linear>()->bias.data().to_vector<float>();
  CHECK(b == std::vector<float>(8, 0.f));
  auto w = net[0].as<nn::Linear>()->weight.data().to_vector<float>();
  for (float v : w) CHECK(std::abs(v) < 0.06);
}

TEST_CASE("S3.3 constant_ sets every element", "[nn][S3.3]") {
  auto net = make_net();
  net->apply([](nn::Module& m) {
    if (auto* l = m.as_if<nn::LinearImpl>()) {
      nn::init::constant_(l->weight, 1);
      nn::init::zeros_(l->bias);
    }
  });
  CHECK(net[0].as<nn::Linear>()->weight.data()[0].to_vector<float>() == std::vector<float>(4, 1.f));
}

TEST_CASE("S3.3 xavier_uniform_ bound comes from fan_in and fan_out", "[nn][S3.3]") {
  manual_seed(9);
  Tensor w = empty({300, 500});
  nn::init::xavier_uniform_(w);
  double bound = std::sqrt(6.0 / 800), mx = 0;
  for (float v : w.to_vector<float>()) mx = std::max(mx, std::abs(double(v)));
  CHECK(mx <= bound);
  CHECK(mx > 0.95 * bound);
  CHECK(nn::init::fans(w) == std::pair<int64_t, int64_t>{500, 300});
}

TEST_CASE("S3.4 different init per layer", "[nn][S3.4]") {
  auto net = make_net();
  auto init_xavier = [](nn::Module& m) {
    if (auto* l = m.as_if<nn::LinearImpl>()) nn::init::xavier_uniform_(l->weight);
  };
  auto init_42 = [](nn::Module& m) {
    if (auto* l = m.as_if<nn::LinearImpl>()) nn::init::constant_(l->weight, 42);
  };
  net[0]->apply(init_xavier);
  net[2]->apply(init_42);
  CHECK(net[2].as<nn::Linear>()->weight.data().to_vector<float>() == std::vector<float>(8, 42.f));
  for (float v : net[0].as<nn::Linear>()->weight.data().to_vector<float>()) CHECK(std::abs(v) <= std::sqrt(6.0 / 12));
}

TEST_CASE("S3.5 custom init prints each Linear and zeroes the band (-5, 5)", "[nn][S3.5]") {
  manual_seed(10);
  auto net = make_net();
  std::ostringstream log;
  net->apply([&](nn::Module& m) {
    if (auto* l = m.as_if<nn::LinearImpl>()) {
      log << fmt::format("Init weight {}\n", l->weight.shape());
      nn::init::uniform_(l->weight, -10, 10);
      l->weight.data() *= l->weight.data().abs() >= 5;
    }
  });
  CHECK(log.str() == "Init weight [8, 4]\nInit weight [1, 8]\n");
  for (float v : net[0].as<nn::Linear>()->weight.data().to_vector<float>()) CHECK((v == 0 || std::abs(v) >= 5));
}

TEST_CASE("S3.6 direct writes to weight data", "[nn][S3.6]") {
  auto net = make_net();
  auto w = net[0].as<nn::Linear>()->weight;
  auto before = w.data().to_vector<float>();
  w.data() += 1;
  w.data()[0][0] = 42;
  auto after = w.data().to_vector<float>();
  CHECK(after[0] == 42);
  for (size_t i = 1; i < after.size(); ++i) CHECK(after[i] == Approx(before[i] + 1));
}

TEST_CASE("S3.7 manual_seed makes initialization reproducible", "[nn][S3.7]") {
  manual_seed(42);
  auto a = make_net();
  manual_seed(42);
  auto b = make_net();
  CHECK(a[0].as<nn::Linear>()->weight.data().to_vector<float>() ==
        b[0].as<nn::Linear>()->weight.data().to_vector<float>());
}
