// tessel's CUDA driver wrapper end to end over the emulated GPU
// (libtessel-emulated-cuda.so): devices, memory and its protection, copies
// between devices, events, NVRTC-compiled kernels run on the host, and the
// errors of images and launches the emulated device refuses.
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "dsl/tessel.h"
#include "emulated_test_support.h"
#include "runtime/cuda/driver.h"
#include "runtime/errors.h"

using namespace tessel::cuda;
using emulated_test::ptx;

namespace {

// Before the driver loads (on first use, inside a test): this program's devices.
// ctest sets the library paths and the kernel cache; a hand run gets them here.
const bool kEnvironment = [] {
  setenv("TESSEL_CUDA_DRIVER", TESSEL_EMU_DRIVER_PATH, 0);
  setenv("TESSEL_CUBLASLT", TESSEL_EMU_CUBLASLT_PATH, 0);
  setenv("TESSEL_CUDNN", TESSEL_EMU_CUDNN_PATH, 0);
  setenv("TESSEL_NCCL", TESSEL_EMU_NCCL_PATH, 0);
  setenv("TESSEL_EMU_CACHE_DIR", TESSEL_EMU_TEST_CACHE_DIR, 0);
  setenv("TESSEL_EMULATED_GPUS", "2", 1);
  setenv("TESSEL_EMULATED_GPU_MIB", "512", 1);
  unsetenv("TESSEL_EMULATED_CC");
  return true;
}();

constexpr std::size_t kMiB = std::size_t(1) << 20;

const char* kScale = R"(
extern "C" __global__ void scale(float* x, float a, long long n) {
  for (int64_t i = ts::thread_index(); i < n; i += ts::grid_stride()) x[i] *= a;
}
)";

// Static __shared__ with a barrier (reverse within each block of 256), and
// dynamic shared memory with warp shuffles (sum of each block).
const char* kShared = R"(
extern "C" __global__ void reverse_blocks(const float* in, float* out) {
  __shared__ float tile[256];
  const int t = threadIdx.x;
  const int64_t base = (int64_t)blockIdx.x * 256;
  tile[t] = in[base + t];
  __syncthreads();
  out[base + t] = tile[255 - t];
}
extern "C" __global__ void block_sums(const float* in, float* sums) {
  TS_DYNAMIC_SHARED(float, partial);
  const int t = threadIdx.x;
  float v = ts::warp_sum(in[(int64_t)blockIdx.x * blockDim.x + t]);
  if (t % 32 == 0) partial[t / 32] = v;
  __syncthreads();
  if (t == 0) {
    float s = 0;
    for (int w = 0; w < blockDim.x / 32; ++w) s += partial[w];
    sums[blockIdx.x] = s;
  }
}
)";

template <class T>
std::vector<T> download(CUdeviceptr p, std::size_t n) {
  std::vector<T> v(n);
  memcpy_dtoh(v.data(), p, n * sizeof(T));
  return v;
}

std::string error_of(auto&& f) {
  try {
    f();
  } catch (const tessel::Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("the emulated driver enumerates two devices with the configured memory", "[emulated-gpu]") {
  REQUIRE(kEnvironment);
  INFO(driver_unavailable_reason());
  REQUIRE(driver_available());
  REQUIRE(device_count() == 2);
  CHECK(driver_version() == 13000);
  for (int d = 0; d < 2; ++d) {
    DeviceProperties p = device_properties(d);
    CHECK(p.name == "tessel emulated GPU");
    CHECK(p.cc_major == 9);
    CHECK(p.cc_minor == 5);
    CHECK(p.arch() == 95);
    CHECK(p.total_memory == 512 * kMiB);
    CHECK(p.multiprocessors == 8);
    CHECK(p.max_threads_per_block == 1024);
    CHECK(p.max_shared_memory_per_block == 48 * 1024);
    CHECK(p.max_shared_memory_per_block_optin == 227 * 1024);
    CHECK(p.warp_size == 32);
    CHECK(memory_info(d).total == 512 * kMiB);
  }
  CHECK(can_access_peer(0, 1));
  CHECK(can_access_peer(1, 0));
  CHECK_THROWS_WITH(device_properties(2), "cuda:2 does not exist: this machine has 2 CUDA devices");
}

TEST_CASE("device memory is allocated per device until it runs out", "[emulated-gpu]") {
  const std::size_t before = memory_info(0).free;
  CUdeviceptr a = mem_alloc(0, 200 * kMiB);
  CUdeviceptr b = mem_alloc(0, 100);
  CHECK(a % 256 == 0);
  CHECK(b % 256 == 0);
  CHECK(memory_info(0).free == before - 200 * kMiB - 256);
  CHECK(memory_info(1).free == 512 * kMiB);  // the other device is untouched
  CHECK(emulated_test::device_of(a) == 0);
  CHECK(emulated_test::device_of(a + 200 * kMiB - 1) == 0);
  CHECK(emulated_test::device_of(b + 100) == 0);  // the block is rounded up to 256 bytes

  CUdeviceptr c = 0;
  CHECK(try_mem_alloc(0, 400 * kMiB, &c) == CUDA_ERROR_OUT_OF_MEMORY);
  CHECK(c == 0);
  CHECK(error_of([] { mem_alloc(0, 513 * kMiB); }) ==
        "CUDA driver call cuMemAlloc_v2(537919488 bytes on cuda:0) failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory)");
  mem_free(a);
  CHECK(emulated_test::device_of(a) == -1);
  CHECK(memory_info(0).free == before - 256);
  REQUIRE(try_mem_alloc(0, 150 * kMiB, &c) == CUDA_SUCCESS);
  CHECK(c == a);  // first fit: the freed block is reused
  // Only fragments are free: 400 MiB fits in neither.
  CUdeviceptr d = 0;
  CHECK(try_mem_alloc(0, 400 * kMiB, &d) == CUDA_ERROR_OUT_OF_MEMORY);
  mem_free(c);
  mem_free(b);
  CHECK(memory_info(0).free == before);
  // Freed neighbours coalesce: the whole device is one block again.
  REQUIRE(try_mem_alloc(0, 512 * kMiB, &d) == CUDA_SUCCESS);
  mem_free(d);
  CHECK(error_of([&] { mem_free(b); }) ==
        "CUDA driver call cuMemFree_v2 failed: CUDA_ERROR_INVALID_VALUE (invalid argument)");
}

TEST_CASE("copies, memsets and peer copies move the bytes between host, cuda:0 and cuda:1", "[emulated-gpu]") {
  std::vector<float> host(1000);
  std::iota(host.begin(), host.end(), 1.0f);
  CUdeviceptr d0 = mem_alloc(0, 4000), d1 = mem_alloc(1, 4000), d0b = mem_alloc(0, 4000);
  CHECK(emulated_test::device_of(d0) == 0);
  CHECK(emulated_test::device_of(d1) == 1);
  CUstream s0 = stream_create(0);
  memcpy_htod_async(d0, host.data(), 4000, s0);
  memcpy_peer_async(d1, 1, d0, 0, 4000, s0);
  stream_synchronize(s0);
  CHECK(stream_query(s0));
  CHECK(download<float>(d1, 1000) == host);

  memcpy_dtod(d0b, d1, 4000);
  CHECK(download<float>(d0b, 1000) == host);
  memset_d8(d0b + 4, 0, 8);
  std::vector<float> expect = host;
  expect[1] = expect[2] = 0.0f;
  CHECK(download<float>(d0b, 1000) == expect);

  void* pinned = host_alloc_pinned(4000);
  memcpy_dtoh_async(pinned, d1, 4000, s0);
  CHECK(std::memcmp(pinned, host.data(), 4000) == 0);
  host_free_pinned(pinned);

  // Ranges outside an allocation are refused, as a GPU would fault on them.
  CHECK(error_of([&] { memcpy_htod(d0 + 3000, host.data(), 2000); }) ==
        "CUDA driver call cuMemcpyHtoD_v2 failed: CUDA_ERROR_INVALID_VALUE (invalid argument)");
  CHECK(error_of([&] { memcpy_dtoh(host.data(), reinterpret_cast<CUdeviceptr>(host.data()), 4); }) ==
        "CUDA driver call cuMemcpyDtoH_v2 failed: CUDA_ERROR_INVALID_VALUE (invalid argument)");
  // A peer copy names each pointer's device.
  CHECK(error_of([&] { memcpy_peer_async(d1, 0, d0, 0, 4000, s0); }) ==
        "CUDA driver call cuMemcpyPeerAsync(cuda:0 -> cuda:0, 4000 bytes) failed: CUDA_ERROR_INVALID_VALUE "
        "(invalid argument)");
  stream_destroy(s0);
  mem_free(d0);
  mem_free(d1);
  mem_free(d0b);
}

TEST_CASE("events record host time and measure the time between them", "[emulated-gpu]") {
  CUevent a = event_create(0, true), b = event_create(0, true);
  event_record(a, nullptr);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  event_record(b, nullptr);
  event_synchronize(b);
  CHECK(event_query(b));
  const float ms = event_elapsed_ms(a, b);
  CHECK(ms >= 30.0f);
  CHECK(ms < 5000.0f);
  CUevent untimed = event_create(0, false);
  event_record(untimed, nullptr);
  CHECK(error_of([&] { event_elapsed_ms(a, untimed); }) ==
        "CUDA driver call cuEventElapsedTime failed: CUDA_ERROR_INVALID_HANDLE (invalid resource handle)");
  event_destroy(untimed);
  event_destroy(a);
  event_destroy(b);
}

TEST_CASE("an NVRTC-compiled kernel runs on the emulated device with exact results", "[emulated-gpu]") {
  const std::string image = ptx(kScale, "scale");
  REQUIRE(image.find("//@tessel-cuda-source-begin") != std::string::npos);
  for (int device : {0, 1}) {
    const long long n = 3000;
    std::vector<float> x(n);
    std::iota(x.begin(), x.end(), -100.0f);
    CUdeviceptr d = mem_alloc(device, n * 4);
    memcpy_htod(d, x.data(), n * 4);
    Module m = Module::load_ptx(device, image);
    float factor = 2.5f;
    void* args[] = {&d, &factor, const_cast<long long*>(&n)};
    const unsigned long long launched = emulated_test::kernels_launched();
    launch_kernel(m.function("scale"), {4}, {256}, 0, nullptr, args);
    CHECK(emulated_test::kernels_launched() == launched + 1);
    std::vector<float> y = download<float>(d, n);
    for (long long i = 0; i < n; ++i) REQUIRE(y[i] == x[i] * 2.5f);
    mem_free(d);
  }
  // The same source again: compiled once per process (and once per cache directory).
  const unsigned long long compiles = emulated_test::host_compiles();
  Module again = Module::load_ptx(0, image);
  CHECK(emulated_test::host_compiles() == compiles);
  CHECK(error_of([&] { again.function("scale_missing"); }).starts_with(
      "CUDA driver call cuModuleGetFunction(\"scale_missing\") failed: CUDA_ERROR_NOT_FOUND (named symbol not "
      "found); the module defines no kernel named 'scale_missing'"));
}

TEST_CASE("__shared__, __syncthreads, dynamic shared memory and warp shuffles behave as on a GPU", "[emulated-gpu]") {
  Module m = Module::load_ptx(0, ptx(kShared, "shared"));
  const int blocks = 6, n = blocks * 256;
  std::vector<float> in(n);
  for (int i = 0; i < n; ++i) in[i] = static_cast<float>(i % 97);
  CUdeviceptr din = mem_alloc(0, n * 4), dout = mem_alloc(0, n * 4), dsums = mem_alloc(0, blocks * 4);
  memcpy_htod(din, in.data(), n * 4);

  void* rev_args[] = {&din, &dout};
  launch_kernel(m.function("reverse_blocks"), {blocks}, {256}, 0, nullptr, rev_args);
  std::vector<float> out = download<float>(dout, n);
  for (int b = 0; b < blocks; ++b)
    for (int t = 0; t < 256; ++t) REQUIRE(out[b * 256 + t] == in[b * 256 + 255 - t]);

  void* sum_args[] = {&din, &dsums};
  launch_kernel(m.function("block_sums"), {blocks}, {256}, 8 * sizeof(float), nullptr, sum_args);
  std::vector<float> sums = download<float>(dsums, blocks);
  for (int b = 0; b < blocks; ++b)
    CHECK(sums[b] == std::accumulate(in.begin() + b * 256, in.begin() + (b + 1) * 256, 0.0f));
  mem_free(din);
  mem_free(dout);
  mem_free(dsums);
}

TEST_CASE("launches of every kernel library reuse the driver's fiber stacks", "[emulated-gpu]") {
  Module scale = Module::load_ptx(0, ptx(kScale, "scale"));
  Module shared = Module::load_ptx(0, ptx(kShared, "shared"));
  const long long n = 4 * 256;
  CUdeviceptr x = mem_alloc(0, n * 4), y = mem_alloc(0, n * 4);
  std::vector<float> ones(n, 1.0f);
  memcpy_htod(x, ones.data(), n * 4);
  float factor = 1.0f;
  void* scale_args[] = {&x, &factor, const_cast<long long*>(&n)};
  void* rev_args[] = {&x, &y};
  auto both = [&] {
    launch_kernel(scale.function("scale"), {4}, {256}, 0, nullptr, scale_args);
    launch_kernel(shared.function("reverse_blocks"), {4}, {256}, 0, nullptr, rev_args);
  };
  both();  // each worker thread of a launch takes a mapping and gives it back as it exits
  const unsigned long long taken = emulated_test::fiber_stacks_taken();
  const unsigned long long mapped = emulated_test::fiber_stack_mappings();
  for (int i = 0; i < 25; ++i) both();
  // Both libraries take their stacks from the driver's pool, one per launch
  // at least, and the pool maps nothing new: the stacks of the first launches.
  CHECK(emulated_test::fiber_stacks_taken() >= taken + 50);
  CHECK(emulated_test::fiber_stack_mappings() == mapped);
  CHECK(download<float>(y, n) == ones);
  mem_free(x);
  mem_free(y);
}

TEST_CASE("launches the device would reject fail with the driver's error", "[emulated-gpu]") {
  Module m = Module::load_ptx(0, ptx(kShared, "shared"));
  CUdeviceptr a = mem_alloc(0, 4096), b = mem_alloc(0, 4096);
  void* args[] = {&a, &b};
  CHECK(error_of([&] { launch_kernel(m.function("reverse_blocks"), {1}, {1025}, 0, nullptr, args); }) ==
        "CUDA driver call cuLaunchKernel(grid=(1,1,1), block=(1025,1,1), shared=0 B) failed: "
        "CUDA_ERROR_INVALID_VALUE (invalid argument)");
  CHECK(error_of([&] { launch_kernel(m.function("reverse_blocks"), {0}, {256}, 0, nullptr, args); }).find(
            "CUDA_ERROR_INVALID_VALUE") != std::string::npos);
  // More dynamic shared memory than 48 KiB needs the kernel's attribute raised first.
  CUfunction sums = m.function("block_sums");
  CHECK(error_of([&] { launch_kernel(sums, {1}, {256}, 64 * 1024, nullptr, args); }).find(
            "CUDA_ERROR_INVALID_VALUE") != std::string::npos);
  function_set_max_dynamic_shared(sums, 64 * 1024);
  launch_kernel(sums, {1}, {256}, 64 * 1024, nullptr, args);
  mem_free(a);
  mem_free(b);
}

TEST_CASE("a kernel that is undefined on a GPU fails its launch", "[emulated-gpu]") {
  // A barrier after an early return: the emulator reports it, the launch fails.
  Module m = Module::load_ptx(0, ptx(R"(
extern "C" __global__ void divergent_barrier(float* x) {
  if (threadIdx.x == 0) return;
  __syncthreads();
  x[threadIdx.x] = 1.0f;
}
)",
                                     "divergent_barrier"));
  CUdeviceptr x = mem_alloc(0, 1024);
  void* args[] = {&x};
  CHECK(error_of([&] { launch_kernel(m.function("divergent_barrier"), {1}, {64}, 0, nullptr, args); }) ==
        "CUDA driver call cuLaunchKernel(grid=(1,1,1), block=(64,1,1), shared=0 B) failed: "
        "CUDA_ERROR_LAUNCH_FAILED (unspecified launch failure)");
  mem_free(x);
}

TEST_CASE("images the emulated device cannot run are refused with a clear error", "[emulated-gpu]") {
  // A CUBIN is machine code for one real GPU; the emulator needs the source.
  std::vector<char> cubin =
      compile(std::string(prelude) + kScale, "scale_cubin", {.arch = 90, .cubin = true}).cubin;
  REQUIRE(cubin.size() > 4);
  const std::string cubin_error = error_of([&] { Module::load_cubin(0, cubin); });
  CHECK(cubin_error.starts_with(
      "CUDA driver call cuModuleLoadDataEx(cuda:0) failed: CUDA_ERROR_NO_BINARY_FOR_GPU (no kernel image is "
      "available for execution on the device)\nJIT log:\ntessel emulated GPU: the image is a CUBIN/fatbin"));

  // PTX from elsewhere carries no source.
  CHECK(error_of([] { Module::load_ptx(0, ".version 9.0\n.target sm_90\n.address_size 64\n"); }) ==
        "CUDA driver call cuModuleLoadDataEx(cuda:0) failed: CUDA_ERROR_INVALID_IMAGE (device kernel image is "
        "invalid)\nJIT log:\ntessel emulated GPU: the PTX carries no //@tessel-cuda-source-begin ... "
        "//@tessel-cuda-source-end block (compile it with tessel::cuda::compile so the host can run its CUDA "
        "source)");

  // A source the host compiler rejects: CUDA_ERROR_INVALID_PTX with the compiler's words.
  const std::string broken = error_of([] {
    Module::load_ptx(0,
                     "//\n//@tessel-cuda-source-begin\n"
                     "//@extern \"C\" __global__ void broken(float* x) { x[0] = not_declared_anywhere; }\n"
                     "//@tessel-cuda-source-end\n");
  });
  CHECK(broken.starts_with("CUDA driver call cuModuleLoadDataEx(cuda:0) failed: CUDA_ERROR_INVALID_PTX (a PTX JIT "
                           "compilation failed)\nJIT log:\nthe host compiler rejected the kernel source"));
  CHECK(broken.find("not_declared_anywhere") != std::string::npos);
}

TEST_CASE("compiled kernels are kept in the cache directory", "[emulated-gpu]") {
  (void)ptx(kScale, "scale");  // compiled by an earlier test or now
  Module m = Module::load_ptx(0, ptx(kScale, "scale"));
  const char* dir = std::getenv("TESSEL_EMU_CACHE_DIR");
  REQUIRE(dir != nullptr);
  int objects = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    objects += e.path().extension() == ".so" && e.path().filename().string()[0] != '.';
  CHECK(objects >= 1);
}

namespace {
// A forked child reads one float at `p` on the host, as tessel's own code
// must never do; returns the child's exit code (-1 unless it exited) and stderr.
std::pair<int, std::string> host_read_in_child(const void* p) {
  int err[2];
  REQUIRE(pipe(err) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    dup2(err[1], 2);
    close(err[0]);
    volatile float v = *static_cast<const volatile float*>(p);
    (void)v;
    _exit(0);
  }
  close(err[1]);
  std::string text;
  char buf[512];
  for (ssize_t n; (n = read(err[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<std::size_t>(n));
  close(err[0]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, text};
}
}  // namespace

TEST_CASE("host code that reads device memory dies with the emulator's message", "[emulated-gpu]") {
  for (int device : {0, 1}) {
    const CUdeviceptr p = mem_alloc(device, 4096) + 128;
    const std::string expect = fmt::format(
        "tessel emulated GPU: host access to device memory at {:#x} (cuda:{}) outside a kernel or copy\n", p, device);
    auto [code, text] = host_read_in_child(reinterpret_cast<const void*>(p));
    CHECK(code == 86);
    CHECK(text == expect);
    mem_free(p - 128);
  }
}

TEST_CASE("a host read of a device tensor's memory through tessel's internals is reported, not read", "[emulated-gpu]") {
  // The internal hook: a tensor's buffer, whose storage on a GPU holds a
  // device pointer. Reading it on the host is the bug the emulator exists to
  // catch (on a real GPU it would crash).
  tessel::Tensor g = tessel::ones({64}, tessel::gpu(1));
  const void* p = g.buffer().storage->data();
  CHECK(emulated_test::device_of(reinterpret_cast<CUdeviceptr>(p)) == 1);
  auto [code, text] = host_read_in_child(p);
  CHECK(code == 86);
  CHECK(text == fmt::format("tessel emulated GPU: host access to device memory at {} (cuda:1) outside a kernel or copy\n",
                            p));
  // Through the API the same values arrive on the host by a copy.
  CHECK(g.sum().item<double>() == 64.0);
}
