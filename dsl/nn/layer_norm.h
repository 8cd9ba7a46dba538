// Layer normalization, as torch.nn.LayerNorm: each sample normalized over its
// last dims (normalized_shape), then an elementwise affine (weight = 1,
// bias = 0 at init; state-dict keys `weight` and `bias`).
//   nn::LayerNorm ln(std::vector<int64_t>{768});
//   Tensor y = ln(x);                  // [B, T, 768] -> [B, T, 768]
#pragma once

#include <vector>

#include "dsl/nn/module.h"

namespace tessel::nn {

class LayerNormImpl : public Module {
 public:
  explicit LayerNormImpl(std::vector<int64_t> normalized_shape, double eps = 1e-5, bool elementwise_affine = true);
  explicit LayerNormImpl(int64_t normalized_size, double eps = 1e-5, bool elementwise_affine = true)
      : LayerNormImpl(std::vector<int64_t>{normalized_size}, eps, elementwise_affine) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  std::vector<int64_t> normalized_shape;
  double eps = 1e-5;
  bool elementwise_affine = true;
  Parameter weight;  // normalized_shape, when elementwise_affine
  Parameter bias;
};
TESSEL_MODULE(LayerNorm);

}  // namespace tessel::nn
