#include "dsl/nn/embedding.h"

#include <fmt/format.h>

#include "dsl/indexing.h"
#include "dsl/nn/init.h"

namespace tessel::nn {

EmbeddingImpl::EmbeddingImpl(int64_t num, int64_t dim) : Module("Embedding"), num_embeddings(num), embedding_dim(dim) {
  if (num <= 0 || dim <= 0)
    throw ValueError(fmt::format("Embedding({}, {}): num_embeddings and embedding_dim must be positive", num, dim));
  weight = register_parameter("weight", Parameter(empty({num, dim})));
  init::normal_(weight, 0, 1);
}

Tensor EmbeddingImpl::forward(const Tensor& ids) {
  if (!is_integral(ids.dtype()))
    throw DTypeError(fmt::format("{} ({}): expected integer ids, got a {} tensor; convert them with .to(DType::i64)",
                                 path(), type_name(), dtype_name(ids.dtype())));
  return embedding(ids, weight);
}

std::string EmbeddingImpl::extra_repr() const { return fmt::format("{}, {}", num_embeddings, embedding_dim); }

}  // namespace tessel::nn
