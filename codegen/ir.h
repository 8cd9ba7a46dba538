// tessel's IR: every node kind in one place.
//
// A model's computation is a DAG of Nodes. Leaves are realized buffers
// (Input) or splatted scalars (Constant); every other node computes a value
// from its args. The IR is backend-neutral: the ref interpreter, the CPU JIT
// and the CUDA emitter all consume it. Invariants the builders in
// codegen/builders.h establish, so that every consumer can rely on them:
//   - elementwise nodes have args of the node's own shape (broadcasts are
//     explicit Expand nodes) and, except Where's condition and Cast's input,
//     of one dtype;
//   - arithmetic never runs on f16/bf16: builders cast to f32 and back;
//   - reduction axes are sorted, unique and in range.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/shape.h"
#include "runtime/storage.h"

namespace tessel::ir {

// X(name, category, one-line meaning). The one list of node kinds.
#define TESSEL_IR_NODE_KINDS(X)                                                  \
  /* leaves */                                                                   \
  X(Input, Leaf, "a realized buffer: storage + offset + strides")                \
  X(Constant, Leaf, "one scalar value splatted over the node's shape")           \
  /* elementwise, one arg */                                                     \
  X(Neg, Unary, "-x")                                                            \
  X(Abs, Unary, "|x|")                                                           \
  X(Exp, Unary, "e^x")                                                           \
  X(Log, Unary, "natural log")                                                   \
  X(Sqrt, Unary, "square root")                                                  \
  X(Tanh, Unary, "hyperbolic tangent")                                           \
  X(Sigmoid, Unary, "1 / (1 + e^-x)")                                            \
  X(Relu, Unary, "max(x, 0)")                                                    \
  X(Not, Unary, "logical not (bool)")                                            \
  X(Cast, Unary, "convert to the node's dtype")                                  \
  /* elementwise, two args */                                                    \
  X(Add, Binary, "a + b")                                                        \
  X(Sub, Binary, "a - b")                                                        \
  X(Mul, Binary, "a * b")                                                        \
  X(Div, Binary, "a / b (true division: float result)")                         \
  X(Pow, Binary, "a ^ b")                                                        \
  X(Maximum, Binary, "elementwise max (NaN-propagating)")                        \
  X(Minimum, Binary, "elementwise min (NaN-propagating)")                        \
  X(Eq, Compare, "a == b -> bool")                                               \
  X(Ne, Compare, "a != b -> bool")                                               \
  X(Lt, Compare, "a < b -> bool")                                                \
  X(Le, Compare, "a <= b -> bool")                                               \
  X(Gt, Compare, "a > b -> bool")                                                \
  X(Ge, Compare, "a >= b -> bool")                                               \
  X(And, Binary, "logical and (bool)")                                           \
  X(Or, Binary, "logical or (bool)")                                             \
  /* elementwise, three args */                                                  \
  X(Where, Ternary, "cond ? a : b")                                              \
  /* reductions over `axes` (keepdim keeps them as size 1) */                    \
  X(Sum, Reduce, "sum; bool/int inputs give i64")                                \
  X(Mean, Reduce, "arithmetic mean (floating only)")                             \
  X(Max, Reduce, "maximum")                                                      \
  X(Min, Reduce, "minimum")                                                      \
  X(ArgMax, Reduce, "index of the first maximum along one axis -> i64")          \
  /* movement: a new view of the same elements */                                \
  X(Reshape, Movement, "same elements, row-major, new shape")                    \
  X(Permute, Movement, "reorder axes by `axes` (output axis i = input axis axes[i])") \
  X(Expand, Movement, "broadcast size-1 axes to the node's shape")               \
  X(Slice, Movement, "strided window: axes = [start0, step0, start1, step1, ...]") \
  /* indexed: elementwise over the node's shape, reading args at computed */  \
  /* positions (loads with coordinates and predicates in the kernel IR) */     \
  X(Iota, Indexed, "each element's index along axes[0] of the node's shape, i64") \
  X(Pad, Indexed, "args[0] inside, args[1] (a scalar) outside: axes = [before0, after0, ...]") \
  X(Cat, Indexed, "args side by side along axes[0]")                            \
  X(Gather, Indexed, "args[0] at args[1]'s values along axes[0] (torch.gather); args[1]'s shape") \
  /* scatter: accumulates into positions it reads from an index (run by ref) */ \
  X(ScatterAdd, Scatter, "zeros plus args[0] added at args[1]'s values along axes[0]") \
  /* contraction */                                                              \
  X(MatMul, Contraction, "[..., n, k] @ [..., k, m] -> [..., n, m]; batch dims equal")

enum class Op : uint8_t {
#define TESSEL_X(name, cat, doc) name,
  TESSEL_IR_NODE_KINDS(TESSEL_X)
#undef TESSEL_X
};

enum class Category : uint8_t { Leaf, Unary, Binary, Compare, Ternary, Reduce, Movement, Indexed, Scatter, Contraction };

std::string_view op_name(Op op);   // "add", "matmul"
Category op_category(Op op);
inline bool is_elementwise(Op op) {
  Category c = op_category(op);
  return c == Category::Unary || c == Category::Binary || c == Category::Compare || c == Category::Ternary;
}
inline bool is_reduction(Op op) { return op_category(op) == Category::Reduce; }
/// Computed per output element in a fused kernel: elementwise or indexed.
inline bool is_pointwise(Op op) { return is_elementwise(op) || op_category(op) == Category::Indexed; }

/// A realized strided view of memory: what an Input holds and what a
/// realized node caches. Strides and offset are in elements.
struct BufferView {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;
  Strides strides;

  template <class T> T* ptr() const { return static_cast<T*>(storage->data()) + offset; }
  std::byte* bytes(DType t) const {
    return static_cast<std::byte*>(storage->data()) + offset * static_cast<int64_t>(dtype_size(t));
  }
};

/// A scalar attribute, kept exactly for both integers and floats.
struct ScalarValue {
  double f = 0;
  int64_t i = 0;
  bool is_int = false;
  static ScalarValue of(double v) { return {v, static_cast<int64_t>(v), false}; }
  static ScalarValue of_int(int64_t v) { return {static_cast<double>(v), v, true}; }
  double as_double() const { return is_int ? static_cast<double>(i) : f; }
};

struct Node;
using NodePtr = std::shared_ptr<Node>;

struct Node {
  Op op;
  DType dtype;
  Shape shape;
  std::vector<NodePtr> args;

  // Attributes; which ones mean something depends on `op`.
  ScalarValue value;           // Constant
  std::vector<int64_t> axes;   // Reduce: reduced axes; Permute: order; Slice: start/step pairs;
                               // Iota, Cat, Gather, ScatterAdd: the axis; Pad: before/after
                               // pairs (its fill is args[1], a scalar constant)
  bool keepdim = false;        // Reduce

  // Autograd: true when a gradient flows to some leaf below.
  bool requires_grad = false;
  // Leaf identity for autograd: the tensor that receives this leaf's gradient.
  std::weak_ptr<void> owner;
  // Keeps `owner` alive when no user tensor does: the relay that hands a
  // device copy's gradient back to the tensor it was copied from.
  std::shared_ptr<void> owner_hold;

  // Set once the node's value exists: always for Input, after realization for
  // the rest. A node with a buffer is a leaf to every evaluator.
  std::optional<BufferView> buffer;
  // Input: the storage's version when this node was made; backward refuses to
  // read a value that was written in place since.
  uint64_t version = 0;

  // The longest chain of unrealized nodes ending here (1 for a node over
  // leaves): the DSL realizes a value past kMaxPendingDepth, so no walk over
  // a pending graph recurses deeper than that (ArrayFire's JIT node limit).
  uint32_t depth = 0;
  // Backward ran through this (computed) node without retain_graph: as in
  // PyTorch its saved values count as freed, and another backward through it
  // is an error rather than gradients that silently add up again.
  bool backward_done = false;

  bool realized() const { return buffer.has_value(); }
  int64_t numel() const { return shape.numel(); }

  Node() = default;
  Node(const Node&) = default;
  Node& operator=(const Node&) = default;
  // Frees a long chain of nodes only this one holds without recursing once
  // per node (a 100,000-op chain would overflow the stack).
  ~Node();
};

/// Pending depth past which the DSL realizes a value (Tensor ops, in-place writes).
inline constexpr uint32_t kMaxPendingDepth = 256;

/// Canonical text of the DAG below `root`: nodes in post-order, realized
/// nodes printed as inputs numbered by first appearance. Two equal trees over
/// different buffers print (and hash) the same.
std::string to_string(const NodePtr& root);
std::string to_string(const std::vector<NodePtr>& roots);
/// 64-bit hash of the canonical text.
uint64_t structural_hash(const std::vector<NodePtr>& roots);

/// Nodes below `roots` in post-order (args before users), each once; the walk
/// stops at realized nodes.
std::vector<Node*> topo_order(const std::vector<NodePtr>& roots);

}  // namespace tessel::ir
