#include "dsl/nn/init.h"

#include <fmt/format.h>

#include <cmath>

namespace tessel::nn::init {

// Writes go through data(): a parameter's memory changes, its graph does not.
const Tensor& uniform_(const Tensor& t, double a, double b) {
  NoGradGuard g;
  t.data().uniform_(a, b);
  return t;
}
const Tensor& normal_(const Tensor& t, double mean, double std) {
  NoGradGuard g;
  t.data().normal_(mean, std);
  return t;
}
const Tensor& constant_(const Tensor& t, double v) {
  NoGradGuard g;
  t.data().fill_(v);
  return t;
}
const Tensor& zeros_(const Tensor& t) { return constant_(t, 0); }
const Tensor& ones_(const Tensor& t) { return constant_(t, 1); }

std::pair<int64_t, int64_t> fans(const Tensor& t) {
  if (t.dim() < 2)
    throw ValueError(fmt::format("fan in and fan out need a tensor with at least 2 dims, got shape {}",
                                 t.shape().str()));
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

const Tensor& xavier_uniform_(const Tensor& t, double gain) {
  auto [in, out] = fans(t);
  double a = gain * std::sqrt(6.0 / static_cast<double>(in + out));
  return uniform_(t, -a, a);
}
const Tensor& xavier_normal_(const Tensor& t, double gain) {
  auto [in, out] = fans(t);
  return normal_(t, 0, gain * std::sqrt(2.0 / static_cast<double>(in + out)));
}
const Tensor& kaiming_uniform_(const Tensor& t, double a) {
  auto [in, out] = fans(t);
  double gain = std::sqrt(2.0 / (1 + a * a));
  double bound = gain * std::sqrt(3.0 / static_cast<double>(in));
  return uniform_(t, -bound, bound);
}
const Tensor& kaiming_normal_(const Tensor& t, double a) {
  auto [in, out] = fans(t);
  double gain = std::sqrt(2.0 / (1 + a * a));
  return normal_(t, 0, gain / std::sqrt(static_cast<double>(in)));
}

}  // namespace tessel::nn::init
