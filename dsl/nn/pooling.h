// Pooling layers, as torch.nn's (no parameters, no state):
//   nn::MaxPool2d pool(2);                       // kernel 2, stride 2
//   nn::AvgPool2d avg(3, {.stride = 1, .padding = 1});
//   nn::AdaptiveAvgPool2d gap(1);                // [N, C, H, W] -> [N, C, 1, 1]
#pragma once

#include "dsl/nn/module.h"
#include "dsl/pooling.h"

namespace tessel::nn {

class MaxPool2dImpl : public Module {
 public:
  explicit MaxPool2dImpl(Size2 kernel_size, MaxPool2dOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Size2 kernel_size;
  MaxPool2dOptions options;
};
// Handles written out so that braced options and sizes convert.
class MaxPool2d : public ModuleHolder<MaxPool2dImpl> {
 public:
  using ModuleHolder::ModuleHolder;
  MaxPool2d(Size2 kernel_size, MaxPool2dOptions options = {})
      : ModuleHolder(std::make_shared<MaxPool2dImpl>(kernel_size, std::move(options))) {}
};

class AvgPool2dImpl : public Module {
 public:
  explicit AvgPool2dImpl(Size2 kernel_size, AvgPool2dOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Size2 kernel_size;
  AvgPool2dOptions options;
};
class AvgPool2d : public ModuleHolder<AvgPool2dImpl> {
 public:
  using ModuleHolder::ModuleHolder;
  AvgPool2d(Size2 kernel_size, AvgPool2dOptions options = {})
      : ModuleHolder(std::make_shared<AvgPool2dImpl>(kernel_size, std::move(options))) {}
};

class AdaptiveAvgPool2dImpl : public Module {
 public:
  explicit AdaptiveAvgPool2dImpl(Size2 output_size);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Size2 output_size;
};
class AdaptiveAvgPool2d : public ModuleHolder<AdaptiveAvgPool2dImpl> {
 public:
  using ModuleHolder::ModuleHolder;
  AdaptiveAvgPool2d(Size2 output_size) : ModuleHolder(std::make_shared<AdaptiveAvgPool2dImpl>(output_size)) {}
};

}  // namespace tessel::nn
