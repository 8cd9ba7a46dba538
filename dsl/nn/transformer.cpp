#include "dsl/nn/transformer.h"

#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "dsl/attention.h"
#include "dsl/functional.h"
#include "dsl/indexing.h"
#include "dsl/nn/init.h"

namespace tessel::nn {

namespace {


Tensor neg_inf_like(const Tensor& like) { return full({}, -INFINITY, like.dtype(), like.device()); }

// x W^T + b for one slice of a packed projection.
Tensor project(const Tensor& x, const Tensor& w, const Tensor& b) {
  Tensor y = matmul(x, w.t());
  return b.defined() ? add(y, b) : y;
}

Tensor apply_activation(const std::string& name, const Tensor& x) {
  return name == "gelu" ? gelu(x, "none") : x.relu();
}

// The layer options, once checked (before any submodule is built).
const TransformerLayerOptions& checked_options(const char* who, const TransformerLayerOptions& o) {
  if (o.activation != "relu" && o.activation != "gelu")
    throw ValueError(fmt::format("{}: activation should be \"relu\" or \"gelu\", not \"{}\"", who, o.activation));
  return o;
}

// The rank and last dim every layer input must have.
void check_layer_input(const Module& m, const char* what, const Tensor& x, int64_t d_model, bool batch_first) {
  if (!x.defined()) throw ValueError(fmt::format("{} ({}): {} is an undefined tensor", m.path(), m.type_name(), what));
  if (x.dim() != 2 && x.dim() != 3)
    throw ShapeError(fmt::format("{} ({}): {} must be 3-D {} or 2-D [T, {}] (unbatched), got shape {}", m.path(),
                                 m.type_name(), what, batch_first ? fmt::format("[B, T, {}]", d_model)
                                                                  : fmt::format("[T, B, {}]", d_model),
                                 d_model, x.shape().str()));
  if (x.size(-1) != d_model)
    throw ShapeError(fmt::format("{} ({}): {} must have last dim d_model = {}, got shape {}", m.path(), m.type_name(),
                                 what, d_model, x.shape().str()));
}

}  // namespace

// ---------------------------------------------------------------------------
// MultiheadAttention

// q, k, v split into heads [B, H, L or S, Dh], the combined mask and how to undo the layout.
struct MultiheadAttentionImpl::Prepared {
  Tensor q, k, v;
  AttentionOptions attn;  // mask / causal / dropout_p for the core
  int64_t B = 0, L = 0, S = 0;
  bool batched = true;
};

MultiheadAttentionImpl::MultiheadAttentionImpl(int64_t embed_dim, int64_t num_heads,
                                               const MultiheadAttentionOptions& o)
    : Module("MultiheadAttention"),
      embed_dim(embed_dim),
      num_heads(num_heads),
      head_dim(num_heads > 0 ? embed_dim / num_heads : 0),
      dropout(o.dropout),
      batch_first(o.batch_first),
      out_proj(std::shared_ptr<LinearImpl>()) {
  const std::string who = fmt::format("MultiheadAttention(embed_dim={}, num_heads={})", embed_dim, num_heads);
  if (embed_dim <= 0 || num_heads <= 0)
    throw ValueError(fmt::format("{}: embed_dim and num_heads must be positive", who));
  if (embed_dim % num_heads != 0)
    throw ValueError(fmt::format("{}: embed_dim must be divisible by num_heads ({} % {} = {})", who, embed_dim,
                                 num_heads, embed_dim % num_heads));
  if (!(o.dropout >= 0.0 && o.dropout <= 1.0))
    throw ValueError(fmt::format("{}: dropout must be in [0, 1], got {}", who, o.dropout));
  in_proj_weight = register_parameter("in_proj_weight", Parameter(empty({3 * embed_dim, embed_dim})));
  if (o.bias) in_proj_bias = register_parameter("in_proj_bias", Parameter(empty({3 * embed_dim})));
  out_proj = register_module("out_proj", Linear(embed_dim, embed_dim, o.bias));
  reset_parameters();
}

void MultiheadAttentionImpl::reset_parameters() {
  init::xavier_uniform_(in_proj_weight);
  if (in_proj_bias.defined()) init::zeros_(in_proj_bias);
  // out_proj.weight keeps Linear's default draw, as PyTorch's does.
  if (out_proj->bias.defined()) init::zeros_(out_proj->bias);
}

std::string MultiheadAttentionImpl::extra_repr() const {
  return fmt::format("embed_dim={}, num_heads={}, dropout={}, bias={}, batch_first={}", embed_dim, num_heads, dropout,
                     in_proj_bias.defined() ? "True" : "False", batch_first ? "True" : "False");
}

MultiheadAttentionImpl::Prepared MultiheadAttentionImpl::prepare(const Tensor& query, const Tensor& key,
                                                                 const Tensor& value,
                                                                 const MultiheadAttentionForwardOptions& o) {
  const std::string who = fmt::format("{} ({})", path(), type_name());
  for (const auto& [name, t] : {std::pair{"query", &query}, {"key", &key}, {"value", &value}})
    if (!t->defined()) throw ValueError(fmt::format("{}: {} is an undefined tensor", who, name));
  const std::string layout = batch_first ? "[B, L, E]" : "[L, B, E]";
  if (query.dim() != 2 && query.dim() != 3)
    throw ShapeError(fmt::format("{}: query must be 3-D {} (batch_first={}) or 2-D [L, E] (unbatched), got shape {}",
                                 who, layout, batch_first ? "true" : "false", query.shape().str()));
  if (key.dim() != query.dim() || value.dim() != query.dim())
    throw ShapeError(fmt::format("{}: query, key and value must have the same rank (all batched or all unbatched), "
                                 "got shapes {}, {} and {}",
                                 who, query.shape().str(), key.shape().str(), value.shape().str()));
  if (query.size(-1) != embed_dim || key.size(-1) != embed_dim || value.size(-1) != embed_dim)
    throw ShapeError(fmt::format("{}: query, key and value must have last dim embed_dim = {}, got shapes {}, {} and {}",
                                 who, embed_dim, query.shape().str(), key.shape().str(), value.shape().str()));
  if (!(key.shape() == value.shape()))
    throw ShapeError(fmt::format("{}: key shape {} does not match value shape {}", who, key.shape().str(),
                                 value.shape().str()));
  for (const auto& [name, t] : {std::pair{"query", &query}, {"key", &key}, {"value", &value}})
    if (!is_floating(t->dtype()))
      throw DTypeError(fmt::format("{}: {} must be floating, got {}; convert it with .to(DType::f32)", who, name,
                                   dtype_name(t->dtype())));

  Prepared p;
  p.batched = query.dim() == 3;
  // Everything batch-first inside: [B, L, E].
  auto to_bfirst = [&](const Tensor& x) {
    if (!p.batched) return x.unsqueeze(0);
    return batch_first ? x : x.transpose(0, 1);
  };
  Tensor qb = to_bfirst(query), kb = to_bfirst(key), vb = to_bfirst(value);
  p.B = qb.size(0);
  p.L = qb.size(1);
  p.S = kb.size(1);
  if (kb.size(0) != p.B)
    throw ShapeError(fmt::format("{}: query and key must have the same batch size, got shapes {} and {}", who,
                                 query.shape().str(), key.shape().str()));
  const int64_t E = embed_dim, H = num_heads, Dh = head_dim, B = p.B, L = p.L, S = p.S;

  // The packed input projection: one matmul for self-attention, three slices otherwise.
  Tensor q, k, v;
  if (query.is_same(key) && key.is_same(value)) {
    auto qkv = chunk(project(qb, in_proj_weight, in_proj_bias), 3, -1);
    q = qkv[0], k = qkv[1], v = qkv[2];
  } else {
    auto slice_b = [&](int64_t i) { return in_proj_bias.defined() ? in_proj_bias.narrow(0, i * E, E) : Tensor(); };
    q = project(qb, in_proj_weight.narrow(0, 0, E), slice_b(0));
    k = project(kb, in_proj_weight.narrow(0, E, E), slice_b(1));
    v = project(vb, in_proj_weight.narrow(0, 2 * E, E), slice_b(2));
  }
  p.q = q.reshape({B, L, H, Dh}).transpose(1, 2);
  p.k = k.reshape({B, S, H, Dh}).transpose(1, 2);
  p.v = v.reshape({B, S, H, Dh}).transpose(1, 2);

  // Masks, each broadcastable to [B, H, L, S]: `blocked` (bool, true = not
  // allowed) and `added` (floating) as nn.MultiheadAttention reads them.
  Tensor blocked, added;
  auto block = [&](const Tensor& m) { blocked = blocked.defined() ? binary_op(ir::Op::Or, blocked, m) : m; };
  auto add_mask = [&](const Tensor& m) {
    Tensor f = m.to(qb.dtype());
    added = added.defined() ? add(added, f) : f;
  };
  if (o.key_padding_mask.defined()) {
    const Tensor& m = o.key_padding_mask;
    if (m.dtype() != DType::b8 && !is_floating(m.dtype()))
      throw DTypeError(fmt::format("{}: key_padding_mask must be bool (true = ignore the key) or floating (added), "
                                   "got {}",
                                   who, dtype_name(m.dtype())));
    std::vector<int64_t> want = p.batched ? std::vector<int64_t>{B, S} : std::vector<int64_t>{S};
    if (m.shape().dims != want)
      throw ShapeError(fmt::format("{}: key_padding_mask must have shape {} ([B, S]), got {}", who,
                                   Shape(want).str(), m.shape().str()));
    Tensor m4 = m.reshape({B, 1, 1, S});
    if (m.dtype() == DType::b8) block(m4);
    else add_mask(m4);
  }
  if (o.attn_mask.defined()) {
    const Tensor& m = o.attn_mask;
    if (m.dtype() != DType::b8 && !is_floating(m.dtype()))
      throw DTypeError(fmt::format("{}: attn_mask must be bool (true = not allowed to attend) or floating (added), "
                                   "got {}",
                                   who, dtype_name(m.dtype())));
    Tensor m4;
    if (m.dim() == 2) {
      if (m.size(0) != L || m.size(1) != S)
        throw ShapeError(fmt::format("{}: the 2-D attn_mask must have shape [L, S] = [{}, {}], got {}", who, L, S,
                                     m.shape().str()));
      m4 = m;
    } else if (m.dim() == 3) {
      const int64_t n = p.batched ? B * H : H;
      if (m.size(0) != n || m.size(1) != L || m.size(2) != S)
        throw ShapeError(fmt::format("{}: the 3-D attn_mask must have shape [{}, L, S] = [{}, {}, {}], got {}", who,
                                     p.batched ? "B * num_heads" : "num_heads", n, L, S, m.shape().str()));
      m4 = m.reshape({B, H, L, S});
    } else {
      throw ShapeError(fmt::format("{}: attn_mask must be 2-D [L, S] or 3-D [B * num_heads, L, S], got shape {}", who,
                                   m.shape().str()));
    }
    if (m.dtype() == DType::b8) block(m4);
    else add_mask(m4);
  }
  if (o.is_causal && (blocked.defined() || added.defined()))
    block(logical_not(tril(ones({L, S}, DType::b8, qb.device()))));
  else if (o.is_causal)
    p.attn.causal = true;

  if (added.defined()) p.attn.mask = blocked.defined() ? where(blocked, neg_inf_like(added), added) : added;
  else if (blocked.defined()) p.attn.mask = logical_not(blocked);  // scaled_dot_product_attention: true = attend
  p.attn.dropout_p = is_training() ? dropout : 0.0;
  return p;
}

Tensor MultiheadAttentionImpl::finish(const Prepared& p, const Tensor& heads) {
  Tensor y = out_proj(heads.transpose(1, 2).reshape({p.B, p.L, embed_dim}));
  if (!p.batched) return y.squeeze(0);
  return batch_first ? y : y.transpose(0, 1);
}

Tensor MultiheadAttentionImpl::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                       const MultiheadAttentionForwardOptions& o) {
  Prepared p = prepare(query, key, value, o);
  return finish(p, scaled_dot_product_attention(p.q, p.k, p.v, p.attn));
}

MultiheadAttentionOutput MultiheadAttentionImpl::forward_with_weights(const Tensor& query, const Tensor& key,
                                                                      const Tensor& value,
                                                                      const MultiheadAttentionForwardOptions& o) {
  Prepared p = prepare(query, key, value, o);
  // The composite of scaled_dot_product_attention_math, keeping the probabilities.
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  Tensor s = binary_op(ir::Op::Mul, p.q.matmul(p.k.transpose(-2, -1)), Scalar(scale));
  if (p.attn.causal) s = masked_fill(s, logical_not(tril(ones({p.L, p.S}, DType::b8, s.device()))), -INFINITY);
  if (p.attn.mask.defined()) {
    if (p.attn.mask.dtype() == DType::b8) s = where(p.attn.mask, s, neg_inf_like(s));
    else s = add(s, p.attn.mask);
  }
  Tensor masked = binary_op(ir::Op::Eq, s, Scalar(-INFINITY));
  Tensor dead_row = masked.all(-1, /*keepdim=*/true);
  Tensor zero = zeros({}, s.dtype(), s.device());
  Tensor w = softmax(where(dead_row, zero, s), -1);
  w = where(masked, zero, w);
  if (p.attn.dropout_p > 0) w = tessel::dropout(w, p.attn.dropout_p, /*training=*/true);
  MultiheadAttentionOutput out;
  out.output = finish(p, w.matmul(p.v));
  out.weights = o.average_attn_weights ? w.mean({1}) : w;  // [B, L, S] or [B, H, L, S]
  if (!p.batched) out.weights = out.weights.squeeze(0);
  return out;
}

// ---------------------------------------------------------------------------
// Encoder layer

TransformerEncoderLayerImpl::TransformerEncoderLayerImpl(int64_t d_model, int64_t nhead,
                                                         const TransformerEncoderLayerOptions& o)
    : Module("TransformerEncoderLayer"),
      d_model(d_model),
      nhead(nhead),
      options(checked_options("TransformerEncoderLayer", o)),
      self_attn(d_model, nhead, MultiheadAttentionOptions{.dropout = o.dropout, .batch_first = o.batch_first}),
      linear1(d_model, o.dim_feedforward),
      dropout(o.dropout),
      linear2(o.dim_feedforward, d_model),
      norm1(d_model, o.layer_norm_eps),
      norm2(d_model, o.layer_norm_eps),
      dropout1(o.dropout),
      dropout2(o.dropout) {
  // PyTorch's registration order, so state-dict keys come out in its order.
  register_module("self_attn", self_attn);
  register_module("linear1", linear1);
  register_module("dropout", dropout);
  register_module("linear2", linear2);
  register_module("norm1", norm1);
  register_module("norm2", norm2);
  register_module("dropout1", dropout1);
  register_module("dropout2", dropout2);
}

Tensor TransformerEncoderLayerImpl::activation(const Tensor& x) const { return apply_activation(options.activation, x); }

Tensor TransformerEncoderLayerImpl::forward(const Tensor& src, const TransformerEncoderLayerForwardOptions& o) {
  check_layer_input(*this, "src", src, d_model, options.batch_first);
  auto sa = [&](const Tensor& h) {
    return dropout1(self_attn(h, h, h,
                              {.key_padding_mask = o.src_key_padding_mask, .attn_mask = o.src_mask,
                               .is_causal = o.is_causal}));
  };
  auto ff = [&](const Tensor& h) { return dropout2(linear2(dropout(activation(linear1(h))))); };
  Tensor x = src;
  if (options.norm_first) {
    x = add(x, sa(norm1(x)));
    x = add(x, ff(norm2(x)));
  } else {
    x = norm1(add(x, sa(x)));
    x = norm2(add(x, ff(x)));
  }
  return x;
}

namespace {

// Copies what a deep copy keeps beyond the state dict: training flags, the
// parameters' requires_grad, and the attributes that may have been changed
// after construction (eps, dropout probabilities).
void copy_module_state(Module& from, Module& to) {
  auto a = from.modules(), b = to.modules();
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    b[i]->train(a[i]->is_training());  // parents first, so children end with their own flag
    if (auto* x = a[i]->as_if<LayerNormImpl>()) b[i]->as<LayerNormImpl>().eps = x->eps;
    if (auto* x = a[i]->as_if<DropoutImpl>()) b[i]->as<DropoutImpl>().p = x->p;
    if (auto* x = a[i]->as_if<MultiheadAttentionImpl>()) b[i]->as<MultiheadAttentionImpl>().dropout = x->dropout;
  }
  auto pa = from.named_parameters(), pb = to.named_parameters();
  for (auto& [name, p] : pa)
    if (pb.contains(name)) pb[name].requires_grad_(p.requires_grad());
}

}  // namespace

std::shared_ptr<TransformerEncoderLayerImpl> TransformerEncoderLayerImpl::clone() {
  auto c = std::make_shared<TransformerEncoderLayerImpl>(d_model, nhead, options);
  c->to(self_attn->in_proj_weight.device());  // where the original lives
  c->load_state_dict(state_dict());
  copy_module_state(*this, *c);
  return c;
}

// ---------------------------------------------------------------------------
// Decoder layer

TransformerDecoderLayerImpl::TransformerDecoderLayerImpl(int64_t d_model, int64_t nhead,
                                                         const TransformerDecoderLayerOptions& o)
    : Module("TransformerDecoderLayer"),
      d_model(d_model),
      nhead(nhead),
      options(checked_options("TransformerDecoderLayer", o)),
      self_attn(d_model, nhead, MultiheadAttentionOptions{.dropout = o.dropout, .batch_first = o.batch_first}),
      multihead_attn(d_model, nhead, MultiheadAttentionOptions{.dropout = o.dropout, .batch_first = o.batch_first}),
      linear1(d_model, o.dim_feedforward),
      dropout(o.dropout),
      linear2(o.dim_feedforward, d_model),
      norm1(d_model, o.layer_norm_eps),
      norm2(d_model, o.layer_norm_eps),
      norm3(d_model, o.layer_norm_eps),
      dropout1(o.dropout),
      dropout2(o.dropout),
      dropout3(o.dropout) {
  register_module("self_attn", self_attn);
  register_module("multihead_attn", multihead_attn);
  register_module("linear1", linear1);
  register_module("dropout", dropout);
  register_module("linear2", linear2);
  register_module("norm1", norm1);
  register_module("norm2", norm2);
  register_module("norm3", norm3);
  register_module("dropout1", dropout1);
  register_module("dropout2", dropout2);
  register_module("dropout3", dropout3);
}

Tensor TransformerDecoderLayerImpl::activation(const Tensor& x) const { return apply_activation(options.activation, x); }

Tensor TransformerDecoderLayerImpl::forward(const Tensor&) {
  throw ModuleError(fmt::format("{} ({}): a decoder layer needs the encoder's output: call forward(tgt, memory) or "
                                "layer(tgt, memory, {{...}})",
                                path(), type_name()));
}

Tensor TransformerDecoderLayerImpl::forward(const Tensor& tgt, const Tensor& memory,
                                            const TransformerDecoderLayerForwardOptions& o) {
  check_layer_input(*this, "tgt", tgt, d_model, options.batch_first);
  check_layer_input(*this, "memory", memory, d_model, options.batch_first);
  if (memory.dim() != tgt.dim())
    throw ShapeError(fmt::format("{} ({}): tgt and memory must both be batched or both unbatched, got shapes {} and {}",
                                 path(), type_name(), tgt.shape().str(), memory.shape().str()));
  auto sa = [&](const Tensor& h) {
    return dropout1(self_attn(h, h, h,
                              {.key_padding_mask = o.tgt_key_padding_mask, .attn_mask = o.tgt_mask,
                               .is_causal = o.tgt_is_causal}));
  };
  auto mha = [&](const Tensor& h) {
    return dropout2(multihead_attn(h, memory, memory,
                                   {.key_padding_mask = o.memory_key_padding_mask, .attn_mask = o.memory_mask,
                                    .is_causal = o.memory_is_causal}));
  };
  auto ff = [&](const Tensor& h) { return dropout3(linear2(dropout(activation(linear1(h))))); };
  Tensor x = tgt;
  if (options.norm_first) {
    x = add(x, sa(norm1(x)));
    x = add(x, mha(norm2(x)));
    x = add(x, ff(norm3(x)));
  } else {
    x = norm1(add(x, sa(x)));
    x = norm2(add(x, mha(x)));
    x = norm3(add(x, ff(x)));
  }
  return x;
}

// ---------------------------------------------------------------------------
// Encoder stack

TransformerEncoderImpl::TransformerEncoderImpl(const TransformerEncoderLayer& layer, int64_t num_layers,
                                               std::optional<LayerNorm> norm)
    : Module("TransformerEncoder"), num_layers(num_layers), norm(std::move(norm)) {
  if (!layer.get()) throw ValueError("TransformerEncoder: the encoder layer is a null handle");
  if (num_layers <= 0)
    throw ValueError(fmt::format("TransformerEncoder: num_layers must be positive, got {}", num_layers));
  for (int64_t i = 0; i < num_layers; ++i) layers->append(layer->clone());
  register_module("layers", layers);
  if (this->norm) {
    if (!this->norm->get()) throw ValueError("TransformerEncoder: norm is a null handle");
    register_module("norm", *this->norm);
  }
}

Tensor TransformerEncoderImpl::forward(const Tensor& src, const TransformerEncoderForwardOptions& o) {
  Tensor x = src;
  for (const auto& l : *layers)
    x = l.as<TransformerEncoderLayer>()->forward(
        x, {.src_mask = o.mask, .src_key_padding_mask = o.src_key_padding_mask, .is_causal = o.is_causal});
  if (norm) x = (*norm)(x);
  return x;
}

}  // namespace tessel::nn

namespace tessel {

Tensor sinusoidal_positional_encoding(int64_t length, int64_t d_model, DType dtype, Device device) {
  if (length < 0 || d_model <= 0)
    throw ValueError(fmt::format("sinusoidal_positional_encoding: length must be >= 0 and d_model positive, got "
                                 "length {} and d_model {}",
                                 length, d_model));
  if (!is_floating(dtype))
    throw DTypeError(fmt::format("sinusoidal_positional_encoding: dtype must be floating, got {}", dtype_name(dtype)));
  std::vector<double> v(static_cast<size_t>(length * d_model));
  for (int64_t pos = 0; pos < length; ++pos)
    for (int64_t j = 0; j < d_model; ++j) {
      const int64_t i2 = j - j % 2;  // 2i
      const double angle =
          static_cast<double>(pos) / std::pow(10000.0, static_cast<double>(i2) / static_cast<double>(d_model));
      v[static_cast<size_t>(pos * d_model + j)] = j % 2 == 0 ? std::sin(angle) : std::cos(angle);
    }
  return from_vector(v, Shape({length, d_model}), device).to(dtype);
}

}  // namespace tessel
