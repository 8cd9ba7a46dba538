#include "dsl/data/distributed_sampler.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "runtime/dist/init.h"

namespace tessel::data {

DistributedSampler::DistributedSampler(int64_t dataset_size, DistributedSamplerOptions options)
    : n_(dataset_size), opt_(options) {
  if (n_ <= 0) throw ValueError(fmt::format("DistributedSampler: the dataset must hold examples, got size {}", n_));
  replicas_ = opt_.num_replicas;
  rank_ = opt_.rank;
  if (replicas_ < 0 || rank_ < 0) {
    if (!dist::is_initialized())
      throw ValueError("DistributedSampler: no process group to take num_replicas and rank from; call "
                       "dist::init_process_group() first or give .num_replicas and .rank");
    auto g = dist::default_group();
    if (replicas_ < 0) replicas_ = g->size();
    if (rank_ < 0) rank_ = g->rank();
  }
  if (replicas_ == 0 || rank_ >= replicas_)
    throw ValueError(fmt::format("DistributedSampler: invalid rank {}, rank should be in the interval [0, {}]", rank_,
                                 replicas_ - 1));
  // PyTorch's sizes: drop_last drops the tail that would not split evenly.
  if (opt_.drop_last && n_ % replicas_ != 0) num_samples_ = (n_ - replicas_ + replicas_ - 1) / replicas_;
  else num_samples_ = (n_ + replicas_ - 1) / replicas_;
  if (num_samples_ <= 0)
    throw ValueError(fmt::format("DistributedSampler: {} examples with drop_last leave nothing for {} ranks", n_,
                                 replicas_));
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> all(static_cast<size_t>(n_));
  std::iota(all.begin(), all.end(), 0);
  if (opt_.shuffle) {
    std::mt19937_64 rng(opt_.seed + epoch_);
    // Fisher-Yates with our own index draw: the same order from every standard library.
    for (size_t i = all.size() - 1; i > 0; --i) {
      uint64_t j = rng() % (i + 1);
      std::swap(all[i], all[j]);
    }
  }
  const auto total = static_cast<size_t>(total_size());
  if (all.size() < total) {
    size_t len = all.size();
    for (size_t i = 0; all.size() < total; ++i) all.push_back(all[i % len]);
  } else {
    all.resize(total);
  }
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  for (size_t i = static_cast<size_t>(rank_); i < total; i += static_cast<size_t>(replicas_)) mine.push_back(all[i]);
  return mine;
}

}  // namespace tessel::data
