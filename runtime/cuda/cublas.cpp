#include "runtime/cuda/cublas.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "runtime/cuda/device_allocator.h"
#include "runtime/cuda/shared_library.h"
#include "runtime/errors.h"

namespace tessel::cuda {
namespace lt {

// --- the cuBLASLt ABI tessel uses (same sizes and values as cublasLt.h) ---
using Status = int;  // cublasStatus_t
struct Context;
struct DescOpaque;
struct LayoutOpaque;
struct PrefOpaque;
using Handle = Context*;
using MatmulDesc = DescOpaque*;
using Layout = LayoutOpaque*;
using Preference = PrefOpaque*;
struct Algo {
  uint64_t data[8];
};
struct HeuristicResult {
  Algo algo;
  size_t workspace_size;
  Status state;
  float waves_count;
  int reserved[4];
};

constexpr Status STATUS_SUCCESS = 0, STATUS_NOT_SUPPORTED = 15;
constexpr int R_32F = 0, R_64F = 1;               // cudaDataType
constexpr int COMPUTE_32F = 68, COMPUTE_64F = 70;  // cublasComputeType_t
constexpr int32_t OP_N = 0, OP_T = 1;              // cublasOperation_t
// cublasLtMatmulDescAttributes_t
constexpr int DESC_TRANSA = 3, DESC_TRANSB = 4, DESC_EPILOGUE = 7, DESC_BIAS_POINTER = 8, DESC_BIAS_DATA_TYPE = 26;
// cublasLtEpilogue_t
constexpr uint32_t EPILOGUE_DEFAULT = 1, EPILOGUE_RELU = 2, EPILOGUE_BIAS = 4, EPILOGUE_RELU_BIAS = 6;
// cublasLtMatmulPreferenceAttributes_t
constexpr int PREF_MAX_WORKSPACE_BYTES = 1, PREF_MIN_ALIGNMENT_A_BYTES = 5, PREF_MIN_ALIGNMENT_B_BYTES = 6,
              PREF_MIN_ALIGNMENT_C_BYTES = 7, PREF_MIN_ALIGNMENT_D_BYTES = 8;

struct Api {
  void* lib = nullptr;
  std::string library;
  std::string unavailable;
  size_t (*GetVersion)() = nullptr;
  const char* (*GetStatusName)(Status) = nullptr;
  Status (*Create)(Handle*) = nullptr;
  Status (*Destroy)(Handle) = nullptr;
  Status (*MatmulDescCreate)(MatmulDesc*, int compute, int scale) = nullptr;
  Status (*MatmulDescDestroy)(MatmulDesc) = nullptr;
  Status (*MatmulDescSetAttribute)(MatmulDesc, int attr, const void* buf, size_t size) = nullptr;
  Status (*MatrixLayoutCreate)(Layout*, int type, uint64_t rows, uint64_t cols, int64_t ld) = nullptr;
  Status (*MatrixLayoutDestroy)(Layout) = nullptr;
  Status (*MatmulPreferenceCreate)(Preference*) = nullptr;
  Status (*MatmulPreferenceDestroy)(Preference) = nullptr;
  Status (*MatmulPreferenceSetAttribute)(Preference, int attr, const void* buf, size_t size) = nullptr;
  Status (*MatmulAlgoGetHeuristic)(Handle, MatmulDesc, Layout, Layout, Layout, Layout, Preference, int requested,
                                   HeuristicResult* results, int* returned) = nullptr;
  Status (*Matmul)(Handle, MatmulDesc, const void* alpha, const void* A, Layout, const void* B, Layout,
                   const void* beta, const void* C, Layout, void* D, Layout, const Algo*, void* workspace,
                   size_t workspace_bytes, CUstream stream) = nullptr;
};

}  // namespace lt
}  // namespace tessel::cuda

// Where the toolkit's header is at hand, the declarations above are checked against it.
#if __has_include(<cublasLt.h>)
#include <cublasLt.h>
namespace tessel::cuda::lt {
static_assert(sizeof(Algo) == sizeof(cublasLtMatmulAlgo_t));
static_assert(sizeof(HeuristicResult) == sizeof(cublasLtMatmulHeuristicResult_t));
static_assert(offsetof(HeuristicResult, workspace_size) == offsetof(cublasLtMatmulHeuristicResult_t, workspaceSize));
static_assert(offsetof(HeuristicResult, state) == offsetof(cublasLtMatmulHeuristicResult_t, state));
static_assert(STATUS_SUCCESS == CUBLAS_STATUS_SUCCESS && STATUS_NOT_SUPPORTED == CUBLAS_STATUS_NOT_SUPPORTED);
static_assert(R_32F == CUDA_R_32F && R_64F == CUDA_R_64F);
static_assert(COMPUTE_32F == CUBLAS_COMPUTE_32F && COMPUTE_64F == CUBLAS_COMPUTE_64F);
static_assert(OP_N == CUBLAS_OP_N && OP_T == CUBLAS_OP_T);
static_assert(DESC_TRANSA == CUBLASLT_MATMUL_DESC_TRANSA && DESC_TRANSB == CUBLASLT_MATMUL_DESC_TRANSB &&
              DESC_EPILOGUE == CUBLASLT_MATMUL_DESC_EPILOGUE && DESC_BIAS_POINTER == CUBLASLT_MATMUL_DESC_BIAS_POINTER &&
              DESC_BIAS_DATA_TYPE == CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE);
static_assert(EPILOGUE_DEFAULT == CUBLASLT_EPILOGUE_DEFAULT && EPILOGUE_RELU == CUBLASLT_EPILOGUE_RELU &&
              EPILOGUE_BIAS == CUBLASLT_EPILOGUE_BIAS && EPILOGUE_RELU_BIAS == CUBLASLT_EPILOGUE_RELU_BIAS);
static_assert(PREF_MAX_WORKSPACE_BYTES == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES &&
              PREF_MIN_ALIGNMENT_A_BYTES == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES &&
              PREF_MIN_ALIGNMENT_B_BYTES == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES &&
              PREF_MIN_ALIGNMENT_C_BYTES == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES &&
              PREF_MIN_ALIGNMENT_D_BYTES == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES);
}  // namespace tessel::cuda::lt
#endif

namespace tessel::cuda {
namespace {

using lt::Status;

lt::Api load() noexcept {
  lt::Api a;
  try {
    // Candidates in order (see the header): the loader, then the toolkit tessel was built with.
    std::vector<std::string> defaults{"libcublasLt.so.13", "libcublasLt.so.12"};
#ifdef TESSEL_CUDA_LIBRARY_DIR
    defaults.push_back(std::string(TESSEL_CUDA_LIBRARY_DIR) + "/libcublasLt.so.13");
#endif
    SharedLibrary lib = open_shared_library({"cuBLASLt", "TESSEL_CUBLASLT", "libcublasLt.so.13"}, std::move(defaults));
    a.lib = lib.handle;
    a.library = lib.path;
    if (!a.lib) {
      a.unavailable = lib.error;
      return a;
    }
    const std::string note = lib.override;
    std::string missing;
    bind_symbol(a.lib, a.GetVersion, "cublasLtGetVersion", missing);
    bind_symbol(a.lib, a.GetStatusName, "cublasLtGetStatusName", missing);
    bind_symbol(a.lib, a.Create, "cublasLtCreate", missing);
    bind_symbol(a.lib, a.Destroy, "cublasLtDestroy", missing);
    bind_symbol(a.lib, a.MatmulDescCreate, "cublasLtMatmulDescCreate", missing);
    bind_symbol(a.lib, a.MatmulDescDestroy, "cublasLtMatmulDescDestroy", missing);
    bind_symbol(a.lib, a.MatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute", missing);
    bind_symbol(a.lib, a.MatrixLayoutCreate, "cublasLtMatrixLayoutCreate", missing);
    bind_symbol(a.lib, a.MatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy", missing);
    bind_symbol(a.lib, a.MatmulPreferenceCreate, "cublasLtMatmulPreferenceCreate", missing);
    bind_symbol(a.lib, a.MatmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy", missing);
    bind_symbol(a.lib, a.MatmulPreferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute", missing);
    bind_symbol(a.lib, a.MatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic", missing);
    bind_symbol(a.lib, a.Matmul, "cublasLtMatmul", missing);
    if (!missing.empty())
      a.unavailable = fmt::format("{}{} lacks {}: not cuBLASLt, or one older than 11", a.library,
                                  note.empty() ? "" : " (named by TESSEL_CUBLASLT)", missing);
  } catch (...) {
    a.unavailable = "failed to load cuBLASLt";
  }
  return a;
}

const lt::Api& api() noexcept {
  static const lt::Api a = load();
  return a;
}

const lt::Api& need(std::string_view call) {
  const lt::Api& a = api();
  if (!a.unavailable.empty()) throw DeviceError(fmt::format("{}: {}", call, a.unavailable));
  return a;
}

[[noreturn]] void fail(const lt::Api& a, std::string_view call, Status s, std::string_view what) {
  const char* name = a.GetStatusName ? a.GetStatusName(s) : nullptr;
  throw DeviceError(fmt::format("cuBLASLt call {} failed: {} ({}) for {}", call, name ? name : "unknown status",
                                s, what));
}

// One handle per device, created with its context current and kept for the
// process: destroying it at exit would race the driver's own teardown.
lt::Handle handle(const lt::Api& a, int device) {
  static std::mutex mu;
  static std::map<int, lt::Handle> handles;
  std::lock_guard<std::mutex> l(mu);
  auto it = handles.find(device);
  if (it != handles.end()) return it->second;
  set_device(device);
  lt::Handle h = nullptr;
  if (Status s = a.Create(&h); s != lt::STATUS_SUCCESS) fail(a, "cublasLtCreate", s, fmt::format("cuda:{}", device));
  handles.emplace(device, h);
  return h;
}

// Descriptors freed on every path.
struct Desc {
  const lt::Api& a;
  lt::MatmulDesc d = nullptr;
  ~Desc() {
    if (d) a.MatmulDescDestroy(d);
  }
};
struct Layouts {
  const lt::Api& a;
  std::array<lt::Layout, 3> l{};
  ~Layouts() {
    for (lt::Layout x : l)
      if (x) a.MatrixLayoutDestroy(x);
  }
};
struct Pref {
  const lt::Api& a;
  lt::Preference p = nullptr;
  ~Pref() {
    if (p) a.MatmulPreferenceDestroy(p);
  }
};

// The largest power of two (up to 256, cuBLASLt's default) dividing the address.
uint32_t alignment(CUdeviceptr p) {
  uint32_t al = 256;
  while (al > 1 && p % al != 0) al >>= 1;
  return al;
}

// The heuristic's pick for one problem, kept: asking costs more than a small product.
struct AlgoKey {
  int device;
  int dtype;
  int64_t M, N, K, lda, ldb, ldc;
  bool ta, tb;
  int epilogue;
  uint32_t align_a, align_b, align_c, align_bias;  // the heuristic picks by alignment, the bias's too
  auto tie() const {
    return std::tie(device, dtype, M, N, K, lda, ldb, ldc, ta, tb, epilogue, align_a, align_b, align_c, align_bias);
  }
  bool operator<(const AlgoKey& o) const { return tie() < o.tie(); }
};
struct Chosen {
  lt::Algo algo;
  size_t workspace = 0;
};

// Workspace cuBLASLt may use per product: what its heuristics assume for large problems.
constexpr uint64_t kMaxWorkspace = uint64_t(32) << 20;

}  // namespace

bool cublaslt_available() noexcept { return api().unavailable.empty(); }
std::string cublaslt_unavailable_reason() { return api().unavailable; }
std::string cublaslt_library() { return api().library; }
std::size_t cublaslt_version() { return need("cublasLtGetVersion").GetVersion(); }

std::string_view gemm_epilogue_name(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::none: return "none";
    case GemmEpilogue::bias: return "bias";
    case GemmEpilogue::relu: return "relu";
    case GemmEpilogue::bias_relu: return "bias+relu";
  }
  return "?";
}

void gemm(int device, CUstream stream, DType t, int64_t M, int64_t N, int64_t K, const GemmOperand& a,
          const GemmOperand& b, CUdeviceptr c, int64_t ldc, GemmEpilogue epilogue, CUdeviceptr bias) {
  const std::string what = fmt::format("{} product [{}, {}] x [{}, {}] ({}{}, epilogue {})", dtype_name(t), M, K, K, N,
                                       a.trans ? "A^T" : "A", b.trans ? " B^T" : " B", gemm_epilogue_name(epilogue));
  if (t != DType::f32 && t != DType::f64)
    throw DTypeError(fmt::format("cuBLASLt gemm: {}: only f32 and f64 products run on cuBLASLt", what));
  if (M < 0 || N < 0 || K < 1)
    throw ValueError(fmt::format("cuBLASLt gemm: {}: M and N must be at least 0 and K at least 1", what));
  // Stored rows are as long as the stored matrix's columns.
  const int64_t need_a = a.trans ? M : K, need_b = b.trans ? K : N;
  if (a.ld < std::max<int64_t>(need_a, 1) || b.ld < std::max<int64_t>(need_b, 1) || ldc < std::max<int64_t>(N, 1))
    throw ValueError(fmt::format("cuBLASLt gemm: {}: leading dimensions lda={} ldb={} ldc={} are shorter than the rows "
                                 "they step over ({}, {}, {})",
                                 what, a.ld, b.ld, ldc, need_a, need_b, N));
  const bool with_bias = epilogue == GemmEpilogue::bias || epilogue == GemmEpilogue::bias_relu;
  if (with_bias && bias == 0) throw ValueError(fmt::format("cuBLASLt gemm: {}: the bias epilogue needs a bias", what));
  if (M == 0 || N == 0) return;
  const lt::Api& A = need("cuBLASLt gemm");
  lt::Handle h = handle(A, device);
  set_device(device);

  // Column-major view: C^T[N, M] = op(B)^T[N, K] x op(A)^T[K, M]. A row-major
  // [r, c] matrix with leading dimension ld is a column-major [c, r] one, so
  // B's memory is cuBLASLt's first operand and A's its second, transposed
  // exactly when the row-major operand is.
  const int dt = t == DType::f32 ? lt::R_32F : lt::R_64F;
  Desc desc{A};
  if (Status s = A.MatmulDescCreate(&desc.d, t == DType::f32 ? lt::COMPUTE_32F : lt::COMPUTE_64F, dt);
      s != lt::STATUS_SUCCESS)
    fail(A, "cublasLtMatmulDescCreate", s, what);
  const int32_t op_first = b.trans ? lt::OP_T : lt::OP_N, op_second = a.trans ? lt::OP_T : lt::OP_N;
  uint32_t epi = lt::EPILOGUE_DEFAULT;
  switch (epilogue) {
    case GemmEpilogue::none: break;
    case GemmEpilogue::bias: epi = lt::EPILOGUE_BIAS; break;
    case GemmEpilogue::relu: epi = lt::EPILOGUE_RELU; break;
    case GemmEpilogue::bias_relu: epi = lt::EPILOGUE_RELU_BIAS; break;
  }
  auto set = [&](int attr, const void* v, size_t n) {
    if (Status s = A.MatmulDescSetAttribute(desc.d, attr, v, n); s != lt::STATUS_SUCCESS)
      fail(A, "cublasLtMatmulDescSetAttribute", s, what);
  };
  set(lt::DESC_TRANSA, &op_first, sizeof op_first);
  set(lt::DESC_TRANSB, &op_second, sizeof op_second);
  set(lt::DESC_EPILOGUE, &epi, sizeof epi);
  if (with_bias) {
    const void* bp = reinterpret_cast<const void*>(bias);
    set(lt::DESC_BIAS_POINTER, &bp, sizeof bp);
    const int32_t bt = dt;
    set(lt::DESC_BIAS_DATA_TYPE, &bt, sizeof bt);
  }
  // Layouts (rows, cols of the stored column-major matrices).
  Layouts lay{A};
  auto layout = [&](int i, int64_t rows, int64_t cols, int64_t ld) {
    if (Status s = A.MatrixLayoutCreate(&lay.l[static_cast<size_t>(i)], dt, static_cast<uint64_t>(rows),
                                        static_cast<uint64_t>(cols), ld);
        s != lt::STATUS_SUCCESS)
      fail(A, "cublasLtMatrixLayoutCreate", s, what);
  };
  layout(0, b.trans ? K : N, b.trans ? N : K, b.ld);
  layout(1, a.trans ? M : K, a.trans ? K : M, a.ld);
  layout(2, N, M, ldc);

  AlgoKey key{device, dt, M, N, K, a.ld, b.ld, ldc, a.trans, b.trans, static_cast<int>(epi),
              alignment(a.ptr), alignment(b.ptr), alignment(c), with_bias ? alignment(bias) : 0u};
  Chosen chosen;
  {
    static std::mutex mu;
    static std::map<AlgoKey, Chosen> cache;
    std::unique_lock<std::mutex> l(mu);
    if (auto it = cache.find(key); it != cache.end()) {
      chosen = it->second;
    } else {
      l.unlock();
      Pref pref{A};
      if (Status s = A.MatmulPreferenceCreate(&pref.p); s != lt::STATUS_SUCCESS)
        fail(A, "cublasLtMatmulPreferenceCreate", s, what);
      auto pset = [&](int attr, const void* v, size_t n) {
        if (Status s = A.MatmulPreferenceSetAttribute(pref.p, attr, v, n); s != lt::STATUS_SUCCESS)
          fail(A, "cublasLtMatmulPreferenceSetAttribute", s, what);
      };
      pset(lt::PREF_MAX_WORKSPACE_BYTES, &kMaxWorkspace, sizeof kMaxWorkspace);
      // Views start anywhere: only algorithms that work at the actual alignments.
      pset(lt::PREF_MIN_ALIGNMENT_A_BYTES, &key.align_b, sizeof key.align_b);
      pset(lt::PREF_MIN_ALIGNMENT_B_BYTES, &key.align_a, sizeof key.align_a);
      pset(lt::PREF_MIN_ALIGNMENT_C_BYTES, &key.align_c, sizeof key.align_c);
      pset(lt::PREF_MIN_ALIGNMENT_D_BYTES, &key.align_c, sizeof key.align_c);
      lt::HeuristicResult r{};
      int found = 0;
      Status s = A.MatmulAlgoGetHeuristic(h, desc.d, lay.l[0], lay.l[1], lay.l[2], lay.l[2], pref.p, 1, &r, &found);
      if (s != lt::STATUS_SUCCESS && s != lt::STATUS_NOT_SUPPORTED) fail(A, "cublasLtMatmulAlgoGetHeuristic", s, what);
      if (found < 1 || r.state != lt::STATUS_SUCCESS)
        throw DeviceError(fmt::format("cuBLASLt ({}) has no algorithm for {} on cuda:{}", A.library, what, device));
      chosen = {r.algo, r.workspace_size};
      l.lock();
      cache.emplace(key, chosen);
    }
  }
  // The workspace goes back to the cache right after the launch is queued:
  // the allocator hands it out again only to later work on the same stream.
  CachingDeviceAllocator& alloc = device_allocator(device);
  CUdeviceptr ws = chosen.workspace ? alloc.allocate(chosen.workspace, stream) : 0;
  struct Release {
    CachingDeviceAllocator& alloc;
    CUdeviceptr p;
    ~Release() { alloc.deallocate(p); }
  } release{alloc, ws};
  const float one_f = 1.0f, zero_f = 0.0f;
  const double one_d = 1.0, zero_d = 0.0;
  const void* alpha = t == DType::f32 ? static_cast<const void*>(&one_f) : &one_d;
  const void* beta = t == DType::f32 ? static_cast<const void*>(&zero_f) : &zero_d;
  void* C = reinterpret_cast<void*>(c);
  if (Status s = A.Matmul(h, desc.d, alpha, reinterpret_cast<const void*>(b.ptr), lay.l[0],
                          reinterpret_cast<const void*>(a.ptr), lay.l[1], beta, C, lay.l[2], C, lay.l[2], &chosen.algo,
                          reinterpret_cast<void*>(ws), chosen.workspace, stream);
      s != lt::STATUS_SUCCESS)
    fail(A, "cublasLtMatmul", s, what);
}

}  // namespace tessel::cuda
