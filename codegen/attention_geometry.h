// One fused attention's geometry, as every engine that computes an Attention
// or AttentionGrad node sees it: the ref loops (the oracle), the CPU kernel
// (codegen/cpu/flash_attention.h) and the CUDA kernels (codegen/cuda/attention_kernels.h).
//
// The leading (batch) dims of q, k, v, the mask and the gradient are equal
// (builders expand them) and are flattened to one index bh in [0, batch).
// Each operand is addressed through an OperandLayout: the batch dims split
// into an outer and an inner group (sizes batch / inner and inner), each
// collapsing to one stride, so q = x.view(B, T, H, D).transpose(1, 2) is read
// in place (outer B, inner H). Rows are strided; the last dim of q, k, v and
// the gradient is contiguous, the mask's may be any stride (0: broadcast).
//
// Attention node:   args q [*, Tq, D], k [*, Tk, D], v [*, Tk, Dv], mask? [*, Tq, Tk]
//                   value [*, Tq, Dv + 1], dense: columns 0 .. Dv-1 the output,
//                   column Dv the row's log-sum-exp of the (scaled, masked)
//                   scores, -inf where every key is masked out (output 0).
// AttentionGrad:    args q, k, v, fwd (the Attention node), g [*, Tq, Dv], mask?
//                   value [*, Tq*D + Tk*D + Tk*Dv], dense: per batch index
//                   dq [Tq, D], then dk [Tk, D], then dv [Tk, Dv], row-major.
//
// The math (s = scores, p = probabilities, m = keep mask of dropout, r = 1 / (1 - p_drop)):
//   s_ij  = scale * q_i . k_j (+ mask_ij if additive; -inf if masked by a bool
//           mask (false) or by causal (j > i))
//   lse_i = log sum_j exp(s_ij);  p_ij = exp(s_ij - lse_i) (0 where s_ij = -inf)
//   o_i   = sum_j p_ij m_ij r v_j
//   backward, with g = dL/do and delta_i = g_i . o_i:
//   dv_j  = sum_i p_ij m_ij r g_i;  dp_ij = m_ij r (g_i . v_j);  ds_ij = p_ij (dp_ij - delta_i)
//   dq_i  = scale * sum_j ds_ij k_j;  dk_j = scale * sum_i ds_ij q_i
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <vector>

#include "codegen/ir.h"
#include "runtime/philox.h"

namespace tessel::ir {

/// Where element (bh, row, col) of an operand is, in elements from its view's start.
struct OperandLayout {
  int64_t outer = 0;  // stride of the outer batch group (index bh / inner)
  int64_t inner = 0;  // stride of the inner batch group (index bh % inner)
  int64_t row = 0;
  int64_t col = 1;
  int64_t at(int64_t bh, int64_t inner_size, int64_t r, int64_t c) const {
    return (bh / inner_size) * outer + (bh % inner_size) * inner + r * row + c * col;
  }
};

struct AttentionGeometry {
  int64_t batch = 1;  // product of the leading dims
  int64_t inner = 1;  // size of the inner batch group (divides batch)
  int64_t tq = 0, tk = 0, d = 0, dv = 0;
  double scale = 1.0;
  bool causal = false;
  AttentionMask mask = AttentionMask::None;
  double dropout_p = 0.0;
  uint64_t seed = 0;
  bool operator==(const AttentionGeometry&) const = default;
};

/// Whether dropout keeps probability (bh, i, j): a Philox draw per element,
/// the same on every engine (CUDA kernels carry the same function).
inline bool attention_keep(const AttentionGeometry& g, int64_t bh, int64_t i, int64_t j) {
  const uint64_t e = (static_cast<uint64_t>(bh) * static_cast<uint64_t>(g.tq) + static_cast<uint64_t>(i)) *
                         static_cast<uint64_t>(g.tk) + static_cast<uint64_t>(j);
  return Philox4x32::uniform(Philox4x32::word(g.seed, e)) >= static_cast<float>(g.dropout_p);
}

/// The geometry of an Attention or AttentionGrad node, from its attributes
/// and its args' shapes (inner is 1: engines pick their own split when they
/// lay the operands out).
AttentionGeometry attention_geometry(const Node& n);

}  // namespace tessel::ir

namespace tessel::ir {

/// How an engine reads each operand of an Attention/AttentionGrad node in
/// place: the inner batch group shared by all operands and one layout per
/// arg (in the node's arg order). `dense_copy[i]` is set for an arg that
/// cannot be read in place (its batch dims do not collapse into the two
/// groups, or its last dim is not contiguous where that is required); the
/// engine copies it dense and asks again (a dense operand always fits).
struct AttentionLayouts {
  int64_t inner = 1;
  std::vector<OperandLayout> operands;
  std::vector<bool> dense_copy;
  bool any_copy() const;
};
AttentionLayouts attention_layouts(const Node& n, const std::vector<Strides>& arg_strides);

}  // namespace tessel::ir

namespace tessel::ir {

/// The operands of one attention computation as an engine reads them: base
/// pointers of the views (host or device addresses) with their layouts. The
/// mask points at bool bytes (AttentionMask::Bool) or T (Additive).
template <class T> struct AttentionOperands {
  const T* q = nullptr;
  const T* k = nullptr;
  const T* v = nullptr;
  const void* mask = nullptr;
  OperandLayout lq, lk, lv, lm;
  int64_t inner = 1;  // the inner batch group's size (AttentionLayouts::inner)
};

/// 1 / (1 - p), the scale of the kept probabilities; 0 when every one is dropped.
inline double dropout_scale(double p) { return p < 1.0 ? 1.0 / (1.0 - p) : 0.0; }

}  // namespace tessel::ir

namespace tessel::ir {

/// An attention node's args made ready for an engine: the geometry, the
/// layouts, and the arg views with those that cannot be read in place
/// replaced by `copy(i)` (a dense copy of arg i, same shape and dtype).
struct PreparedAttention {
  AttentionGeometry geometry;
  AttentionLayouts layouts;
  std::vector<BufferView> views;

  /// The q, k, v, mask operands (arg order of the node; the mask is the last arg).
  template <class T> AttentionOperands<T> operands() const {
    AttentionOperands<T> o;
    o.q = views[0].ptr<T>();
    o.k = views[1].ptr<T>();
    o.v = views[2].ptr<T>();
    o.lq = layouts.operands[0];
    o.lk = layouts.operands[1];
    o.lv = layouts.operands[2];
    if (geometry.mask != AttentionMask::None) {
      o.mask = views.back().bytes(geometry.mask == AttentionMask::Bool ? DType::b8 : dtype_of<T>::value);
      o.lm = layouts.operands.back();
    }
    o.inner = layouts.inner;
    return o;
  }
};
PreparedAttention prepare_attention(const Node& n, std::vector<BufferView> args,
                                    const std::function<BufferView(size_t)>& copy);

}  // namespace tessel::ir
