#include "runtime/cuda/device_allocator.h"

#include <algorithm>
#include <array>

#include <fmt/format.h>

#include "runtime/errors.h"

namespace tessel::cuda {

namespace {

class DriverMemorySource final : public DeviceMemorySource {
 public:
  explicit DriverMemorySource(int ordinal) : ordinal_(ordinal) {}
  int device() const override { return ordinal_; }
  CUdeviceptr allocate(std::size_t bytes) override {
    CUdeviceptr p = 0;
    return try_mem_alloc(ordinal_, bytes, &p) == CUDA_SUCCESS ? p : 0;
  }
  void free(CUdeviceptr ptr) override {
    set_device(ordinal_);
    mem_free(ptr);
  }
  MemoryInfo memory_info() override { return cuda::memory_info(ordinal_); }
  CUevent record_event(CUstream stream) override {
    CUevent e = event_create(ordinal_);
    event_record(e, stream);
    return e;
  }
  bool event_done(CUevent e) override { return event_query(e); }
  void event_wait_and_release(CUevent e) override {
    event_synchronize(e);
    event_destroy(e);
  }
  void event_release(CUevent e) override { event_destroy(e); }

 private:
  int ordinal_;
};

}  // namespace

std::unique_ptr<DeviceMemorySource> driver_memory_source(int ordinal) {
  if (ordinal < 0 || ordinal >= device_count())
    throw DeviceError(fmt::format("cuda:{} does not exist: this machine has {} CUDA device{}", ordinal,
                                  device_count(), device_count() == 1 ? "" : "s"));
  return std::make_unique<DriverMemorySource>(ordinal);
}

std::size_t CachingDeviceAllocator::round_size(std::size_t bytes) {
  if (bytes == 0) return 0;
  const std::size_t unit = bytes <= kSmallLimit ? kSmallRound : kLargeRound;
  return (bytes + unit - 1) / unit * unit;
}

CachingDeviceAllocator::CachingDeviceAllocator(std::unique_ptr<DeviceMemorySource> source)
    : source_(std::move(source)) {
  TESSEL_ASSERT("device allocator", source_ != nullptr);
}

CachingDeviceAllocator::~CachingDeviceAllocator() {
  try {
    std::lock_guard lock(mu_);
    empty_cache_locked();
  } catch (...) {
    // The device may be gone at shutdown; its memory goes with it.
  }
}

void CachingDeviceAllocator::process_pending_locked() {
  for (std::size_t i = 0; i < pending_.size();) {
    Pending& p = pending_[i];
    while (!p.events.empty() && source_->event_done(p.events.back())) {
      source_->event_release(p.events.back());
      p.events.pop_back();
    }
    if (p.events.empty()) {
      free_[p.block.stream].emplace(p.block.size, p.ptr);
      pending_[i] = std::move(pending_.back());
      pending_.pop_back();
    } else {
      ++i;
    }
  }
}

CUdeviceptr CachingDeviceAllocator::take_cached_locked(std::size_t size, CUstream stream) {
  auto lists = free_.find(stream);
  if (lists == free_.end()) return 0;
  auto& list = lists->second;
  auto it = list.lower_bound(size);
  // Reusing a much larger block would strand memory a later request needs.
  if (it == list.end() || it->first > size + size / 8) return 0;
  const std::size_t block = it->first;
  const CUdeviceptr ptr = it->second;
  list.erase(it);
  stats_.cached -= block;
  active_[ptr] = Block{block, stream, {}};
  return ptr;
}

CUdeviceptr CachingDeviceAllocator::allocate(std::size_t bytes, CUstream stream) {
  if (bytes == 0) return 0;
  const std::size_t size = round_size(bytes);
  std::lock_guard lock(mu_);
  ++stats_.num_allocs;
  if (!pending_.empty()) process_pending_locked();

  CUdeviceptr ptr = take_cached_locked(size, stream);
  if (ptr) {
    ++stats_.num_cache_hits;
  } else {
    ptr = source_->allocate(size);
    if (!ptr) {
      // Out of memory: what the cache holds may be enough once it is returned.
      ++stats_.num_cache_flushes;
      empty_cache_locked();
      ptr = source_->allocate(size);
      if (!ptr) throw_oom_locked(bytes);
    }
    ++stats_.num_device_allocs;
    active_[ptr] = Block{size, stream, {}};
  }
  stats_.allocated += size;
  stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
  return ptr;
}

void CachingDeviceAllocator::throw_oom_locked(std::size_t requested) {
  std::string total = "?", free = "?";
  try {
    MemoryInfo m = source_->memory_info();
    total = format_bytes(m.total);
    free = format_bytes(m.free);
  } catch (const std::exception&) {
    // The message is still worth having without the device's view.
  }
  throw OutOfMemoryError(fmt::format(
      "CUDA out of memory on cuda:{}: tried to allocate {}; total {}, free {}, allocated by tessel {}, cached {}",
      source_->device(), format_bytes(requested), total, free, format_bytes(stats_.allocated),
      format_bytes(stats_.cached)));
}

void CachingDeviceAllocator::deallocate(CUdeviceptr ptr) {
  if (!ptr) return;
  std::lock_guard lock(mu_);
  auto it = active_.find(ptr);
  if (it == active_.end())
    throw ValueError(fmt::format("device memory 0x{:x} on cuda:{} was not allocated by tessel or was already freed",
                                 ptr, source_->device()));
  Block block = std::move(it->second);
  active_.erase(it);
  stats_.allocated -= block.size;
  stats_.cached += block.size;
  if (block.other_streams.empty()) {
    free_[block.stream].emplace(block.size, ptr);
    return;
  }
  Pending p{ptr, std::move(block), {}};
  for (CUstream s : p.block.other_streams) p.events.push_back(source_->record_event(s));
  pending_.push_back(std::move(p));
}

void CachingDeviceAllocator::record_stream(CUdeviceptr ptr, CUstream stream) {
  std::lock_guard lock(mu_);
  auto it = active_.find(ptr);
  if (it == active_.end())
    throw ValueError(fmt::format("record_stream: device memory 0x{:x} on cuda:{} is not allocated by tessel", ptr,
                                 source_->device()));
  Block& b = it->second;
  if (stream == b.stream) return;
  if (std::find(b.other_streams.begin(), b.other_streams.end(), stream) == b.other_streams.end())
    b.other_streams.push_back(stream);
}

void CachingDeviceAllocator::empty_cache_locked() {
  for (Pending& p : pending_) {
    for (CUevent e : p.events) source_->event_wait_and_release(e);
    p.events.clear();
    free_[p.block.stream].emplace(p.block.size, p.ptr);
  }
  pending_.clear();
  for (auto& [stream, list] : free_) {
    for (auto it = list.begin(); it != list.end();) {
      source_->free(it->second);
      stats_.cached -= it->first;
      ++stats_.num_device_frees;
      it = list.erase(it);
    }
  }
  free_.clear();
}

void CachingDeviceAllocator::empty_cache() {
  std::lock_guard lock(mu_);
  empty_cache_locked();
}

AllocatorStats CachingDeviceAllocator::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void CachingDeviceAllocator::reset_peak() {
  std::lock_guard lock(mu_);
  stats_.peak_allocated = stats_.allocated;
}

std::size_t CachingDeviceAllocator::block_size(CUdeviceptr ptr) const {
  std::lock_guard lock(mu_);
  auto it = active_.find(ptr);
  return it == active_.end() ? 0 : it->second.size;
}

CachingDeviceAllocator& device_allocator(int ordinal) {
  static std::mutex mu;
  static std::array<CachingDeviceAllocator*, 64> allocators{};
  std::lock_guard lock(mu);
  if (ordinal < 0 || ordinal >= static_cast<int>(allocators.size()) || ordinal >= device_count())
    throw DeviceError(fmt::format("cuda:{} does not exist: this machine has {} CUDA device{}", ordinal,
                                  device_count(), device_count() == 1 ? "" : "s"));
  if (!allocators[ordinal]) allocators[ordinal] = new CachingDeviceAllocator(driver_memory_source(ordinal));
  return *allocators[ordinal];
}

}  // namespace tessel::cuda
