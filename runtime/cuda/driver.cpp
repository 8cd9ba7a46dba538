#include "runtime/cuda/driver.h"

#include <dlfcn.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "runtime/errors.h"

namespace tessel::cuda {
namespace {

using CUjit_option = int;  // an enum in cuda.h; int-sized
constexpr CUjit_option CU_JIT_INFO_LOG_BUFFER = 3;
constexpr CUjit_option CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4;
constexpr CUjit_option CU_JIT_ERROR_LOG_BUFFER = 5;
constexpr CUjit_option CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6;
constexpr int CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1;
constexpr int CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK = 8;
constexpr int CU_DEVICE_ATTRIBUTE_WARP_SIZE = 10;
constexpr int CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
constexpr int CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97;
constexpr int CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;
constexpr unsigned CU_STREAM_NON_BLOCKING = 0x1;
constexpr unsigned CU_EVENT_DISABLE_TIMING = 0x2;
constexpr unsigned CU_MEMHOSTALLOC_PORTABLE = 0x1;
constexpr int kMaxDevices = 64;

// The entry points tessel uses, by their versioned ABI names (cuda.h maps
// e.g. cuMemAlloc to cuMemAlloc_v2; dlsym needs the real symbol).
struct Api {
  void* lib = nullptr;
  std::string unavailable;  // why the driver cannot be used; empty when it can

  CUresult (*cuInit)(unsigned) = nullptr;
  CUresult (*cuDriverGetVersion)(int*) = nullptr;
  CUresult (*cuGetErrorName)(CUresult, const char**) = nullptr;
  CUresult (*cuGetErrorString)(CUresult, const char**) = nullptr;
  CUresult (*cuDeviceGetCount)(int*) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*cuDeviceGetName)(char*, int, CUdevice) = nullptr;
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice) = nullptr;
  CUresult (*cuDeviceTotalMem)(std::size_t*, CUdevice) = nullptr;
  CUresult (*cuDeviceCanAccessPeer)(int*, CUdevice, CUdevice) = nullptr;
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*cuCtxSetCurrent)(CUcontext) = nullptr;
  CUresult (*cuCtxGetCurrent)(CUcontext*) = nullptr;
  CUresult (*cuCtxSynchronize)() = nullptr;
  CUresult (*cuMemGetInfo)(std::size_t*, std::size_t*) = nullptr;
  CUresult (*cuMemAlloc)(CUdeviceptr*, std::size_t) = nullptr;
  CUresult (*cuMemFree)(CUdeviceptr) = nullptr;
  CUresult (*cuMemHostAlloc)(void**, std::size_t, unsigned) = nullptr;
  CUresult (*cuMemFreeHost)(void*) = nullptr;
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, std::size_t) = nullptr;
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, std::size_t) = nullptr;
  CUresult (*cuMemcpyDtoD)(CUdeviceptr, CUdeviceptr, std::size_t) = nullptr;
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void*, std::size_t, CUstream) = nullptr;
  CUresult (*cuMemcpyDtoHAsync)(void*, CUdeviceptr, std::size_t, CUstream) = nullptr;
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, std::size_t, CUstream) = nullptr;
  CUresult (*cuMemcpyPeerAsync)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, std::size_t,
                                CUstream) = nullptr;
  CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, std::size_t) = nullptr;
  CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, std::size_t, CUstream) = nullptr;
  CUresult (*cuStreamCreate)(CUstream*, unsigned) = nullptr;
  CUresult (*cuStreamDestroy)(CUstream) = nullptr;
  CUresult (*cuStreamSynchronize)(CUstream) = nullptr;
  CUresult (*cuStreamQuery)(CUstream) = nullptr;
  CUresult (*cuStreamWaitEvent)(CUstream, CUevent, unsigned) = nullptr;
  CUresult (*cuEventCreate)(CUevent*, unsigned) = nullptr;
  CUresult (*cuEventDestroy)(CUevent) = nullptr;
  CUresult (*cuEventRecord)(CUevent, CUstream) = nullptr;
  CUresult (*cuEventSynchronize)(CUevent) = nullptr;
  CUresult (*cuEventQuery)(CUevent) = nullptr;
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent) = nullptr;
  CUresult (*cuModuleLoadDataEx)(CUmodule*, const void*, unsigned, CUjit_option*, void**) = nullptr;
  CUresult (*cuModuleUnload)(CUmodule) = nullptr;
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*cuFuncSetAttribute)(CUfunction, int, int) = nullptr;
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, CUstream, void**, void**) = nullptr;

  int device_count = 0;
  int version = 0;
};

const char* known_error_name(CUresult r) {
  switch (r) {
    case CUDA_SUCCESS: return "CUDA_SUCCESS";
    case CUDA_ERROR_INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
    case CUDA_ERROR_OUT_OF_MEMORY: return "CUDA_ERROR_OUT_OF_MEMORY";
    case CUDA_ERROR_NOT_INITIALIZED: return "CUDA_ERROR_NOT_INITIALIZED";
    case CUDA_ERROR_STUB_LIBRARY: return "CUDA_ERROR_STUB_LIBRARY";
    case CUDA_ERROR_NO_DEVICE: return "CUDA_ERROR_NO_DEVICE";
    case CUDA_ERROR_INVALID_DEVICE: return "CUDA_ERROR_INVALID_DEVICE";
    case CUDA_ERROR_INVALID_IMAGE: return "CUDA_ERROR_INVALID_IMAGE";
    case CUDA_ERROR_INVALID_PTX: return "CUDA_ERROR_INVALID_PTX";
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION: return "CUDA_ERROR_UNSUPPORTED_PTX_VERSION";
    case CUDA_ERROR_NOT_FOUND: return "CUDA_ERROR_NOT_FOUND";
    case CUDA_ERROR_NOT_READY: return "CUDA_ERROR_NOT_READY";
  }
  return nullptr;
}

template <class F>
bool bind(Api& a, F& fn, const char* symbol) {
  fn = reinterpret_cast<F>(dlsym(a.lib, symbol));
  if (!fn && a.unavailable.empty()) a.unavailable = fmt::format("the driver library lacks {} (driver too old)", symbol);
  return fn != nullptr;
}

Api load() noexcept {
  Api a;
  try {
    const char* override_path = std::getenv("TESSEL_CUDA_DRIVER");
    const char* path = override_path && *override_path ? override_path : "libcuda.so.1";
    a.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!a.lib) {
      const char* why = dlerror();
      a.unavailable = why ? why : fmt::format("cannot load {}", path);
      return a;
    }
    bind(a, a.cuInit, "cuInit");
    bind(a, a.cuDriverGetVersion, "cuDriverGetVersion");
    bind(a, a.cuGetErrorName, "cuGetErrorName");
    bind(a, a.cuGetErrorString, "cuGetErrorString");
    bind(a, a.cuDeviceGetCount, "cuDeviceGetCount");
    bind(a, a.cuDeviceGet, "cuDeviceGet");
    bind(a, a.cuDeviceGetName, "cuDeviceGetName");
    bind(a, a.cuDeviceGetAttribute, "cuDeviceGetAttribute");
    bind(a, a.cuDeviceTotalMem, "cuDeviceTotalMem_v2");
    bind(a, a.cuDeviceCanAccessPeer, "cuDeviceCanAccessPeer");
    bind(a, a.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    bind(a, a.cuCtxSetCurrent, "cuCtxSetCurrent");
    bind(a, a.cuCtxGetCurrent, "cuCtxGetCurrent");
    bind(a, a.cuCtxSynchronize, "cuCtxSynchronize");
    bind(a, a.cuMemGetInfo, "cuMemGetInfo_v2");
    bind(a, a.cuMemAlloc, "cuMemAlloc_v2");
    bind(a, a.cuMemFree, "cuMemFree_v2");
    bind(a, a.cuMemHostAlloc, "cuMemHostAlloc");
    bind(a, a.cuMemFreeHost, "cuMemFreeHost");
    bind(a, a.cuMemcpyHtoD, "cuMemcpyHtoD_v2");
    bind(a, a.cuMemcpyDtoH, "cuMemcpyDtoH_v2");
    bind(a, a.cuMemcpyDtoD, "cuMemcpyDtoD_v2");
    bind(a, a.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
    bind(a, a.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
    bind(a, a.cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
    bind(a, a.cuMemcpyPeerAsync, "cuMemcpyPeerAsync");
    bind(a, a.cuMemsetD8, "cuMemsetD8_v2");
    bind(a, a.cuMemsetD8Async, "cuMemsetD8Async");
    bind(a, a.cuStreamCreate, "cuStreamCreate");
    bind(a, a.cuStreamDestroy, "cuStreamDestroy_v2");
    bind(a, a.cuStreamSynchronize, "cuStreamSynchronize");
    bind(a, a.cuStreamQuery, "cuStreamQuery");
    bind(a, a.cuStreamWaitEvent, "cuStreamWaitEvent");
    bind(a, a.cuEventCreate, "cuEventCreate");
    bind(a, a.cuEventDestroy, "cuEventDestroy_v2");
    bind(a, a.cuEventRecord, "cuEventRecord");
    bind(a, a.cuEventSynchronize, "cuEventSynchronize");
    bind(a, a.cuEventQuery, "cuEventQuery");
    // 12.8 added _v2 (and CUDA 13 headers map to it); older drivers have only the original.
    a.cuEventElapsedTime =
        reinterpret_cast<decltype(a.cuEventElapsedTime)>(dlsym(a.lib, "cuEventElapsedTime_v2"));
    if (!a.cuEventElapsedTime) bind(a, a.cuEventElapsedTime, "cuEventElapsedTime");
    bind(a, a.cuModuleLoadDataEx, "cuModuleLoadDataEx");
    bind(a, a.cuModuleUnload, "cuModuleUnload");
    bind(a, a.cuModuleGetFunction, "cuModuleGetFunction");
    bind(a, a.cuFuncSetAttribute, "cuFuncSetAttribute");
    bind(a, a.cuLaunchKernel, "cuLaunchKernel");
    if (!a.unavailable.empty()) return a;

    if (CUresult r = a.cuInit(0); r != CUDA_SUCCESS) {
      // The toolkit's stub library fails cuGetErrorName too, so names come from the table first.
      const char* name = known_error_name(r);
      if (!name && (a.cuGetErrorName(r, &name) != CUDA_SUCCESS || !name)) name = "unknown error";
      a.unavailable = fmt::format("cuInit failed: {} ({})", name, r);
      return a;
    }
    if (a.cuDriverGetVersion(&a.version) != CUDA_SUCCESS) a.version = 0;
    int n = 0;
    if (a.cuDeviceGetCount(&n) != CUDA_SUCCESS) n = 0;
    a.device_count = n < 0 ? 0 : (n > kMaxDevices ? kMaxDevices : n);
  } catch (...) {
    a.unavailable = "failed to load the CUDA driver";
  }
  return a;
}

const Api& api() noexcept {
  static const Api a = load();
  return a;
}

std::string describe(CUresult r) {
  const Api& a = api();
  const char* name = nullptr;
  const char* text = nullptr;
  if (a.unavailable.empty()) {
    if (a.cuGetErrorName(r, &name) != CUDA_SUCCESS) name = nullptr;
    if (a.cuGetErrorString(r, &text) != CUDA_SUCCESS) text = nullptr;
  }
  std::string n = name ? std::string(name) : error_name(r);
  return text ? fmt::format("{} ({})", n, text) : n;
}

[[noreturn]] void fail(std::string_view call, CUresult r) {
  throw DeviceError(fmt::format("CUDA driver call {} failed: {}", call, describe(r)));
}

inline void check(CUresult r, std::string_view call) {
  if (r != CUDA_SUCCESS) fail(call, r);
}

// The driver, or a DeviceError saying why it cannot be used for `call`.
const Api& need(std::string_view call) {
  const Api& a = api();
  if (!a.unavailable.empty())
    throw DeviceError(fmt::format("{}: the CUDA driver is not available ({}); tessel runs on the CPU here",
                                  call, a.unavailable));
  return a;
}

void check_ordinal(const Api& a, int ordinal) {
  if (ordinal < 0 || ordinal >= a.device_count)
    throw DeviceError(fmt::format("cuda:{} does not exist: this machine has {} CUDA device{}", ordinal,
                                  a.device_count, a.device_count == 1 ? "" : "s"));
}

std::array<std::atomic<CUcontext>, kMaxDevices> g_primary{};
std::mutex g_primary_mutex;

// Memory copies and frees work in any context (unified addressing); they need one current.
const Api& need_context(std::string_view call) {
  const Api& a = need(call);
  CUcontext cur = nullptr;
  if (a.cuCtxGetCurrent(&cur) != CUDA_SUCCESS || cur == nullptr) {
    if (a.device_count == 0) throw DeviceError(fmt::format("{}: no CUDA device", call));
    set_device(0);
  }
  return a;
}

int attribute(const Api& a, int attr, CUdevice d) {
  int v = 0;
  check(a.cuDeviceGetAttribute(&v, attr, d), "cuDeviceGetAttribute");
  return v;
}

}  // namespace

bool driver_available() noexcept { return api().unavailable.empty(); }

std::string driver_unavailable_reason() { return api().unavailable; }

int device_count() noexcept { return api().device_count; }

int driver_version() noexcept { return api().version; }

std::string error_name(CUresult r) {
  if (const char* known = known_error_name(r)) return known;
  const Api& a = api();
  const char* name = nullptr;
  if (a.unavailable.empty() && a.cuGetErrorName(r, &name) == CUDA_SUCCESS && name) return name;
  return fmt::format("CUDA error {}", r);
}

DeviceProperties device_properties(int ordinal) {
  const Api& a = need("cuDeviceGet");
  check_ordinal(a, ordinal);
  CUdevice d = 0;
  check(a.cuDeviceGet(&d, ordinal), "cuDeviceGet");
  DeviceProperties p;
  p.ordinal = ordinal;
  char name[256] = {};
  check(a.cuDeviceGetName(name, sizeof name - 1, d), "cuDeviceGetName");
  p.name = name;
  p.cc_major = attribute(a, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d);
  p.cc_minor = attribute(a, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d);
  check(a.cuDeviceTotalMem(&p.total_memory, d), "cuDeviceTotalMem_v2");
  p.multiprocessors = attribute(a, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d);
  p.max_threads_per_block = attribute(a, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, d);
  p.max_shared_memory_per_block = attribute(a, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, d);
  p.max_shared_memory_per_block_optin =
      attribute(a, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, d);
  p.warp_size = attribute(a, CU_DEVICE_ATTRIBUTE_WARP_SIZE, d);
  return p;
}

std::string device_name(int ordinal) { return device_properties(ordinal).name; }

std::pair<int, int> compute_capability(int ordinal) {
  const Api& a = need("cuDeviceGetAttribute");
  check_ordinal(a, ordinal);
  CUdevice d = 0;
  check(a.cuDeviceGet(&d, ordinal), "cuDeviceGet");
  return {attribute(a, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d),
          attribute(a, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d)};
}

std::size_t total_memory(int ordinal) {
  const Api& a = need("cuDeviceTotalMem_v2");
  check_ordinal(a, ordinal);
  CUdevice d = 0;
  check(a.cuDeviceGet(&d, ordinal), "cuDeviceGet");
  std::size_t bytes = 0;
  check(a.cuDeviceTotalMem(&bytes, d), "cuDeviceTotalMem_v2");
  return bytes;
}

MemoryInfo memory_info(int ordinal) {
  const Api& a = need("cuMemGetInfo_v2");
  set_device(ordinal);
  MemoryInfo m;
  check(a.cuMemGetInfo(&m.free, &m.total), "cuMemGetInfo_v2");
  return m;
}

CUcontext primary_context(int ordinal) {
  const Api& a = need("cuDevicePrimaryCtxRetain");
  check_ordinal(a, ordinal);
  if (CUcontext c = g_primary[ordinal].load(std::memory_order_acquire)) return c;
  std::lock_guard lock(g_primary_mutex);
  if (CUcontext c = g_primary[ordinal].load(std::memory_order_relaxed)) return c;
  CUdevice d = 0;
  check(a.cuDeviceGet(&d, ordinal), "cuDeviceGet");
  CUcontext c = nullptr;
  if (CUresult r = a.cuDevicePrimaryCtxRetain(&c, d); r != CUDA_SUCCESS)
    fail(fmt::format("cuDevicePrimaryCtxRetain(cuda:{})", ordinal), r);
  // Retained for the life of the process: the driver tears contexts down at exit.
  g_primary[ordinal].store(c, std::memory_order_release);
  return c;
}

void set_device(int ordinal) {
  const Api& a = need("cuCtxSetCurrent");
  CUcontext want = primary_context(ordinal);
  CUcontext cur = nullptr;
  // Asked every time rather than cached: other libraries (cuBLAS, the runtime API)
  // may change the current context behind tessel's back.
  if (a.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == want) return;
  check(a.cuCtxSetCurrent(want), "cuCtxSetCurrent");
}

int current_device() {
  const Api& a = api();
  if (!a.unavailable.empty()) return -1;
  CUcontext cur = nullptr;
  if (a.cuCtxGetCurrent(&cur) != CUDA_SUCCESS || !cur) return -1;
  for (int i = 0; i < a.device_count; ++i)
    if (g_primary[i].load(std::memory_order_acquire) == cur) return i;
  return -1;
}

void device_synchronize(int ordinal) {
  const Api& a = need("cuCtxSynchronize");
  set_device(ordinal);
  check(a.cuCtxSynchronize(), "cuCtxSynchronize");
}

CUresult try_mem_alloc(int ordinal, std::size_t bytes, CUdeviceptr* out) {
  const Api& a = need("cuMemAlloc_v2");
  set_device(ordinal);
  *out = 0;
  CUresult r = a.cuMemAlloc(out, bytes);
  if (r == CUDA_SUCCESS || r == CUDA_ERROR_OUT_OF_MEMORY) return r;
  fail(fmt::format("cuMemAlloc_v2({} bytes on cuda:{})", bytes, ordinal), r);
}

CUdeviceptr mem_alloc(int ordinal, std::size_t bytes) {
  CUdeviceptr p = 0;
  if (CUresult r = try_mem_alloc(ordinal, bytes, &p); r != CUDA_SUCCESS)
    fail(fmt::format("cuMemAlloc_v2({} bytes on cuda:{})", bytes, ordinal), r);
  return p;
}

void mem_free(CUdeviceptr ptr) {
  if (!ptr) return;
  check(need_context("cuMemFree_v2").cuMemFree(ptr), "cuMemFree_v2");
}

void memcpy_htod(CUdeviceptr dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  check(need_context("cuMemcpyHtoD_v2").cuMemcpyHtoD(dst, src, bytes), "cuMemcpyHtoD_v2");
}

void memcpy_dtoh(void* dst, CUdeviceptr src, std::size_t bytes) {
  if (bytes == 0) return;
  check(need_context("cuMemcpyDtoH_v2").cuMemcpyDtoH(dst, src, bytes), "cuMemcpyDtoH_v2");
}

void memcpy_dtod(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes) {
  if (bytes == 0) return;
  check(need_context("cuMemcpyDtoD_v2").cuMemcpyDtoD(dst, src, bytes), "cuMemcpyDtoD_v2");
}

void memcpy_htod_async(CUdeviceptr dst, const void* src, std::size_t bytes, CUstream stream) {
  if (bytes == 0) return;
  check(need_context("cuMemcpyHtoDAsync_v2").cuMemcpyHtoDAsync(dst, src, bytes, stream),
        "cuMemcpyHtoDAsync_v2");
}

void memcpy_dtoh_async(void* dst, CUdeviceptr src, std::size_t bytes, CUstream stream) {
  if (bytes == 0) return;
  check(need_context("cuMemcpyDtoHAsync_v2").cuMemcpyDtoHAsync(dst, src, bytes, stream),
        "cuMemcpyDtoHAsync_v2");
}

void memcpy_dtod_async(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes, CUstream stream) {
  if (bytes == 0) return;
  check(need_context("cuMemcpyDtoDAsync_v2").cuMemcpyDtoDAsync(dst, src, bytes, stream),
        "cuMemcpyDtoDAsync_v2");
}

void memcpy_peer_async(CUdeviceptr dst, int dst_device, CUdeviceptr src, int src_device,
                       std::size_t bytes, CUstream stream) {
  if (bytes == 0) return;
  const Api& a = need_context("cuMemcpyPeerAsync");
  CUresult r = a.cuMemcpyPeerAsync(dst, primary_context(dst_device), src, primary_context(src_device),
                                   bytes, stream);
  if (r != CUDA_SUCCESS)
    fail(fmt::format("cuMemcpyPeerAsync(cuda:{} -> cuda:{}, {} bytes)", src_device, dst_device, bytes), r);
}

bool can_access_peer(int device, int peer_device) {
  const Api& a = need("cuDeviceCanAccessPeer");
  check_ordinal(a, device);
  check_ordinal(a, peer_device);
  if (device == peer_device) return true;
  CUdevice d = 0, peer = 0;
  check(a.cuDeviceGet(&d, device), "cuDeviceGet");
  check(a.cuDeviceGet(&peer, peer_device), "cuDeviceGet");
  int ok = 0;
  check(a.cuDeviceCanAccessPeer(&ok, d, peer), "cuDeviceCanAccessPeer");
  return ok != 0;
}

void memset_d8(CUdeviceptr dst, unsigned char value, std::size_t bytes) {
  if (bytes == 0) return;
  check(need_context("cuMemsetD8_v2").cuMemsetD8(dst, value, bytes), "cuMemsetD8_v2");
}

void memset_d8_async(CUdeviceptr dst, unsigned char value, std::size_t bytes, CUstream stream) {
  if (bytes == 0) return;
  check(need_context("cuMemsetD8Async").cuMemsetD8Async(dst, value, bytes, stream), "cuMemsetD8Async");
}

void* host_alloc_pinned(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  const Api& a = need_context("cuMemHostAlloc");
  void* p = nullptr;
  if (CUresult r = a.cuMemHostAlloc(&p, bytes, CU_MEMHOSTALLOC_PORTABLE); r != CUDA_SUCCESS)
    fail(fmt::format("cuMemHostAlloc({} bytes)", bytes), r);
  return p;
}

void host_free_pinned(void* ptr) {
  if (!ptr) return;
  check(need_context("cuMemFreeHost").cuMemFreeHost(ptr), "cuMemFreeHost");
}

CUstream stream_create(int ordinal) {
  const Api& a = need("cuStreamCreate");
  set_device(ordinal);
  CUstream s = nullptr;
  check(a.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  return s;
}

void stream_destroy(CUstream s) {
  if (!s) return;
  check(need_context("cuStreamDestroy_v2").cuStreamDestroy(s), "cuStreamDestroy_v2");
}

void stream_synchronize(CUstream s) {
  check(need_context("cuStreamSynchronize").cuStreamSynchronize(s), "cuStreamSynchronize");
}

bool stream_query(CUstream s) {
  CUresult r = need_context("cuStreamQuery").cuStreamQuery(s);
  if (r == CUDA_ERROR_NOT_READY) return false;
  check(r, "cuStreamQuery");
  return true;
}

void stream_wait_event(CUstream s, CUevent e) {
  check(need_context("cuStreamWaitEvent").cuStreamWaitEvent(s, e, 0), "cuStreamWaitEvent");
}

CUevent event_create(int ordinal, bool timing) {
  const Api& a = need("cuEventCreate");
  set_device(ordinal);
  CUevent e = nullptr;
  check(a.cuEventCreate(&e, timing ? 0u : CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  return e;
}

void event_destroy(CUevent e) {
  if (!e) return;
  check(need_context("cuEventDestroy_v2").cuEventDestroy(e), "cuEventDestroy_v2");
}

void event_record(CUevent e, CUstream s) {
  check(need_context("cuEventRecord").cuEventRecord(e, s), "cuEventRecord");
}

void event_synchronize(CUevent e) {
  check(need_context("cuEventSynchronize").cuEventSynchronize(e), "cuEventSynchronize");
}

bool event_query(CUevent e) {
  CUresult r = need_context("cuEventQuery").cuEventQuery(e);
  if (r == CUDA_ERROR_NOT_READY) return false;
  check(r, "cuEventQuery");
  return true;
}

float event_elapsed_ms(CUevent start, CUevent end) {
  float ms = 0;
  check(need_context("cuEventElapsedTime").cuEventElapsedTime(&ms, start, end), "cuEventElapsedTime");
  return ms;
}

CUmodule module_load_data(int ordinal, const void* image) {
  const Api& a = need("cuModuleLoadDataEx");
  set_device(ordinal);
  // The JIT's own log says which PTX line it rejected; without it the error is opaque.
  std::vector<char> info(8192, '\0'), error(8192, '\0');
  CUjit_option opts[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                         CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* vals[] = {info.data(), reinterpret_cast<void*>(static_cast<std::uintptr_t>(info.size() - 1)),
                  error.data(), reinterpret_cast<void*>(static_cast<std::uintptr_t>(error.size() - 1))};
  CUmodule m = nullptr;
  CUresult r = a.cuModuleLoadDataEx(&m, image, 4, opts, vals);
  if (r != CUDA_SUCCESS) {
    std::string log(error.data());
    std::string msg = fmt::format("CUDA driver call cuModuleLoadDataEx(cuda:{}) failed: {}", ordinal, describe(r));
    if (r == CUDA_ERROR_UNSUPPORTED_PTX_VERSION)
      msg += fmt::format("; the PTX is newer than this driver (CUDA {}.{}): load a CUBIN instead or update the driver",
                         a.version / 1000, a.version % 1000 / 10);
    if (!log.empty()) msg += "\nJIT log:\n" + log;
    throw DeviceError(msg);
  }
  return m;
}

void module_unload(CUmodule m) {
  if (!m) return;
  check(need_context("cuModuleUnload").cuModuleUnload(m), "cuModuleUnload");
}

CUfunction module_get_function(CUmodule m, const char* name) {
  const Api& a = need("cuModuleGetFunction");
  CUfunction f = nullptr;
  if (CUresult r = a.cuModuleGetFunction(&f, m, name); r != CUDA_SUCCESS) {
    std::string call = fmt::format("cuModuleGetFunction(\"{}\")", name);
    if (r == CUDA_ERROR_NOT_FOUND)
      throw DeviceError(fmt::format("CUDA driver call {} failed: {}; the module defines no kernel named '{}' "
                                    "(declare it extern \"C\" __global__ to keep the name unmangled)",
                                    call, describe(r), name));
    fail(call, r);
  }
  return f;
}

void function_set_max_dynamic_shared(CUfunction f, int bytes) {
  check(need("cuFuncSetAttribute").cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes),
        "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
}

void launch_kernel(CUfunction f, Dim3 grid, Dim3 block, unsigned shared_bytes, CUstream stream,
                   void** args) {
  const Api& a = need_context("cuLaunchKernel");
  CUresult r = a.cuLaunchKernel(f, grid.x, grid.y, grid.z, block.x, block.y, block.z, shared_bytes, stream,
                                args, nullptr);
  if (r != CUDA_SUCCESS)
    fail(fmt::format("cuLaunchKernel(grid=({},{},{}), block=({},{},{}), shared={} B)", grid.x, grid.y, grid.z,
                     block.x, block.y, block.z, shared_bytes),
         r);
}

Module Module::load_ptx(int ordinal, std::string_view ptx) {
  std::string text(ptx);  // the driver wants it NUL-terminated
  return Module(module_load_data(ordinal, text.c_str()));
}

Module Module::load_cubin(int ordinal, std::span<const char> cubin) {
  if (cubin.size() < 4 || cubin[0] != 0x7f || cubin[1] != 'E' || cubin[2] != 'L' || cubin[3] != 'F')
    throw DeviceError("Module::load_cubin: the image is not a CUBIN (no ELF header)");
  return Module(module_load_data(ordinal, cubin.data()));
}

Module& Module::operator=(Module&& o) noexcept {
  if (this != &o) {
    if (m_) {
      try {
        module_unload(m_);
      } catch (...) {
      }
    }
    m_ = o.m_;
    o.m_ = nullptr;
  }
  return *this;
}

Module::~Module() {
  if (m_) {
    try {
      module_unload(m_);
    } catch (...) {
      // A destructor cannot report; the module dies with its context.
    }
  }
}

}  // namespace tessel::cuda
