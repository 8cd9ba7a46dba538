// A stand-in for libcuda.so.1 that keeps "device memory" in host memory, so
// the driver wrapper (dlopen, symbol versions, contexts, error mapping) and the
// allocator over it run without a GPU. Loaded through TESSEL_CUDA_DRIVER.
//
// One device, compute capability 9.0, kFakeTotal bytes of memory. Modules accept PTX
// text containing ".entry" or an ELF image; launching the kernel "fake_fill"
// runs fake_fill(float* out, float value, long long n) on the host, any other
// kernel is only recorded (see fake_cuda_last_launch).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

namespace {

using CUresult = int;
// 64 MiB unless TESSEL_FAKE_CUDA_MIB says otherwise (to run tests written for a real device).
const std::size_t kFakeTotal = [] {
  const char* e = std::getenv("TESSEL_FAKE_CUDA_MIB");
  return std::size_t(e ? std::atoi(e) : 64) << 20;
}();

struct Module {
  std::string image;
};
struct Function {
  std::string name;
};

std::mutex mu;
std::map<std::uintptr_t, std::size_t> allocations;
std::size_t used = 0;
int ctx_token = 1;  // the primary context is &ctx_token
thread_local void* current_ctx = nullptr;

struct LastLaunch {
  unsigned grid[3], block[3], shared;
  void* stream;
  void** args;
  std::string function;
} last_launch;

}  // namespace

#define FAKE extern "C" __attribute__((visibility("default")))

FAKE CUresult cuInit(unsigned) { return 0; }
FAKE CUresult cuDriverGetVersion(int* v) {
  *v = 13000;
  return 0;
}
FAKE CUresult cuGetErrorName(CUresult r, const char** s) {
  switch (r) {
    case 0: *s = "CUDA_SUCCESS"; return 0;
    case 1: *s = "CUDA_ERROR_INVALID_VALUE"; return 0;
    case 2: *s = "CUDA_ERROR_OUT_OF_MEMORY"; return 0;
    case 218: *s = "CUDA_ERROR_INVALID_PTX"; return 0;
    case 500: *s = "CUDA_ERROR_NOT_FOUND"; return 0;
    case 101: *s = "CUDA_ERROR_INVALID_DEVICE"; return 0;
  }
  *s = nullptr;
  return 1;
}
FAKE CUresult cuGetErrorString(CUresult r, const char** s) {
  switch (r) {
    case 0: *s = "no error"; return 0;
    case 1: *s = "invalid argument"; return 0;
    case 2: *s = "out of memory"; return 0;
    case 218: *s = "a PTX JIT compilation failed"; return 0;
    case 500: *s = "named symbol not found"; return 0;
    case 101: *s = "invalid device ordinal"; return 0;
  }
  *s = nullptr;
  return 1;
}
FAKE CUresult cuDeviceGetCount(int* n) {
  *n = 1;
  return 0;
}
FAKE CUresult cuDeviceGet(int* d, int ordinal) {
  if (ordinal != 0) return 101;
  *d = 0;
  return 0;
}
FAKE CUresult cuDeviceGetName(char* name, int len, int) {
  std::strncpy(name, "Tessel Fake GPU", static_cast<std::size_t>(len));
  return 0;
}
FAKE CUresult cuDeviceGetAttribute(int* v, int attr, int) {
  switch (attr) {
    case 1: *v = 1024; break;     // max threads per block
    case 8: *v = 49152; break;    // shared per block
    case 10: *v = 32; break;      // warp size
    case 16: *v = 132; break;     // SMs
    case 75: *v = 9; break;       // cc major
    case 76: *v = 0; break;       // cc minor
    case 97: *v = 232448; break;  // shared opt-in
    default: return 1;
  }
  return 0;
}
FAKE CUresult cuDeviceTotalMem_v2(std::size_t* bytes, int) {
  *bytes = kFakeTotal;
  return 0;
}
FAKE CUresult cuDeviceCanAccessPeer(int* ok, int, int) {
  *ok = 0;
  return 0;
}
FAKE CUresult cuDevicePrimaryCtxRetain(void** ctx, int) {
  *ctx = &ctx_token;
  return 0;
}
FAKE CUresult cuCtxSetCurrent(void* ctx) {
  current_ctx = ctx;
  return 0;
}
FAKE CUresult cuCtxGetCurrent(void** ctx) {
  *ctx = current_ctx;
  return 0;
}
static CUresult need_ctx() { return current_ctx ? 0 : 201; /* CUDA_ERROR_INVALID_CONTEXT */ }
FAKE CUresult cuCtxSynchronize() { return need_ctx(); }
FAKE CUresult cuMemGetInfo_v2(std::size_t* free, std::size_t* total) {
  std::lock_guard lock(mu);
  *free = kFakeTotal - used;
  *total = kFakeTotal;
  return need_ctx();
}
FAKE CUresult cuMemAlloc_v2(unsigned long long* p, std::size_t bytes) {
  if (CUresult r = need_ctx()) return r;
  if (bytes == 0) return 1;
  std::lock_guard lock(mu);
  if (bytes > kFakeTotal - used) return 2;
  void* m = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (!m) return 2;
  allocations[reinterpret_cast<std::uintptr_t>(m)] = bytes;
  used += bytes;
  *p = reinterpret_cast<std::uintptr_t>(m);
  return 0;
}
FAKE CUresult cuMemFree_v2(unsigned long long p) {
  if (CUresult r = need_ctx()) return r;
  std::lock_guard lock(mu);
  auto it = allocations.find(p);
  if (it == allocations.end()) return 1;
  used -= it->second;
  allocations.erase(it);
  std::free(reinterpret_cast<void*>(p));
  return 0;
}
FAKE CUresult cuMemHostAlloc(void** p, std::size_t bytes, unsigned) {
  *p = std::malloc(bytes);
  return *p ? need_ctx() : 2;
}
FAKE CUresult cuMemFreeHost(void* p) {
  std::free(p);
  return 0;
}
FAKE CUresult cuMemcpyHtoD_v2(unsigned long long d, const void* s, std::size_t n) {
  std::memcpy(reinterpret_cast<void*>(d), s, n);
  return need_ctx();
}
FAKE CUresult cuMemcpyDtoH_v2(void* d, unsigned long long s, std::size_t n) {
  std::memcpy(d, reinterpret_cast<void*>(s), n);
  return need_ctx();
}
FAKE CUresult cuMemcpyDtoD_v2(unsigned long long d, unsigned long long s, std::size_t n) {
  std::memmove(reinterpret_cast<void*>(d), reinterpret_cast<void*>(s), n);
  return need_ctx();
}
FAKE CUresult cuMemcpyHtoDAsync_v2(unsigned long long d, const void* s, std::size_t n, void*) {
  return cuMemcpyHtoD_v2(d, s, n);
}
FAKE CUresult cuMemcpyDtoHAsync_v2(void* d, unsigned long long s, std::size_t n, void*) {
  return cuMemcpyDtoH_v2(d, s, n);
}
FAKE CUresult cuMemcpyDtoDAsync_v2(unsigned long long d, unsigned long long s, std::size_t n, void*) {
  return cuMemcpyDtoD_v2(d, s, n);
}
FAKE CUresult cuMemcpyPeerAsync(unsigned long long d, void*, unsigned long long s, void*, std::size_t n, void*) {
  return cuMemcpyDtoD_v2(d, s, n);
}
FAKE CUresult cuMemsetD8_v2(unsigned long long d, unsigned char v, std::size_t n) {
  std::memset(reinterpret_cast<void*>(d), v, n);
  return need_ctx();
}
FAKE CUresult cuMemsetD8Async(unsigned long long d, unsigned char v, std::size_t n, void*) {
  return cuMemsetD8_v2(d, v, n);
}
FAKE CUresult cuStreamCreate(void** s, unsigned) {
  *s = new int(0);
  return need_ctx();
}
FAKE CUresult cuStreamDestroy_v2(void* s) {
  delete static_cast<int*>(s);
  return 0;
}
FAKE CUresult cuStreamSynchronize(void*) { return need_ctx(); }
FAKE CUresult cuStreamQuery(void*) { return need_ctx(); }
FAKE CUresult cuStreamWaitEvent(void*, void*, unsigned) { return need_ctx(); }
FAKE CUresult cuEventCreate(void** e, unsigned) {
  *e = new int(0);
  return need_ctx();
}
FAKE CUresult cuEventDestroy_v2(void* e) {
  delete static_cast<int*>(e);
  return 0;
}
FAKE CUresult cuEventRecord(void* e, void*) {
  ++*static_cast<int*>(e);
  return need_ctx();
}
FAKE CUresult cuEventSynchronize(void*) { return need_ctx(); }
FAKE CUresult cuEventQuery(void*) { return need_ctx(); }
FAKE CUresult cuEventElapsedTime_v2(float* ms, void*, void*) {
  *ms = 1.5f;
  return need_ctx();
}
FAKE CUresult cuModuleLoadDataEx(void** m, const void* image, unsigned n, int* opts, void** vals) {
  if (CUresult r = need_ctx()) return r;
  const char* text = static_cast<const char*>(image);
  if (std::memcmp(text, "\x7f" "ELF", 4) == 0) {
    *m = new Module{std::string()};
    return 0;
  }
  std::string s(text);
  if (s.find(".entry") == std::string::npos) {
    for (unsigned i = 0; i < n; ++i)
      if (opts[i] == 5)  // CU_JIT_ERROR_LOG_BUFFER
        std::strcpy(static_cast<char*>(vals[i]), "ptxas fatal: fake driver found no .entry");
    return 218;
  }
  *m = new Module{s};
  return 0;
}
FAKE CUresult cuModuleUnload(void* m) {
  delete static_cast<Module*>(m);
  return 0;
}
FAKE CUresult cuModuleGetFunction(void** f, void* m, const char* name) {
  const std::string& image = static_cast<Module*>(m)->image;
  if (image.find(std::string(".entry ") + name + "(") == std::string::npos) return 500;
  *f = new Function{name};  // leaked, as the driver's live with the module
  return 0;
}
FAKE CUresult cuFuncSetAttribute(void*, int, int) { return 0; }
FAKE CUresult cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                             unsigned shared, void* stream, void** args, void**) {
  if (CUresult r = need_ctx()) return r;
  if (gx == 0 || bx * by * bz > 1024) return 1;
  const std::string& name = static_cast<Function*>(f)->name;
  last_launch = {{gx, gy, gz}, {bx, by, bz}, shared, stream, args, name};
  if (name == "fake_fill") {
    float* out = reinterpret_cast<float*>(*static_cast<unsigned long long*>(args[0]));
    const float value = *static_cast<float*>(args[1]);
    const long long n = *static_cast<long long*>(args[2]);
    for (long long i = 0; i < n; ++i) out[i] = value;
  }
  return 0;
}

// For tests: what the last launch was given; live device bytes.
FAKE void fake_cuda_last_launch(unsigned* grid, unsigned* block, unsigned* shared, const char** name) {
  std::memcpy(grid, last_launch.grid, sizeof last_launch.grid);
  std::memcpy(block, last_launch.block, sizeof last_launch.block);
  *shared = last_launch.shared;
  *name = last_launch.function.c_str();
}
FAKE std::size_t fake_cuda_used_bytes() {
  std::lock_guard lock(mu);
  return used;
}
