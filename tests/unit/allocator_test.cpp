// The host allocator caches freed blocks by size class and hands them out again.
#include "tests/support/tensor_testing.h"

#include "runtime/host_allocator.h"

#include <sys/mman.h>
#include <unistd.h>

#include <vector>

using namespace tessel;
using namespace tessel::testing;

TEST_CASE("host allocator: small blocks are 64-byte aligned", "[allocator]") {
  void* p = host_allocate(100);
  CHECK(reinterpret_cast<uintptr_t>(p) % 64 == 0);
  host_free(p, 100);
}

TEST_CASE("host allocator: large blocks are 2 MiB aligned", "[allocator]") {
  size_t n = 3u << 20;
  void* p = host_allocate(n);
  CHECK(reinterpret_cast<uintptr_t>(p) % (2u << 20) == 0);
  host_free(p, n);
}

// A fresh block's pages are faulted in by one call (MADV_POPULATE_WRITE), not
// one trap per page as the kernels first write them.
TEST_CASE("host allocator: a fresh block of 64 KiB or more comes with its pages resident", "[allocator]") {
  const long page = ::sysconf(_SC_PAGESIZE);
  {  // kernels before Linux 5.14 lack the call: nothing to check there
    void* probe = ::mmap(nullptr, static_cast<size_t>(page), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(probe != MAP_FAILED);
    const bool supported = ::madvise(probe, static_cast<size_t>(page), MADV_POPULATE_WRITE) == 0;
    ::munmap(probe, static_cast<size_t>(page));
    if (!supported) {
      WARN("MADV_POPULATE_WRITE is not supported by this kernel: pages are faulted in as written");
      return;
    }
  }
  host_empty_cache();
  const size_t n = (5u << 20) + 12345;  // a class of its own (6 MiB): fresh from the OS
  auto* p = static_cast<unsigned char*>(host_allocate(n));
  const auto base = reinterpret_cast<uintptr_t>(p) & ~static_cast<uintptr_t>(page - 1);
  const size_t span = reinterpret_cast<uintptr_t>(p) + n - base;
  std::vector<unsigned char> resident((span + static_cast<size_t>(page) - 1) / static_cast<size_t>(page));
  REQUIRE(::mincore(reinterpret_cast<void*>(base), span, resident.data()) == 0);
  size_t in = 0;
  for (unsigned char r : resident) in += r & 1u;
  CHECK(in == resident.size());
  host_free(p, n);
  host_empty_cache();
}

TEST_CASE("host allocator: a freed block is reused for the same size class", "[allocator]") {
  void* p = host_allocate(1000);
  host_free(p, 1000);
  auto before = host_allocator_stats();
  void* q = host_allocate(900);  // same class (1024)
  auto after = host_allocator_stats();
  CHECK(q == p);
  CHECK(after.reuses == before.reuses + 1);
  CHECK(after.allocations == before.allocations + 1);
  CHECK(after.cached_bytes == before.cached_bytes - 1024);
  host_free(q, 900);
}

TEST_CASE("host allocator: a different size class is not reused", "[allocator]") {
  host_empty_cache();
  void* p = host_allocate(1000);
  host_free(p, 1000);
  auto before = host_allocator_stats();
  void* q = host_allocate(5000);
  CHECK(host_allocator_stats().reuses == before.reuses);
  host_free(q, 5000);
}

TEST_CASE("host allocator: live and cached bytes", "[allocator]") {
  host_empty_cache();
  auto s0 = host_allocator_stats();
  CHECK(s0.cached_bytes == 0);
  void* p = host_allocate(4096);
  CHECK(host_allocator_stats().live_bytes == s0.live_bytes + 4096);
  host_free(p, 4096);
  auto s1 = host_allocator_stats();
  CHECK(s1.live_bytes == s0.live_bytes);
  CHECK(s1.cached_bytes == 4096);
  host_empty_cache();
  CHECK(host_allocator_stats().cached_bytes == 0);
}

TEST_CASE("host allocator: tensors of the same size reuse memory", "[allocator]") {
  { Tensor warm = empty({1000}); }
  auto before = host_allocator_stats();
  for (int i = 0; i < 10; ++i) {
    Tensor t = empty({1000});
    t.fill_(1);
  }
  auto after = host_allocator_stats();
  CHECK(after.reuses - before.reuses >= 10);
  CHECK(after.live_bytes == before.live_bytes);
}

TEST_CASE("host allocator: a training-like loop stops allocating fresh memory", "[allocator]") {
  Tensor w = rand({64, 32});
  Tensor x = rand({16, 64});
  auto step = [&] {
    Tensor h = relu(x.matmul(w) + 1);
    return h.sum().item<double>();
  };
  step();
  step();
  auto before = host_allocator_stats();
  for (int i = 0; i < 5; ++i) step();
  auto after = host_allocator_stats();
  CHECK(after.allocations - before.allocations == after.reuses - before.reuses);  // every one a reuse
}
