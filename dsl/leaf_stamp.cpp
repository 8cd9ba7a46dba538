#include "dsl/leaf_stamp.h"

#include <fmt/format.h>

#include "runtime/errors.h"

namespace tessel {

void LeafStamp::throw_written(const Tensor& t) {
  throw ValueError(fmt::format(
      "an expression object was evaluated after its leaf (a tensor of shape {}, {}, on {}) was written in place: "
      "`auto y = x * 2;` keeps the expression, not its value, so it would read the new values. Store the "
      "expression in a Tensor to evaluate it at that point (`Tensor y = x * 2;`), or build it after the write",
      t.shape().str(), dtype_name(t.dtype()), t.device().str()));
}

}  // namespace tessel
