// Linear layers: y = x W^T + b, with PyTorch's default init
// (uniform in [-1/sqrt(in), 1/sqrt(in)]) and PyTorch's parameter names.
//   nn::Linear fc(20, 256);        // shapes known now
//   nn::LazyLinear lazy(256);      // in_features learned from the first input
#pragma once

#include "dsl/nn/module.h"

namespace tessel::nn {

class LinearImpl : public Module {
 public:
  LinearImpl(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  /// Re-draws weight and bias from PyTorch's default distribution.
  void reset_parameters();

  int64_t in_features = 0;  // 0 while lazy and uninitialized
  int64_t out_features = 0;
  Parameter weight;         // [out_features, in_features]
  Parameter bias;           // [out_features], undefined without bias

 protected:
  struct LazyTag {};
  LinearImpl(LazyTag, int64_t out_features, bool bias);
  void materialize_for_load(const std::string& name, const Tensor& value) override;
  void materialize(int64_t in);
  bool has_bias_ = true;
};
TESSEL_MODULE(Linear);

/// A Linear whose in_features is inferred from its first input; it prints as
/// LazyLinear until then and as Linear after, as in PyTorch.
class LazyLinearImpl : public LinearImpl {
 public:
  explicit LazyLinearImpl(int64_t out_features, bool bias = true);
};
TESSEL_MODULE(LazyLinear);

}  // namespace tessel::nn
