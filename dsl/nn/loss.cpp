#include "dsl/nn/loss.h"

#include <fmt/format.h>

namespace tessel::nn {

namespace {
[[noreturn]] void throw_one_input(const Module& m) {
  throw ModuleError(fmt::format("{} ({}) is a loss: call it with (input, target), e.g. criterion(logits, labels)",
                                m.path(), m.type_name()));
}
}  // namespace

CrossEntropyLossImpl::CrossEntropyLossImpl(CrossEntropyLossOptions o) : Module("CrossEntropyLoss"), options(std::move(o)) {}

Tensor CrossEntropyLossImpl::forward(const Tensor&) { throw_one_input(*this); }

Tensor CrossEntropyLossImpl::forward(const Tensor& input, const Tensor& target) {
  return cross_entropy(input, target,
                       {.ignore_index = options.ignore_index,
                        .label_smoothing = options.label_smoothing,
                        .reduction = options.reduction});
}

std::string CrossEntropyLossImpl::extra_repr() const {
  return fmt::format("ignore_index={}, label_smoothing={}, reduction={}", options.ignore_index,
                     options.label_smoothing, options.reduction);
}

MSELossImpl::MSELossImpl(MSELossOptions o) : Module("MSELoss"), options(std::move(o)) {}

Tensor MSELossImpl::forward(const Tensor&) { throw_one_input(*this); }

Tensor MSELossImpl::forward(const Tensor& input, const Tensor& target) {
  return mse_loss(input, target, options.reduction);
}

std::string MSELossImpl::extra_repr() const { return fmt::format("reduction={}", options.reduction); }

}  // namespace tessel::nn
