// Learning-rate schedulers, as torch.optim.lr_scheduler: each sets its
// optimizer's lr from the number of step() calls so far (the epoch), with
// the optimizer's lr at construction as the base lr. Construction sets the
// lr for epoch 0. The optimizer must outlive its scheduler.
//   optim::SGD opt(net->parameters(), {.lr = 0.1});
//   optim::CosineAnnealingLR sched(opt, /*T_max=*/100, /*eta_min=*/1e-4);
//   for (int epoch = 0; epoch < 100; ++epoch) { train_one_epoch(); sched.step(); }
#pragma once

#include <cstdint>

#include "dsl/ordered_dict.h"
#include "dsl/train/optimizer.h"

namespace tessel::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;
  /// Advances one epoch (or step) and sets the optimizer's lr for it.
  void step();
  /// The lr the last step() (or the constructor) set. One value: a tessel
  /// optimizer has one lr, where PyTorch returns one per parameter group.
  double get_last_lr() const { return last_lr_; }
  /// How many times step() has been called.
  int64_t last_epoch() const { return epoch_; }
  double base_lr() const { return base_lr_; }
  /// {"last_epoch": int64 scalar}, what a resumed run needs (the schedule
  /// itself is the code), as PyTorch's scheduler.state_dict()["last_epoch"].
  OrderedDict<Tensor> state_dict() const;
  /// Continues at the saved epoch: sets it and the optimizer's lr for it.
  ///   sched.load_state_dict(load_dict("sched.safetensors"));
  void load_state_dict(const OrderedDict<Tensor>& state);
  /// The lr this schedule gives at `epoch`.
  virtual double lr_at(int64_t epoch) const = 0;

 protected:
  explicit LRScheduler(Optimizer& opt);
  /// Called by each subclass's constructor, after its own fields are set.
  void start();

 private:
  Optimizer& opt_;
  double base_lr_;
  double last_lr_;
  int64_t epoch_ = 0;
};

/// lr = base_lr * gamma^floor(epoch / step_size).
///   optim::StepLR sched(opt, /*step_size=*/30, /*gamma=*/0.1);
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& opt, int64_t step_size, double gamma = 0.1);
  double lr_at(int64_t epoch) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

/// PyTorch's closed form: eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2.
///   optim::CosineAnnealingLR sched(opt, /*T_max=*/100, /*eta_min=*/0.0);
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& opt, int64_t T_max, double eta_min = 0.0);
  double lr_at(int64_t epoch) const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

/// Linear warmup from 0 to base_lr over warmup_steps, then cosine from
/// base_lr to min_lr at total_steps, and min_lr after:
///   step < warmup:  base_lr * step / warmup_steps
///   otherwise:      min_lr + (base_lr - min_lr) * (1 + cos(pi * p)) / 2,
///                   p = min(1, (step - warmup_steps) / (total_steps - warmup_steps))
///   optim::CosineWithWarmup sched(opt, /*warmup_steps=*/100, /*total_steps=*/1000, /*min_lr=*/1e-5);
///   // per batch: opt.step(); sched.step();
class CosineWithWarmup : public LRScheduler {
 public:
  CosineWithWarmup(Optimizer& opt, int64_t warmup_steps, int64_t total_steps, double min_lr = 0.0);
  double lr_at(int64_t epoch) const override;

 private:
  int64_t warmup_, total_;
  double min_lr_;
};

}  // namespace tessel::optim
