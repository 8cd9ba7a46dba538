// Parameter-free layers.
//   nn::Sequential net(nn::Flatten(), nn::LazyLinear(256), nn::ReLU(), nn::Dropout(0.5));
#pragma once

#include "dsl/nn/module.h"

namespace tessel::nn {

class ReLUImpl : public Module {
 public:
  ReLUImpl() : Module("ReLU") {}
  Tensor forward(const Tensor& x) override { return x.relu(); }
};
TESSEL_MODULE(ReLU);

class TanhImpl : public Module {
 public:
  TanhImpl() : Module("Tanh") {}
  Tensor forward(const Tensor& x) override { return x.tanh(); }
};
TESSEL_MODULE(Tanh);

class SigmoidImpl : public Module {
 public:
  SigmoidImpl() : Module("Sigmoid") {}
  Tensor forward(const Tensor& x) override { return x.sigmoid(); }
};
TESSEL_MODULE(Sigmoid);

/// gelu (functional.h); approximate "none" (exact) or "tanh", as torch.nn.GELU.
///   nn::Sequential mlp(nn::Linear(64, 256), nn::GELU("tanh"), nn::Linear(256, 64));
class GELUImpl : public Module {
 public:
  explicit GELUImpl(std::string approximate = "none");
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  std::string approximate;
};
TESSEL_MODULE(GELU);

class SiLUImpl : public Module {
 public:
  SiLUImpl() : Module("SiLU") {}
  Tensor forward(const Tensor& x) override;
};
TESSEL_MODULE(SiLU);

class IdentityImpl : public Module {
 public:
  IdentityImpl() : Module("Identity") {}
  Tensor forward(const Tensor& x) override { return x; }
};
TESSEL_MODULE(Identity);

/// Flattens dims [start_dim, end_dim] into one (default: all but the batch dim).
class FlattenImpl : public Module {
 public:
  explicit FlattenImpl(int64_t start_dim = 1, int64_t end_dim = -1) : Module("Flatten"), start_(start_dim), end_(end_dim) {}
  Tensor forward(const Tensor& x) override { return x.flatten(start_, end_); }
  std::string extra_repr() const override;

 private:
  int64_t start_, end_;
};
TESSEL_MODULE(Flatten);

/// Zeroes elements with probability p in training mode; identity in eval mode.
class DropoutImpl : public Module {
 public:
  explicit DropoutImpl(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  double p;
};
TESSEL_MODULE(Dropout);

class SoftmaxImpl : public Module {
 public:
  explicit SoftmaxImpl(int64_t dim) : Module("Softmax"), dim(dim) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  int64_t dim;
};
TESSEL_MODULE(Softmax);

}  // namespace tessel::nn
