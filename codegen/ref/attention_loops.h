// Direct loops for the two attention nodes: the oracle the fused engines (the
// CPU kernel, the CUDA kernels) are tested against. One query row at a time,
// all its scores stored, accumulation in double; the layouts and the math of
// codegen/attention_geometry.h.
#pragma once

#include "codegen/attention_geometry.h"

namespace tessel::ref {

/// out (dense [batch, tq, dv + 1]) = the Attention node's value.
template <class T> void attention_forward(const ir::AttentionGeometry& g, const ir::AttentionOperands<T>& a, T* out);
/// grads (dense [batch, tq*d + tk*d + tk*dv]) = the AttentionGrad node's value,
/// from the forward's value `fwd` (dense) and the output gradient `go` (layout lg).
template <class T>
void attention_backward(const ir::AttentionGeometry& g, const ir::AttentionOperands<T>& a, const T* fwd, const T* go,
                        const ir::OperandLayout& lg, T* grads);

}  // namespace tessel::ref
