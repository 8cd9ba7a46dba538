// A caching allocator for CUDA device memory.
//
// cuMemAlloc/cuMemFree are slow and synchronize the device, so freed blocks are
// kept and handed out again:
//   - sizes are rounded up to a multiple of 512 B (requests up to 1 MiB) or of
//     2 MiB (larger requests), and a request reuses the smallest cached block of
//     at least its rounded size that wastes at most 1/8 of it;
//   - free lists are per stream: a block freed after use on stream S is reused
//     only by later allocations on S, which the stream orders after that use.
//     A block also used on other streams (record_stream) is reused once events
//     recorded on those streams at free time have completed;
//   - when the device is out of memory the cache is released and the
//     allocation retried once; if it fails again tessel::OutOfMemoryError says
//     what was requested and where the memory went:
//       CUDA out of memory on cuda:0: tried to allocate 2.00 GiB; total 139.8 GiB,
//       free 1.20 GiB, allocated by tessel 130.0 GiB, cached 0 B
//
//   auto& alloc = tessel::cuda::device_allocator(0);
//   CUdeviceptr p = alloc.allocate(n * sizeof(float), stream);
//   ...
//   alloc.deallocate(p);            // cached; the next same-size allocate on `stream` reuses it
//   alloc.stats().cached;           // bytes held for reuse
//
// The raw memory comes from a DeviceMemorySource, so the caching logic runs in
// tests without a GPU over a fake source.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/cuda/driver.h"
#include "runtime/errors.h"

namespace tessel::cuda {

using tessel::format_bytes;  // runtime/errors.h

/// Where the caching allocator gets device memory and stream-ordering events from.
class DeviceMemorySource {
 public:
  virtual ~DeviceMemorySource() = default;
  /// The device ordinal, for messages ("cuda:0").
  virtual int device() const = 0;
  /// Exactly `bytes` of device memory, or 0 when the device is out of memory;
  /// any other failure throws.
  virtual CUdeviceptr allocate(std::size_t bytes) = 0;
  virtual void free(CUdeviceptr ptr) = 0;
  virtual MemoryInfo memory_info() = 0;
  /// An event recorded on `stream` now.
  virtual CUevent record_event(CUstream stream) = 0;
  /// True when the event has completed.
  virtual bool event_done(CUevent e) = 0;
  /// Waits for the event, then releases it.
  virtual void event_wait_and_release(CUevent e) = 0;
  virtual void event_release(CUevent e) = 0;
};

/// The real source: cuMemAlloc/cuMemFree and events on device `ordinal`.
std::unique_ptr<DeviceMemorySource> driver_memory_source(int ordinal);

struct AllocatorStats {
  std::size_t allocated = 0;       // bytes in blocks handed out and not freed (rounded sizes)
  std::size_t cached = 0;          // bytes in freed blocks kept for reuse
  std::size_t peak_allocated = 0;  // high-water mark of `allocated`
  std::size_t num_allocs = 0;          // allocate() calls with bytes > 0
  std::size_t num_cache_hits = 0;      // ... served from the cache
  std::size_t num_device_allocs = 0;   // blocks obtained from the source
  std::size_t num_device_frees = 0;    // blocks returned to the source
  std::size_t num_cache_flushes = 0;   // out-of-memory retries after emptying the cache
  std::size_t reserved() const { return allocated + cached; }
};

class CachingDeviceAllocator {
 public:
  static constexpr std::size_t kSmallRound = 512;
  static constexpr std::size_t kSmallLimit = std::size_t(1) << 20;
  static constexpr std::size_t kLargeRound = std::size_t(2) << 20;
  /// The block size a request of `bytes` gets.
  static std::size_t round_size(std::size_t bytes);

  explicit CachingDeviceAllocator(std::unique_ptr<DeviceMemorySource> source);
  /// Returns cached blocks to the source; blocks still allocated are left alone.
  ~CachingDeviceAllocator();
  CachingDeviceAllocator(const CachingDeviceAllocator&) = delete;
  CachingDeviceAllocator& operator=(const CachingDeviceAllocator&) = delete;

  /// A block of at least `bytes` for use on `stream` (0 for 0 bytes).
  /// tessel::OutOfMemoryError when the device cannot provide it even after emptying the cache.
  CUdeviceptr allocate(std::size_t bytes, CUstream stream = nullptr);
  /// Returns the block to the cache of the stream it was allocated on. 0 is ignored.
  void deallocate(CUdeviceptr ptr);
  /// Notes that the block is also used on `stream`, so it is reused only after
  /// the work queued there before its deallocate() has finished.
  void record_stream(CUdeviceptr ptr, CUstream stream);
  /// Returns every cached block to the device (waiting for pending stream uses first).
  void empty_cache();

  AllocatorStats stats() const;
  void reset_peak();
  int device() const { return source_->device(); }
  /// Rounded size of an allocated block; 0 when `ptr` is not one.
  std::size_t block_size(CUdeviceptr ptr) const;

 private:
  struct Block {
    std::size_t size = 0;
    CUstream stream = nullptr;
    std::vector<CUstream> other_streams;
  };
  struct Pending {
    CUdeviceptr ptr;
    Block block;
    std::vector<CUevent> events;
  };

  void process_pending_locked();
  void empty_cache_locked();
  CUdeviceptr take_cached_locked(std::size_t size, CUstream stream);
  [[noreturn]] void throw_oom_locked(std::size_t requested);

  std::unique_ptr<DeviceMemorySource> source_;
  mutable std::mutex mu_;
  std::unordered_map<CUdeviceptr, Block> active_;
  std::unordered_map<CUstream, std::multimap<std::size_t, CUdeviceptr>> free_;
  std::vector<Pending> pending_;
  AllocatorStats stats_;
};

/// The process-wide caching allocator of device `ordinal`, over the driver.
/// Created on first use and never destroyed (the driver reclaims memory at exit).
CachingDeviceAllocator& device_allocator(int ordinal);

}  // namespace tessel::cuda
