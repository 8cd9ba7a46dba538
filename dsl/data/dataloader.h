// Mini-batches over in-memory tensors.
//   DataLoader loader(X, y, {.batch_size = 256, .shuffle = true, .seed = 0});
//   for (auto& [xb, yb] : loader) { ... }
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "dsl/tensor.h"

namespace tessel::data {

/// Which examples an epoch visits, in order (PyTorch's torch.utils.data.Sampler):
/// data::DistributedSampler gives each rank its share.
class Sampler {
 public:
  virtual ~Sampler() = default;
  /// This epoch's example indices.
  virtual std::vector<int64_t> indices() const = 0;
  /// Samplers that reshuffle per epoch draw the order of epoch `e` (Trainer calls it).
  virtual void set_epoch(uint64_t e) { (void)e; }
};

struct DataLoaderOptions {
  int64_t batch_size = 64;
  bool shuffle = false;
  bool drop_last = false;
  uint64_t seed = 0;  // each epoch draws a new order from (seed, epoch)
  /// Where the indices come from instead of 0..N-1 (shuffle must then be false, as in PyTorch).
  std::shared_ptr<Sampler> sampler;
};

class DataLoader {
 public:
  /// X: [N, ...] features, y: [N] targets. Both stay on the host; batches are copies.
  DataLoader(Tensor X, Tensor y, DataLoaderOptions opt);

  using Batch = std::pair<Tensor, Tensor>;
  class Epoch;
  /// The batches of one pass, gathered one at a time as they are visited (a
  /// batch's memory is reused by the next once the caller drops it); each
  /// call draws the next shuffled order.
  Epoch epoch();
  int64_t num_batches() const;
  int64_t num_examples() const { return n_; }
  const DataLoaderOptions& options() const { return opt_; }
  /// The sampler (null when none), for Trainer::fit's set_epoch.
  Sampler* sampler() const { return opt_.sampler.get(); }
  /// The next epoch() draws the shuffled order of epoch `e` (a resumed run continues the order).
  void set_epoch(uint64_t e) { epoch_ = e; }

 private:
  Tensor X_, y_;
  DataLoaderOptions opt_;
  int64_t n_;
  uint64_t epoch_ = 0;
};

/// One pass of a DataLoader: its order, drawn when epoch() was called, and
/// the batches over it, copied out of the data as they are reached.
///
///   for (auto& [xb, yb] : loader.epoch()) { ... }
///   auto e = loader.epoch();  DataLoader::Batch third = e[2];
class DataLoader::Epoch {
 public:
  class iterator {
   public:
    Batch& operator*() { return cur_; }
    Batch* operator->() { return &cur_; }
    iterator& operator++() {
      if (++i_ < e_->size()) cur_ = (*e_)[i_];
      return *this;
    }
    bool operator!=(const iterator& o) const { return i_ != o.i_; }
    bool operator==(const iterator& o) const { return i_ == o.i_; }

   private:
    friend class Epoch;
    iterator(const Epoch* e, size_t i) : e_(e), i_(i) {
      if (i_ < e_->size()) cur_ = (*e_)[i_];
    }
    const Epoch* e_;
    size_t i_;
    Batch cur_;
  };

  iterator begin() const { return iterator(this, 0); }
  iterator end() const { return iterator(this, size()); }
  size_t size() const { return batches_; }
  /// Batch i of this pass (a new copy each call).
  Batch operator[](size_t i) const;

 private:
  friend class DataLoader;
  Epoch(Tensor X, Tensor y, std::vector<int64_t> order, size_t batch, size_t batches)
      : X_(std::move(X)), y_(std::move(y)), order_(std::move(order)), batch_(batch), batches_(batches) {}
  Tensor X_, y_;
  std::vector<int64_t> order_;
  size_t batch_, batches_;
};

}  // namespace tessel::data
