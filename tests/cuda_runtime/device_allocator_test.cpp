// The caching allocator's policy over a fake memory source: no GPU needed.
#include "runtime/cuda/device_allocator.h"

#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <thread>
#include <vector>

#include "runtime/errors.h"

using namespace tessel::cuda;

namespace {

constexpr std::size_t KiB = 1024, MiB = 1024 * KiB, GiB = 1024 * MiB;

// Hands out fake addresses up to a budget. `other_use` is memory someone else
// holds on the device (it lowers `free` without being allocatable).
struct FakeSource final : DeviceMemorySource {
  std::size_t total, budget, other_use = 0;
  std::size_t used = 0;
  CUdeviceptr next = 0x10000000;
  std::map<CUdeviceptr, std::size_t> live;
  int allocs = 0, frees = 0, failed_allocs = 0;
  bool events_complete = true;
  int events_live = 0, events_waited = 0;
  bool throw_other_error = false;

  FakeSource(std::size_t total_, std::size_t budget_) : total(total_), budget(budget_) {}
  int device() const override { return 0; }
  CUdeviceptr allocate(std::size_t bytes) override {
    if (throw_other_error) throw tessel::DeviceError("CUDA driver call cuMemAlloc_v2 failed: CUDA_ERROR_LAUNCH_FAILED");
    if (used + bytes > budget) {
      ++failed_allocs;
      return 0;
    }
    CUdeviceptr p = next;
    next += bytes + 4096;
    live[p] = bytes;
    used += bytes;
    ++allocs;
    return p;
  }
  void free(CUdeviceptr p) override {
    REQUIRE(live.count(p) == 1);
    used -= live[p];
    live.erase(p);
    ++frees;
  }
  MemoryInfo memory_info() override { return {total - used - other_use, total}; }
  CUevent record_event(CUstream) override {
    ++events_live;
    return reinterpret_cast<CUevent>(std::uintptr_t(0x100 + events_live));
  }
  bool event_done(CUevent) override { return events_complete; }
  void event_wait_and_release(CUevent) override {
    ++events_waited;
    --events_live;
  }
  void event_release(CUevent) override { --events_live; }
};

struct Fixture {
  FakeSource* source;
  CachingDeviceAllocator alloc;
  Fixture(std::size_t total, std::size_t budget)
      : source(new FakeSource(total, budget)), alloc(std::unique_ptr<DeviceMemorySource>(source)) {}
};

CUstream stream(int i) { return reinterpret_cast<CUstream>(std::uintptr_t(0x5000 + i)); }

}  // namespace

TEST_CASE("byte counts print like the out-of-memory message wants them", "[emulated-cuda][allocator]") {
  CHECK(format_bytes(0) == "0 B");
  CHECK(format_bytes(512) == "512 B");
  CHECK(format_bytes(1023) == "1023 B");
  CHECK(format_bytes(1024) == "1.00 KiB");
  CHECK(format_bytes(1536) == "1.50 KiB");
  CHECK(format_bytes(10 * KiB) == "10.0 KiB");
  CHECK(format_bytes(2 * GiB) == "2.00 GiB");
  CHECK(format_bytes(130 * GiB) == "130.0 GiB");
  CHECK(format_bytes(static_cast<std::size_t>(1.2 * GiB)) == "1.20 GiB");
}

TEST_CASE("requests round to 512 B up to 1 MiB and to 2 MiB above", "[emulated-cuda][allocator]") {
  using A = CachingDeviceAllocator;
  CHECK(A::round_size(0) == 0);
  CHECK(A::round_size(1) == 512);
  CHECK(A::round_size(512) == 512);
  CHECK(A::round_size(513) == 1024);
  CHECK(A::round_size(MiB) == MiB);
  CHECK(A::round_size(MiB + 1) == 2 * MiB);
  CHECK(A::round_size(3 * MiB) == 4 * MiB);
  CHECK(A::round_size(4 * MiB) == 4 * MiB);

  Fixture f(GiB, GiB);
  CUdeviceptr p = f.alloc.allocate(1000);
  CHECK(f.alloc.block_size(p) == 1024);
  CHECK(f.source->live.at(p) == 1024);
  CUdeviceptr q = f.alloc.allocate(3 * MiB + 5);
  CHECK(f.source->live.at(q) == 4 * MiB);
  CHECK(f.alloc.stats().allocated == 4 * MiB + 1024);
  CHECK(f.alloc.allocate(0) == 0);
  f.alloc.deallocate(0);  // ignored, as free(nullptr)
  f.alloc.deallocate(p);
  f.alloc.deallocate(q);
}

TEST_CASE("freed blocks are reused by requests of the same size class", "[emulated-cuda][allocator]") {
  Fixture f(GiB, GiB);
  CUdeviceptr p = f.alloc.allocate(1000);
  f.alloc.deallocate(p);
  CHECK(f.alloc.stats().cached == 1024);
  CHECK(f.alloc.stats().allocated == 0);
  CHECK(f.alloc.allocate(900) == p);  // same 1024 B class
  CHECK(f.alloc.stats().num_cache_hits == 1);
  CHECK(f.source->allocs == 1);

  CUdeviceptr big = f.alloc.allocate(5 * MiB);  // 6 MiB block
  f.alloc.deallocate(big);
  CHECK(f.alloc.allocate(6 * MiB) == big);
  f.alloc.deallocate(big);
  // A block much larger than the request stays cached for a request that fits it.
  CUdeviceptr small = f.alloc.allocate(2 * MiB);
  CHECK(small != big);
  CUdeviceptr tiny = f.alloc.allocate(100);  // 512 B; the cached 6 MiB block would waste too much
  CHECK(f.source->live.at(tiny) == 512);
  CHECK(f.alloc.stats().cached == 6 * MiB);
  f.alloc.deallocate(p);
  f.alloc.deallocate(small);
  f.alloc.deallocate(tiny);
  CHECK(f.alloc.stats().allocated == 0);
  CHECK(f.alloc.stats().num_allocs == 6);
  f.alloc.empty_cache();
  CHECK(f.alloc.stats().cached == 0);
  CHECK(f.source->live.empty());
}

TEST_CASE("free lists are per stream", "[emulated-cuda][allocator]") {
  Fixture f(GiB, GiB);
  CUdeviceptr a = f.alloc.allocate(4096, stream(1));
  f.alloc.deallocate(a);
  CUdeviceptr b = f.alloc.allocate(4096, stream(2));
  CHECK(b != a);  // the block may still be in use by stream 1's queued work
  CHECK(f.alloc.allocate(4096, stream(1)) == a);
}

TEST_CASE("a block used on another stream is reused only after that stream's work completes",
          "[emulated-cuda][allocator]") {
  Fixture f(GiB, GiB);
  CUdeviceptr a = f.alloc.allocate(4096, stream(1));
  f.alloc.record_stream(a, stream(2));
  f.alloc.record_stream(a, stream(1));  // its own stream: nothing to wait for
  f.source->events_complete = false;
  f.alloc.deallocate(a);
  CHECK(f.source->events_live == 1);
  CHECK(f.alloc.stats().cached == 4096);
  CUdeviceptr b = f.alloc.allocate(4096, stream(1));
  CHECK(b != a);
  f.source->events_complete = true;
  CHECK(f.alloc.allocate(4096, stream(1)) == a);
  CHECK(f.source->events_live == 0);

  // empty_cache waits for pending uses instead of freeing memory a stream still reads.
  f.alloc.record_stream(a, stream(3));
  f.source->events_complete = false;
  f.alloc.deallocate(a);
  f.alloc.empty_cache();
  CHECK(f.source->events_waited == 1);
  CHECK(f.source->live.count(a) == 0);
  f.alloc.deallocate(b);
}

TEST_CASE("on out-of-memory the cache is emptied and the allocation retried once", "[emulated-cuda][allocator]") {
  Fixture f(GiB, 10 * MiB);
  CUdeviceptr a = f.alloc.allocate(4 * MiB), b = f.alloc.allocate(4 * MiB);
  f.alloc.deallocate(a);
  f.alloc.deallocate(b);
  CHECK(f.alloc.stats().cached == 8 * MiB);
  CUdeviceptr c = f.alloc.allocate(6 * MiB);  // no cached 4 MiB block fits; 8 + 6 > 10
  CHECK(c != 0);
  AllocatorStats s = f.alloc.stats();
  CHECK(s.num_cache_flushes == 1);
  CHECK(s.num_device_frees == 2);
  CHECK(s.cached == 0);
  CHECK(s.allocated == 6 * MiB);
  CHECK(f.source->failed_allocs == 1);
  f.alloc.deallocate(c);
}

TEST_CASE("out-of-memory after the retry states requested and total and free and allocated and cached bytes",
          "[emulated-cuda][allocator]") {
  const std::size_t total = static_cast<std::size_t>(139.8 * GiB);
  Fixture f(total, 131 * GiB);
  std::vector<CUdeviceptr> held;
  for (int i = 0; i < 65; ++i) held.push_back(f.alloc.allocate(2 * GiB));
  f.source->other_use = total - 130 * GiB - static_cast<std::size_t>(1.2 * GiB);
  try {
    f.alloc.allocate(2 * GiB);
    FAIL("allocated");
  } catch (const tessel::OutOfMemoryError& e) {
    CHECK(std::string(e.what()) ==
          "CUDA out of memory on cuda:0: tried to allocate 2.00 GiB; total 139.8 GiB, free 1.20 GiB, "
          "allocated by tessel 130.0 GiB, cached 0 B");
  }
  CHECK(f.source->failed_allocs == 2);  // first try and the retry
  CHECK(f.alloc.stats().num_cache_flushes == 1);
  CHECK(f.alloc.stats().allocated == 130 * GiB);
  CHECK(f.alloc.stats().peak_allocated == 130 * GiB);
  for (CUdeviceptr p : held) f.alloc.deallocate(p);
  CHECK(f.alloc.stats().cached == 130 * GiB);
  f.alloc.reset_peak();
  CHECK(f.alloc.stats().peak_allocated == 0);
}

TEST_CASE("other device errors propagate unchanged", "[emulated-cuda][allocator]") {
  Fixture f(GiB, GiB);
  f.source->throw_other_error = true;
  CHECK_THROWS_AS(f.alloc.allocate(100), tessel::DeviceError);
  CHECK(f.alloc.stats().allocated == 0);
}

TEST_CASE("freeing memory the allocator does not own is a ValueError", "[emulated-cuda][allocator]") {
  Fixture f(GiB, GiB);
  CUdeviceptr p = f.alloc.allocate(100);
  f.alloc.deallocate(p);
  CHECK_THROWS_WITH(f.alloc.deallocate(p), Catch::Contains("was not allocated by tessel or was already freed"));
  CHECK_THROWS_AS(f.alloc.record_stream(0x1234, stream(1)), tessel::ValueError);
}

TEST_CASE("concurrent allocations and frees keep the books straight", "[emulated-cuda][allocator]") {
  Fixture f(GiB, GiB);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&f, t] {
      std::vector<CUdeviceptr> mine;
      for (int i = 0; i < 2000; ++i) {
        mine.push_back(f.alloc.allocate(512 * (1 + (i + t) % 7), stream(t % 2)));
        if (i % 3 == 0) {
          f.alloc.deallocate(mine.front());
          mine.erase(mine.begin());
        }
      }
      for (CUdeviceptr p : mine) f.alloc.deallocate(p);
    });
  for (std::thread& t : threads) t.join();
  AllocatorStats s = f.alloc.stats();
  CHECK(s.allocated == 0);
  CHECK(s.num_allocs == 8000);
  CHECK(s.cached == f.source->used);
  std::set<CUdeviceptr> unique;
  for (auto& [p, n] : f.source->live) unique.insert(p);
  CHECK(unique.size() == f.source->live.size());
}
