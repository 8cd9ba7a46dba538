// Movement semantics, in one place: what a Reshape, Permute, Expand or Slice
// node does to the memory of its argument. The ref interpreter, lowering
// (views over materialized values) and the DSL (views of realized tensors,
// and the layout a pending value will have) all ask these functions, so a
// view means the same thing on every path.
//
//   ir::BufferView in = *x->buffer;                     // x: [2, 3] dense
//   auto v = ir::movement_view(*ir::permute(x, {1, 0}), in);  // strides {1, 3}
#pragma once

#include <optional>

#include "codegen/ir.h"

namespace tessel::ir {

/// Whether `st` lays out `s` densely in row-major order. As in PyTorch, the
/// stride of a size-1 dim does not matter and an empty tensor is contiguous.
bool is_contiguous(const Shape& s, const Strides& st);

/// Strides that view memory laid out as (`shape`, `strides`) with `target`'s
/// shape in row-major order, when some exist without a copy (ATen's
/// computeStride): every run of dims contiguous with each other may be split
/// or merged. nullopt: the reshape is a copy.
std::optional<Strides> reshape_strides(const Shape& shape, const Strides& strides, const Shape& target);

/// The view movement node `n` gives over `in`, the memory of its argument;
/// nullopt for a reshape that no strides can express (its value is a dense
/// copy of the argument, viewed with contiguous strides).
std::optional<BufferView> movement_view(const Node& n, const BufferView& in);

}  // namespace tessel::ir
