// A character-level GPT as minGPT / nanoGPT write it (a GPT-2 decoder:
// pre-norm blocks of causal self-attention and an MLP), written with tessel's
// nn modules; shared by the sample (gpt.cpp), its training test (tests/train),
// the PyTorch interop test (tests/interop) and the AOT test (tests/aot).
//
//   GPT
//     transformer                     GPTTransformer
//       wte   Embedding(vocab, d)     token embedding (its weight is lm_head's)
//       wpe   Embedding(ctx, d)       learned position embedding
//       h     ModuleList of Block:
//               ln_1  LayerNorm(d)
//               attn  CausalSelfAttention: c_attn Linear(d, 3d), c_proj Linear(d, d)
//               ln_2  LayerNorm(d)
//               mlp   MLP: c_fc Linear(d, 4d), GELU, c_proj Linear(4d, d)
//       ln_f  LayerNorm(d)
//     lm_head Linear(d, vocab, bias=False), tied: its weight IS transformer.wte.weight
//
// The state-dict keys are those of the same torch.nn model (minGPT's names):
// transformer.wte.weight, transformer.wpe.weight, transformer.h.0.ln_1.weight,
// ..., transformer.h.0.attn.c_attn.weight, ..., transformer.ln_f.bias,
// lm_head.weight; lm_head.weight is the same tensor as transformer.wte.weight,
// so a checkpoint stores it once and records lm_head.weight as an alias.
//
//   gpt::GPT model(gpt::Config{.vocab_size = 96});   // 4 layers, 4 heads, d = 128, context 128
//   Tensor logits = model(idx);              // idx [B, T] int64 -> [B, T, vocab]
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "dsl/attention.h"
#include "dsl/nn/embedding.h"
#include "dsl/nn/init.h"
#include "dsl/nn/layer_norm.h"
#include "dsl/nn/module_list.h"
#include "dsl/tessel.h"
#include "dsl/train/optimizer.h"

namespace gpt {

struct Config {
  int64_t vocab_size = 0;    // the corpus's characters
  int64_t block_size = 128;  // context length: the longest input
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;      // d; a multiple of n_head
  double dropout = 0.1;      // on embeddings, attention weights, residual branches (training only)
};

/// Multi-head causal self-attention: one projection to q, k and v, the heads
/// as [B, H, T, hd] views, tessel's fused attention with the causal mask,
/// the heads joined again and projected back.
struct CausalSelfAttentionImpl : tessel::nn::Module {
  tessel::nn::Linear c_attn, c_proj;
  int64_t n_head, n_embd;
  double dropout;

  explicit CausalSelfAttentionImpl(const Config& c)
      : Module("CausalSelfAttention"),
        c_attn(c.n_embd, 3 * c.n_embd),
        c_proj(c.n_embd, c.n_embd),
        n_head(c.n_head),
        n_embd(c.n_embd),
        dropout(c.dropout) {
    if (c.n_embd % c.n_head != 0)
      throw tessel::ValueError(fmt::format("GPT: n_embd {} is not a multiple of n_head {}", c.n_embd, c.n_head));
    register_module("c_attn", c_attn);
    register_module("c_proj", c_proj);
  }

  tessel::Tensor forward(const tessel::Tensor& x) override {
    using namespace tessel;
    const int64_t B = x.size(0), T = x.size(1), C = n_embd, hd = C / n_head;
    Tensor qkv = c_attn(x);  // [B, T, 3C]: q, k, v side by side (torch: .split(C, dim=2))
    auto head_view = [&](int64_t i) { return qkv.narrow(2, i * C, C).reshape({B, T, n_head, hd}).transpose(1, 2); };
    const double p = is_training() ? dropout : 0.0;
    Tensor y = scaled_dot_product_attention(head_view(0), head_view(1), head_view(2),
                                            {.causal = true, .dropout_p = p});  // [B, H, T, hd]
    y = y.transpose(1, 2).reshape({B, T, C});                                  // heads side by side again
    return tessel::dropout(c_proj(y), p, is_training());
  }
};
TESSEL_MODULE(CausalSelfAttention);

/// The position-wise feed-forward network: d -> 4d -> GELU -> d.
struct MLPImpl : tessel::nn::Module {
  tessel::nn::Linear c_fc, c_proj;
  double dropout;

  explicit MLPImpl(const Config& c)
      : Module("MLP"), c_fc(c.n_embd, 4 * c.n_embd), c_proj(4 * c.n_embd, c.n_embd), dropout(c.dropout) {
    register_module("c_fc", c_fc);
    register_module("c_proj", c_proj);
  }

  tessel::Tensor forward(const tessel::Tensor& x) override {
    return tessel::dropout(c_proj(tessel::gelu(c_fc(x))), dropout, is_training());
  }
};
TESSEL_MODULE(MLP);

/// A pre-norm transformer block: x + attn(ln_1(x)), then + mlp(ln_2(.)).
struct BlockImpl : tessel::nn::Module {
  tessel::nn::LayerNorm ln_1;
  CausalSelfAttention attn;
  tessel::nn::LayerNorm ln_2;
  MLP mlp;

  explicit BlockImpl(const Config& c) : Module("Block"), ln_1(c.n_embd), attn(c), ln_2(c.n_embd), mlp(c) {
    register_module("ln_1", ln_1);
    register_module("attn", attn);
    register_module("ln_2", ln_2);
    register_module("mlp", mlp);
  }

  tessel::Tensor forward(const tessel::Tensor& x) override {
    tessel::Tensor h = x + attn(ln_1(x));
    return h + mlp(ln_2(h));
  }
};
TESSEL_MODULE(Block);

/// minGPT's `transformer` ModuleDict: the embeddings, the blocks, the final norm.
struct GPTTransformerImpl : tessel::nn::Module {
  tessel::nn::Embedding wte, wpe;
  tessel::nn::ModuleList h;
  tessel::nn::LayerNorm ln_f;

  explicit GPTTransformerImpl(const Config& c)
      : Module("ModuleDict"), wte(c.vocab_size, c.n_embd), wpe(c.block_size, c.n_embd), ln_f(c.n_embd) {
    for (int64_t i = 0; i < c.n_layer; ++i) h->append(Block(c));
    register_module("wte", wte);
    register_module("wpe", wpe);
    register_module("h", h);
    register_module("ln_f", ln_f);
  }
};
TESSEL_MODULE(GPTTransformer);

/// A bias-free Linear over a weight another module owns: `weight` is the
/// given Parameter itself (the same object, not a copy), so both uses train
/// one tensor and their gradients add up. (nn::Linear makes its own weight;
/// tying one to an embedding's is registering that Parameter here.) It
/// prints as PyTorch prints the tied lm_head: Linear(..., bias=False).
struct TiedLinearImpl : tessel::nn::Module {
  tessel::nn::Parameter weight;  // [out_features, in_features]

  explicit TiedLinearImpl(const tessel::nn::Parameter& w) : Module("Linear") {
    weight = register_parameter("weight", w);
  }
  tessel::Tensor forward(const tessel::Tensor& x) override { return tessel::matmul(x, weight.t()); }
  std::string extra_repr() const override {
    return fmt::format("in_features={}, out_features={}, bias=False", weight.size(1), weight.size(0));
  }
};
TESSEL_MODULE(TiedLinear);

/// The whole model: token ids [B, T] (T <= block_size) -> logits [B, T, vocab].
struct GPTImpl : tessel::nn::Module {
  Config config;
  GPTTransformer transformer;
  TiedLinear lm_head;

  explicit GPTImpl(const Config& c)
      : Module("GPT"), config(c), transformer(checked(c)), lm_head(transformer->wte->weight) {
    register_module("transformer", transformer);
    register_module("lm_head", lm_head);
    init_weights();
  }

  tessel::Tensor forward(const tessel::Tensor& idx) override {
    using namespace tessel;
    const int64_t T = idx.size(-1);
    if (idx.dim() != 2 || T > config.block_size)
      throw ShapeError(fmt::format("GPT: expected token ids [B, T] with T <= {}, got {}", config.block_size,
                                   idx.shape().str()));
    Tensor pos = arange(T, DType::i64, idx.device());                           // [T]
    Tensor x = dropout(transformer->wte(idx) + transformer->wpe(pos), config.dropout, is_training());
    for (const auto& block : *transformer->h) x = block->forward(x);
    return lm_head(transformer->ln_f(x));
  }

  /// Parameters, the tied lm_head / wte weight counted once (named_parameters lists it once).
  int64_t num_parameters() const {
    int64_t n = 0;
    for (auto& p : parameters()) n += p.numel();
    return n;
  }

 private:
  static const Config& checked(const Config& c) {
    if (c.vocab_size <= 0 || c.block_size <= 0 || c.n_layer <= 0 || c.n_head <= 0 || c.n_embd <= 0)
      throw tessel::ValueError(fmt::format("GPT: every size must be positive (vocab_size {}, block_size {}, "
                                           "n_layer {}, n_head {}, n_embd {})",
                                           c.vocab_size, c.block_size, c.n_layer, c.n_head, c.n_embd));
    return c;
  }

  // GPT-2's init (as minGPT's _init_weights): N(0, 0.02) for Linear and
  // Embedding weights, zero biases, LayerNorm's (1, 0); each residual
  // projection (c_proj) N(0, 0.02 / sqrt(2 n_layer)).
  void init_weights() {
    namespace init = tessel::nn::init;
    apply([](tessel::nn::Module& m) {
      if (auto* l = m.as_if<tessel::nn::LinearImpl>()) {
        init::normal_(l->weight, 0.0, 0.02);
        if (l->bias.defined()) init::zeros_(l->bias);
      } else if (auto* e = m.as_if<tessel::nn::EmbeddingImpl>()) {
        init::normal_(e->weight, 0.0, 0.02);
      }
    });
    const double proj_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config.n_layer));
    for (auto& [name, p] : named_parameters())
      if (name.ends_with("c_proj.weight")) init::normal_(p, 0.0, proj_std);
  }
};
TESSEL_MODULE(GPT);

/// AdamW's two parameter groups, as minGPT's configure_optimizers: the
/// Linear layers' weights decay; biases, LayerNorm weights and the embeddings
/// (wte, which is also lm_head's weight, and wpe) do not.
inline std::vector<tessel::optim::ParamGroup> param_groups(GPT& model, double weight_decay) {
  std::vector<tessel::nn::Parameter> decay, no_decay;
  std::vector<const tessel::TensorImpl*> decayed;
  for (auto& m : model->modules())
    if (auto* l = m->as_if<tessel::nn::LinearImpl>()) decayed.push_back(l->weight.impl());
  for (auto& [name, p] : model->named_parameters()) {
    bool d = std::find(decayed.begin(), decayed.end(), p.impl()) != decayed.end();
    (d ? decay : no_decay).push_back(p);
  }
  return {{decay, weight_decay}, {no_decay, 0.0}};
}

/// The next token drawn from the last position's logits: divided by
/// `temperature`, cut to the `top_k` largest (0: all), soft-maxed, sampled
/// with `rng` (on the host: one draw per token).
inline int64_t sample_token(const std::vector<float>& logits, double temperature, int64_t top_k, std::mt19937_64& rng) {
  std::vector<double> l(logits.begin(), logits.end());
  for (double& v : l) v /= temperature;
  if (top_k > 0 && top_k < static_cast<int64_t>(l.size())) {
    std::vector<double> sorted = l;
    std::nth_element(sorted.begin(), sorted.begin() + (top_k - 1), sorted.end(), std::greater<>());
    const double kth = sorted[static_cast<size_t>(top_k - 1)];
    for (double& v : l)
      if (v < kth) v = -INFINITY;
  }
  const double mx = *std::max_element(l.begin(), l.end());
  std::vector<double> w(l.size());
  for (size_t i = 0; i < l.size(); ++i) w[i] = std::exp(l[i] - mx);
  std::discrete_distribution<int64_t> pick(w.begin(), w.end());
  return pick(rng);
}

/// Continues `tokens` by `max_new_tokens`, as minGPT's generate: eval mode, no
/// gradients, the context cropped to the last block_size tokens. Every forward
/// pass has the shape [1, block_size] (the context left-aligned, the unused
/// tail padded with token 0, which a causal model's earlier positions never
/// see), so its kernels compile once; the logits are read at the context's
/// last position. Deterministic for a given `seed`.
inline std::vector<int64_t> generate(GPT& model, std::vector<int64_t> tokens, int64_t max_new_tokens,
                                     double temperature = 1.0, int64_t top_k = 0, uint64_t seed = 0) {
  using namespace tessel;
  if (tokens.empty()) throw ValueError("generate: the prompt must have at least one token");
  if (!(temperature > 0)) throw ValueError(fmt::format("generate: temperature must be > 0, got {}", temperature));
  NoGradGuard no_grad;
  const bool was_training = model->is_training();
  model->eval();
  const int64_t ctx = model->config.block_size, V = model->config.vocab_size;
  std::mt19937_64 rng(seed);
  std::vector<int64_t> window(static_cast<size_t>(ctx));
  for (int64_t n = 0; n < max_new_tokens; ++n) {
    const int64_t T = std::min<int64_t>(ctx, static_cast<int64_t>(tokens.size()));
    std::fill(window.begin(), window.end(), 0);
    std::copy(tokens.end() - T, tokens.end(), window.begin());
    Tensor logits = model(from_vector<int64_t>(window, {1, ctx}));  // [1, ctx, V]
    std::vector<float> last = logits[0][T - 1].to_vector<float>();
    if (static_cast<int64_t>(last.size()) != V) throw InternalError("generate: unexpected logits shape");
    tokens.push_back(sample_token(last, temperature, top_k, rng));
  }
  model->train(was_training);
  return tokens;
}

}  // namespace gpt
