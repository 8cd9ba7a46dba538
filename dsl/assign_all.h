// In-place writes of several tensors in one realization: an optimizer's step
// computes every parameter's new value (and its momentum or moment buffers)
// with one schedule, and each value whose kernel reads its destination only
// at the element it writes is computed straight into that memory -- no new
// buffer, no copy. Results are those of the same assign_() calls in order.
//
//   NoGradGuard g;
//   std::vector<Tensor> dsts{w, b}, values{w - gw * lr, b - gb * lr};
//   assign_all_(dsts, std::move(values));   // w and b updated in place
#pragma once

#include <vector>

#include "dsl/tensor.h"

namespace tessel {

/// Writes values[i] into dsts[i] (as dsts[i].assign_(values[i]), every value
/// computed from the memory as it was before any write). `values` is taken:
/// a value that no one else holds may end up computed into its destination's
/// memory. Pairs that need autograd or a cast, or destinations that are not
/// dense realized memory, take assign_() one at a time.
void assign_all_(const std::vector<Tensor>& dsts, std::vector<Tensor>&& values);

}  // namespace tessel
