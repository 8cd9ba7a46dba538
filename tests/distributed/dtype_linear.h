// DLinear: nn::Linear with parameters of any dtype (PyTorch's names and init
// bounds), for the data-parallel tests that train the same model in f32 and f64.
#pragma once

#include <cmath>

#include "dsl/tessel.h"

namespace tessel::testing {

struct DLinearImpl : nn::Module {
  nn::Parameter weight, bias;
  DLinearImpl(int64_t in, int64_t out, DType dt) : Module("DLinear") {
    double k = 1.0 / std::sqrt(static_cast<double>(in));
    weight = register_parameter("weight", (rand({out, in}, dt) * 2 - 1) * k);
    bias = register_parameter("bias", (rand({out}, dt) * 2 - 1) * k);
  }
  Tensor forward(const Tensor& x) override { return x.matmul(weight.t()) + bias; }
};
TESSEL_MODULE(DLinear);

}  // namespace tessel::testing
