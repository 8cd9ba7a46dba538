// A lookup table of learned vectors, as torch.nn.Embedding: weight
// [num_embeddings, embedding_dim] drawn from N(0, 1), state-dict key `weight`.
//   nn::Embedding wte(vocab, 128);
//   Tensor x = wte(tokens);            // [B, T] integers -> [B, T, 128]
// Forward is one gather kernel; backward adds each row's gradient into the
// rows the ids name (a deterministic scatter-add, no atomics).
#pragma once

#include "dsl/nn/module.h"

namespace tessel::nn {

class EmbeddingImpl : public Module {
 public:
  EmbeddingImpl(int64_t num_embeddings, int64_t embedding_dim);
  Tensor forward(const Tensor& ids) override;
  std::string extra_repr() const override;

  int64_t num_embeddings = 0;
  int64_t embedding_dim = 0;
  Parameter weight;  // [num_embeddings, embedding_dim]
};
TESSEL_MODULE(Embedding);

}  // namespace tessel::nn
