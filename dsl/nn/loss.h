// Loss modules: torch.nn.CrossEntropyLoss and torch.nn.MSELoss, calling the
// functionals in functional.h. Called with (input, target).
//   nn::CrossEntropyLoss criterion({.ignore_index = 0, .label_smoothing = 0.1});
//   Tensor loss = criterion(logits, labels);        // logits [N, C], labels [N]
//   nn::MSELoss mse({.reduction = "sum"});
//   Tensor l2 = mse(pred, target);
#pragma once

#include <memory>
#include <string>

#include "dsl/functional.h"
#include "dsl/nn/module.h"

namespace tessel::nn {

struct CrossEntropyLossOptions {
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
  std::string reduction = "mean";  // "mean", "sum" or "none"
};

/// cross_entropy(input, target, options) as a module.
class CrossEntropyLossImpl : public Module {
 public:
  explicit CrossEntropyLossImpl(CrossEntropyLossOptions options = {});
  /// One input is a ModuleError: a loss takes (input, target).
  Tensor forward(const Tensor& input) override;
  Tensor forward(const Tensor& input, const Tensor& target);
  std::string extra_repr() const override;
  CrossEntropyLossOptions options;
};

struct MSELossOptions {
  std::string reduction = "mean";  // "mean", "sum" or "none"
};

/// mse_loss(input, target, reduction) as a module.
class MSELossImpl : public Module {
 public:
  explicit MSELossImpl(MSELossOptions options = {});
  /// One input is a ModuleError: a loss takes (input, target).
  Tensor forward(const Tensor& input) override;
  Tensor forward(const Tensor& input, const Tensor& target);
  std::string extra_repr() const override;
  MSELossOptions options;
};

// The handles: written out rather than TESSEL_MODULE so that a braced
// options list ({.reduction = "sum"}) converts, and so they take two inputs.
class CrossEntropyLoss : public ModuleHolder<CrossEntropyLossImpl> {
 public:
  CrossEntropyLoss(CrossEntropyLossOptions options = {})
      : ModuleHolder(std::make_shared<CrossEntropyLossImpl>(std::move(options))) {}
  CrossEntropyLoss(std::shared_ptr<CrossEntropyLossImpl> p) : ModuleHolder(std::move(p)) {}
  Tensor operator()(const Tensor& input, const Tensor& target) const { return get()->forward(input, target); }
};

class MSELoss : public ModuleHolder<MSELossImpl> {
 public:
  MSELoss(MSELossOptions options = {}) : ModuleHolder(std::make_shared<MSELossImpl>(std::move(options))) {}
  MSELoss(std::shared_ptr<MSELossImpl> p) : ModuleHolder(std::move(p)) {}
  Tensor operator()(const Tensor& input, const Tensor& target) const { return get()->forward(input, target); }
};

}  // namespace tessel::nn
