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
//   - reduction axes are sorted, unique and in range;
//   - `attrs` holds the alternative the op's AttrKind names.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/shape.h"
#include "runtime/storage.h"

namespace tessel::ir {

// Op traits: the columns of the node-kind table, queried by the builders, the
// scheduler and the emitters instead of lists of ops kept in each of them.
enum Trait : uint32_t {
  kNoTraits = 0,
  // Computes on floating values only. Elementwise: builders compute integer
  // and bool inputs in f32 (torch.exp(int) is float); reductions: integer
  // input is a DTypeError (torch.mean(int) raises).
  kFloatOnly = 1u << 0,
  // A libm call per element: the kernel is compute-bound, so streaming
  // stores (codegen/cpu/llvm_emitter.h) buy nothing.
  kTranscendental = 1u << 1,
  // The kernel emitters have an i32/i64 form (others fall back to ref on integers).
  kIntForm = 1u << 2,
  // The ref interpreter and the kernel emitters have a bool form.
  kBoolForm = 1u << 3,
  // The result is bool whatever the operands' dtype (comparisons, isnan).
  kBoolResult = 1u << 4,
  // No gradient flows through: the result is a bool or an index.
  kNoGrad = 1u << 5,
};

// X(name, category, attributes, traits, one-line meaning). The one list of
// node kinds. Attributes: which member of Node::attrs the op carries (AttrKind
// below). Traits: the Trait bits above.
#define TESSEL_IR_NODE_KINDS(X)                                                                                        \
  /* leaves */                                                                                                         \
  X(Input, Leaf, None, kNoTraits, "a realized buffer: storage + offset + strides")                                     \
  X(Constant, Leaf, None, kNoTraits, "one scalar value splatted over the node's shape")                                \
  /* elementwise, one arg */                                                                                           \
  X(Neg, Unary, None, kIntForm, "-x")                                                                                  \
  X(Abs, Unary, None, kIntForm | kBoolForm, "|x|")                                                                     \
  X(Exp, Unary, None, kFloatOnly | kTranscendental, "e^x")                                                             \
  X(Log, Unary, None, kFloatOnly | kTranscendental, "natural log")                                                     \
  X(Sqrt, Unary, None, kFloatOnly, "square root")                                                                      \
  X(Tanh, Unary, None, kFloatOnly | kTranscendental, "hyperbolic tangent")                                             \
  X(Sigmoid, Unary, None, kFloatOnly | kTranscendental, "1 / (1 + e^-x)")                                              \
  X(Relu, Unary, None, kIntForm | kBoolForm, "max(x, 0)")                                                              \
  X(Sin, Unary, None, kFloatOnly | kTranscendental, "sine")                                                            \
  X(Cos, Unary, None, kFloatOnly | kTranscendental, "cosine")                                                          \
  X(Erf, Unary, None, kFloatOnly | kTranscendental, "error function")                                                  \
  X(Log1p, Unary, None, kFloatOnly | kTranscendental, "log(1 + x), accurate near 0")                                   \
  X(Expm1, Unary, None, kFloatOnly | kTranscendental, "e^x - 1, accurate near 0")                                      \
  X(Rsqrt, Unary, None, kFloatOnly, "1 / sqrt(x)")                                                                     \
  X(Reciprocal, Unary, None, kFloatOnly, "1 / x")                                                                      \
  X(Sign, Unary, None, kIntForm | kBoolForm, "-1, 0 or 1; 0 for NaN, as torch.sign")                                   \
  X(Floor, Unary, None, kIntForm | kBoolForm, "round down (integers unchanged)")                                       \
  X(Ceil, Unary, None, kIntForm | kBoolForm, "round up (integers unchanged)")                                          \
  X(Round, Unary, None, kIntForm | kBoolForm, "round half to even, as torch.round (integers unchanged)")               \
  X(IsNan, Unary, None, kBoolResult | kNoGrad, "x is NaN -> bool (of floats; integers never are)")                     \
  X(IsInf, Unary, None, kBoolResult | kNoGrad, "x is +-inf -> bool (of floats; integers never are)")                   \
  X(Not, Unary, None, kIntForm | kBoolForm | kBoolResult | kNoGrad, "logical not (bool)")                              \
  X(Cast, Unary, None, kIntForm | kBoolForm, "convert to the node's dtype")                                            \
  /* elementwise, two args */                                                                                          \
  X(Add, Binary, None, kIntForm | kBoolForm, "a + b")                                                                  \
  X(Sub, Binary, None, kIntForm, "a - b")                                                                              \
  X(Mul, Binary, None, kIntForm | kBoolForm, "a * b")                                                                  \
  X(Div, Binary, None, kFloatOnly, "a / b (true division: float result)")                                              \
  X(Pow, Binary, None, kTranscendental, "a ^ b")                                                                       \
  X(Maximum, Binary, None, kIntForm | kBoolForm, "elementwise max (NaN-propagating)")                                  \
  X(Minimum, Binary, None, kIntForm | kBoolForm, "elementwise min (NaN-propagating)")                                  \
  X(Eq, Compare, None, kIntForm | kBoolForm | kBoolResult | kNoGrad, "a == b -> bool")                                 \
  X(Ne, Compare, None, kIntForm | kBoolForm | kBoolResult | kNoGrad, "a != b -> bool")                                 \
  X(Lt, Compare, None, kIntForm | kBoolForm | kBoolResult | kNoGrad, "a < b -> bool")                                  \
  X(Le, Compare, None, kIntForm | kBoolForm | kBoolResult | kNoGrad, "a <= b -> bool")                                 \
  X(Gt, Compare, None, kIntForm | kBoolForm | kBoolResult | kNoGrad, "a > b -> bool")                                  \
  X(Ge, Compare, None, kIntForm | kBoolForm | kBoolResult | kNoGrad, "a >= b -> bool")                                 \
  X(And, Binary, None, kIntForm | kBoolForm, "logical and (bool)")                                                     \
  X(Or, Binary, None, kIntForm | kBoolForm, "logical or (bool)")                                                       \
  /* elementwise, three args */                                                                                        \
  X(Where, Ternary, None, kIntForm | kBoolForm, "cond ? a : b")                                                        \
  /* reductions over their axes (keepdim keeps them as size 1) */                                                      \
  X(Sum, Reduce, Reduce, kNoTraits, "sum; bool/int inputs give i64")                                                   \
  X(Mean, Reduce, Reduce, kFloatOnly, "arithmetic mean (floating only)")                                               \
  X(Max, Reduce, Reduce, kNoTraits, "maximum")                                                                         \
  X(Min, Reduce, Reduce, kNoTraits, "minimum")                                                                         \
  X(Prod, Reduce, Reduce, kNoTraits, "product; bool/int inputs give i64, an empty one is 1")                           \
  /* movement: a new view of the same elements */                                                                      \
  X(Reshape, Movement, None, kNoTraits, "same elements, row-major, new shape")                                         \
  X(Permute, Movement, Order, kNoTraits, "reorder dims: output dim i = input dim order[i]")                            \
  X(Expand, Movement, None, kNoTraits, "broadcast size-1 axes to the node's shape")                                    \
  X(Slice, Movement, Window, kNoTraits, "strided window: per dim a start and a step")                                  \
  /* indexed: elementwise over the node's shape, reading args at computed positions */                                 \
  /* (loads with coordinates and predicates in the kernel IR) */                                                       \
  X(Iota, Indexed, Axis, kIntForm | kNoGrad, "each element's index along `axis` of the node's shape, i64")             \
  X(Pad, Indexed, Widths, kIntForm | kBoolForm, "args[0] inside, args[1] (a scalar) outside: per dim widths before and after") \
  X(Cat, Indexed, Axis, kIntForm | kBoolForm, "args side by side along `axis`")                                        \
  X(Gather, Indexed, Axis, kIntForm | kBoolForm, "args[0] at args[1]'s values along `axis` (torch.gather)")            \
  /* scatter: accumulates into positions it reads from an index (run by ref, in order) */                              \
  X(ScatterAdd, Scatter, Axis, kIntForm | kBoolForm, "zeros plus args[0] added at args[1]'s values along `axis`")      \
  /* contraction */                                                                                                    \
  X(MatMul, Contraction, None, kNoTraits, "[..., n, k] @ [..., k, m] -> [..., n, m]; batch dims equal")                \
  X(Conv, Contraction, Conv, kNoTraits, "2-D convolution: [n, c, h, w] with [o, c / groups, kh, kw] -> [n, o, oh, ow]") \
  X(ConvGradInput, Contraction, Conv, kNoTraits, "a Conv's input gradient from (gy, weight); shape: the input's")      \
  X(ConvGradWeight, Contraction, Conv, kNoTraits, "a Conv's weight gradient from (input, gy); shape: the weight's")  \
  X(Attention, Contraction, Attention, kNoTraits, "fused softmax(scale q k^T + mask) v of (q, k, v, mask?): [*, Tq, Dv + 1], last column the row log-sum-exp") \
  X(AttentionGrad, Contraction, Attention, kNoTraits, "an Attention's q, k, v gradients from (q, k, v, fwd, g, mask?), packed [*, Tq*D + Tk*D + Tk*Dv]")

enum class Op : uint8_t {
#define TESSEL_X(name, cat, attrs, traits, doc) name,
  TESSEL_IR_NODE_KINDS(TESSEL_X)
#undef TESSEL_X
};

/// How many node kinds there are: Op values are 0 .. kNumOps - 1.
inline constexpr int kNumOps = 0
#define TESSEL_X(name, cat, attrs, traits, doc) +1
    TESSEL_IR_NODE_KINDS(TESSEL_X);
#undef TESSEL_X

enum class Category : uint8_t { Leaf, Unary, Binary, Compare, Ternary, Reduce, Movement, Indexed, Scatter, Contraction };

/// Which attribute struct a node kind carries in Node::attrs (the table's third column).
enum class AttrKind : uint8_t { None, Reduce, Order, Window, Widths, Axis, Conv, Attention };

std::string_view op_name(Op op);   // "add", "matmul"
Category op_category(Op op);
/// The attribute column of the op's row.
AttrKind op_attr_kind(Op op);
/// The op's traits column (a set of Trait bits).
uint32_t op_traits(Op op);
inline bool has_trait(Op op, Trait t) { return (op_traits(op) & t) != 0; }
inline bool is_elementwise(Op op) {
  Category c = op_category(op);
  return c == Category::Unary || c == Category::Binary || c == Category::Compare || c == Category::Ternary;
}
inline bool is_reduction(Op op) { return op_category(op) == Category::Reduce; }
/// Computed per output element in a fused kernel: elementwise or indexed.
inline bool is_pointwise(Op op) { return is_elementwise(op) || op_category(op) == Category::Indexed; }

// Case labels generated from the table, for a switch that handles one group
// of ops and must still name every other op: switches over Op have no
// `default:`, so an op of the group that a switch forgets is a -Wswitch
// error, while ops outside the group never need it edited.
//   switch (op) { case Op::Reshape: ...; TESSEL_IR_CASES_NOT_MOVEMENT break; }
#define TESSEL_IR_CASE_UNLESS(name, cat, group) TESSEL_IR_CASE_UNLESS_##group##_##cat(name)
#define TESSEL_IR_CASE_LABEL(name) case ::tessel::ir::Op::name:
#define TESSEL_IR_CASE_NONE(name)
// Not elementwise: leaves, reductions, movement, indexed, scatter, contraction.
#define TESSEL_IR_CASE_UNLESS_Elementwise_Leaf TESSEL_IR_CASE_LABEL
#define TESSEL_IR_CASE_UNLESS_Elementwise_Unary TESSEL_IR_CASE_NONE
#define TESSEL_IR_CASE_UNLESS_Elementwise_Binary TESSEL_IR_CASE_NONE
#define TESSEL_IR_CASE_UNLESS_Elementwise_Compare TESSEL_IR_CASE_NONE
#define TESSEL_IR_CASE_UNLESS_Elementwise_Ternary TESSEL_IR_CASE_NONE
#define TESSEL_IR_CASE_UNLESS_Elementwise_Reduce TESSEL_IR_CASE_LABEL
#define TESSEL_IR_CASE_UNLESS_Elementwise_Movement TESSEL_IR_CASE_LABEL
#define TESSEL_IR_CASE_UNLESS_Elementwise_Contraction TESSEL_IR_CASE_LABEL
#define TESSEL_IR_CASE_UNLESS_Elementwise_Indexed TESSEL_IR_CASE_LABEL
#define TESSEL_IR_CASE_UNLESS_Elementwise_Scatter TESSEL_IR_CASE_LABEL
#define TESSEL_IR_CASE_NOT_ELEMENTWISE(name, cat, attrs, traits, doc) TESSEL_IR_CASE_UNLESS(name, cat, Elementwise)
#define TESSEL_IR_CASES_NOT_ELEMENTWISE TESSEL_IR_NODE_KINDS(TESSEL_IR_CASE_NOT_ELEMENTWISE)
// Not movement.
#define TESSEL_IR_CASE_UNLESS_Movement_Leaf TESSEL_IR_CASE_LABEL
#define TESSEL_IR_CASE_UNLESS_Movement_Unary TESSEL_IR_CASE_LABEL
#define TESSEL_IR_CASE_UNLESS_Movement_Binary TESSEL_IR_CASE_LABEL
#define TESSEL_IR_CASE_UNLESS_Movement_Compare TESSEL_IR_CASE_LABEL
#define TESSEL_IR_CASE_UNLESS_Movement_Ternary TESSEL_IR_CASE_LABEL
#define TESSEL_IR_CASE_UNLESS_Movement_Reduce TESSEL_IR_CASE_LABEL
#define TESSEL_IR_CASE_UNLESS_Movement_Movement TESSEL_IR_CASE_NONE
#define TESSEL_IR_CASE_UNLESS_Movement_Contraction TESSEL_IR_CASE_LABEL
#define TESSEL_IR_CASE_UNLESS_Movement_Indexed TESSEL_IR_CASE_LABEL
#define TESSEL_IR_CASE_UNLESS_Movement_Scatter TESSEL_IR_CASE_LABEL
#define TESSEL_IR_CASE_NOT_MOVEMENT(name, cat, attrs, traits, doc) TESSEL_IR_CASE_UNLESS(name, cat, Movement)
#define TESSEL_IR_CASES_NOT_MOVEMENT TESSEL_IR_NODE_KINDS(TESSEL_IR_CASE_NOT_MOVEMENT)
// Not reductions.
#define TESSEL_IR_CASE_UNLESS_Reduce_Leaf TESSEL_IR_CASE_LABEL
#define TESSEL_IR_CASE_UNLESS_Reduce_Unary TESSEL_IR_CASE_LABEL
#define TESSEL_IR_CASE_UNLESS_Reduce_Binary TESSEL_IR_CASE_LABEL
#define TESSEL_IR_CASE_UNLESS_Reduce_Compare TESSEL_IR_CASE_LABEL
#define TESSEL_IR_CASE_UNLESS_Reduce_Ternary TESSEL_IR_CASE_LABEL
#define TESSEL_IR_CASE_UNLESS_Reduce_Reduce TESSEL_IR_CASE_NONE
#define TESSEL_IR_CASE_UNLESS_Reduce_Movement TESSEL_IR_CASE_LABEL
#define TESSEL_IR_CASE_UNLESS_Reduce_Contraction TESSEL_IR_CASE_LABEL
#define TESSEL_IR_CASE_UNLESS_Reduce_Indexed TESSEL_IR_CASE_LABEL
#define TESSEL_IR_CASE_UNLESS_Reduce_Scatter TESSEL_IR_CASE_LABEL
#define TESSEL_IR_CASE_NOT_REDUCE(name, cat, attrs, traits, doc) TESSEL_IR_CASE_UNLESS(name, cat, Reduce)
#define TESSEL_IR_CASES_NOT_REDUCE TESSEL_IR_NODE_KINDS(TESSEL_IR_CASE_NOT_REDUCE)
// Not indexed.
#define TESSEL_IR_CASE_UNLESS_Indexed_Leaf TESSEL_IR_CASE_LABEL
#define TESSEL_IR_CASE_UNLESS_Indexed_Unary TESSEL_IR_CASE_LABEL
#define TESSEL_IR_CASE_UNLESS_Indexed_Binary TESSEL_IR_CASE_LABEL
#define TESSEL_IR_CASE_UNLESS_Indexed_Compare TESSEL_IR_CASE_LABEL
#define TESSEL_IR_CASE_UNLESS_Indexed_Ternary TESSEL_IR_CASE_LABEL
#define TESSEL_IR_CASE_UNLESS_Indexed_Reduce TESSEL_IR_CASE_LABEL
#define TESSEL_IR_CASE_UNLESS_Indexed_Movement TESSEL_IR_CASE_LABEL
#define TESSEL_IR_CASE_UNLESS_Indexed_Indexed TESSEL_IR_CASE_NONE
#define TESSEL_IR_CASE_UNLESS_Indexed_Scatter TESSEL_IR_CASE_LABEL
#define TESSEL_IR_CASE_UNLESS_Indexed_Contraction TESSEL_IR_CASE_LABEL
#define TESSEL_IR_CASE_NOT_INDEXED(name, cat, attrs, traits, doc) TESSEL_IR_CASE_UNLESS(name, cat, Indexed)
#define TESSEL_IR_CASES_NOT_INDEXED TESSEL_IR_NODE_KINDS(TESSEL_IR_CASE_NOT_INDEXED)

// Not contractions.
#define TESSEL_IR_CASE_UNLESS_Contraction_Leaf TESSEL_IR_CASE_LABEL
#define TESSEL_IR_CASE_UNLESS_Contraction_Unary TESSEL_IR_CASE_LABEL
#define TESSEL_IR_CASE_UNLESS_Contraction_Binary TESSEL_IR_CASE_LABEL
#define TESSEL_IR_CASE_UNLESS_Contraction_Compare TESSEL_IR_CASE_LABEL
#define TESSEL_IR_CASE_UNLESS_Contraction_Ternary TESSEL_IR_CASE_LABEL
#define TESSEL_IR_CASE_UNLESS_Contraction_Reduce TESSEL_IR_CASE_LABEL
#define TESSEL_IR_CASE_UNLESS_Contraction_Movement TESSEL_IR_CASE_LABEL
#define TESSEL_IR_CASE_UNLESS_Contraction_Indexed TESSEL_IR_CASE_LABEL
#define TESSEL_IR_CASE_UNLESS_Contraction_Scatter TESSEL_IR_CASE_LABEL
#define TESSEL_IR_CASE_UNLESS_Contraction_Contraction TESSEL_IR_CASE_NONE
#define TESSEL_IR_CASE_NOT_CONTRACTION(name, cat, attrs, traits, doc) TESSEL_IR_CASE_UNLESS(name, cat, Contraction)
#define TESSEL_IR_CASES_NOT_CONTRACTION TESSEL_IR_NODE_KINDS(TESSEL_IR_CASE_NOT_CONTRACTION)

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

// Typed attributes, one struct per AttrKind: a reduction's axes, a
// permutation, a slice's window, a pad's widths and an indexed op's axis are
// different things and no longer share one vector of integers.
struct NoAttrs {
  bool operator==(const NoAttrs&) const = default;
};
/// The order of every floating Sum and Mean, on every backend that must
/// equal the ref interpreter bit for bit: element p of a reduction (counted
/// row-major over its reduced axes) is added, in order, to partial sum
/// p % kSumLanes; then 0 + partial 0 + partial 1 + ... in lane order. One
/// serial chain of adds runs at an add's latency per element; this order is
/// what a vector unit computes at full speed, and it is more accurate.
inline constexpr int kSumLanes = 8;

/// Reductions: the reduced axes (sorted, unique, in range) and whether they stay as size 1.
struct ReduceAttrs {
  std::vector<int64_t> axes;
  bool keepdim = false;
  bool operator==(const ReduceAttrs&) const = default;
};
/// Permute: output dim i is input dim order[i] (a permutation of 0 .. rank-1).
struct OrderAttrs {
  std::vector<int64_t> order;
  bool operator==(const OrderAttrs&) const = default;
};
/// Slice: output index j of dim d reads input index start + j * step (step >= 1).
struct SliceDim {
  int64_t start = 0;
  int64_t step = 1;
  bool operator==(const SliceDim&) const = default;
};
struct WindowAttrs {
  std::vector<SliceDim> dims;  // one per dim of the input
  bool operator==(const WindowAttrs&) const = default;
};
/// Pad: elements added before and after a dim (negative widths crop).
struct PadWidth {
  int64_t before = 0;
  int64_t after = 0;
  bool operator==(const PadWidth&) const = default;
};
struct WidthsAttrs {
  std::vector<PadWidth> dims;  // one per dim of the input
  bool operator==(const WidthsAttrs&) const = default;
};
/// Iota, Cat, Gather, ScatterAdd: the one axis they index along.
struct AxisAttrs {
  int64_t axis = 0;
  bool operator==(const AxisAttrs&) const = default;
};
/// Conv, ConvGradInput, ConvGradWeight: per spatial dim (h, w) the stride,
/// the padding before and after (they differ for "same" with an even
/// kernel) and the dilation (1: dense); the channel groups.
struct ConvAttrs {
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> pad_before{0, 0};
  std::array<int64_t, 2> pad_after{0, 0};
  std::array<int64_t, 2> dilation{1, 1};
  int64_t groups = 1;
  bool operator==(const ConvAttrs&) const = default;
};
/// Attention, AttentionGrad (codegen/attention_geometry.h): the score scale,
/// the causal triangle, the mask's kind (its tensor is the last arg), and
/// dropout's probability and Philox seed (a fresh seed per call, so nodes of
/// two calls differ; backward reuses its forward's).
enum class AttentionMask : uint8_t { None, Bool, Additive };
struct AttentionAttrs {
  double scale = 1.0;
  bool causal = false;
  AttentionMask mask = AttentionMask::None;
  double dropout_p = 0.0;
  uint64_t seed = 0;
  bool operator==(const AttentionAttrs&) const = default;
};
/// Alternatives in AttrKind order.
using Attrs = std::variant<NoAttrs, ReduceAttrs, OrderAttrs, WindowAttrs, WidthsAttrs, AxisAttrs, ConvAttrs, AttentionAttrs>;

struct Node;
using NodePtr = std::shared_ptr<Node>;

struct Node {
  Op op;
  DType dtype;
  Shape shape;
  std::vector<NodePtr> args;

  ScalarValue value;  // Constant's value
  // The op's attributes: the alternative op_attr_kind(op) names (a pad's
  // fill is args[1], a scalar constant). Read them through the accessors,
  // which name the op when it carries another kind.
  Attrs attrs;
  const ReduceAttrs& reduce() const { return attr<ReduceAttrs>("reduction"); }
  const OrderAttrs& order() const { return attr<OrderAttrs>("permutation"); }
  const WindowAttrs& window() const { return attr<WindowAttrs>("slice window"); }
  const WidthsAttrs& widths() const { return attr<WidthsAttrs>("pad widths"); }
  int64_t axis() const { return attr<AxisAttrs>("axis").axis; }
  const ConvAttrs& conv() const { return attr<ConvAttrs>("convolution"); }
  const AttentionAttrs& attention() const { return attr<AttentionAttrs>("attention"); }

  // Autograd: true when a gradient flows to some leaf below.
  bool requires_grad = false;
  // Autograd: when set, the gradient reaching this node goes on through
  // `grad_via` (same shape and dtype) instead of through this node's op and
  // args. It is a derivative-only graph: no forward realization reaches it, so
  // an op can compute its value one way and differentiate another (a max pool
  // is a running where() forward and a one-kernel scatter of its first maxima
  // backward). Set through ir::with_gradient_via.
  NodePtr grad_via;
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

 private:
  template <class A> const A& attr(const char* what) const {
    if (const A* a = std::get_if<A>(&attrs)) return *a;
    throw_wrong_attrs(what);
  }
  [[noreturn]] void throw_wrong_attrs(const char* what) const;
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
/// Appends n's attributes to a structural key, unambiguously (the kind,
/// each list's length, then its values).
void append_attrs(std::vector<int64_t>& key, const Node& n);

/// Nodes below `roots` in post-order (args before users), each once; the walk
/// stops at realized nodes.
std::vector<Node*> topo_order(const std::vector<NodePtr>& roots);

}  // namespace tessel::ir
