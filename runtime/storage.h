// A block of tensor memory on one device. Views share a Storage through
// shared_ptr; the block returns to its device's caching allocator when the
// last view dies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "runtime/device.h"

namespace tessel {

class Storage {
 public:
  /// Uninitialized memory for `nbytes` on `device`.
  static std::shared_ptr<Storage> allocate(size_t nbytes, Device device = cpu());
  /// Wraps memory owned elsewhere (a memory-mapped file, say); `release` runs at death.
  static std::shared_ptr<Storage> wrap(void* data, size_t nbytes, Device device,
                                       std::function<void()> release);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  /// Bumped by every in-place write, so readers can tell the bytes changed.
  uint64_t version() const { return version_; }
  void bump_version() { ++version_; }

 private:
  Storage() = default;
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  uint64_t version_ = 0;
  std::function<void()> release_;
};

/// Hooks the CUDA runtime installs so that runtime/storage stays free of it.
struct DeviceMemoryHooks {
  void* (*allocate)(size_t nbytes, int device) = nullptr;
  void (*free)(void* p, size_t nbytes, int device) = nullptr;
};
void set_device_memory_hooks(DeviceMemoryHooks hooks);

}  // namespace tessel
