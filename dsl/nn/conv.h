// Convolution layers with PyTorch's names, default init (kaiming_uniform with
// a = sqrt(5), bias uniform in +-1/sqrt(fan_in)) and state-dict keys
// (`weight` [O, C / groups, KH, KW], `bias` [O]). Options are the functional
// ones (dsl/convolution.h); a trailing `false` drops the bias.
//   nn::Conv2d c1(1, 6, 5, {.padding = 2});            // LeNet's first layer
//   nn::Conv2d down(64, 128, 3, {.stride = 2, .padding = 1}, false);
//   nn::LazyConv2d lazy(32, 3, {.padding = "same"});   // in_channels from the first input
#pragma once

#include "dsl/convolution.h"
#include "dsl/nn/module.h"

namespace tessel::nn {

class Conv2dImpl : public Module {
 public:
  Conv2dImpl(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Conv2dOptions options = {}, bool bias = true);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  /// Re-draws weight and bias from PyTorch's default distribution.
  void reset_parameters();

  int64_t in_channels = 0;  // 0 while lazy and uninitialized
  int64_t out_channels = 0;
  Size2 kernel_size;
  Conv2dOptions options;
  Parameter weight;  // [out_channels, in_channels / groups, KH, KW]
  Parameter bias;    // [out_channels], undefined without bias

 protected:
  struct LazyTag {};
  Conv2dImpl(LazyTag, int64_t out_channels, Size2 kernel_size, Conv2dOptions options, bool bias);
  void materialize_for_load(const std::string& name, const Tensor& value) override;
  void materialize(int64_t in_channels);
  bool has_bias_ = true;
};
// The handles are written out rather than TESSEL_MODULE so that braced
// options ({.padding = 1}) and sizes ({3, 5}) convert.
class Conv2d : public ModuleHolder<Conv2dImpl> {
 public:
  using ModuleHolder::ModuleHolder;
  Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Conv2dOptions options = {}, bool bias = true)
      : ModuleHolder(std::make_shared<Conv2dImpl>(in_channels, out_channels, kernel_size, std::move(options), bias)) {}
};

/// A Conv2d whose in_channels is inferred from its first input (dim -3);
/// it prints as LazyConv2d until then and as Conv2d after, as in PyTorch.
class LazyConv2dImpl : public Conv2dImpl {
 public:
  explicit LazyConv2dImpl(int64_t out_channels, Size2 kernel_size, Conv2dOptions options = {}, bool bias = true);
};
class LazyConv2d : public ModuleHolder<LazyConv2dImpl> {
 public:
  using ModuleHolder::ModuleHolder;
  LazyConv2d(int64_t out_channels, Size2 kernel_size, Conv2dOptions options = {}, bool bias = true)
      : ModuleHolder(std::make_shared<LazyConv2dImpl>(out_channels, kernel_size, std::move(options), bias)) {}
};

/// torch.nn.Conv1d over [N, C, L]: weight [O, C / groups, K].
///   nn::Conv1d c(16, 32, 3, {.padding = 1});
class Conv1dImpl : public Module {
 public:
  Conv1dImpl(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv1dOptions options = {}, bool bias = true);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  void reset_parameters();

  int64_t in_channels, out_channels, kernel_size;
  Conv1dOptions options;
  Parameter weight;  // [out_channels, in_channels / groups, K]
  Parameter bias;
};
class Conv1d : public ModuleHolder<Conv1dImpl> {
 public:
  using ModuleHolder::ModuleHolder;
  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv1dOptions options = {}, bool bias = true)
      : ModuleHolder(std::make_shared<Conv1dImpl>(in_channels, out_channels, kernel_size, std::move(options), bias)) {}
};

/// torch.nn.ConvTranspose2d: weight [in_channels, out_channels / groups, KH, KW].
///   nn::ConvTranspose2d up(64, 32, 2, {.stride = 2});   // doubles H and W
class ConvTranspose2dImpl : public Module {
 public:
  ConvTranspose2dImpl(int64_t in_channels, int64_t out_channels, Size2 kernel_size, ConvTranspose2dOptions options = {},
                      bool bias = true);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  void reset_parameters();

  int64_t in_channels, out_channels;
  Size2 kernel_size;
  ConvTranspose2dOptions options;
  Parameter weight;  // [in_channels, out_channels / groups, KH, KW]
  Parameter bias;    // [out_channels]
};
class ConvTranspose2d : public ModuleHolder<ConvTranspose2dImpl> {
 public:
  using ModuleHolder::ModuleHolder;
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, ConvTranspose2dOptions options = {},
                  bool bias = true)
      : ModuleHolder(
            std::make_shared<ConvTranspose2dImpl>(in_channels, out_channels, kernel_size, std::move(options), bias)) {}
};

}  // namespace tessel::nn
