// Transformer building blocks, as torch.nn spells them: MultiheadAttention,
// TransformerEncoderLayer, TransformerDecoderLayer and TransformerEncoder,
// with PyTorch's constructor options, masks, dropout placement and
// state-dict keys (a state dict saved by tessel loads into the torch.nn
// module with load_state_dict(strict=True), and back), plus the sinusoidal
// positional-encoding table of "Attention Is All You Need".
//
// The attention core is scaled_dot_product_attention (dsl/attention.h).
// Masks follow nn.MultiheadAttention, not F.scaled_dot_product_attention:
// a bool attn_mask or key_padding_mask is true where a key is NOT allowed
// (masked out); a floating mask is added to the scores.
//
//   nn::TransformerEncoderLayer layer(512, 8, {.dim_feedforward = 2048, .batch_first = true});
//   nn::TransformerEncoder encoder(layer, 6, nn::LayerNorm(512));
//   Tensor src = randn({32, 10, 512});                     // [B, S, E]
//   Tensor y = encoder(src, {.src_key_padding_mask = pad});   // pad: bool [32, 10], true = padding
#pragma once

#include <optional>
#include <string>

#include "dsl/nn/layer_norm.h"
#include "dsl/nn/layers.h"
#include "dsl/nn/linear.h"
#include "dsl/nn/module.h"
#include "dsl/nn/module_list.h"

namespace tessel::nn {

// ---------------------------------------------------------------------------
// MultiheadAttention

/// Constructor options of nn::MultiheadAttention (torch.nn.MultiheadAttention's).
struct MultiheadAttentionOptions {
  /// Dropout probability on the attention weights, in training mode only.
  double dropout = 0.0;
  /// Whether the input projection (in_proj_bias) and out_proj have biases.
  bool bias = true;
  /// Inputs and output are [B, L, E] when true, [L, B, E] (PyTorch's default) when false.
  bool batch_first = false;
};

/// Per-call arguments of MultiheadAttention::forward (PyTorch's keyword arguments).
struct MultiheadAttentionForwardOptions {
  /// Bool [B, S] ([S] for an unbatched input): true = that key is padding and
  /// ignored; or floating [B, S], added to the scores.
  Tensor key_padding_mask;
  /// [L, S] or [B * num_heads, L, S]: bool, true = NOT allowed to attend (as
  /// nn.MultiheadAttention; the opposite of scaled_dot_product_attention's
  /// bool mask), or floating, added to the scores (-inf masks out).
  Tensor attn_mask;
  /// Query i attends to keys j <= i. Together with attn_mask or
  /// key_padding_mask, a key must be allowed by all of them.
  bool is_causal = false;
  /// Only for forward_with_weights: average the weights over the heads
  /// ([B, L, S]) instead of returning them per head ([B, num_heads, L, S]).
  bool average_attn_weights = true;
};

/// What forward_with_weights returns: PyTorch's (attn_output, attn_output_weights).
struct MultiheadAttentionOutput {
  Tensor output;
  Tensor weights;
};

/// torch.nn.MultiheadAttention with kdim = vdim = embed_dim: parameters
/// in_proj_weight [3E, E] (xavier-uniform), in_proj_bias [3E] (zeros) and the
/// Linear submodule out_proj (weight as Linear's default, bias zeros).
/// forward() is PyTorch's need_weights=False call; forward_with_weights()
/// its need_weights=True one.
///
///   nn::MultiheadAttention mha(64, 8, {.dropout = 0.1, .batch_first = true});
///   Tensor q = randn({2, 5, 64}), kv = randn({2, 7, 64});
///   Tensor y = mha(q, kv, kv, {.key_padding_mask = pad});   // [2, 5, 64]; pad bool [2, 7]
///   Tensor z = mha(q);                                       // self-attention, [2, 5, 64]
class MultiheadAttentionImpl : public Module {
 public:
  MultiheadAttentionImpl(int64_t embed_dim, int64_t num_heads, const MultiheadAttentionOptions& options = {});

  /// Attention of `query` [L, B, E] over `key` [S, B, E] / `value` [S, B, E]
  /// ([B, L, E] etc. with batch_first; [L, E] and [S, E] unbatched) -> query's shape.
  ///
  ///   Tensor y = mha->forward(x, x, x, {.attn_mask = future, .is_causal = false});
  Tensor forward(const Tensor& query, const Tensor& key, const Tensor& value,
                 const MultiheadAttentionForwardOptions& options = {});
  /// Self-attention: forward(x, x, x).
  Tensor forward(const Tensor& x) override { return forward(x, x, x); }
  /// The output and the attention weights (after dropout, as PyTorch's),
  /// computed by the unfused composite path (the [L, S] scores are stored).
  ///
  ///   auto [y, w] = mha->forward_with_weights(q, k, v);   // w: [B, L, S], rows sum to 1
  MultiheadAttentionOutput forward_with_weights(const Tensor& query, const Tensor& key, const Tensor& value,
                                                const MultiheadAttentionForwardOptions& options = {});
  std::string extra_repr() const override;
  /// Re-draws the parameters as PyTorch's _reset_parameters does.
  void reset_parameters();

  int64_t embed_dim;
  int64_t num_heads;
  int64_t head_dim;
  double dropout;
  bool batch_first;
  Parameter in_proj_weight;  // [3E, E]: the q, k and v projections stacked
  Parameter in_proj_bias;    // [3E], undefined without bias
  Linear out_proj;

 private:
  struct Prepared;
  Prepared prepare(const Tensor& query, const Tensor& key, const Tensor& value,
                   const MultiheadAttentionForwardOptions& o);
  Tensor finish(const Prepared& p, const Tensor& heads);
};

/// The handle: mha(x) for self-attention, mha(q, k, v, {...}) for the full call.
/// (Handles are written out rather than TESSEL_MODULE so that braced options convert.)
class MultiheadAttention : public ModuleHolder<MultiheadAttentionImpl> {
 public:
  using ModuleHolder<MultiheadAttentionImpl>::ModuleHolder;
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, const MultiheadAttentionOptions& options = {})
      : ModuleHolder(std::make_shared<MultiheadAttentionImpl>(embed_dim, num_heads, options)) {}
  using ModuleHolder<MultiheadAttentionImpl>::operator();
  Tensor operator()(const Tensor& query, const Tensor& key, const Tensor& value,
                    const MultiheadAttentionForwardOptions& options = {}) const {
    return get()->forward(query, key, value, options);
  }
};

// ---------------------------------------------------------------------------
// Encoder and decoder layers

/// Constructor options of nn::TransformerEncoderLayer / TransformerDecoderLayer.
struct TransformerLayerOptions {
  int64_t dim_feedforward = 2048;
  /// One probability for every dropout of the layer (attention weights included).
  double dropout = 0.1;
  /// "relu" or "gelu" (exact, erf form).
  std::string activation = "relu";
  double layer_norm_eps = 1e-5;
  /// [B, T, E] inputs when true, [T, B, E] (PyTorch's default) when false.
  bool batch_first = false;
  /// Pre-norm (x + f(norm(x))) when true, post-norm (norm(x + f(x))) when false.
  bool norm_first = false;
};
using TransformerEncoderLayerOptions = TransformerLayerOptions;
using TransformerDecoderLayerOptions = TransformerLayerOptions;

/// Per-call arguments of TransformerEncoderLayer::forward.
struct TransformerEncoderLayerForwardOptions {
  /// [S, S] or [B * nhead, S, S]: bool (true = not allowed) or floating (added).
  Tensor src_mask;
  /// Bool [B, S]: true = padding, ignored as a key.
  Tensor src_key_padding_mask;
  /// Causal self-attention (with src_mask too, both must allow a key).
  bool is_causal = false;
};

/// torch.nn.TransformerEncoderLayer: self-attention then a feed-forward
/// block, each with dropout, a residual connection and a LayerNorm. Children
/// (and state-dict prefixes): self_attn, linear1, dropout, linear2, norm1,
/// norm2, dropout1, dropout2.
///
///   nn::TransformerEncoderLayer layer(16, 4, {.dim_feedforward = 32, .activation = "gelu",
///                                             .batch_first = true, .norm_first = true});
///   Tensor y = layer(randn({2, 5, 16}));                         // [2, 5, 16]
///   Tensor z = layer(x, {.src_key_padding_mask = pad, .is_causal = true});
class TransformerEncoderLayerImpl : public Module {
 public:
  TransformerEncoderLayerImpl(int64_t d_model, int64_t nhead, const TransformerEncoderLayerOptions& options = {});

  /// src [S, B, E] ([B, S, E] with batch_first; [S, E] unbatched) -> the same shape.
  Tensor forward(const Tensor& src, const TransformerEncoderLayerForwardOptions& options);
  Tensor forward(const Tensor& src) override { return forward(src, TransformerEncoderLayerForwardOptions{}); }
  /// A deep copy: the same options, its own parameters with the same values,
  /// the same training flags (what TransformerEncoder stacks).
  ///
  ///   nn::TransformerEncoderLayer copy = layer->clone();
  std::shared_ptr<TransformerEncoderLayerImpl> clone();

  int64_t d_model;
  int64_t nhead;
  TransformerEncoderLayerOptions options;
  MultiheadAttention self_attn;
  Linear linear1;
  Dropout dropout;
  Linear linear2;
  LayerNorm norm1, norm2;
  Dropout dropout1, dropout2;

 private:
  Tensor activation(const Tensor& x) const;
};

class TransformerEncoderLayer : public ModuleHolder<TransformerEncoderLayerImpl> {
 public:
  using ModuleHolder<TransformerEncoderLayerImpl>::ModuleHolder;
  TransformerEncoderLayer(int64_t d_model, int64_t nhead, const TransformerEncoderLayerOptions& options = {})
      : ModuleHolder(std::make_shared<TransformerEncoderLayerImpl>(d_model, nhead, options)) {}
  using ModuleHolder<TransformerEncoderLayerImpl>::operator();
  Tensor operator()(const Tensor& src, const TransformerEncoderLayerForwardOptions& options) const {
    return get()->forward(src, options);
  }
};

/// Per-call arguments of TransformerDecoderLayer::forward.
struct TransformerDecoderLayerForwardOptions {
  /// Self-attention mask [T, T] (bool true = not allowed, or floating).
  Tensor tgt_mask;
  /// Cross-attention mask [T, S].
  Tensor memory_mask;
  /// Bool [B, T] / [B, S]: true = padding.
  Tensor tgt_key_padding_mask;
  Tensor memory_key_padding_mask;
  /// Causal self-attention (the usual decoder mask).
  bool tgt_is_causal = false;
  /// Causal cross-attention (rarely wanted).
  bool memory_is_causal = false;
};

/// torch.nn.TransformerDecoderLayer: self-attention, cross-attention over
/// `memory`, then the feed-forward block. Children: self_attn,
/// multihead_attn, linear1, dropout, linear2, norm1, norm2, norm3, dropout1,
/// dropout2, dropout3.
///
///   nn::TransformerDecoderLayer layer(16, 4, {.dim_feedforward = 32, .batch_first = true});
///   Tensor y = layer(tgt, memory, {.tgt_is_causal = true});   // tgt [B, T, 16], memory [B, S, 16]
class TransformerDecoderLayerImpl : public Module {
 public:
  TransformerDecoderLayerImpl(int64_t d_model, int64_t nhead, const TransformerDecoderLayerOptions& options = {});

  /// tgt [T, B, E], memory [S, B, E] ([B, T, E] / [B, S, E] with batch_first) -> tgt's shape.
  Tensor forward(const Tensor& tgt, const Tensor& memory, const TransformerDecoderLayerForwardOptions& options = {});
  /// A decoder layer needs a memory: ModuleError pointing at forward(tgt, memory).
  Tensor forward(const Tensor& tgt) override;

  int64_t d_model;
  int64_t nhead;
  TransformerDecoderLayerOptions options;
  MultiheadAttention self_attn, multihead_attn;
  Linear linear1;
  Dropout dropout;
  Linear linear2;
  LayerNorm norm1, norm2, norm3;
  Dropout dropout1, dropout2, dropout3;

 private:
  Tensor activation(const Tensor& x) const;
};

class TransformerDecoderLayer : public ModuleHolder<TransformerDecoderLayerImpl> {
 public:
  using ModuleHolder<TransformerDecoderLayerImpl>::ModuleHolder;
  TransformerDecoderLayer(int64_t d_model, int64_t nhead, const TransformerDecoderLayerOptions& options = {})
      : ModuleHolder(std::make_shared<TransformerDecoderLayerImpl>(d_model, nhead, options)) {}
  using ModuleHolder<TransformerDecoderLayerImpl>::operator();
  Tensor operator()(const Tensor& tgt, const Tensor& memory,
                    const TransformerDecoderLayerForwardOptions& options = {}) const {
    return get()->forward(tgt, memory, options);
  }
};

// ---------------------------------------------------------------------------
// Encoder stack

/// Per-call arguments of TransformerEncoder::forward (passed to every layer).
struct TransformerEncoderForwardOptions {
  Tensor mask;
  Tensor src_key_padding_mask;
  bool is_causal = false;
};

/// torch.nn.TransformerEncoder: num_layers deep copies of `layer` (each its
/// own parameters, starting from `layer`'s values) under `layers.0`,
/// `layers.1`, ..., then the optional final `norm` (used as given, not copied).
/// `layer` itself is not registered, as in PyTorch.
///
///   nn::TransformerEncoderLayer layer(16, 4, {.dim_feedforward = 32});
///   nn::TransformerEncoder encoder(layer, 2, nn::LayerNorm(16));
///   Tensor y = encoder(randn({5, 2, 16}), {.is_causal = true});   // [5, 2, 16]
class TransformerEncoderImpl : public Module {
 public:
  TransformerEncoderImpl(const TransformerEncoderLayer& layer, int64_t num_layers,
                         std::optional<LayerNorm> norm = std::nullopt);

  Tensor forward(const Tensor& src, const TransformerEncoderForwardOptions& options);
  Tensor forward(const Tensor& src) override { return forward(src, TransformerEncoderForwardOptions{}); }

  int64_t num_layers;
  ModuleList layers;
  std::optional<LayerNorm> norm;
};

class TransformerEncoder : public ModuleHolder<TransformerEncoderImpl> {
 public:
  using ModuleHolder<TransformerEncoderImpl>::ModuleHolder;
  TransformerEncoder(const TransformerEncoderLayer& layer, int64_t num_layers,
                     std::optional<LayerNorm> norm = std::nullopt)
      : ModuleHolder(std::make_shared<TransformerEncoderImpl>(layer, num_layers, std::move(norm))) {}
  using ModuleHolder<TransformerEncoderImpl>::operator();
  Tensor operator()(const Tensor& src, const TransformerEncoderForwardOptions& options) const {
    return get()->forward(src, options);
  }
};

}  // namespace tessel::nn

namespace tessel {

/// The sinusoidal table of "Attention Is All You Need", [length, d_model]:
/// pe[pos, 2i] = sin(pos / 10000^(2i / d_model)), pe[pos, 2i + 1] = cos(same angle).
/// Computed in double precision, returned as `dtype` (no gradient).
///
///   Tensor pe = sinusoidal_positional_encoding(50, 16);   // [50, 16]
///   Tensor x = embed(tokens) + pe.narrow(0, 0, T);        // [B, T, 16]
Tensor sinusoidal_positional_encoding(int64_t length, int64_t d_model, DType dtype = DType::f32,
                                      Device device = cpu());

}  // namespace tessel
