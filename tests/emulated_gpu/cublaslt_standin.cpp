// A host stand-in for libcublasLt: the entry points tessel loads
// (runtime/cuda/cublas.cpp), with cuBLASLt's column-major semantics, computing
// D = epilogue(alpha * op(A) op(B) + beta * C) with plain loops over the
// emulated driver's device memory (opened with tessel_emu_enter/leave). f32
// and f64; epilogues DEFAULT, RELU, BIAS and RELU_BIAS, the bias being one
// value per row of D (length m). Selected with TESSEL_CUBLASLT=<path>.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <atomic>
#include <vector>

extern "C" int tessel_emu_enter(void);
extern "C" void tessel_emu_leave(void);
extern "C" int tessel_emu_range_device(const void* p, std::size_t bytes);

namespace {

using Status = int;
enum : Status {
  STATUS_SUCCESS = 0,
  STATUS_NOT_INITIALIZED = 1,
  STATUS_ALLOC_FAILED = 3,
  STATUS_INVALID_VALUE = 7,
  STATUS_EXECUTION_FAILED = 13,
  STATUS_NOT_SUPPORTED = 15,
};

constexpr int R_32F = 0, R_64F = 1;
constexpr int COMPUTE_32F = 68, COMPUTE_64F = 70;
constexpr int32_t OP_N = 0, OP_T = 1, OP_C = 2;
// cublasLtMatmulDescAttributes_t
constexpr int DESC_COMPUTE_TYPE = 0, DESC_SCALE_TYPE = 1, DESC_POINTER_MODE = 2, DESC_TRANSA = 3, DESC_TRANSB = 4,
              DESC_EPILOGUE = 7, DESC_BIAS_POINTER = 8, DESC_BIAS_DATA_TYPE = 26;
constexpr uint32_t EPILOGUE_DEFAULT = 1, EPILOGUE_RELU = 2, EPILOGUE_BIAS = 4, EPILOGUE_RELU_BIAS = 6;
// cublasLtMatrixLayoutAttribute_t
constexpr int LAYOUT_TYPE = 0, LAYOUT_ORDER = 1, LAYOUT_ROWS = 2, LAYOUT_COLS = 3, LAYOUT_LD = 4,
              LAYOUT_BATCH_COUNT = 5;

struct Desc {
  int compute = COMPUTE_32F, scale = R_32F;
  int32_t trans_a = OP_N, trans_b = OP_N;
  uint32_t epilogue = EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  int bias_type = -1;  // -1: D's type
};
struct Layout {
  int type = R_32F;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
};
struct Preference {
  uint64_t max_workspace = 0;
};
struct Handle {
  int magic = 0x1a5;
};
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

std::atomic<unsigned long long> g_matmuls{0};

template <class T>
bool read_value(const void* buf, size_t size, T* out) {
  if (!buf || size != sizeof(T)) return false;
  std::memcpy(out, buf, sizeof(T));
  return true;
}

// The problem one descriptor and its layouts describe, checked as cuBLASLt does.
struct Problem {
  uint64_t m = 0, n = 0, k = 0;
  int type = R_32F;
  bool ta = false, tb = false;
};

Status describe(const Desc* d, const Layout* a, const Layout* b, const Layout* c, const Layout* dl, Problem* p,
                const char** why) {
  if (!d || !a || !b || !c || !dl) return *why = "a descriptor is null", STATUS_INVALID_VALUE;
  p->ta = d->trans_a != OP_N;
  p->tb = d->trans_b != OP_N;
  const uint64_t am = p->ta ? a->cols : a->rows, ak = p->ta ? a->rows : a->cols;
  const uint64_t bk = p->tb ? b->cols : b->rows, bn = p->tb ? b->rows : b->cols;
  if (ak != bk) return *why = "op(A) has a different k than op(B)", STATUS_INVALID_VALUE;
  if (c->rows != am || c->cols != bn || dl->rows != am || dl->cols != bn)
    return *why = "C or D is not m x n", STATUS_INVALID_VALUE;
  for (const Layout* l : {a, b, c, dl})
    if (l->ld < 0 || static_cast<uint64_t>(l->ld) < (l->rows > 0 ? l->rows : 1))
      return *why = "a leading dimension is shorter than its matrix's rows", STATUS_INVALID_VALUE;
  const int t = dl->type;
  if (a->type != t || b->type != t || c->type != t) return *why = "mixed matrix types", STATUS_NOT_SUPPORTED;
  if (!((t == R_32F && d->compute == COMPUTE_32F && d->scale == R_32F) ||
        (t == R_64F && d->compute == COMPUTE_64F && d->scale == R_64F)))
    return *why = "only f32 (COMPUTE_32F) and f64 (COMPUTE_64F) products", STATUS_NOT_SUPPORTED;
  switch (d->epilogue) {
    case EPILOGUE_DEFAULT:
    case EPILOGUE_RELU:
    case EPILOGUE_BIAS:
    case EPILOGUE_RELU_BIAS: break;
    default: return *why = "only the DEFAULT, RELU, BIAS and RELU_BIAS epilogues", STATUS_NOT_SUPPORTED;
  }
  if (d->bias_type != -1 && d->bias_type != t) return *why = "a bias of another type than D", STATUS_NOT_SUPPORTED;
  p->m = am;
  p->n = bn;
  p->k = ak;
  p->type = t;
  return STATUS_SUCCESS;
}

size_t element_size(int type) { return type == R_64F ? 8 : 4; }

// Bytes from a matrix's first element to one past its last.
size_t extent(const Layout* l) {
  if (l->rows == 0 || l->cols == 0) return 0;
  return ((l->cols - 1) * static_cast<uint64_t>(l->ld) + l->rows) * element_size(l->type);
}

template <class T>
void product(const Problem& p, const Desc* d, T alpha, const T* A, const Layout* la, const T* B, const Layout* lb,
             T beta, const T* C, const Layout* lc, T* D, const Layout* ld) {
  const uint64_t m = p.m, n = p.n, k = p.k;
  const int64_t lda = la->ld, ldb = lb->ld, ldc = lc->ld, ldd = ld->ld;
  // op(A) packed column-major (m x k), so the inner loop runs over contiguous
  // memory. The buffers are kept between calls: a fresh one of a layer's size
  // is a fresh mapping, first touched at ~15 us a page, on every product.
  static thread_local std::vector<T> a, acc;
  a.resize(m * k);
  acc.resize(m);
  for (uint64_t q = 0; q < k; ++q)
    for (uint64_t i = 0; i < m; ++i) a[i + q * m] = p.ta ? A[q + i * lda] : A[i + q * lda];
  const bool bias = d->epilogue == EPILOGUE_BIAS || d->epilogue == EPILOGUE_RELU_BIAS;
  const bool relu = d->epilogue == EPILOGUE_RELU || d->epilogue == EPILOGUE_RELU_BIAS;
  const T* bias_v = static_cast<const T*>(d->bias);
  for (uint64_t j = 0; j < n; ++j) {
    for (uint64_t i = 0; i < m; ++i) acc[i] = T(0);
    for (uint64_t q = 0; q < k; ++q) {
      const T bv = p.tb ? B[j + q * ldb] : B[q + j * ldb];
      const T* col = &a[q * m];
      for (uint64_t i = 0; i < m; ++i) acc[i] += col[i] * bv;
    }
    for (uint64_t i = 0; i < m; ++i) {
      T v = alpha * acc[i];
      if (beta != T(0)) v += beta * C[i + j * ldc];  // beta == 0: C is not read (it may hold NaNs)
      if (bias) v += bias_v[i];
      if (relu) v = v > T(0) ? v : T(0);
      D[i + j * ldd] = v;
    }
  }
}

}  // namespace

#define LT_API extern "C" __attribute__((visibility("default")))

LT_API size_t cublasLtGetVersion() { return 130000; }  // reads as cuBLASLt 13.0.0

LT_API const char* cublasLtGetStatusName(Status s) {
  switch (s) {
    case 0: return "CUBLAS_STATUS_SUCCESS";
    case 1: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case 3: return "CUBLAS_STATUS_ALLOC_FAILED";
    case 7: return "CUBLAS_STATUS_INVALID_VALUE";
    case 8: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case 11: return "CUBLAS_STATUS_MAPPING_ERROR";
    case 13: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case 14: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case 15: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case 16: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

LT_API const char* cublasLtGetStatusString(Status s) {
  switch (s) {
    case 0: return "success";
    case 1: return "the library was not initialized";
    case 3: return "the resource allocation failed";
    case 7: return "an invalid numeric value was used as an argument";
    case 8: return "an absent device architectural feature is required";
    case 11: return "an access to GPU memory space failed";
    case 13: return "the GPU program failed to execute";
    case 14: return "an internal operation failed";
    case 15: return "the functionality requested is not supported";
    case 16: return "an error was detected when checking the current licensing";
  }
  return "unknown error";
}

LT_API Status cublasLtCreate(Handle** h) {
  if (!h) return STATUS_INVALID_VALUE;
  *h = new Handle;
  return STATUS_SUCCESS;
}

LT_API Status cublasLtDestroy(Handle* h) {
  if (!h) return STATUS_NOT_INITIALIZED;
  delete h;
  return STATUS_SUCCESS;
}

LT_API Status cublasLtMatmulDescCreate(Desc** d, int compute, int scale) {
  if (!d) return STATUS_INVALID_VALUE;
  *d = new Desc;
  (*d)->compute = compute;
  (*d)->scale = scale;
  return STATUS_SUCCESS;
}

LT_API Status cublasLtMatmulDescDestroy(Desc* d) {
  delete d;
  return STATUS_SUCCESS;
}

LT_API Status cublasLtMatmulDescSetAttribute(Desc* d, int attr, const void* buf, size_t size) {
  if (!d) return STATUS_INVALID_VALUE;
  bool ok = false;
  switch (attr) {
    case DESC_COMPUTE_TYPE: ok = read_value(buf, size, &d->compute); break;
    case DESC_SCALE_TYPE: ok = read_value(buf, size, &d->scale); break;
    case DESC_POINTER_MODE: {
      int32_t mode = 0;
      ok = read_value(buf, size, &mode);
      if (ok && mode != 0) return STATUS_NOT_SUPPORTED;  // alpha and beta on the host only
      break;
    }
    case DESC_TRANSA: ok = read_value(buf, size, &d->trans_a) && d->trans_a >= OP_N && d->trans_a <= OP_C; break;
    case DESC_TRANSB: ok = read_value(buf, size, &d->trans_b) && d->trans_b >= OP_N && d->trans_b <= OP_C; break;
    case DESC_EPILOGUE: ok = read_value(buf, size, &d->epilogue); break;
    case DESC_BIAS_POINTER: ok = read_value(buf, size, &d->bias); break;
    case DESC_BIAS_DATA_TYPE: {
      int32_t t = 0;
      ok = read_value(buf, size, &t);
      d->bias_type = t;
      break;
    }
    default:
      std::fprintf(stderr, "tessel emulated cuBLASLt: matmul descriptor attribute %d is not emulated\n", attr);
      return STATUS_NOT_SUPPORTED;
  }
  return ok ? STATUS_SUCCESS : STATUS_INVALID_VALUE;
}

LT_API Status cublasLtMatrixLayoutCreate(Layout** l, int type, uint64_t rows, uint64_t cols, int64_t ld) {
  if (!l) return STATUS_INVALID_VALUE;
  if (type != R_32F && type != R_64F) return STATUS_NOT_SUPPORTED;
  *l = new Layout{type, rows, cols, ld};
  return STATUS_SUCCESS;
}

LT_API Status cublasLtMatrixLayoutDestroy(Layout* l) {
  delete l;
  return STATUS_SUCCESS;
}

LT_API Status cublasLtMatrixLayoutSetAttribute(Layout* l, int attr, const void* buf, size_t size) {
  if (!l) return STATUS_INVALID_VALUE;
  switch (attr) {
    case LAYOUT_TYPE: return read_value(buf, size, &l->type) ? STATUS_SUCCESS : STATUS_INVALID_VALUE;
    case LAYOUT_ROWS: return read_value(buf, size, &l->rows) ? STATUS_SUCCESS : STATUS_INVALID_VALUE;
    case LAYOUT_COLS: return read_value(buf, size, &l->cols) ? STATUS_SUCCESS : STATUS_INVALID_VALUE;
    case LAYOUT_LD: return read_value(buf, size, &l->ld) ? STATUS_SUCCESS : STATUS_INVALID_VALUE;
    case LAYOUT_ORDER: {  // column-major only
      int32_t order = 0;
      if (!read_value(buf, size, &order)) return STATUS_INVALID_VALUE;
      return order == 0 ? STATUS_SUCCESS : STATUS_NOT_SUPPORTED;
    }
    case LAYOUT_BATCH_COUNT: {  // unbatched only
      int32_t count = 0;
      if (!read_value(buf, size, &count)) return STATUS_INVALID_VALUE;
      return count == 1 ? STATUS_SUCCESS : STATUS_NOT_SUPPORTED;
    }
  }
  return STATUS_NOT_SUPPORTED;
}

LT_API Status cublasLtMatmulPreferenceCreate(Preference** p) {
  if (!p) return STATUS_INVALID_VALUE;
  *p = new Preference;
  return STATUS_SUCCESS;
}

LT_API Status cublasLtMatmulPreferenceDestroy(Preference* p) {
  delete p;
  return STATUS_SUCCESS;
}

LT_API Status cublasLtMatmulPreferenceSetAttribute(Preference* p, int attr, const void* buf, size_t size) {
  if (!p || !buf) return STATUS_INVALID_VALUE;
  if (attr == 1) return read_value(buf, size, &p->max_workspace) ? STATUS_SUCCESS : STATUS_INVALID_VALUE;
  return STATUS_SUCCESS;  // alignments and the like: any algorithm here works at any alignment
}

LT_API Status cublasLtMatmulAlgoGetHeuristic(Handle* h, Desc* d, Layout* a, Layout* b, Layout* c, Layout* dl,
                                             Preference* pref, int requested, HeuristicResult* results,
                                             int* returned) {
  if (!h) return STATUS_NOT_INITIALIZED;
  if (!pref || requested < 1 || !results || !returned) return STATUS_INVALID_VALUE;
  Problem p;
  const char* why = "";
  if (Status s = describe(d, a, b, c, dl, &p, &why); s != STATUS_SUCCESS) {
    *returned = 0;
    return s;
  }
  std::memset(&results[0], 0, sizeof results[0]);
  results[0].algo.data[0] = 0x7e55e1;  // the one host algorithm
  results[0].workspace_size = 0;
  results[0].state = STATUS_SUCCESS;
  results[0].waves_count = 1.0f;
  *returned = 1;
  return STATUS_SUCCESS;
}

LT_API Status cublasLtMatmul(Handle* h, Desc* d, const void* alpha, const void* A, Layout* la, const void* B,
                             Layout* lb, const void* beta, const void* C, Layout* lc, void* D, Layout* ld,
                             const Algo*, void*, size_t, void* /*stream: all work is done at call time*/) {
  if (!h) return STATUS_NOT_INITIALIZED;
  if (!alpha || !beta) return STATUS_INVALID_VALUE;
  Problem p;
  const char* why = "";
  if (Status s = describe(d, la, lb, lc, ld, &p, &why); s != STATUS_SUCCESS) {
    std::fprintf(stderr, "tessel emulated cuBLASLt: cublasLtMatmul: %s\n", why);
    return s;
  }
  if (p.m == 0 || p.n == 0) return STATUS_SUCCESS;
  const bool bias = d->epilogue == EPILOGUE_BIAS || d->epilogue == EPILOGUE_RELU_BIAS;
  // Every operand must be device memory of the emulated driver (a GPU would fault).
  struct Operand {
    const char* name;
    const void* ptr;
    size_t bytes;
  };
  const Operand operands[] = {{"A", A, p.k ? extent(la) : 0},
                              {"B", B, p.k ? extent(lb) : 0},
                              {"C", C, extent(lc)},
                              {"D", D, extent(ld)},
                              {"the bias", bias ? d->bias : nullptr, bias ? p.m * element_size(p.type) : 0}};
  const bool beta_zero = p.type == R_32F ? *static_cast<const float*>(beta) == 0.0f : *static_cast<const double*>(beta) == 0.0;
  for (const Operand& o : operands) {
    if (o.bytes == 0 || (o.ptr == C && o.name[0] == 'C' && beta_zero)) continue;  // C unread
    if (!o.ptr || tessel_emu_range_device(o.ptr, o.bytes) < 0) {
      std::fprintf(stderr, "tessel emulated cuBLASLt: cublasLtMatmul: %s (%p, %zu bytes) is not inside one device "
                           "allocation\n", o.name, o.ptr, o.bytes);
      return STATUS_INVALID_VALUE;
    }
  }
  ++g_matmuls;
  struct Open {
    Open() { tessel_emu_enter(); }
    ~Open() { tessel_emu_leave(); }
  } open;
  if (p.type == R_32F)
    product<float>(p, d, *static_cast<const float*>(alpha), static_cast<const float*>(A), la,
                   static_cast<const float*>(B), lb, *static_cast<const float*>(beta), static_cast<const float*>(C),
                   lc, static_cast<float*>(D), ld);
  else
    product<double>(p, d, *static_cast<const double*>(alpha), static_cast<const double*>(A), la,
                    static_cast<const double*>(B), lb, *static_cast<const double*>(beta),
                    static_cast<const double*>(C), lc, static_cast<double*>(D), ld);
  return STATUS_SUCCESS;
}

LT_API unsigned long long tessel_emu_blaslt_matmuls(void) { return g_matmuls.load(); }
