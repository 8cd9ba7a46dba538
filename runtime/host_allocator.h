// Host memory for tensors. A first touch of a fresh page costs ~15 us per
// 4 KiB here, so freed blocks are cached by size class and handed out again
// instead of going back to the OS; large blocks are 2 MiB aligned and asked
// to be backed by huge pages.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessel {

struct HostAllocatorStats {
  uint64_t allocations = 0;  // calls to allocate()
  uint64_t reuses = 0;       // served from the cache
  size_t cached_bytes = 0;   // held in free lists now
  size_t live_bytes = 0;     // handed out and not yet freed
};

/// Returns a block of at least `nbytes`, 64-byte aligned (2 MiB for large ones).
void* host_allocate(size_t nbytes);
/// Returns a block to the cache; `nbytes` must be the size passed to host_allocate.
void host_free(void* p, size_t nbytes);
/// Releases every cached block to the OS.
void host_empty_cache();
HostAllocatorStats host_allocator_stats();

}  // namespace tessel
