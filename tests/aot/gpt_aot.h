// The GPT of the AOT test -- samples/gpt/gpt_model.h in a tiny configuration
// -- and the steps run on it, shared by the build-time generator
// (gpt_gen.cpp) and the program that links its kernels (gpt_run_test.cpp):
// the kernels depend on the structure, the shapes and the order of
// realizations, so both sides run exactly these steps on the same batch.
#pragma once

#include <string_view>

#include "dsl/tessel.h"
#include "dsl/train/optimizer.h"
#include "samples/gpt/gpt_model.h"

namespace aot_gpt {

using namespace tessel;

// No dropout: the comparison is bit for bit, step for step, and the export
// traces the steps as given (a deployment's forward is eval mode anyway).
inline gpt::Config config() {
  return {.vocab_size = 40, .block_size = 16, .n_layer = 2, .n_head = 2, .n_embd = 32, .dropout = 0.0};
}
inline constexpr int64_t batch = 4;
inline constexpr int train_steps = 3;
// The sample's optimizer, AdamW with weight decay 0.1, here on every
// parameter: an export's optimizer text has no parameter groups. The sample's
// gradient clipping reads the norm on the host between backward and the
// step, so it is not part of a traced step either.
inline constexpr std::string_view optimizer = "adamw:lr=0.003,beta2=0.99,weight_decay=0.1";
// Seed of the weights and of the batch, on both sides.
inline constexpr uint64_t seed = 13;

// The model with the sample's GPT-2 init drawn from the current seed, realized.
inline gpt::GPT make_initialized() {
  gpt::GPT m(config());
  for (auto& [k, t] : m->state_dict()) t.eval();
  return m;
}

// Token ids x and next-token targets y, both [batch, block_size], realized.
struct Batch {
  Tensor x, y;
};
inline Batch make_batch() {
  const gpt::Config c = config();
  Batch b{randint(0, c.vocab_size, {batch, c.block_size}), randint(0, c.vocab_size, {batch, c.block_size})};
  realize({b.x, b.y});
  return b;
}

// Inference as a deployment runs it: eval mode, no autograd. [batch, T, vocab].
inline Tensor eval_logits(gpt::GPT& m, const Tensor& x) {
  NoGradGuard g;
  m->eval();
  Tensor logits = m(x);
  logits.eval();
  return logits;
}

// The training loss: mean next-token cross-entropy over every position.
inline Tensor train_loss(gpt::GPT& m, const Tensor& x, const Tensor& y) {
  const int64_t N = x.numel(), V = m->config.vocab_size;
  return cross_entropy(m(x).reshape({N, V}), y.reshape({N}));
}

// One iteration of the training loop: zero_grad, the loss (realized: the
// loop reads it), backward, the optimizer's step. Returns the loss.
inline Tensor train_step(gpt::GPT& m, optim::Optimizer& opt, const Tensor& x, const Tensor& y) {
  m->train();
  opt.zero_grad();
  Tensor loss = train_loss(m, x, y);
  loss.eval();
  loss.backward();
  opt.step();
  return loss;
}

}  // namespace aot_gpt
