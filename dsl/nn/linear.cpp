#include "dsl/nn/linear.h"

#include <fmt/format.h>

#include <cmath>

#include "dsl/nn/init.h"

namespace tessel::nn {

LinearImpl::LinearImpl(int64_t in, int64_t out, bool bias) : Module("Linear"), in_features(in), out_features(out), has_bias_(bias) {
  if (in <= 0 || out <= 0)
    throw ValueError(fmt::format("Linear({}, {}): in_features and out_features must be positive", in, out));
  weight = register_parameter("weight", Parameter(empty({out, in})));
  if (bias) this->bias = register_parameter("bias", Parameter(empty({out})));
  reset_parameters();
}

LinearImpl::LinearImpl(LazyTag, int64_t out, bool bias) : Module("LazyLinear"), out_features(out), has_bias_(bias) {
  if (out <= 0) throw ValueError(fmt::format("LazyLinear({}): out_features must be positive", out));
  weight = register_parameter("weight", Parameter::uninitialized());
  if (bias) this->bias = register_parameter("bias", Parameter::uninitialized());
}

LazyLinearImpl::LazyLinearImpl(int64_t out, bool bias) : LinearImpl(LazyTag{}, out, bias) {}

void LinearImpl::reset_parameters() {
  double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  init::uniform_(weight, -bound, bound);
  if (bias.defined()) init::uniform_(bias, -bound, bound);
}

void LinearImpl::materialize(int64_t in) {
  in_features = in;
  weight.materialize({out_features, in});
  if (has_bias_) bias.materialize({out_features});
  set_type_name("Linear");
  reset_parameters();
}

void LinearImpl::materialize_for_load(const std::string& name, const Tensor& value) {
  // Only the weight says in_features; a bias alone leaves the layer lazy and
  // load_state_dict reports the missing weight.
  if (name == "weight" && value.dim() == 2) materialize(value.size(1));
}

Tensor LinearImpl::forward(const Tensor& x) {
  if (x.dim() == 0)
    throw ShapeError(fmt::format("{} ({}): input must have at least 1 dimension, got a 0-d tensor", path(), type_name()));
  int64_t in = x.size(-1);
  if (!weight.is_initialized()) materialize(in);
  if (in != in_features)
    throw ShapeError(fmt::format("{} ({}): expected input with last dimension {} (shape [*, {}]), got shape {}",
                                 path(), type_name(), in_features, in_features, x.shape().str()));
  Tensor y = matmul(x, weight.t());
  return bias.defined() ? add(y, bias) : y;
}

std::string LinearImpl::extra_repr() const {
  return fmt::format("in_features={}, out_features={}, bias={}", in_features, out_features, has_bias_ ? "True" : "False");
}

}  // namespace tessel::nn
