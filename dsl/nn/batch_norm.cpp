#include "dsl/nn/batch_norm.h"

#include <fmt/format.h>

#include "codegen/grad_mode.h"
#include "dsl/normalization.h"

namespace tessel::nn {
namespace {

std::string_view py_bool(bool b) { return b ? "True" : "False"; }

}  // namespace

BatchNormImpl::BatchNormImpl(std::string type, int64_t n, double eps, std::optional<double> momentum, bool affine,
                             bool track)
    : Module(std::move(type)), num_features(n), eps(eps), momentum(momentum), affine(affine), track_running_stats(track) {
  if (n <= 0) throw ValueError(fmt::format("{}({}): num_features must be positive", type_name(), n));
  if (eps <= 0) throw ValueError(fmt::format("{}({}): eps must be positive, got {}", type_name(), n, eps));
  if (affine) {
    weight = register_parameter("weight", Parameter(ones({n})));
    bias = register_parameter("bias", Parameter(zeros({n})));
  }
  if (track) {
    register_buffer("running_mean", zeros({n}));
    register_buffer("running_var", ones({n}));
    register_buffer("num_batches_tracked", zeros({}, DType::i64));
  }
}

void BatchNormImpl::reset_running_stats() {
  if (!track_running_stats) return;
  NoGradGuard no_grad;
  buffer("running_mean").zero_();
  buffer("running_var").fill_(1.0);
  buffer("num_batches_tracked").zero_();
}

Tensor BatchNormImpl::forward(const Tensor& x) {
  check_input(x);
  if (x.size(1) != num_features)
    throw ShapeError(fmt::format("{} ({}): expected {} channels (dim 1), got input of shape {}", path(), type_name(),
                                 num_features, x.shape().str()));
  // As PyTorch: batch statistics when training or when no running ones are
  // kept (batch_norm uses them when given none); the running ones are
  // updated only when training.
  Tensor rm, rv;
  double factor = momentum.value_or(0.0);
  if (track_running_stats) {
    rm = buffer("running_mean");
    rv = buffer("running_var");
    if (is_training()) {
      const Tensor& count = buffer("num_batches_tracked");
      {
        NoGradGuard no_grad;
        count += 1;
      }
      // momentum nullopt: a cumulative average, 1 / (batches seen so far)
      // (the only case that reads the count back to the host).
      if (!momentum) factor = 1.0 / static_cast<double>(count.item<int64_t>());
    }
  }
  return batch_norm(x, rm, rv, weight, bias, is_training(), factor, eps);
}

std::string BatchNormImpl::extra_repr() const {
  return fmt::format("{}, eps={}, momentum={}, affine={}, track_running_stats={}", num_features, eps,
                     momentum ? fmt::format("{}", *momentum) : "None", py_bool(affine), py_bool(track_running_stats));
}

void BatchNorm1dImpl::check_input(const Tensor& x) const {
  if (x.dim() != 2 && x.dim() != 3)
    throw ShapeError(fmt::format("{} ({}): expected a 2-D [N, C] or 3-D [N, C, L] input, got shape {}", path(),
                                 type_name(), x.shape().str()));
}

void BatchNorm2dImpl::check_input(const Tensor& x) const {
  if (x.dim() != 4)
    throw ShapeError(fmt::format("{} ({}): expected a 4-D [N, C, H, W] input, got shape {}", path(), type_name(),
                                 x.shape().str()));
}

GroupNormImpl::GroupNormImpl(int64_t groups, int64_t channels, double eps, bool affine)
    : Module("GroupNorm"), num_groups(groups), num_channels(channels), eps(eps), affine(affine) {
  if (groups <= 0 || channels <= 0 || channels % groups != 0)
    throw ValueError(fmt::format("GroupNorm({}, {}): num_groups must be positive and divide num_channels", groups,
                                 channels));
  if (affine) {
    weight = register_parameter("weight", Parameter(ones({channels})));
    bias = register_parameter("bias", Parameter(zeros({channels})));
  }
}

Tensor GroupNormImpl::forward(const Tensor& x) {
  if (x.dim() < 2 || x.size(1) != num_channels)
    throw ShapeError(fmt::format("{} ({}): expected an input [N, {}, *], got shape {}", path(), type_name(),
                                 num_channels, x.shape().str()));
  return group_norm(x, num_groups, weight, bias, eps);
}

std::string GroupNormImpl::extra_repr() const {
  return fmt::format("{}, {}, eps={}, affine={}", num_groups, num_channels, eps, py_bool(affine));
}

}  // namespace tessel::nn
