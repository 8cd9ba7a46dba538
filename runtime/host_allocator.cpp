#include "runtime/host_allocator.h"

#include <sys/mman.h>

#include <bit>
#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

namespace tessel {
namespace {

constexpr size_t kLarge = size_t{1} << 21;  // 2 MiB: huge-page sized blocks
constexpr size_t kMaxCached = size_t{4} << 30;

// Size classes: powers of two up to 2 MiB, then multiples of 2 MiB, so a
// training loop that allocates the same shapes every step always hits.
size_t size_class(size_t n) {
  if (n <= 64) return 64;
  if (n < kLarge) return std::bit_ceil(n);
  return (n + kLarge - 1) / kLarge * kLarge;
}

struct Pool {
  std::mutex mu;
  std::unordered_map<size_t, std::vector<void*>> free_lists;
  HostAllocatorStats stats;
};

Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: tensors may die during static teardown
  return *p;
}

void* fresh_block(size_t cls) {
  size_t align = cls >= kLarge ? kLarge : 64;
  void* p = std::aligned_alloc(align, cls);
  if (!p) throw std::bad_alloc();
  if (cls >= kLarge) madvise(p, cls, MADV_HUGEPAGE);
  return p;
}

}  // namespace

void* host_allocate(size_t nbytes) {
  size_t cls = size_class(nbytes);
  Pool& P = pool();
  {
    std::lock_guard lock(P.mu);
    ++P.stats.allocations;
    P.stats.live_bytes += cls;
    auto it = P.free_lists.find(cls);
    if (it != P.free_lists.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      P.stats.cached_bytes -= cls;
      ++P.stats.reuses;
      return p;
    }
  }
  return fresh_block(cls);
}

void host_free(void* p, size_t nbytes) {
  if (!p) return;
  size_t cls = size_class(nbytes);
  Pool& P = pool();
  std::lock_guard lock(P.mu);
  P.stats.live_bytes -= cls;
  if (P.stats.cached_bytes + cls > kMaxCached) {
    std::free(p);
    return;
  }
  P.free_lists[cls].push_back(p);
  P.stats.cached_bytes += cls;
}

void host_empty_cache() {
  Pool& P = pool();
  std::lock_guard lock(P.mu);
  for (auto& [cls, list] : P.free_lists)
    for (void* p : list) std::free(p);
  P.free_lists.clear();
  P.stats.cached_bytes = 0;
}

HostAllocatorStats host_allocator_stats() {
  Pool& P = pool();
  std::lock_guard lock(P.mu);
  return P.stats;
}

}  // namespace tessel
