// Scaled dot-product attention, as torch.nn.functional.scaled_dot_product_attention.
//
// q [..., Tq, D], k [..., Tk, D], v [..., Tk, Dv] -> [..., Tq, Dv]:
// softmax(q k^T * scale + mask) v, with dropout on the probabilities. The
// leading dims broadcast. The op is one IR node (Attention) that each backend
// runs fused: the scores of a block of queries are computed, soft-maxed with
// a running max and sum (the online-softmax formulation) and multiplied by v
// tile by tile, so the [Tq, Tk] scores are never stored; the backward pass
// recomputes them from the saved row log-sum-exps.
//
//   Tensor y = scaled_dot_product_attention(q, k, v, {.causal = true});
//   Tensor z = scaled_dot_product_attention(q, k, v, {.mask = keep, .dropout_p = 0.1});
#pragma once

#include <optional>

#include "dsl/tensor.h"

namespace tessel {

struct AttentionOptions {
  /// Optional, broadcastable to [..., Tq, Tk]: bool (true = the key takes
  /// part) or floating (added to the scaled scores; -inf masks a key out).
  Tensor mask;
  /// Query i attends to keys j <= i (the top-left aligned lower triangle, as
  /// PyTorch's is_causal). Not together with `mask`.
  bool causal = false;
  /// Probability of zeroing an attention weight (the rest scaled by 1 / (1 - p)).
  /// Applied whenever it is > 0: modules pass it only in training, as PyTorch's do.
  double dropout_p = 0.0;
  /// Multiplies q k^T; default 1 / sqrt(D).
  std::optional<double> scale;
};

/// Fused attention (see the file comment). A query row whose keys are all
/// masked out gives zeros (and zero gradients), as PyTorch's attention does
/// since 2.5, instead of the NaNs of a plain softmax over -inf.
///
///   Tensor q = randn({8, 4, 256, 32}), k = randn({8, 4, 256, 32}), v = randn({8, 4, 256, 32});
///   Tensor y = scaled_dot_product_attention(q, k, v, {.causal = true});   // [8, 4, 256, 32]
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const AttentionOptions& options = {});

/// The same attention written with the DSL's ordinary ops (matmul, masks,
/// softmax, dropout): the unfused composite, kept as the reference the fused
/// op is tested against and as PyTorch's "math" path. Stores the scores.
///
///   Tensor ref = scaled_dot_product_attention_math(q, k, v, {.causal = true});
Tensor scaled_dot_product_attention_math(const Tensor& q, const Tensor& k, const Tensor& v,
                                         const AttentionOptions& options = {});

}  // namespace tessel
