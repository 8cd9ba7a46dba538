#include "dsl/nn/layers.h"

#include <fmt/format.h>

#include "dsl/functional.h"

namespace tessel::nn {

std::string FlattenImpl::extra_repr() const { return fmt::format("start_dim={}, end_dim={}", start_, end_); }

DropoutImpl::DropoutImpl(double p) : Module("Dropout"), p(p) {
  if (p < 0 || p > 1) throw ValueError(fmt::format("Dropout: probability must be in [0, 1], got {}", p));
}
Tensor DropoutImpl::forward(const Tensor& x) { return dropout(x, p, is_training()); }
std::string DropoutImpl::extra_repr() const { return fmt::format("p={}, inplace=False", p); }

GELUImpl::GELUImpl(std::string approximate) : Module("GELU"), approximate(std::move(approximate)) {
  if (this->approximate != "none" && this->approximate != "tanh")
    throw ValueError(fmt::format("GELU: approximate must be \"none\" or \"tanh\", got \"{}\"", this->approximate));
}
Tensor GELUImpl::forward(const Tensor& x) { return gelu(x, approximate); }
std::string GELUImpl::extra_repr() const { return fmt::format("approximate='{}'", approximate); }

Tensor SiLUImpl::forward(const Tensor& x) { return silu(x); }

Tensor SoftmaxImpl::forward(const Tensor& x) { return softmax(x, dim); }
std::string SoftmaxImpl::extra_repr() const { return fmt::format("dim={}", dim); }

}  // namespace tessel::nn
