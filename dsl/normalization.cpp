#include "dsl/normalization.h"

#include <fmt/format.h>

#include "codegen/grad_mode.h"
#include "dsl/expr.h"
#include "dsl/reductions.h"
#include "runtime/errors.h"

namespace tessel {
namespace {

void check_per_channel(std::string_view op, std::string_view what, const Tensor& t, int64_t C, const Tensor& x) {
  if (t.defined() && t.numel() != C)
    throw ShapeError(fmt::format("{}: {} has shape {} but the input {} has {} channels (dim 1); it needs {} elements",
                                 op, what, t.shape().str(), x.shape().str(), C, C));
}

// [1, C, 1, ...]: a per-channel vector broadcast over x.
std::vector<int64_t> channel_shape(const Tensor& x) {
  std::vector<int64_t> s(static_cast<size_t>(x.dim()), 1);
  s[1] = x.size(1);
  return s;
}

Tensor affine(Tensor y, const Tensor& weight, const Tensor& bias, const std::vector<int64_t>& cs) {
  if (weight.defined()) y = y * weight.reshape(cs);
  if (bias.defined()) y = y + bias.reshape(cs);
  return y;
}

}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  constexpr std::string_view op = "batch_norm";
  if (x.dim() < 2)
    throw ShapeError(fmt::format("batch_norm: expected an input [N, C, *] of at least 2 dims, got shape {}",
                                 x.shape().str()));
  if (!is_floating(x.dtype()))
    throw DTypeError(fmt::format("batch_norm: expected a floating input, got {}; convert it with .to(DType::f32)",
                                 dtype_name(x.dtype())));
  const int64_t C = x.size(1);
  check_per_channel(op, "running_mean", running_mean, C, x);
  check_per_channel(op, "running_var", running_var, C, x);
  check_per_channel(op, "weight", weight, C, x);
  check_per_channel(op, "bias", bias, C, x);
  if (running_mean.defined() != running_var.defined())
    throw ValueError("batch_norm: give both running_mean and running_var, or neither");
  const std::vector<int64_t> cs = channel_shape(x);
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);

  if (!training && running_mean.defined()) {
    auto as_x = [&](const Tensor& t) { return t.dtype() == x.dtype() ? t.reshape(cs) : t.reshape(cs).to(x.dtype()); };
    Tensor y = (x - as_x(running_mean)) * (as_x(running_var) + eps).rsqrt();
    return affine(y, weight, bias, cs);
  }
  const int64_t n = x.numel() / std::max<int64_t>(C, 1);
  if (n <= 1)
    throw ValueError(fmt::format("batch_norm: expected more than 1 value per channel when training, got input of "
                                 "shape {}; use a larger batch or eval()",
                                 x.shape().str()));
  // The deviations d are made once: the variance and the output read the
  // same value, which the statistics' pass keeps for backward (var()'s own
  // deviations would be a second copy). Each square is divided before the
  // sum, as var() does, so the sum is a row program's last stage.
  Tensor mean = x.mean(dims, true);
  Tensor d = x - mean;
  Tensor v = (d * d / static_cast<double>(n)).sum(dims, true);  // population variance normalizes
  if (training && running_mean.defined()) {
    // The statistics are realized once: the update and the normalization read them.
    realize({mean, v});
    NoGradGuard no_grad;
    const double unbiased = static_cast<double>(n) / static_cast<double>(n - 1);
    running_mean.copy_(running_mean * (1.0 - momentum) + mean.detach().reshape({C}) * momentum);
    running_var.copy_(running_var * (1.0 - momentum) + v.detach().reshape({C}) * (momentum * unbiased));
  }
  // d * (rstd * weight) + bias: the per-channel factor is formed first, so the
  // forward writes no normalized copy for the weight's gradient (that
  // gradient is sum(g * d) times rstd, from d, which backward keeps anyway).
  Tensor scale = (v + eps).rsqrt();
  if (weight.defined()) scale = scale * weight.reshape(cs);
  Tensor y = d * scale;
  return bias.defined() ? y + bias.reshape(cs) : y;
}

Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight, const Tensor& bias, double eps) {
  constexpr std::string_view op = "group_norm";
  if (x.dim() < 2)
    throw ShapeError(fmt::format("group_norm: expected an input [N, C, *] of at least 2 dims, got shape {}",
                                 x.shape().str()));
  if (!is_floating(x.dtype()))
    throw DTypeError(fmt::format("group_norm: expected a floating input, got {}; convert it with .to(DType::f32)",
                                 dtype_name(x.dtype())));
  const int64_t N = x.size(0), C = x.size(1);
  if (num_groups <= 0 || C % num_groups != 0)
    throw ValueError(fmt::format("group_norm: num_groups ({}) must be positive and divide the {} channels of the "
                                 "input {}",
                                 num_groups, C, x.shape().str()));
  check_per_channel(op, "weight", weight, C, x);
  check_per_channel(op, "bias", bias, C, x);
  Tensor g = x.reshape({N, num_groups, -1});
  Tensor mean = g.mean({2}, true);
  Tensor y = ((g - mean) * (var(g, {2}, 0.0, true) + eps).rsqrt()).reshape(x.shape().dims);
  return affine(y, weight, bias, channel_shape(x));
}

}  // namespace tessel
