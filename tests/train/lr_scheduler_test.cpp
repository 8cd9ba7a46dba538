// LR schedulers against PyTorch's formulas evaluated by hand.
#include <catch2/catch.hpp>

#include <cmath>
#include <numbers>

#include "dsl/tessel.h"
#include "dsl/train/lr_scheduler.h"

using namespace tessel;

namespace {
nn::Parameter one_param() { return nn::Parameter(tensor({1., 2.})); }
std::vector<double> run(optim::LRScheduler& s, optim::Optimizer& opt, int steps) {
  std::vector<double> lrs{s.get_last_lr()};
  for (int i = 0; i < steps; ++i) {
    s.step();
    CHECK(opt.lr() == s.get_last_lr());
    lrs.push_back(s.get_last_lr());
  }
  return lrs;
}
}  // namespace

TEST_CASE("StepLR multiplies by gamma every step_size epochs", "[train][lr_scheduler]") {
  optim::SGD opt({one_param()}, {.lr = 0.1});
  optim::StepLR sched(opt, 2, 0.5);
  auto lrs = run(sched, opt, 5);
  std::vector<double> want{0.1, 0.1, 0.05, 0.05, 0.025, 0.025};
  REQUIRE(lrs.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) CHECK(lrs[i] == Approx(want[i]));
  CHECK(sched.last_epoch() == 5);
}

TEST_CASE("CosineAnnealingLR follows the closed form down to eta_min at T_max", "[train][lr_scheduler]") {
  optim::Adam opt({one_param()}, {.lr = 1.0});
  optim::CosineAnnealingLR sched(opt, 4, 0.2);
  auto lrs = run(sched, opt, 4);
  // 0.2 + 0.8 * (1 + cos(pi * t / 4)) / 2
  const double r = std::sqrt(0.5);
  std::vector<double> want{1.0, 0.2 + 0.4 * (1 + r), 0.6, 0.2 + 0.4 * (1 - r), 0.2};
  for (size_t i = 0; i < want.size(); ++i) CHECK(lrs[i] == Approx(want[i]));
}

TEST_CASE("CosineWithWarmup rises linearly, then follows a cosine to min_lr and stays there", "[train][lr_scheduler]") {
  optim::SGD opt({one_param()}, {.lr = 0.4});
  optim::CosineWithWarmup sched(opt, 2, 6, 0.0);
  CHECK(opt.lr() == 0.0);  // step 0 of the warmup
  auto lrs = run(sched, opt, 7);
  // warmup: 0, 0.2; then 0.4 * (1 + cos(pi * k / 4)) / 2 for k = 0..4; then min_lr
  const double r = std::sqrt(0.5);
  std::vector<double> want{0.0, 0.2, 0.4, 0.2 * (1 + r), 0.2, 0.2 * (1 - r), 0.0, 0.0};
  REQUIRE(lrs.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) CHECK(lrs[i] == Approx(want[i]).margin(1e-12));
  optim::SGD opt2({one_param()}, {.lr = 1.0});
  optim::CosineWithWarmup with_floor(opt2, 0, 2, 0.1);
  with_floor.step();
  CHECK(with_floor.get_last_lr() == Approx(0.1 + 0.9 * 0.5));
}

TEST_CASE("a scheduled optimizer steps with the scheduled lr", "[train][lr_scheduler]") {
  nn::Parameter p(tensor({1., 1.}));
  optim::SGD opt({p}, {.lr = 1.0});
  optim::StepLR sched(opt, 1, 0.5);
  sched.step();  // lr 0.5
  p.set_grad(tensor({1., 2.}));
  opt.step();
  CHECK(p.data().to_vector<float>() == std::vector<float>{0.5f, 0.f});
}
