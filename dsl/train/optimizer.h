// Optimizers: update parameters in place from their gradients. Every update
// runs under NoGradGuard on the parameters' memory (p.data()), as one lazy
// expression per parameter, so the compiled backend fuses each step.
//   optim::SGD opt(net->parameters(), {.lr = 0.1, .momentum = 0.9});
//   loss.backward(); opt.step(); opt.zero_grad();
// Their state (step count, moments, momentum buffers) is a dict of tensors
// that saves with the model's (save/load_dict of dsl/io.h), so training resumes:
//   save(opt.state_dict(), "opt.safetensors");  ...  opt.load_state_dict(load_dict("opt.safetensors"));
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "dsl/nn/parameter.h"
#include "dsl/ordered_dict.h"

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

  /// The state a resumed run needs, as PyTorch's optimizer.state_dict() keeps
  /// it, flattened to tensors: "step" (int64, the steps taken), "lr" (float64)
  /// and each parameter's buffers under its index in params(), e.g.
  /// "exp_avg.3"; a parameter that has no state yet has no entries. The
  /// tensors are copies. An optimizer of your own overrides both (the
  /// defaults raise ValueError).
  virtual OrderedDict<Tensor> state_dict() const;
  /// Restores a state_dict() of an optimizer of the same kind over parameters
  /// of the same shapes in the same order (ValueError naming the key
  /// otherwise: unknown, out of range, mis-shaped). The values are copied to
  /// each parameter's device.
  virtual void load_state_dict(const OrderedDict<Tensor>& state);

 protected:
  /// Checks that `key` of a loaded state is "NAME.INDEX" with NAME one of
  /// `names` and INDEX < params().size(), shaped as that parameter; returns
  /// (name, index).
  std::pair<std::string, size_t> parse_state_key(const std::string& key, const Tensor& value,
                                                 const std::vector<std::string>& names) const;
  std::vector<nn::Parameter> params_;
};

/// Parameters that share options, as a PyTorch param group. Only the weight
/// decay can differ per group (the usual split: decay on matrices, none on
/// biases, norms and embeddings); the learning rate is the optimizer's.
///   optim::Adam opt({{decay, 0.1}, {no_decay, 0.0}}, {.lr = 3e-4, .decoupled = true});
struct ParamGroup {
  std::vector<nn::Parameter> params;
  std::optional<double> weight_decay;  // unset: the optimizer's
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
  /// "step", "lr", "momentum_buffer.I".
  OrderedDict<Tensor> state_dict() const override;
  void load_state_dict(const OrderedDict<Tensor>& state) override;

 private:
  SGDOptions opt_;
  std::vector<Tensor> momentum_;
  int64_t steps_ = 0;
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
  /// Parameter groups, each with its own weight decay (opt.weight_decay
  /// where a group sets none).
  Adam(std::vector<ParamGroup> groups, AdamOptions opt);
  void step() override;
  double lr() const override { return opt_.lr; }
  void set_lr(double lr) override { opt_.lr = lr; }
  /// "step", "lr", "exp_avg.I", "exp_avg_sq.I" (PyTorch's names).
  OrderedDict<Tensor> state_dict() const override;
  void load_state_dict(const OrderedDict<Tensor>& state) override;
  /// The weight decay parameter i gets.
  double weight_decay(size_t i) const { return weight_decay_.at(i); }

 private:
  AdamOptions opt_;
  std::vector<double> weight_decay_;  // per parameter
  std::vector<Tensor> m_, v_;
  int64_t t_ = 0;
};

inline Adam AdamW(std::vector<nn::Parameter> params, AdamOptions opt) {
  opt.decoupled = true;
  if (opt.weight_decay == 0) opt.weight_decay = 1e-2;
  return Adam(std::move(params), opt);
}
/// AdamW over parameter groups: a group's weight decay, when set (0 too),
/// is used as given; the others get opt.weight_decay (1e-2 when 0, as above).
inline Adam AdamW(std::vector<ParamGroup> groups, AdamOptions opt) {
  opt.decoupled = true;
  if (opt.weight_decay == 0) opt.weight_decay = 1e-2;
  return Adam(std::move(groups), opt);
}

/// Scales all gradients so their global L2 norm is at most max_norm; returns the norm before.
double clip_grad_norm_(const std::vector<nn::Parameter>& params, double max_norm);

}  // namespace tessel::optim
