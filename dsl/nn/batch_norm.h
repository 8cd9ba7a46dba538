// Batch normalization layers, as torch.nn's: parameters `weight` (ones) and
// `bias` (zeros) when affine; buffers `running_mean` (zeros), `running_var`
// (ones) and `num_batches_tracked` (an int64 scalar) when
// track_running_stats, all in the state dict under PyTorch's keys. train()
// normalizes by batch statistics and updates the running ones (momentum, or a
// cumulative average when momentum is nullopt); eval() normalizes by the
// running statistics.
//   nn::BatchNorm2d bn(6);
//   Tensor y = bn(x);            // x [N, 6, H, W]
//   net->eval();                 // now y uses running_mean / running_var
#pragma once

#include <optional>

#include "dsl/nn/module.h"

namespace tessel::nn {

/// What BatchNorm1d and BatchNorm2d share; they differ in the ranks they accept.
class BatchNormImpl : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  /// running_mean = 0, running_var = 1, num_batches_tracked = 0.
  void reset_running_stats();

  int64_t num_features;
  double eps;
  std::optional<double> momentum;
  bool affine, track_running_stats;
  Parameter weight;  // [num_features], when affine
  Parameter bias;

 protected:
  BatchNormImpl(std::string type_name, int64_t num_features, double eps, std::optional<double> momentum, bool affine,
                bool track_running_stats);
  virtual void check_input(const Tensor& x) const = 0;
};

/// Over [N, C] or [N, C, L].
class BatchNorm1dImpl : public BatchNormImpl {
 public:
  explicit BatchNorm1dImpl(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                           bool affine = true, bool track_running_stats = true)
      : BatchNormImpl("BatchNorm1d", num_features, eps, momentum, affine, track_running_stats) {}

 protected:
  void check_input(const Tensor& x) const override;
};
TESSEL_MODULE(BatchNorm1d);

/// Over [N, C, H, W].
class BatchNorm2dImpl : public BatchNormImpl {
 public:
  explicit BatchNorm2dImpl(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                           bool affine = true, bool track_running_stats = true)
      : BatchNormImpl("BatchNorm2d", num_features, eps, momentum, affine, track_running_stats) {}

 protected:
  void check_input(const Tensor& x) const override;
};
TESSEL_MODULE(BatchNorm2d);

/// torch.nn.GroupNorm: `weight` (ones) and `bias` (zeros) [num_channels] when affine.
///   nn::GroupNorm gn(4, 32);
class GroupNormImpl : public Module {
 public:
  GroupNormImpl(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  int64_t num_groups, num_channels;
  double eps;
  bool affine;
  Parameter weight, bias;
};
TESSEL_MODULE(GroupNorm);

}  // namespace tessel::nn
