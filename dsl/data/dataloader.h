// Mini-batches over in-memory tensors.
//   DataLoader loader(X, y, {.batch_size = 256, .shuffle = true, .seed = 0});
//   for (auto& [xb, yb] : loader) { ... }
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "dsl/tensor.h"

namespace tessel::data {

struct DataLoaderOptions {
  int64_t batch_size = 64;
  bool shuffle = false;
  bool drop_last = false;
  uint64_t seed = 0;  // each epoch draws a new order from (seed, epoch)
};

class DataLoader {
 public:
  /// X: [N, ...] features, y: [N] targets. Both stay on the host; batches are copies.
  DataLoader(Tensor X, Tensor y, DataLoaderOptions opt);

  using Batch = std::pair<Tensor, Tensor>;
  /// Batches of one pass; shuffling changes order each time begin() is called.
  std::vector<Batch> epoch();
  int64_t num_batches() const;
  int64_t num_examples() const { return n_; }
  const DataLoaderOptions& options() const { return opt_; }

 private:
  Tensor X_, y_;
  DataLoaderOptions opt_;
  int64_t n_;
  uint64_t epoch_ = 0;
};

}  // namespace tessel::data
