// Parameter initializers: in place, recording no gradient (PyTorch's nn.init).
//   net->apply([](nn::Module& m) {
//     if (auto* l = m.as_if<nn::LinearImpl>()) { nn::init::xavier_uniform_(l->weight); nn::init::zeros_(l->bias); }
//   });
#pragma once

#include "dsl/tensor.h"

namespace tessel::nn::init {

const Tensor& uniform_(const Tensor& t, double a = 0, double b = 1);
const Tensor& normal_(const Tensor& t, double mean = 0, double std = 1);
const Tensor& constant_(const Tensor& t, double v);
const Tensor& zeros_(const Tensor& t);
const Tensor& ones_(const Tensor& t);
/// Glorot: U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out)).
const Tensor& xavier_uniform_(const Tensor& t, double gain = 1);
const Tensor& xavier_normal_(const Tensor& t, double gain = 1);
/// He: for ReLU layers; mode fan_in, leaky_relu slope `a`.
const Tensor& kaiming_uniform_(const Tensor& t, double a = 0);
const Tensor& kaiming_normal_(const Tensor& t, double a = 0);
/// (fan_in, fan_out) as PyTorch computes them; ValueError below 2 dims.
std::pair<int64_t, int64_t> fans(const Tensor& t);

}  // namespace tessel::nn::init
