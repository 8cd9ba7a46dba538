// data::DistributedSampler: each rank's share of a dataset's indices, as
// PyTorch's torch.utils.data.distributed.DistributedSampler. With shuffle, the
// order of epoch e is a permutation drawn from (seed, e), the same on every
// rank (seed must be the same everywhere); each rank then takes every
// num_replicas-th index starting at its rank. Without drop_last the list is
// first padded by repeating its beginning to a multiple of num_replicas, so
// every rank gets ceil(N / num_replicas) indices (some examples appear twice in
// an epoch); with drop_last the tail is dropped instead.
//
//   auto sampler = std::make_shared<data::DistributedSampler>(X.size(0));   // rank, size: the default group
//   data::DataLoader loader(X, y, {.batch_size = 256 / world, .sampler = sampler});
//   for (int e = 0; e < epochs; ++e) {
//     sampler->set_epoch(e);              // else every epoch has the same order (Trainer::fit calls it)
//     for (auto& [xb, yb] : loader.epoch()) ...
//   }
#pragma once

#include <cstdint>
#include <vector>

#include "dsl/data/dataloader.h"

namespace tessel::data {

struct DistributedSamplerOptions {
  int num_replicas = -1;  // -1: the default process group's size
  int rank = -1;          // -1: this process's rank in it
  bool shuffle = true;
  uint64_t seed = 0;      // the same on every rank
  bool drop_last = false;
};

class DistributedSampler : public Sampler {
 public:
  explicit DistributedSampler(int64_t dataset_size, DistributedSamplerOptions options = {});
  std::vector<int64_t> indices() const override;
  void set_epoch(uint64_t e) override { epoch_ = e; }
  uint64_t epoch() const { return epoch_; }
  /// Indices per rank and in all (num_samples * num_replicas).
  int64_t num_samples() const { return num_samples_; }
  int64_t total_size() const { return num_samples_ * replicas_; }
  int rank() const { return rank_; }
  int num_replicas() const { return replicas_; }

 private:
  int64_t n_;
  DistributedSamplerOptions opt_;
  int replicas_, rank_;
  int64_t num_samples_;
  uint64_t epoch_ = 0;
};

}  // namespace tessel::data
