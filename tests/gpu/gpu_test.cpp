// On a real CUDA device: enumeration, copies, the caching allocator and its
// out-of-memory path, and the hand-written test kernels (the same text the
// emulation and NVRTC tests use) compiled by NVRTC, launched, and checked
// against host loops. Each test skips with a warning where there is no GPU.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_kernels.h"
#include "runtime/cuda/device_allocator.h"
#include "runtime/cuda/driver.h"
#include "runtime/cuda/nvrtc.h"
#include "runtime/cuda/prelude.h"
#include "runtime/errors.h"

using namespace tessel::cuda;

#define SKIP_WITHOUT_GPU()                \
  do {                                    \
    if (tessel::cuda::device_count() == 0) { \
      WARN("no GPU: skipped");            \
      return;                             \
    }                                     \
  } while (0)

namespace {

const int64_t kSizes[] = {1, 31, 33, 1000, 1000003};

struct DeviceBuffer {
  CUdeviceptr ptr = 0;
  std::size_t bytes = 0;
  explicit DeviceBuffer(std::size_t n) : ptr(mem_alloc(0, n ? n : 1)), bytes(n) {}
  template <class T>
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size() * sizeof(T)) {
    memcpy_htod(ptr, host.data(), bytes);
  }
  ~DeviceBuffer() { mem_free(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <class T>
  std::vector<T> read(std::size_t n) const {
    std::vector<T> out(n);
    memcpy_dtoh(out.data(), ptr, n * sizeof(T));
    return out;
  }
};

std::vector<float> random_floats(int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

double sum(const std::vector<float>& x) { return std::accumulate(x.begin(), x.end(), 0.0); }
double abs_sum(const std::vector<float>& x) {
  double s = 0;
  for (float v : x) s += std::fabs(v);
  return s;
}

unsigned blocks_for(int64_t n, unsigned block, unsigned cap) {
  return static_cast<unsigned>(std::clamp<int64_t>((n + block - 1) / block, 1, cap));
}

// The newest arch NVRTC can target that the device runs.
int ptx_arch_for(int device_arch) {
  int best = 0;
  for (int a : nvrtc_supported_archs())
    if (a <= device_arch && a > best) best = a;
  return best;
}

// The test kernels of one source file, loaded as PTX or as CUBIN for this device.
Module load_test_kernels(std::string_view name, bool cubin) {
  const int arch = device_properties(0).arch();
  std::string source = std::string(prelude);
  for (const auto& s : cuda_test_kernels::all)
    if (s.name == name) source += std::string(s.text);
  CompileOptions opt;
  opt.cubin = cubin;
  opt.arch = cubin ? arch : ptx_arch_for(arch);
  CompiledKernel k = compile(source, name, opt);
  INFO("NVRTC log: " << k.log);
  REQUIRE(k.log.empty());
  return cubin ? Module::load_cubin(0, k.cubin) : Module::load_ptx(0, k.ptx);
}

bool cubin_possible() {
  const int arch = device_properties(0).arch();
  const auto archs = nvrtc_supported_archs();
  return std::find(archs.begin(), archs.end(), arch) != archs.end();
}

template <class... T>
void launch(CUfunction f, unsigned grid, unsigned block, T*... args) {
  void* argv[] = {static_cast<void*>(args)...};
  launch_kernel(f, {grid, 1, 1}, {block, 1, 1}, 0, nullptr, argv);
}

}  // namespace

TEST_CASE("devices enumerate with sane properties", "[gpu]") {
  int n = -1;
  REQUIRE_NOTHROW(n = device_count());
  REQUIRE(n >= 0);
  REQUIRE((n == 0 || driver_available()));
  SKIP_WITHOUT_GPU();
  for (int i = 0; i < n; ++i) {
    DeviceProperties p = device_properties(i);
    std::printf("cuda:%d %s, compute %d.%d, %s, %d SMs; driver %d\n", i, p.name.c_str(), p.cc_major, p.cc_minor,
                format_bytes(p.total_memory).c_str(), p.multiprocessors, driver_version());
    CHECK_FALSE(p.name.empty());
    CHECK(p.arch() >= 75);
    CHECK(p.total_memory > 0);
    CHECK(p.warp_size == 32);
    MemoryInfo m = memory_info(i);
    CHECK(m.total == p.total_memory);
    CHECK(m.free <= m.total);
  }
  CHECK_THROWS_AS(device_properties(n), tessel::DeviceError);
}

TEST_CASE("host to device to device to host copies round-trip sync and async through pinned memory", "[gpu]") {
  SKIP_WITHOUT_GPU();
  const std::size_t n = std::size_t(16) << 20;  // 64 MiB of floats
  std::vector<float> host(n);
  std::iota(host.begin(), host.end(), 0.0f);
  DeviceBuffer a(host), b(n * sizeof(float));
  memcpy_dtod(b.ptr, a.ptr, b.bytes);
  CHECK(b.read<float>(n) == host);

  CUstream s = stream_create(0);
  float* pinned = static_cast<float*>(host_alloc_pinned(n * sizeof(float)));
  memset_d8_async(b.ptr, 0, b.bytes, s);
  memcpy_dtoh_async(pinned, b.ptr, b.bytes, s);
  stream_synchronize(s);
  CHECK(std::all_of(pinned, pinned + n, [](float v) { return v == 0.0f; }));
  std::copy(host.begin(), host.end(), pinned);
  CUevent start = event_create(0, true), end = event_create(0, true);
  event_record(start, s);
  memcpy_htod_async(b.ptr, pinned, b.bytes, s);
  memcpy_dtod_async(a.ptr, b.ptr, b.bytes, s);
  std::fill(host.begin(), host.end(), -1.0f);
  event_record(end, s);
  memcpy_dtoh_async(host.data(), a.ptr, a.bytes, s);  // pageable: the driver stages it
  stream_synchronize(s);
  CHECK(event_query(end));
  const float ms = event_elapsed_ms(start, end);
  std::printf("64 MiB pinned H2D + D2D: %.3f ms\n", ms);
  CHECK(ms > 0.0f);
  CHECK(std::equal(host.begin(), host.end(), pinned));
  event_destroy(start);
  event_destroy(end);
  host_free_pinned(pinned);
  stream_destroy(s);
}

TEST_CASE("the caching allocator reuses device blocks", "[gpu][allocator]") {
  SKIP_WITHOUT_GPU();
  CachingDeviceAllocator& alloc = device_allocator(0);
  const AllocatorStats before = alloc.stats();
  CUstream s = stream_create(0);
  CUdeviceptr p = alloc.allocate(1000, s);
  std::vector<char> text(1000, 'x'), back(1000);
  memcpy_htod_async(p, text.data(), 1000, s);
  memcpy_dtoh_async(back.data(), p, 1000, s);
  stream_synchronize(s);
  CHECK(back == text);
  alloc.deallocate(p);
  CHECK(alloc.allocate(900, s) == p);
  const AllocatorStats after = alloc.stats();
  CHECK(after.num_cache_hits == before.num_cache_hits + 1);
  CHECK(after.allocated == before.allocated + 1024);
  alloc.deallocate(p);
  alloc.empty_cache();
  CHECK(alloc.stats().cached == 0);
  stream_destroy(s);
}

TEST_CASE("a request larger than the device raises OutOfMemoryError with the numbers", "[gpu][allocator]") {
  SKIP_WITHOUT_GPU();
  CachingDeviceAllocator& alloc = device_allocator(0);
  CUdeviceptr keep = alloc.allocate(std::size_t(64) << 20);
  alloc.deallocate(alloc.allocate(std::size_t(32) << 20));  // something cached, to be flushed
  const std::size_t huge = total_memory(0) * 2;
  const std::size_t flushes = alloc.stats().num_cache_flushes;
  try {
    alloc.allocate(huge);
    FAIL("allocated twice the device's memory");
  } catch (const tessel::OutOfMemoryError& e) {
    const std::string msg = e.what();
    std::printf("%s\n", msg.c_str());
    CHECK_THAT(msg, Catch::StartsWith("CUDA out of memory on cuda:0: tried to allocate " + format_bytes(huge) +
                                      "; total " + format_bytes(total_memory(0)) + ", free "));
    CHECK_THAT(msg, Catch::EndsWith(", allocated by tessel " + format_bytes(alloc.stats().allocated) + ", cached 0 B"));
  }
  CHECK(alloc.stats().num_cache_flushes == flushes + 1);
  CUdeviceptr after = alloc.allocate(std::size_t(1) << 20);  // the device is still usable
  CHECK(after != 0);
  alloc.deallocate(after);
  alloc.deallocate(keep);
  alloc.empty_cache();
}

TEST_CASE("NVRTC-compiled elementwise kernels run on the device and match a loop", "[gpu][nvrtc]") {
  SKIP_WITHOUT_GPU();
  if (!nvrtc_available()) {
    WARN("built without NVRTC: skipped");
    return;
  }
  for (bool cubin : {false, true}) {
    if (cubin && !cubin_possible()) continue;
    CAPTURE(cubin);
    Module m = load_test_kernels("elementwise", cubin);
    CUfunction f = m.function("ew_axpy_relu_sigmoid");
    for (int64_t n : kSizes) {
      CAPTURE(n);
      std::vector<float> x = random_floats(n, 1), y = random_floats(n, 2);
      DeviceBuffer dx(x), dy(y), dout(n * sizeof(float));
      float a = 1.75f;
      int64_t count = n;
      launch(f, blocks_for(n, 256, 1024), 256, &dx.ptr, &dy.ptr, &dout.ptr, &a, &count);
      device_synchronize(0);
      std::vector<float> out = dout.read<float>(n);
      for (int64_t i = 0; i < n; ++i) {
        const float ref = std::max(a * x[i] + y[i], 0.0f) + 0.5f * (1.0f / (1.0f + std::exp(-x[i])));
        REQUIRE(out[i] == Approx(ref).epsilon(1e-5).margin(1e-6));
      }
    }
  }

  // Conversions use cvt on the device and bit arithmetic on the host: same bits.
  Module m = load_test_kernels("elementwise", false);
  std::vector<float> x = {1.0f, -2.0f, 0.1f, 65504.0f, 65519.0f, 65520.0f, 1e-8f, 5.9604645e-8f, 3e-5f, 0.0f, -0.0f};
  const uint16_t want_h[] = {0x3c00, 0xc000, 0x2e66, 0x7bff, 0x7bff, 0x7c00, 0x0000, 0x0001, 0x01f7, 0x0000, 0x8000};
  const int64_t n = static_cast<int64_t>(x.size());
  DeviceBuffer dx(x), dh(n * 2), db(n * 2), dbh(n * 4), dbb(n * 4);
  int64_t count = n;
  launch(m.function("ew_half_bf16_roundtrip"), 1, 32, &dx.ptr, &dh.ptr, &db.ptr, &dbh.ptr, &dbb.ptr, &count);
  device_synchronize(0);
  std::vector<uint16_t> h = dh.read<uint16_t>(n);
  for (int64_t i = 0; i < n; ++i) {
    CAPTURE(i);
    CHECK(h[i] == want_h[i]);
  }
}

TEST_CASE("NVRTC-compiled reductions run on the device and match a loop", "[gpu][nvrtc]") {
  SKIP_WITHOUT_GPU();
  if (!nvrtc_available()) {
    WARN("built without NVRTC: skipped");
    return;
  }
  Module block = load_test_kernels("reduce_block", false);
  Module two_pass = load_test_kernels("reduce_two_pass", true && cubin_possible());
  Module atomic = load_test_kernels("reduce_atomic", false);
  for (int64_t n : kSizes) {
    CAPTURE(n);
    std::vector<float> x = random_floats(n, 3);
    DeviceBuffer dx(x), dout(1024 * sizeof(float));
    const double tol = 1e-5 * abs_sum(x) + 1e-6;
    int64_t count = n;

    launch(block.function("reduce_sum_block"), 1, 512, &dx.ptr, &dout.ptr, &count);
    device_synchronize(0);
    CHECK(std::fabs(dout.read<float>(1)[0] - sum(x)) <= tol);

    const unsigned blocks = blocks_for(n, 256, 264);
    DeviceBuffer partials(blocks * sizeof(float));
    int64_t m = blocks;
    launch(two_pass.function("reduce_sum_partials"), blocks, 256, &dx.ptr, &partials.ptr, &count);
    launch(two_pass.function("reduce_sum_finalize"), 1, 256, &partials.ptr, &dout.ptr, &m);
    device_synchronize(0);
    CHECK(std::fabs(dout.read<float>(1)[0] - sum(x)) <= tol);

    memset_d8(dout.ptr, 0, sizeof(float));
    launch(atomic.function("reduce_sum_atomic"), blocks, 256, &dx.ptr, &dout.ptr, &count);
    DeviceBuffer dcount(8), dsum(8), dmax(4);
    memset_d8(dcount.ptr, 0, 8);
    memset_d8(dsum.ptr, 0, 8);
    memset_d8(dmax.ptr, 0xff, 4);  // -1
    launch(atomic.function("count_and_sum_f64"), blocks_for(n, 128, 200), 128, &dx.ptr, &dcount.ptr, &dsum.ptr,
           &dmax.ptr, &count);
    device_synchronize(0);
    CHECK(std::fabs(dout.read<float>(1)[0] - sum(x)) <= tol);
    unsigned long long want_count = 0;
    int want_max = -1;
    for (int64_t i = 0; i < n; ++i)
      if (x[i] > 0.0f) {
        ++want_count;
        want_max = static_cast<int>(i);
      }
    CHECK(dcount.read<unsigned long long>(1)[0] == want_count);
    CHECK(dmax.read<int>(1)[0] == want_max);
    CHECK(std::fabs(dsum.read<double>(1)[0] - sum(x)) <= 1e-9 * abs_sum(x) + 1e-12);

    const int rows = 3;
    std::vector<float> xr = random_floats(rows * n, 4);
    DeviceBuffer dxr(xr);
    launch(block.function("reduce_max_rows"), rows, 128, &dxr.ptr, &dout.ptr, &count);
    device_synchronize(0);
    std::vector<float> maxes = dout.read<float>(rows);
    for (int r = 0; r < rows; ++r)
      CHECK(maxes[r] == *std::max_element(xr.begin() + r * n, xr.begin() + (r + 1) * n));
  }
}

TEST_CASE("a module without the requested kernel names it in the error", "[gpu]") {
  SKIP_WITHOUT_GPU();
  if (!nvrtc_available()) return;
  Module m = load_test_kernels("elementwise", false);
  CHECK_THROWS_WITH(m.function("no_such_kernel"), Catch::Contains("CUDA_ERROR_NOT_FOUND") &&
                                                      Catch::Contains("no kernel named 'no_such_kernel'"));
}

TEST_CASE("copies between two devices", "[gpu]") {
  SKIP_WITHOUT_GPU();
  if (device_count() < 2) {
    WARN("one GPU: peer copy skipped");
    return;
  }
  std::vector<int> host(1 << 20);
  std::iota(host.begin(), host.end(), 7);
  CUdeviceptr a = mem_alloc(0, host.size() * 4), b = mem_alloc(1, host.size() * 4);
  memcpy_htod(a, host.data(), host.size() * 4);
  memcpy_peer_async(b, 1, a, 0, host.size() * 4, nullptr);
  device_synchronize(0);
  device_synchronize(1);
  std::vector<int> back(host.size());
  memcpy_dtoh(back.data(), b, host.size() * 4);
  CHECK(back == host);
  mem_free(a);
  mem_free(b);
}
