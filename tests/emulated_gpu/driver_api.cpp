// The CUDA driver entry points tessel loads (runtime/cuda/driver.cpp, by their
// versioned names), over emulated devices that run kernels on the host:
// device memory lives in device_memory.cpp's protected arenas, kernels are the
// CUDA source carried by tessel's PTX compiled by host_kernels.cpp. Everything
// runs at call time, so every stream is trivially ordered and complete.
//
// Environment (read by cuInit): TESSEL_EMULATED_GPUS (devices, default 2),
// TESSEL_EMULATED_GPU_MIB (memory per device, default 2048), TESSEL_EMULATED_CC
// (compute capability, default "9.5": no NVRTC has SASS for it, so tessel
// compiles PTX, the image that carries the source).
#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "device_memory.h"
#include "host_kernels.h"

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;

struct CUctx_st {
  int device = 0;
};
struct CUstream_st {
  int device = 0;
};
struct CUevent_st {
  int device = 0;
  unsigned flags = 0;
  bool recorded = false;
  std::chrono::steady_clock::time_point when;
};
struct CUfunc_st;
struct CUmod_st {
  int device = 0;
  std::shared_ptr<const tessel_emu::HostModule> host;
  std::mutex mu;
  std::map<std::string, std::unique_ptr<CUfunc_st>> functions;
};
struct CUfunc_st {
  CUmod_st* module = nullptr;
  std::string name;
  tessel_emu::Launcher launcher = nullptr;
  int max_dynamic_shared = 48 * 1024;
};

namespace {

using namespace tessel_emu;

enum : CUresult {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_IMAGE = 200,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_NO_BINARY_FOR_GPU = 209,
  CUDA_ERROR_INVALID_PTX = 218,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_NOT_READY = 600,
  CUDA_ERROR_LAUNCH_FAILED = 719,
  CUDA_ERROR_NOT_SUPPORTED = 801,
};

constexpr unsigned CU_EVENT_DISABLE_TIMING = 0x2;
constexpr int CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;
constexpr int kSharedPerBlock = 48 * 1024, kSharedOptin = 227 * 1024;
constexpr int CU_JIT_INFO_LOG_BUFFER = 3, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4, CU_JIT_ERROR_LOG_BUFFER = 5,
              CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6;

struct Config {
  int devices = 2;
  std::size_t mib = 2048;
  int cc_major = 9, cc_minor = 5;
};

Config read_config() {
  Config c;
  if (const char* e = std::getenv("TESSEL_EMULATED_GPUS"); e && *e) c.devices = std::atoi(e);
  if (const char* e = std::getenv("TESSEL_EMULATED_GPU_MIB"); e && *e) c.mib = std::strtoull(e, nullptr, 10);
  if (const char* e = std::getenv("TESSEL_EMULATED_CC"); e && *e) {
    int major = 0, minor = 0;
    if (std::sscanf(e, "%d.%d", &major, &minor) == 2 && major > 0 && minor >= 0) {
      c.cc_major = major;
      c.cc_minor = minor;
    }
  }
  if (c.devices < 0) c.devices = 0;
  if (c.devices > kMaxDevices) c.devices = kMaxDevices;
  return c;
}

Config g_config;
bool g_initialized = false;
std::once_flag g_init_once;
CUresult g_init_result = CUDA_SUCCESS;
CUctx_st g_contexts[kMaxDevices];
thread_local CUctx_st* t_current = nullptr;
std::atomic<unsigned long long> g_launches{0};

// Live handles, so a stale or foreign one is an error rather than a crash.
std::mutex g_handles_mu;
std::set<const void*> g_streams, g_events, g_modules, g_host_blocks;

bool live(const std::set<const void*>& set, const void* h) {
  std::lock_guard lock(g_handles_mu);
  return set.count(h) != 0;
}

CUresult need_init() { return g_initialized ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED; }

CUresult need_context() {
  if (!g_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  return t_current ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

bool valid_device(CUdevice d) { return d >= 0 && d < device_count(); }

// The null stream, CU_STREAM_LEGACY (1), CU_STREAM_PER_THREAD (2), or a live stream.
bool valid_stream(const CUstream_st* s) {
  const auto v = reinterpret_cast<std::uintptr_t>(s);
  return v <= 2 || live(g_streams, s);
}

bool device_range(CUdeviceptr p, std::size_t n) { return allocation_device(p, n) >= 0; }

CUresult copy(void* dst, const void* src, std::size_t n) {
  if (n == 0) return CUDA_SUCCESS;
  Unprotected open;
  std::memmove(dst, src, n);
  return CUDA_SUCCESS;
}

void write_log(char* buffer, std::size_t size, const std::string& text) {
  if (!buffer || size == 0) return;
  const std::size_t n = text.size() < size - 1 ? text.size() : size - 1;
  std::memcpy(buffer, text.data(), n);
  buffer[n] = '\0';
}

}  // namespace

// Loading the driver selects the whole emulated device: unless TESSEL_CUBLASLT,
// TESSEL_CUDNN and TESSEL_NCCL name libraries already, they name the cuBLASLt,
// cuDNN and NCCL stand-ins beside this one (tessel's test programs load the
// driver before any of those libraries).
__attribute__((constructor)) static void name_library_standins() {
  Dl_info self{};
  if (!dladdr(reinterpret_cast<const void*>(&name_library_standins), &self) || !self.dli_fname) return;
  std::string dir = self.dli_fname;
  const std::size_t slash = dir.rfind('/');
  dir = slash == std::string::npos ? std::string() : dir.substr(0, slash + 1);
  for (auto [var, file] : {std::pair{"TESSEL_CUBLASLT", "libtessel-emulated-cublaslt.so"},
                           std::pair{"TESSEL_CUDNN", "libtessel-emulated-cudnn.so"},
                           std::pair{"TESSEL_NCCL", "libtessel-emulated-nccl.so"}}) {
    if (const char* e = std::getenv(var); e && *e) continue;
    const std::string path = dir + file;
    if (access(path.c_str(), R_OK) == 0) setenv(var, path.c_str(), 0);
  }
}

#define EMU_API extern "C" __attribute__((visibility("default")))

// ---- initialization, errors ----

EMU_API CUresult cuInit(unsigned flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::call_once(g_init_once, [] {
    g_config = read_config();
    if (!init_devices(g_config.devices, g_config.mib << 20)) {
      std::fprintf(stderr, "tessel emulated GPU: cannot reserve %d x %zu MiB of address space for device memory\n",
                   g_config.devices, g_config.mib);
      g_init_result = CUDA_ERROR_OUT_OF_MEMORY;
      return;
    }
    for (int d = 0; d < kMaxDevices; ++d) g_contexts[d].device = d;
    g_initialized = true;
  });
  return g_init_result;
}

EMU_API CUresult cuDriverGetVersion(int* v) {
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  *v = 13000;
  return CUDA_SUCCESS;
}

namespace {
struct ErrorText {
  CUresult code;
  const char* name;
  const char* text;
};
constexpr ErrorText kErrors[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {34, "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {200, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {209, "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"},
    {218, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "the provided PTX was compiled with an unsupported toolchain."},
    {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {600, "CUDA_ERROR_NOT_READY", "device not ready"},
    {719, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
};
const ErrorText* find_error(CUresult r) {
  for (const ErrorText& e : kErrors)
    if (e.code == r) return &e;
  return nullptr;
}
}  // namespace

EMU_API CUresult cuGetErrorName(CUresult r, const char** s) {
  if (!s) return CUDA_ERROR_INVALID_VALUE;
  const ErrorText* e = find_error(r);
  *s = e ? e->name : nullptr;
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EMU_API CUresult cuGetErrorString(CUresult r, const char** s) {
  if (!s) return CUDA_ERROR_INVALID_VALUE;
  const ErrorText* e = find_error(r);
  *s = e ? e->text : nullptr;
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// ---- devices ----

EMU_API CUresult cuDeviceGetCount(int* n) {
  if (CUresult r = need_init()) return r;
  if (!n) return CUDA_ERROR_INVALID_VALUE;
  *n = device_count();
  return CUDA_SUCCESS;
}

EMU_API CUresult cuDeviceGet(CUdevice* d, int ordinal) {
  if (CUresult r = need_init()) return r;
  if (!d) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *d = ordinal;
  return CUDA_SUCCESS;
}

EMU_API CUresult cuDeviceGetName(char* name, int len, CUdevice d) {
  if (CUresult r = need_init()) return r;
  if (!valid_device(d)) return CUDA_ERROR_INVALID_DEVICE;
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  std::snprintf(name, static_cast<std::size_t>(len), "%s", "tessel emulated GPU");
  return CUDA_SUCCESS;
}

EMU_API CUresult cuDeviceGetAttribute(int* v, int attr, CUdevice d) {
  if (CUresult r = need_init()) return r;
  if (!valid_device(d)) return CUDA_ERROR_INVALID_DEVICE;
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  switch (attr) {
    case 1: *v = 1024; break;                    // MAX_THREADS_PER_BLOCK
    case 2: *v = 1024; break;                    // MAX_BLOCK_DIM_X
    case 3: *v = 1024; break;                    // MAX_BLOCK_DIM_Y
    case 4: *v = 64; break;                      // MAX_BLOCK_DIM_Z
    case 5: *v = 2147483647; break;              // MAX_GRID_DIM_X
    case 6: *v = 65535; break;                   // MAX_GRID_DIM_Y
    case 7: *v = 65535; break;                   // MAX_GRID_DIM_Z
    case 8: *v = kSharedPerBlock; break;         // MAX_SHARED_MEMORY_PER_BLOCK
    case 9: *v = 65536; break;                   // TOTAL_CONSTANT_MEMORY
    case 10: *v = 32; break;                     // WARP_SIZE
    case 12: *v = 65536; break;                  // MAX_REGISTERS_PER_BLOCK
    case 13: *v = 1500000; break;                // CLOCK_RATE (kHz)
    case 16: *v = 8; break;                      // MULTIPROCESSOR_COUNT
    case 17: *v = 0; break;                      // KERNEL_EXEC_TIMEOUT
    case 18: *v = 0; break;                      // INTEGRATED
    case 19: *v = 1; break;                      // CAN_MAP_HOST_MEMORY
    case 20: *v = 0; break;                      // COMPUTE_MODE (default)
    case 31: *v = 1; break;                      // CONCURRENT_KERNELS
    case 32: *v = 0; break;                      // ECC_ENABLED
    case 33: *v = d + 1; break;                  // PCI_BUS_ID
    case 34: *v = 0; break;                      // PCI_DEVICE_ID
    case 36: *v = 2600000; break;                // MEMORY_CLOCK_RATE (kHz)
    case 37: *v = 5120; break;                   // GLOBAL_MEMORY_BUS_WIDTH
    case 38: *v = 50 << 20; break;               // L2_CACHE_SIZE
    case 39: *v = 2048; break;                   // MAX_THREADS_PER_MULTIPROCESSOR
    case 40: *v = 2; break;                      // ASYNC_ENGINE_COUNT
    case 41: *v = 1; break;                      // UNIFIED_ADDRESSING
    case 75: *v = g_config.cc_major; break;      // COMPUTE_CAPABILITY_MAJOR
    case 76: *v = g_config.cc_minor; break;      // COMPUTE_CAPABILITY_MINOR
    case 81: *v = 228 * 1024; break;             // MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
    case 82: *v = 65536; break;                  // MAX_REGISTERS_PER_MULTIPROCESSOR
    case 83: *v = 0; break;                      // MANAGED_MEMORY (not emulated)
    case 97: *v = kSharedOptin; break;           // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

EMU_API CUresult cuDeviceTotalMem_v2(std::size_t* bytes, CUdevice d) {
  if (CUresult r = need_init()) return r;
  if (!valid_device(d)) return CUDA_ERROR_INVALID_DEVICE;
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  *bytes = device_bytes();
  return CUDA_SUCCESS;
}

EMU_API CUresult cuDeviceCanAccessPeer(int* ok, CUdevice d, CUdevice peer) {
  if (CUresult r = need_init()) return r;
  if (!valid_device(d) || !valid_device(peer)) return CUDA_ERROR_INVALID_DEVICE;
  if (!ok) return CUDA_ERROR_INVALID_VALUE;
  *ok = 1;
  return CUDA_SUCCESS;
}

// ---- contexts ----

EMU_API CUresult cuDevicePrimaryCtxRetain(CUctx_st** ctx, CUdevice d) {
  if (CUresult r = need_init()) return r;
  if (!valid_device(d)) return CUDA_ERROR_INVALID_DEVICE;
  if (!ctx) return CUDA_ERROR_INVALID_VALUE;
  *ctx = &g_contexts[d];
  return CUDA_SUCCESS;
}

EMU_API CUresult cuCtxSetCurrent(CUctx_st* ctx) {
  if (CUresult r = need_init()) return r;
  if (ctx && (ctx < g_contexts || ctx >= g_contexts + device_count())) return CUDA_ERROR_INVALID_CONTEXT;
  t_current = ctx;
  return CUDA_SUCCESS;
}

EMU_API CUresult cuCtxGetCurrent(CUctx_st** ctx) {
  if (CUresult r = need_init()) return r;
  if (!ctx) return CUDA_ERROR_INVALID_VALUE;
  *ctx = t_current;
  return CUDA_SUCCESS;
}

EMU_API CUresult cuCtxSynchronize() { return need_context(); }

// ---- memory ----

EMU_API CUresult cuMemGetInfo_v2(std::size_t* free, std::size_t* total) {
  if (CUresult r = need_context()) return r;
  if (!free || !total) return CUDA_ERROR_INVALID_VALUE;
  *free = free_bytes(t_current->device);
  *total = device_bytes();
  return CUDA_SUCCESS;
}

EMU_API CUresult cuMemAlloc_v2(CUdeviceptr* p, std::size_t bytes) {
  if (CUresult r = need_context()) return r;
  if (!p || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  std::uintptr_t out = 0;
  CUresult r = allocate(t_current->device, bytes, &out);
  if (r == CUDA_SUCCESS) *p = out;
  return r;
}

EMU_API CUresult cuMemFree_v2(CUdeviceptr p) {
  if (CUresult r = need_context()) return r;
  return release(p);
}

EMU_API CUresult cuMemHostAlloc(void** p, std::size_t bytes, unsigned) {
  if (CUresult r = need_context()) return r;
  if (!p || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  // Page-aligned like the driver's pinned blocks; ordinary host memory otherwise.
  void* m = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard lock(g_handles_mu);
  g_host_blocks.insert(m);
  *p = m;
  return CUDA_SUCCESS;
}

EMU_API CUresult cuMemFreeHost(void* p) {
  if (CUresult r = need_init()) return r;
  {
    std::lock_guard lock(g_handles_mu);
    if (!g_host_blocks.erase(p)) return CUDA_ERROR_INVALID_VALUE;
  }
  std::free(p);
  return CUDA_SUCCESS;
}

EMU_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, std::size_t n) {
  if (CUresult r = need_context()) return r;
  if (n == 0) return CUDA_SUCCESS;
  if (!src || !device_range(dst, n)) return CUDA_ERROR_INVALID_VALUE;
  return copy(reinterpret_cast<void*>(dst), src, n);
}

EMU_API CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, std::size_t n) {
  if (CUresult r = need_context()) return r;
  if (n == 0) return CUDA_SUCCESS;
  if (!dst || !device_range(src, n)) return CUDA_ERROR_INVALID_VALUE;
  return copy(dst, reinterpret_cast<const void*>(src), n);
}

EMU_API CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, std::size_t n) {
  if (CUresult r = need_context()) return r;
  if (n == 0) return CUDA_SUCCESS;
  if (!device_range(dst, n) || !device_range(src, n)) return CUDA_ERROR_INVALID_VALUE;
  return copy(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n);
}

EMU_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, std::size_t n, CUstream_st* s) {
  if (CUresult r = need_context()) return r;
  if (!valid_stream(s)) return CUDA_ERROR_INVALID_HANDLE;
  return cuMemcpyHtoD_v2(dst, src, n);
}

EMU_API CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, std::size_t n, CUstream_st* s) {
  if (CUresult r = need_context()) return r;
  if (!valid_stream(s)) return CUDA_ERROR_INVALID_HANDLE;
  return cuMemcpyDtoH_v2(dst, src, n);
}

EMU_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, std::size_t n, CUstream_st* s) {
  if (CUresult r = need_context()) return r;
  if (!valid_stream(s)) return CUDA_ERROR_INVALID_HANDLE;
  return cuMemcpyDtoD_v2(dst, src, n);
}

EMU_API CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUctx_st* dst_ctx, CUdeviceptr src, CUctx_st* src_ctx,
                                   std::size_t n, CUstream_st* s) {
  if (CUresult r = need_context()) return r;
  if (!valid_stream(s)) return CUDA_ERROR_INVALID_HANDLE;
  auto valid_ctx = [](CUctx_st* c) { return c >= g_contexts && c < g_contexts + device_count(); };
  if (!valid_ctx(dst_ctx) || !valid_ctx(src_ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  if (n == 0) return CUDA_SUCCESS;
  // Each pointer must be memory of its context's device.
  if (allocation_device(dst, n) != dst_ctx->device || allocation_device(src, n) != src_ctx->device)
    return CUDA_ERROR_INVALID_VALUE;
  return copy(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n);
}

EMU_API CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char v, std::size_t n) {
  if (CUresult r = need_context()) return r;
  if (n == 0) return CUDA_SUCCESS;
  if (!device_range(dst, n)) return CUDA_ERROR_INVALID_VALUE;
  Unprotected open;
  std::memset(reinterpret_cast<void*>(dst), v, n);
  return CUDA_SUCCESS;
}

EMU_API CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, std::size_t n, CUstream_st* s) {
  if (CUresult r = need_context()) return r;
  if (!valid_stream(s)) return CUDA_ERROR_INVALID_HANDLE;
  return cuMemsetD8_v2(dst, v, n);
}

// ---- streams and events ----

EMU_API CUresult cuStreamCreate(CUstream_st** s, unsigned) {
  if (CUresult r = need_context()) return r;
  if (!s) return CUDA_ERROR_INVALID_VALUE;
  auto* stream = new CUstream_st{t_current->device};
  std::lock_guard lock(g_handles_mu);
  g_streams.insert(stream);
  *s = stream;
  return CUDA_SUCCESS;
}

EMU_API CUresult cuStreamDestroy_v2(CUstream_st* s) {
  if (CUresult r = need_init()) return r;
  {
    std::lock_guard lock(g_handles_mu);
    if (!g_streams.erase(s)) return CUDA_ERROR_INVALID_HANDLE;
  }
  delete s;
  return CUDA_SUCCESS;
}

EMU_API CUresult cuStreamSynchronize(CUstream_st* s) {
  if (CUresult r = need_context()) return r;
  return valid_stream(s) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

EMU_API CUresult cuStreamQuery(CUstream_st* s) {
  if (CUresult r = need_context()) return r;
  return valid_stream(s) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

EMU_API CUresult cuStreamWaitEvent(CUstream_st* s, CUevent_st* e, unsigned) {
  if (CUresult r = need_context()) return r;
  if (!valid_stream(s) || !live(g_events, e)) return CUDA_ERROR_INVALID_HANDLE;
  return CUDA_SUCCESS;
}

EMU_API CUresult cuEventCreate(CUevent_st** e, unsigned flags) {
  if (CUresult r = need_context()) return r;
  if (!e) return CUDA_ERROR_INVALID_VALUE;
  auto* event = new CUevent_st{t_current->device, flags, false, {}};
  std::lock_guard lock(g_handles_mu);
  g_events.insert(event);
  *e = event;
  return CUDA_SUCCESS;
}

EMU_API CUresult cuEventDestroy_v2(CUevent_st* e) {
  if (CUresult r = need_init()) return r;
  {
    std::lock_guard lock(g_handles_mu);
    if (!g_events.erase(e)) return CUDA_ERROR_INVALID_HANDLE;
  }
  delete e;
  return CUDA_SUCCESS;
}

EMU_API CUresult cuEventRecord(CUevent_st* e, CUstream_st* s) {
  if (CUresult r = need_context()) return r;
  if (!live(g_events, e) || !valid_stream(s)) return CUDA_ERROR_INVALID_HANDLE;
  e->recorded = true;
  e->when = std::chrono::steady_clock::now();  // all earlier work on the stream is done
  return CUDA_SUCCESS;
}

EMU_API CUresult cuEventSynchronize(CUevent_st* e) {
  if (CUresult r = need_context()) return r;
  return live(g_events, e) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

EMU_API CUresult cuEventQuery(CUevent_st* e) {
  if (CUresult r = need_context()) return r;
  return live(g_events, e) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

EMU_API CUresult cuEventElapsedTime_v2(float* ms, CUevent_st* start, CUevent_st* end) {
  if (CUresult r = need_context()) return r;
  if (!ms) return CUDA_ERROR_INVALID_VALUE;
  if (!live(g_events, start) || !live(g_events, end)) return CUDA_ERROR_INVALID_HANDLE;
  // As the driver: unrecorded or timing-disabled events have no time.
  if (!start->recorded || !end->recorded || (start->flags & CU_EVENT_DISABLE_TIMING) ||
      (end->flags & CU_EVENT_DISABLE_TIMING))
    return CUDA_ERROR_INVALID_HANDLE;
  *ms = std::chrono::duration<float, std::milli>(end->when - start->when).count();
  return CUDA_SUCCESS;
}

EMU_API CUresult cuEventElapsedTime(float* ms, CUevent_st* start, CUevent_st* end) {
  return cuEventElapsedTime_v2(ms, start, end);
}

// ---- modules and launches ----

EMU_API CUresult cuModuleLoadDataEx(CUmod_st** m, const void* image, unsigned n, int* options, void** values) {
  if (CUresult r = need_context()) return r;
  if (!m || !image) return CUDA_ERROR_INVALID_VALUE;
  char* error_log = nullptr;
  char* info_log = nullptr;
  std::size_t error_size = 0, info_size = 0;
  for (unsigned i = 0; i < n && options && values; ++i) {
    const auto value = reinterpret_cast<std::uintptr_t>(values[i]);
    switch (options[i]) {
      case CU_JIT_ERROR_LOG_BUFFER: error_log = static_cast<char*>(values[i]); break;
      case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES: error_size = value; break;
      case CU_JIT_INFO_LOG_BUFFER: info_log = static_cast<char*>(values[i]); break;
      case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES: info_size = value; break;
      default: break;  // other JIT options change nothing here
    }
  }
  write_log(info_log, info_size, "");
  write_log(error_log, error_size, "");
  LoadResult loaded = load_host_module(image);
  switch (loaded.status) {
    case LoadStatus::ok: break;
    case LoadStatus::cubin: write_log(error_log, error_size, loaded.log); return CUDA_ERROR_NO_BINARY_FOR_GPU;
    case LoadStatus::not_ptx_with_source: write_log(error_log, error_size, loaded.log); return CUDA_ERROR_INVALID_IMAGE;
    case LoadStatus::compile_failed: write_log(error_log, error_size, loaded.log); return CUDA_ERROR_INVALID_PTX;
  }
  auto* module = new CUmod_st;
  module->device = t_current->device;
  module->host = std::move(loaded.module);
  std::lock_guard lock(g_handles_mu);
  g_modules.insert(module);
  *m = module;
  return CUDA_SUCCESS;
}

EMU_API CUresult cuModuleUnload(CUmod_st* m) {
  if (CUresult r = need_init()) return r;
  {
    std::lock_guard lock(g_handles_mu);
    if (!g_modules.erase(m)) return CUDA_ERROR_INVALID_HANDLE;
  }
  delete m;  // its functions die with it, as the driver's do; the host code stays loaded
  return CUDA_SUCCESS;
}

EMU_API CUresult cuModuleGetFunction(CUfunc_st** f, CUmod_st* m, const char* name) {
  if (CUresult r = need_init()) return r;
  if (!f || !name) return CUDA_ERROR_INVALID_VALUE;
  if (!live(g_modules, m)) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard lock(m->mu);
  if (auto it = m->functions.find(name); it != m->functions.end()) {
    *f = it->second.get();
    return CUDA_SUCCESS;
  }
  Launcher launcher = m->host->launcher(name);
  if (!launcher) return CUDA_ERROR_NOT_FOUND;
  auto fn = std::make_unique<CUfunc_st>();
  fn->module = m;
  fn->name = name;
  fn->launcher = launcher;
  *f = fn.get();
  m->functions.emplace(name, std::move(fn));
  return CUDA_SUCCESS;
}

EMU_API CUresult cuFuncSetAttribute(CUfunc_st* f, int attr, int value) {
  if (CUresult r = need_init()) return r;
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  if (attr == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
    if (value < 0 || value > kSharedOptin) return CUDA_ERROR_INVALID_VALUE;
    f->max_dynamic_shared = value > kSharedPerBlock ? value : kSharedPerBlock;
  }
  return CUDA_SUCCESS;  // other attributes (carveout, cluster shape, ...) change nothing here
}

EMU_API CUresult cuLaunchKernel(CUfunc_st* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                unsigned bz, unsigned shared, CUstream_st* stream, void** params, void** extra) {
  if (CUresult r = need_context()) return r;
  if (!f || !f->launcher) return CUDA_ERROR_INVALID_HANDLE;
  if (!valid_stream(stream)) return CUDA_ERROR_INVALID_HANDLE;
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0) return CUDA_ERROR_INVALID_VALUE;
  if (std::uint64_t(bx) * by * bz > 1024 || bz > 64 || gy > 65535 || gz > 65535 || gx > 2147483647u)
    return CUDA_ERROR_INVALID_VALUE;
  if (extra) {
    std::fprintf(stderr, "tessel emulated GPU: cuLaunchKernel(%s): the `extra` argument is not supported; pass "
                         "kernelParams\n", f->name.c_str());
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (shared > static_cast<unsigned>(f->max_dynamic_shared)) {
    std::fprintf(stderr,
                 "tessel emulated GPU: cuLaunchKernel(%s): %u bytes of dynamic shared memory exceed the kernel's "
                 "limit of %d (raise it with cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES))\n",
                 f->name.c_str(), shared, f->max_dynamic_shared);
    return CUDA_ERROR_INVALID_VALUE;
  }
  ++g_launches;
  std::string failure;
  {
    Unprotected open;
    // On a thread of its own: the emulator keeps per-thread fiber stacks for
    // each kernel library, which die with the thread instead of piling up.
    std::thread runner([&] {
      try {
        f->launcher(params, gx, gy, gz, bx, by, bz, shared);
      } catch (const std::exception& e) {
        failure = e.what();
        if (failure.empty()) failure = "an exception without a message";
      } catch (...) {
        failure = "an exception that is not a std::exception";
      }
    });
    runner.join();
  }
  if (!failure.empty()) {
    std::fprintf(stderr, "tessel emulated GPU: kernel %s (grid %u,%u,%u block %u,%u,%u) failed: %s\n",
                 f->name.c_str(), gx, gy, gz, bx, by, bz, failure.c_str());
    return CUDA_ERROR_LAUNCH_FAILED;
  }
  return CUDA_SUCCESS;
}

// ---- for tests and the library stand-ins ----

EMU_API int tessel_emu_enter(void) {
  enter();
  return 0;
}

EMU_API void tessel_emu_leave(void) { leave(); }

EMU_API int tessel_emu_device_of(const void* p) {
  return allocation_device(reinterpret_cast<std::uintptr_t>(p), 1);
}

EMU_API int tessel_emu_range_device(const void* p, std::size_t bytes) {
  return allocation_device(reinterpret_cast<std::uintptr_t>(p), bytes == 0 ? 1 : bytes);
}

// The device whose context is current on this thread; -1 when none is.
EMU_API int tessel_emu_current_device(void) { return t_current ? t_current->device : -1; }

// The device of a stream: -2 for the null, legacy or per-thread default stream
// (every device has one), -1 when `s` is no live stream.
EMU_API int tessel_emu_stream_device(const void* s) {
  if (reinterpret_cast<std::uintptr_t>(s) <= 2) return -2;
  if (!live(g_streams, s)) return -1;
  return static_cast<const CUstream_st*>(s)->device;
}

EMU_API unsigned long long tessel_emu_kernels_launched(void) { return g_launches.load(); }

EMU_API unsigned long long tessel_emu_host_compiles(void) { return host_compiles(); }

// Fiber stacks the shared pool handed out, and mappings it had to make (fiber_stacks.cpp).
EMU_API unsigned long long tessel_emu_fiber_stacks_taken(void) { return fiber_stacks_taken(); }
EMU_API unsigned long long tessel_emu_fiber_stack_mappings(void) { return fiber_stack_mappings(); }
