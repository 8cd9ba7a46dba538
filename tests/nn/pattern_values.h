// What the conv, pooling and normalization tests share: deterministic inputs
// whose expected outputs were computed by torch on the same tensors, and a
// shape-and-values check.
#pragma once

#include <vector>

#include "tests/support/tensor_testing.h"

namespace tessel::testing {

// Distinct values in [-2.5, 2.5] for up to 101 elements: element i is
// ((37 i + off) mod 101 - 50) / 20. The expected values in the tests come
// from torch on the same tensors.
inline Tensor pat(const std::vector<int64_t>& shape, int64_t off = 0, DType dt = DType::f64) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<double>((i * 37 + off) % 101 - 50) / 20.0;
  return make(v, Shape(shape), dt);
}

// A copy of t that requires grad.
inline Tensor leaf(const Tensor& t) {
  Tensor l = t.clone();
  l.requires_grad_(true);
  return l;
}

inline void check_values(const Tensor& t, const std::vector<int64_t>& shape, const std::vector<double>& want,
                         double tol = 1e-10) {
  REQUIRE(dims(t) == shape);
  require_close(vals(t), want, tol, tol);
}

}  // namespace tessel::testing
