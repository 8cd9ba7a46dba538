// Fused attention on the CPU: the Attention and AttentionGrad nodes
// (codegen/attention_geometry.h) in the flash-attention formulation.
//
// Forward: one task per (batch index, block of 64 queries). The block's
// scores against a tile of keys are one small GEMM (OpenBLAS), soft-maxed in
// place with a running max and sum per row (rescaling the partial output when
// the max grows), then multiplied into the output with a second GEMM. Only a
// [64, BK] tile of scores exists at a time: memory is linear in the sequence
// length. Causal blocks stop at the diagonal, so masked tiles cost nothing.
// Backward: one task per batch index; the probabilities of each tile are
// recomputed from the saved log-sum-exp (no [Tq, Tk] buffer), and dq, dk, dv
// accumulate through four GEMMs per tile. f32 accumulation for f32 operands.
//
// The tiles keep every GEMM at or under 64^3 multiply-adds, which OpenBLAS
// runs on the calling thread: tasks run on tessel's pool, never on BLAS's.
#pragma once

#include "codegen/attention_geometry.h"

namespace tessel::cpu_attention {

/// out (dense [batch, tq, dv + 1]) = the Attention node's value.
template <class T> void forward(const ir::AttentionGeometry& g, const ir::AttentionOperands<T>& a, T* out);
/// grads (dense [batch, tq*d + tk*d + tk*dv]) = the AttentionGrad node's value,
/// from the forward's dense value `fwd` and the output gradient `go` (layout lg).
template <class T>
void backward(const ir::AttentionGeometry& g, const ir::AttentionOperands<T>& a, const T* fwd, const T* go,
              const ir::OperandLayout& lg, T* grads);

/// The key-tile width for head dims d and dv (BQ = 64 query rows).
int64_t key_tile(int64_t d, int64_t dv);

}  // namespace tessel::cpu_attention
