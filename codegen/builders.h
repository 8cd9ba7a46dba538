// Builders: the only way nodes are made. Each one checks its operands (shape
// and dtype errors name the op and both operands), inserts the explicit
// broadcasts and casts that ir.h's invariants promise, infers the result
// shape and dtype, and records whether gradients flow.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "codegen/ir.h"

namespace tessel::ir {

/// A leaf over realized memory. `owner` is the tensor that collects its gradient.
NodePtr input(BufferView view, DType dtype, Shape shape, bool requires_grad = false,
              std::weak_ptr<void> owner = {});
/// `v` splatted over `shape`.
NodePtr constant(ScalarValue v, DType dtype, Shape shape = {});

NodePtr unary(Op op, NodePtr x);
NodePtr cast(NodePtr x, DType to);
/// Broadcasting (NumPy rules) and type promotion happen here.
NodePtr binary(Op op, NodePtr a, NodePtr b);
NodePtr where(NodePtr cond, NodePtr a, NodePtr b);
/// `axes` empty reduces over every axis. Negative axes count from the end.
NodePtr reduce(Op op, NodePtr x, std::vector<int64_t> axes, bool keepdim);
/// torch.argmax: the index (i64) of the first maximum along `dim`, or into
/// the flattened tensor without one; a NaN counts as the maximum. Built of
/// max, compare, iota, where and min (one row program where a backend fuses).
///   NodePtr label = argmax(logits, 1, false);  // [N, C] -> [N]
NodePtr argmax(NodePtr x, std::optional<int64_t> dim, bool keepdim);
/// One -1 in `s` is inferred from the element count.
NodePtr reshape(NodePtr x, std::vector<int64_t> s);
NodePtr permute(NodePtr x, std::vector<int64_t> order);
NodePtr transpose(NodePtr x, int64_t d0, int64_t d1);
/// Broadcast to `s` (may add leading axes), as torch.expand.
NodePtr expand(NodePtr x, Shape s);
/// Window [start, start + step * size) per axis.
NodePtr slice(NodePtr x, std::vector<int64_t> starts, std::vector<int64_t> steps, Shape out);
/// Each element's index along `axis` of `shape`, i64, computed inside the
/// kernel that reads it (no memory): arange, masks, eye.
NodePtr iota(Shape shape, int64_t axis);
/// `x` with before[d] / after[d] elements of `fill` added on each side of dim
/// d (negative widths remove elements, as torch.nn.functional.pad).
NodePtr pad(NodePtr x, std::vector<int64_t> before, std::vector<int64_t> after, ScalarValue fill);
/// `xs` side by side along `axis` (one dtype; every other dim equal), as torch.cat.
NodePtr cat(std::vector<NodePtr> xs, int64_t axis);
/// torch.gather: out[i..] = x[i.. with dim `axis` replaced by idx[i..]];
/// idx (integer) has x's rank and, off `axis`, dims no larger than x's.
/// Index values must be in range (the DSL checks them; kernels read only
/// in-range positions).
NodePtr gather(NodePtr x, NodePtr idx, int64_t axis);
/// torch.zeros(shape).scatter_add_(axis, idx, src): src's elements added at
/// the positions idx names along `axis` (in element order: deterministic).
NodePtr scatter_add(NodePtr src, NodePtr idx, int64_t axis, Shape shape);
/// Fused attention of q [*, Tq, D], k [*, Tk, D], v [*, Tk, Dv] (f32 or
/// f64, one dtype) and, when attrs.mask is not None, `mask` broadcastable to
/// [*, Tq, Tk] (bool, or floating: cast to q's dtype). Batch dims broadcast.
/// The value is [*, Tq, Dv + 1]: the output and each row's log-sum-exp
/// (codegen/attention_geometry.h).
NodePtr attention(NodePtr q, NodePtr k, NodePtr v, NodePtr mask, const AttentionAttrs& attrs);
/// The packed q, k, v gradients of Attention node `fwd` from the output's
/// gradient g [*, Tq, Dv].
NodePtr attention_grad(NodePtr fwd, NodePtr g);
/// `value`'s numbers with `surrogate`'s derivative: backward sends the gradient
/// of the result through `surrogate` (same shape and dtype), which forward
/// never computes. `value` must be pending and computed without gradients
/// (built under NoGradGuard), e.g. a max pool:
///   { NoGradGuard g; v = <running where over the windows>; }
///   y = with_gradient_via(v, sum(where(first_max_mask, x_windows, 0), window axes));
NodePtr with_gradient_via(NodePtr value, NodePtr surrogate);
/// torch.matmul semantics: 1-D operands, 2-D, batched with broadcast batch dims.
NodePtr matmul(NodePtr a, NodePtr b);
/// 2-D convolution of x [n, c, h, w] with w [o, c / groups, kh, kw] (the DSL's
/// conv2d checks shapes and options first; codegen/conv_geometry.h).
NodePtr conv(NodePtr x, NodePtr w, const ConvAttrs& attrs);
/// A convolution's output shape: [n, o, oh, ow].
Shape conv_output_shape(const Shape& x, const Shape& w, const ConvAttrs& attrs);
/// The input gradient of conv(x, w) from its output gradient gy; `input` is x's shape.
NodePtr conv_grad_input(NodePtr gy, NodePtr w, const ConvAttrs& attrs, Shape input);
/// The weight gradient of conv(x, w) from gy; `weight` is w's shape.
NodePtr conv_grad_weight(NodePtr x, NodePtr gy, const ConvAttrs& attrs, Shape weight);

/// The broadcast of two shapes; ShapeError naming `op` and both shapes if they do not broadcast.
Shape broadcast_shapes(std::string_view op, const Shape& a, const Shape& b);
/// `d` in [-rank, rank) made non-negative; IndexError naming `op` otherwise.
int64_t normalize_axis(std::string_view op, int64_t d, int64_t rank, const Shape& shape);

}  // namespace tessel::ir
