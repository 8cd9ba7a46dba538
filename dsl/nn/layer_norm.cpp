#include "dsl/nn/layer_norm.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dsl/functional.h"

namespace tessel::nn {

LayerNormImpl::LayerNormImpl(std::vector<int64_t> shape, double eps, bool affine)
    : Module("LayerNorm"), normalized_shape(std::move(shape)), eps(eps), elementwise_affine(affine) {
  bool ok = !normalized_shape.empty();
  for (int64_t d : normalized_shape) ok = ok && d > 0;
  if (!ok)
    throw ValueError(fmt::format("LayerNorm({}): normalized_shape must be non-empty with positive sizes",
                                 normalized_shape));
  if (affine) {
    weight = register_parameter("weight", Parameter(ones(Shape{normalized_shape})));
    bias = register_parameter("bias", Parameter(zeros(Shape{normalized_shape})));
  }
}

Tensor LayerNormImpl::forward(const Tensor& x) {
  if (!is_floating(x.dtype()))
    throw DTypeError(fmt::format("{} ({}): expected a floating input, got {}; convert it with .to(DType::f32)", path(),
                                 type_name(), dtype_name(x.dtype())));
  if (!elementwise_affine) return layer_norm(x, normalized_shape, nullptr, nullptr, eps);
  return layer_norm(x, normalized_shape, &weight, &bias, eps);
}

std::string LayerNormImpl::extra_repr() const {
  return fmt::format("({}), eps={}, elementwise_affine={}", fmt::join(normalized_shape, ", "), eps,
                     elementwise_affine ? "True" : "False");
}

}  // namespace tessel::nn
