#include "runtime/host_allocator.h"

#include <sys/mman.h>
#include <unistd.h>

#include <fmt/format.h>

#include <bit>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/errors.h"

namespace tessel {
namespace {

constexpr size_t kLarge = size_t{1} << 21;  // 2 MiB: huge-page sized blocks
constexpr size_t kMaxCached = size_t{4} << 30;
constexpr size_t kHuge = size_t{1} << 30;  // requests checked against the machine's memory first

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

// A tensor's memory is written as soon as it is handed out, so the pages a
// fresh block will hold the request in are faulted in by one call rather than
// one trap per 4 KiB page (most of a first training step's page-fault time).
// Kernels without MADV_POPULATE_WRITE (before Linux 5.14) fault them lazily.
constexpr size_t kPopulateFrom = size_t{64} << 10;

void* fresh_block(size_t cls, size_t nbytes) {
  size_t align = cls >= kLarge ? kLarge : 64;
  void* p = std::aligned_alloc(align, cls);
  if (p && cls >= kLarge) madvise(p, cls, MADV_HUGEPAGE);
#ifdef MADV_POPULATE_WRITE
  if (p && nbytes >= kPopulateFrom) {
    // madvise wants page-aligned ranges: the pages the request covers.
    static const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto begin = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
    const auto end = (reinterpret_cast<uintptr_t>(p) + nbytes + page - 1) & ~(page - 1);
    madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE);
  }
#endif
  return p;
}

// "MemTotal" or "MemAvailable" from /proc/meminfo, in bytes (0 where unreadable).
size_t meminfo(const char* key) {
  std::ifstream f("/proc/meminfo");
  std::string k, unit;
  size_t kib = 0;
  while (f >> k >> kib) {
    std::getline(f, unit);
    if (k.size() == std::strlen(key) + 1 && k.compare(0, k.size() - 1, key) == 0) return kib * 1024;
  }
  return 0;
}

[[noreturn]] void throw_host_oom(size_t requested) {
  const HostAllocatorStats st = host_allocator_stats();
  throw OutOfMemoryError(fmt::format(
      "CPU out of memory: tried to allocate {}; total {}, available {}, allocated by tessel {}, cached {} (the "
      "cache was freed and the allocation retried)",
      format_bytes(requested), format_bytes(meminfo("MemTotal")), format_bytes(meminfo("MemAvailable")),
      format_bytes(st.live_bytes), format_bytes(st.cached_bytes)));
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
  // Not served: the counts taken above are given back before the error.
  auto fail = [&] {
    {
      std::lock_guard lock(P.mu);
      --P.stats.allocations;
      P.stats.live_bytes -= cls;
    }
    throw_host_oom(nbytes);
  };
  // More than the machine has at all: refuse before the OS is asked (with
  // overcommit it may say yes, and the first touch would bring the OOM killer).
  if (cls >= kHuge) {
    const size_t total = meminfo("MemTotal") + meminfo("SwapTotal");
    if (total > 0 && cls > total) fail();
  }
  if (void* p = fresh_block(cls, nbytes)) return p;
  // As on GPUs: give the cache back to the OS and try once more, then say
  // what was asked for and what there is (never a bare std::bad_alloc).
  host_empty_cache();
  if (void* p = fresh_block(cls, nbytes)) return p;
  fail();
  return nullptr;  // not reached: fail() throws
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
