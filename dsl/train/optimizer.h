// Optimizers: update parameters in place from their gradients. Every update
// runs under NoGradGuard on the parameters' memory (p.data()), as one lazy
// expression per parameter, so the compiled backend fuses each step.
//   optim::SGD opt(net->parameters(), {.lr = 0.1, .momentum = 0.9});
//   loss.backward(); opt.step(); opt.zero_grad();
#pragma once

#include <vector>

#include "dsl/nn/parameter.h"

namespace tessel::optim {

class Optimizer {
 public:
  explicit Optimizer(std::vector<nn::Parameter> params);
  virtual ~Optimizer() = default;
  /// One update from the current gradients (parameters without a gradient are skipped).
  virtual void step() = 0;
  /// Clears every parameter's gradient.
  void zero_grad();
  const std::vector<nn::Parameter>& params() const { return params_; }
  virtual double lr() const = 0;
  virtual void set_lr(double lr) = 0;

 protected:
  std::vector<nn::Parameter> params_;
};

struct SGDOptions {
  double lr = 0.01;
  double momentum = 0;
  double weight_decay = 0;
  bool nesterov = false;
};

/// Stochastic gradient descent with PyTorch's momentum, weight decay and Nesterov rules.
class SGD : public Optimizer {
 public:
  SGD(std::vector<nn::Parameter> params, SGDOptions opt);
  void step() override;
  double lr() const override { return opt_.lr; }
  void set_lr(double lr) override { opt_.lr = lr; }

 private:
  SGDOptions opt_;
  std::vector<Tensor> momentum_;
};

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  bool decoupled = false;  // AdamW
};

/// Adam (Kingma & Ba), and AdamW with decoupled weight decay.
class Adam : public Optimizer {
 public:
  Adam(std::vector<nn::Parameter> params, AdamOptions opt);
  void step() override;
  double lr() const override { return opt_.lr; }
  void set_lr(double lr) override { opt_.lr = lr; }

 private:
  AdamOptions opt_;
  std::vector<Tensor> m_, v_;
  int64_t t_ = 0;
};

inline Adam AdamW(std::vector<nn::Parameter> params, AdamOptions opt) {
  opt.decoupled = true;
  if (opt.weight_decay == 0) opt.weight_decay = 1e-2;
  return Adam(std::move(params), opt);
}

/// Scales all gradients so their global L2 norm is at most max_norm; returns the norm before.
double clip_grad_norm_(const std::vector<nn::Parameter>& params, double max_norm);

}  // namespace tessel::optim
