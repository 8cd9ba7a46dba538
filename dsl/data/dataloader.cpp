#include "dsl/data/dataloader.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

namespace tessel::data {

DataLoader::DataLoader(Tensor X, Tensor y, DataLoaderOptions opt) : X_(X.contiguous()), y_(y.contiguous()), opt_(opt) {
  if (X_.dim() == 0 || y_.dim() == 0)
    throw ShapeError("DataLoader: X and y need a leading example dimension");
  if (X_.size(0) != y_.size(0))
    throw ShapeError(fmt::format("DataLoader: X has {} examples (shape {}) but y has {} (shape {})", X_.size(0),
                                 X_.shape().str(), y_.size(0), y_.shape().str()));
  if (opt.batch_size <= 0) throw ValueError(fmt::format("DataLoader: batch_size must be positive, got {}", opt.batch_size));
  if (!X_.device().is_cpu() || !y_.device().is_cpu())
    throw DeviceError("DataLoader: keep the dataset on the CPU; move each batch with Trainer::prepare_batch");
  n_ = X_.size(0);
  if (opt_.sampler && opt_.shuffle)
    throw ValueError("DataLoader: sampler option is mutually exclusive with shuffle; the sampler decides the order");
}

int64_t DataLoader::num_batches() const {
  if (opt_.sampler) {
    auto m = static_cast<int64_t>(opt_.sampler->indices().size());
    return opt_.drop_last ? m / opt_.batch_size : (m + opt_.batch_size - 1) / opt_.batch_size;
  }
  return opt_.drop_last ? n_ / opt_.batch_size : (n_ + opt_.batch_size - 1) / opt_.batch_size;
}

namespace {
// Rows `idx` of a contiguous tensor, gathered into a new contiguous tensor.
Tensor gather_rows(const Tensor& src, const std::vector<int64_t>& idx, size_t begin, size_t end) {
  Shape s = src.shape();
  s[0] = static_cast<int64_t>(end - begin);
  Tensor out = empty(s, src.dtype());
  size_t row = static_cast<size_t>(src.numel() / std::max<int64_t>(src.size(0), 1)) * dtype_size(src.dtype());
  const std::byte* from = src.buffer().bytes(src.dtype());
  std::byte* to = out.buffer().bytes(src.dtype());
  for (size_t i = begin; i < end; ++i)
    std::memcpy(to + (i - begin) * row, from + static_cast<size_t>(idx[i]) * row, row);
  return out;
}
}  // namespace

DataLoader::Batch DataLoader::Epoch::operator[](size_t i) const {
  if (i >= batches_)
    throw IndexError(fmt::format("DataLoader epoch: batch {} of an epoch of {} batches", i, batches_));
  const size_t b = i * batch_, e = std::min(order_.size(), b + batch_);
  return {gather_rows(X_, order_, b, e), gather_rows(y_, order_, b, e)};
}

DataLoader::Epoch DataLoader::epoch() {
  std::vector<int64_t> order(static_cast<size_t>(n_));
  std::iota(order.begin(), order.end(), 0);
  if (opt_.sampler) {
    order = opt_.sampler->indices();
    for (int64_t i : order)
      if (i < 0 || i >= n_)
        throw IndexError(fmt::format("DataLoader: the sampler gave index {} for a dataset of {} examples", i, n_));
  } else if (opt_.shuffle) {
    std::mt19937_64 rng(opt_.seed * 0x9E3779B97F4A7C15ull + epoch_);
    std::shuffle(order.begin(), order.end(), rng);
  }
  ++epoch_;
  const auto bs = static_cast<size_t>(opt_.batch_size);
  const size_t batches = opt_.drop_last ? order.size() / bs : (order.size() + bs - 1) / bs;
  return Epoch(X_, y_, std::move(order), bs, batches);
}

}  // namespace tessel::data
