// Host-side comparisons of whole tensors: allclose and equal, as torch's.
#include <fmt/format.h>

#include "dsl/tensor.h"
#include "runtime/errors.h"

namespace tessel {

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  if (rtol < 0 || atol < 0)
    throw ValueError(fmt::format("allclose: rtol and atol must be >= 0, got {} and {}", rtol, atol));
  // Compared in f64 so neither side's rounding decides; integers compare exactly.
  Tensor x = a.to(DType::f64), y = b.to(DType::f64);
  Tensor bound = binary_op(ir::Op::Add, binary_op(ir::Op::Mul, y.abs(), Scalar(rtol)), Scalar(atol));
  Tensor close = binary_op(ir::Op::Le, binary_op(ir::Op::Sub, x, y).abs(), bound);
  // Infinities are close only to themselves (inf - -inf is inf, within an inf bound).
  Tensor finite = logical_not(binary_op(ir::Op::Or, x.isinf(), y.isinf()));
  close = binary_op(ir::Op::Or, binary_op(ir::Op::And, close, finite), binary_op(ir::Op::Eq, x, y));
  if (equal_nan) close = binary_op(ir::Op::Or, close, binary_op(ir::Op::And, x.isnan(), y.isnan()));
  return close.all().item<bool>();
}

bool equal(const Tensor& a, const Tensor& b) {
  if (!(a.shape() == b.shape())) return false;
  return binary_op(ir::Op::Eq, a, b).all().item<bool>();
}

}  // namespace tessel
