#include "dsl/train/lr_scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "runtime/errors.h"

namespace tessel::optim {

LRScheduler::LRScheduler(Optimizer& opt) : opt_(opt), base_lr_(opt.lr()), last_lr_(opt.lr()) {}

void LRScheduler::start() {
  last_lr_ = lr_at(0);
  opt_.set_lr(last_lr_);
}

void LRScheduler::step() {
  ++epoch_;
  last_lr_ = lr_at(epoch_);
  opt_.set_lr(last_lr_);
}

OrderedDict<Tensor> LRScheduler::state_dict() const {
  return OrderedDict<Tensor>{{"last_epoch", full({}, Scalar(epoch_), DType::i64)}};
}

void LRScheduler::load_state_dict(const OrderedDict<Tensor>& state) {
  const Tensor* e = state.find("last_epoch");
  if (!e || e->numel() != 1)
    throw ValueError("LRScheduler load_state_dict: expected a scalar 'last_epoch' (a state_dict() of a scheduler)");
  int64_t epoch = e->item<int64_t>();
  if (epoch < 0) throw ValueError(fmt::format("LRScheduler load_state_dict: last_epoch must be >= 0, got {}", epoch));
  epoch_ = epoch;
  last_lr_ = lr_at(epoch_);
  opt_.set_lr(last_lr_);
}

StepLR::StepLR(Optimizer& opt, int64_t step_size, double gamma)
    : LRScheduler(opt), step_size_(step_size), gamma_(gamma) {
  if (step_size <= 0)
    throw ValueError(fmt::format("StepLR: step_size must be a positive number of epochs, got {}", step_size));
  start();
}

double StepLR::lr_at(int64_t epoch) const {
  return base_lr() * std::pow(gamma_, static_cast<double>(epoch / step_size_));
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& opt, int64_t T_max, double eta_min)
    : LRScheduler(opt), t_max_(T_max), eta_min_(eta_min) {
  if (T_max <= 0)
    throw ValueError(fmt::format("CosineAnnealingLR: T_max must be a positive number of epochs, got {}", T_max));
  start();
}

double CosineAnnealingLR::lr_at(int64_t epoch) const {
  double c = std::cos(std::numbers::pi * static_cast<double>(epoch) / static_cast<double>(t_max_));
  return eta_min_ + (base_lr() - eta_min_) * (1 + c) / 2;
}

CosineWithWarmup::CosineWithWarmup(Optimizer& opt, int64_t warmup_steps, int64_t total_steps, double min_lr)
    : LRScheduler(opt), warmup_(warmup_steps), total_(total_steps), min_lr_(min_lr) {
  if (warmup_steps < 0)
    throw ValueError(fmt::format("CosineWithWarmup: warmup_steps must be >= 0, got {}", warmup_steps));
  if (total_steps <= warmup_steps)
    throw ValueError(fmt::format("CosineWithWarmup: total_steps ({}) must be greater than warmup_steps ({}); the "
                                 "cosine part needs at least one step",
                                 total_steps, warmup_steps));
  start();
}

double CosineWithWarmup::lr_at(int64_t step) const {
  if (step < warmup_) return base_lr() * static_cast<double>(step) / static_cast<double>(warmup_);
  double p = std::min(1.0, static_cast<double>(step - warmup_) / static_cast<double>(total_ - warmup_));
  return min_lr_ + (base_lr() - min_lr_) * (1 + std::cos(std::numbers::pi * p)) / 2;
}

}  // namespace tessel::optim
