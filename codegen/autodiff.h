// Reverse-mode differentiation on the IR. The gradient of each node is built
// as more IR from its op's derivative rule, so backward graphs go through the
// same realization (and fusion) as forward ones.
#pragma once

#include <string>
#include <vector>

#include "codegen/ir.h"

namespace tessel::autodiff {

struct LeafGrad {
  ir::Node* leaf;       // a node with a live `owner` (a leaf tensor, or one that retains its grad)
  ir::NodePtr grad;     // d(root)/d(leaf), same shape and dtype as the leaf
};

/// Gradients of `root` (seeded with `seed`, root's shape) for every node below
/// it that has an owner. A node reached along several paths (a tied
/// parameter) gets the sum of their contributions.
/// Without `retain_graph`, the computed nodes walked are marked backward_done,
/// and a later call through any of them is a ValueError (PyTorch's rule).
std::vector<LeafGrad> gradients(const ir::NodePtr& root, const ir::NodePtr& seed, bool retain_graph = false);

/// The values the derivative rule of `n` reads to form the gradients of its
/// arguments that require grad: its own value (`self`) and arguments (bit i
/// of `args` for args[i]). A forward pass keeps only these for backward
/// (PyTorch's saved tensors); the rest of it fuses as if no backward came.
/// A node with `grad_via` reads through that graph instead (not covered here).
///   x * w, w requiring grad: reads x only; exp(x): reads its own value.
struct ValuesRead {
  bool self = false;
  uint32_t args = 0;
};
ValuesRead values_read(const ir::Node& n);

/// PyTorch's name for the backward of `n`: "SumBackward0", "MmBackward0", ...
std::string grad_fn_name(const ir::Node& n);

}  // namespace tessel::autodiff
