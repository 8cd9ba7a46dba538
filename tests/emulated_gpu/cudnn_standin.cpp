// A host stand-in for libcudnn: the legacy convolution entry points tessel
// loads (runtime/cuda/cudnn.cpp), with cuDNN's semantics for NCHW tensors and
// KCRS filters -- y = alpha * conv(x, w) + beta * y and the two gradients
// likewise, cross-correlation with symmetric padding, stride, dilation and
// groups, f32 or f64 -- computed with direct loops over the emulated driver's
// device memory (opened with tessel_emu_enter/leave). Selected with
// TESSEL_CUDNN=<path>.
//
// What a GPU would fault on or cuDNN refuse is an error here too: a handle
// works only while its device's context is current; every operand must lie
// inside one allocation on that device; an algorithm that asks for a
// workspace gets one inside an allocation at least that large; empty tensors
// are bad parameters. The heuristics list a non-deterministic algorithm first
// for the filter gradient, and algorithms with a workspace first elsewhere,
// so the caller's choice shows in tessel_emu_cudnn_last_algo.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

extern "C" int tessel_emu_enter(void);
extern "C" void tessel_emu_leave(void);
extern "C" int tessel_emu_range_device(const void* p, std::size_t bytes);
extern "C" int tessel_emu_current_device(void);

namespace {

using Status = int;
enum : Status {
  STATUS_SUCCESS = 0,
  STATUS_NOT_INITIALIZED = 1001,
  STATUS_BAD_PARAM = 2000,
  STATUS_BAD_PARAM_NULL_POINTER = 2002,
  STATUS_NOT_SUPPORTED = 3000,
  STATUS_INTERNAL_ERROR = 4000,
  STATUS_EXECUTION_FAILED = 5000,
};

constexpr int DATA_FLOAT = 0, DATA_DOUBLE = 1;
constexpr int TENSOR_NCHW = 0;
constexpr int CROSS_CORRELATION = 1;
constexpr int NON_DETERMINISTIC = 0, DETERMINISTIC = 1;
constexpr int FMA_MATH = 3;

enum Pass : int { FORWARD = 0, BACKWARD_DATA = 1, BACKWARD_FILTER = 2 };

struct Handle {
  int device = -1;
  void* stream = nullptr;
};
struct TensorDesc {
  bool set = false;
  int type = -1;
  int n = 0, c = 0, h = 0, w = 0;
};
struct FilterDesc {
  bool set = false;
  int type = -1;
  int k = 0, c = 0, h = 0, w = 0;
};
struct ConvDesc {
  bool set = false;
  int pad_h = 0, pad_w = 0, u = 1, v = 1, dilation_h = 1, dilation_w = 1;
  int mode = CROSS_CORRELATION, compute = DATA_FLOAT;
  int groups = 1;
  int math = 0;
};
struct AlgoPerf {
  int algo;
  Status status;
  float time;
  size_t memory;
  int determinism;
  int math_type;
  int reserved[3];
};

std::atomic<unsigned long long> g_calls[3];
std::atomic<int> g_last_algo[3] = {-1, -1, -1};
std::atomic<unsigned long long> g_last_workspace[3];
std::atomic<int> g_refused_type{-1};

// One convolution, checked as cuDNN checks its descriptors.
struct Geometry {
  int64_t n, c, h, w, k, cg, kh, kw, oh, ow, groups;
  int64_t pad_h, pad_w, u, v, dh, dw;
  int type;
  size_t es() const { return type == DATA_DOUBLE ? 8 : 4; }
  size_t x_bytes() const { return size_t(n * c * h * w) * es(); }
  size_t w_bytes() const { return size_t(k * cg * kh * kw) * es(); }
  size_t y_bytes() const { return size_t(n * k * oh * ow) * es(); }
};

Status geometry(const TensorDesc* x, const FilterDesc* w, const ConvDesc* cd, const TensorDesc* y, Geometry* g,
                const char** why) {
  if (!x || !w || !cd || !y) return *why = "a descriptor is null", STATUS_BAD_PARAM_NULL_POINTER;
  if (!x->set || !w->set || !cd->set || !y->set) return *why = "a descriptor was never set", STATUS_BAD_PARAM;
  const int t = x->type;
  if (w->type != t || y->type != t) return *why = "mixed data types", STATUS_BAD_PARAM;
  if (cd->compute != t) return *why = "a compute type other than the data type", STATUS_NOT_SUPPORTED;
  if (cd->mode != CROSS_CORRELATION) return *why = "only cross-correlation is emulated", STATUS_NOT_SUPPORTED;
  if (x->c != w->c * cd->groups || w->k % cd->groups != 0)
    return *why = "the channels do not match the filter and the group count", STATUS_BAD_PARAM;
  const int64_t span_h = int64_t(cd->dilation_h) * (w->h - 1) + 1, span_w = int64_t(cd->dilation_w) * (w->w - 1) + 1;
  if (x->h + 2 * cd->pad_h < span_h || x->w + 2 * cd->pad_w < span_w)
    return *why = "the filter is larger than the padded input", STATUS_BAD_PARAM;
  const int64_t oh = (x->h + 2 * cd->pad_h - span_h) / cd->u + 1, ow = (x->w + 2 * cd->pad_w - span_w) / cd->v + 1;
  if (y->n != x->n || y->c != w->k || y->h != oh || y->w != ow)
    return *why = "the output descriptor is not the convolution's output", STATUS_BAD_PARAM;
  *g = Geometry{x->n, x->c, x->h, x->w, w->k, w->c, w->h, w->w, oh, ow, cd->groups,
                cd->pad_h, cd->pad_w, cd->u, cd->v, cd->dilation_h, cd->dilation_w, t};
  return STATUS_SUCCESS;
}

// The algorithms of a pass, in the order the heuristic lists them.
struct Algo {
  int id;
  int determinism;
  bool workspace;
};
std::vector<Algo> algorithms(int pass) {
  switch (pass) {
    case FORWARD: return {{1, DETERMINISTIC, true}, {0, DETERMINISTIC, false}};       // PRECOMP_GEMM, IMPLICIT_GEMM
    case BACKWARD_DATA: return {{1, DETERMINISTIC, true}, {0, NON_DETERMINISTIC, false}};  // ALGO_1, ALGO_0
    case BACKWARD_FILTER: return {{0, NON_DETERMINISTIC, false}, {1, DETERMINISTIC, true}};  // ALGO_0, ALGO_1
  }
  return {};
}

// What an algorithm with a workspace asks for: one im2col row.
size_t workspace_bytes(const Geometry& g) { return size_t(g.cg * g.kh * g.kw) * g.es() + 64; }

// Calls f(x index, w index, y index) for every product term inside the input.
template <class F>
void for_each_term(const Geometry& g, F&& f) {
  const int64_t kg = g.k / g.groups;
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t k = 0; k < g.k; ++k) {
      const int64_t group = k / kg;
      for (int64_t ci = 0; ci < g.cg; ++ci) {
        const int64_t c = group * g.cg + ci;
        for (int64_t oy = 0; oy < g.oh; ++oy)
          for (int64_t ky = 0; ky < g.kh; ++ky) {
            const int64_t iy = oy * g.u - g.pad_h + ky * g.dh;
            if (iy < 0 || iy >= g.h) continue;
            for (int64_t ox = 0; ox < g.ow; ++ox)
              for (int64_t kx = 0; kx < g.kw; ++kx) {
                const int64_t ix = ox * g.v - g.pad_w + kx * g.dw;
                if (ix < 0 || ix >= g.w) continue;
                f(((n * g.c + c) * g.h + iy) * g.w + ix, ((k * g.cg + ci) * g.kh + ky) * g.kw + kx,
                  ((n * g.k + k) * g.oh + oy) * g.ow + ox);
              }
          }
      }
    }
}

// out = alpha * sum + beta * out, the sum of the pass's terms (beta == 0: out is not read).
template <class T>
void compute(int pass, const Geometry& g, T alpha, T beta, const T* x, const T* w, const T* y, T* out) {
  size_t count = pass == FORWARD ? size_t(g.n * g.k * g.oh * g.ow)
                 : pass == BACKWARD_DATA ? size_t(g.n * g.c * g.h * g.w)
                                         : size_t(g.k * g.cg * g.kh * g.kw);
  std::vector<double> acc(count, 0.0);
  switch (pass) {
    case FORWARD:
      for_each_term(g, [&](int64_t xi, int64_t wi, int64_t yi) { acc[size_t(yi)] += double(x[xi]) * double(w[wi]); });
      break;
    case BACKWARD_DATA:
      for_each_term(g, [&](int64_t xi, int64_t wi, int64_t yi) { acc[size_t(xi)] += double(y[yi]) * double(w[wi]); });
      break;
    case BACKWARD_FILTER:
      for_each_term(g, [&](int64_t xi, int64_t wi, int64_t yi) { acc[size_t(wi)] += double(x[xi]) * double(y[yi]); });
      break;
  }
  for (size_t i = 0; i < count; ++i) {
    T v = alpha * static_cast<T>(acc[i]);
    if (beta != T(0)) v += beta * out[i];
    out[i] = v;
  }
}

const char* kPassNames[] = {"cudnnConvolutionForward", "cudnnConvolutionBackwardData",
                            "cudnnConvolutionBackwardFilter"};

Status fail(int pass, Status s, const char* why) {
  std::fprintf(stderr, "tessel emulated cuDNN: %s: %s\n", kPassNames[pass], why);
  return s;
}

// The three convolution calls: operands checked against the handle's device, then the loops.
Status convolve(int pass, Handle* h, const void* alpha, const TensorDesc* xd, const void* x, const FilterDesc* wd,
                const void* w, const ConvDesc* cd, int algo, void* workspace, size_t workspace_size,
                const void* beta, const TensorDesc* yd, const void* y, void* out) {
  if (!h) return STATUS_NOT_INITIALIZED;
  if (!alpha || !beta) return fail(pass, STATUS_BAD_PARAM_NULL_POINTER, "alpha or beta is null");
  Geometry g{};
  const char* why = "";
  if (Status s = geometry(xd, wd, cd, yd, &g, &why); s != STATUS_SUCCESS) return fail(pass, s, why);
  if (g.n == 0 || g.c == 0 || g.k == 0) return fail(pass, STATUS_BAD_PARAM, "an empty tensor");
  if (tessel_emu_current_device() != h->device)
    return fail(pass, STATUS_EXECUTION_FAILED, "the handle's device is not the current one");
  bool known = false, needs_workspace = false;
  for (const Algo& a : algorithms(pass))
    if (a.id == algo) known = true, needs_workspace = a.workspace;
  if (!known) return fail(pass, STATUS_NOT_SUPPORTED, "an algorithm the heuristic never offered");
  const size_t need = needs_workspace ? workspace_bytes(g) : 0;
  if (workspace_size < need) return fail(pass, STATUS_BAD_PARAM, "a workspace smaller than the algorithm needs");
  struct Operand {
    const char* name;
    const void* ptr;
    size_t bytes;
  };
  const Operand operands[] = {{"x", x, g.x_bytes()}, {"w", w, g.w_bytes()}, {"y", y, g.y_bytes()},
                              {"the workspace", workspace, need}};
  for (const Operand& o : operands) {
    if (o.bytes == 0) continue;
    if (!o.ptr || tessel_emu_range_device(o.ptr, o.bytes) != h->device) {
      std::fprintf(stderr, "tessel emulated cuDNN: %s: %s (%p, %zu bytes) is not inside one allocation on device %d\n",
                   kPassNames[pass], o.name, o.ptr, o.bytes, h->device);
      return STATUS_BAD_PARAM;
    }
  }
  ++g_calls[pass];
  g_last_algo[pass] = algo;
  g_last_workspace[pass] = workspace_size;
  struct Open {
    Open() { tessel_emu_enter(); }
    ~Open() { tessel_emu_leave(); }
  } open;
  if (need) std::memset(workspace, 0xa5, need);  // scratch a real algorithm would overwrite
  if (g.type == DATA_FLOAT)
    compute<float>(pass, g, *static_cast<const float*>(alpha), *static_cast<const float*>(beta),
                   static_cast<const float*>(x), static_cast<const float*>(w), static_cast<const float*>(y),
                   static_cast<float*>(out));
  else
    compute<double>(pass, g, *static_cast<const double*>(alpha), *static_cast<const double*>(beta),
                    static_cast<const double*>(x), static_cast<const double*>(w), static_cast<const double*>(y),
                    static_cast<double*>(out));
  return STATUS_SUCCESS;
}

Status heuristic(int pass, Handle* h, const TensorDesc* x, const FilterDesc* w, const ConvDesc* cd,
                 const TensorDesc* y, int requested, int* returned, AlgoPerf* results) {
  if (!h) return STATUS_NOT_INITIALIZED;
  if (!returned || !results || requested < 1) return STATUS_BAD_PARAM;
  *returned = 0;
  Geometry g{};
  const char* why = "";
  if (Status s = geometry(x, w, cd, y, &g, &why); s != STATUS_SUCCESS) return s;
  if (g.type == g_refused_type.load()) return STATUS_SUCCESS;  // no algorithm for this type
  for (const Algo& a : algorithms(pass)) {
    if (*returned == requested) break;
    AlgoPerf& r = results[(*returned)++];
    std::memset(&r, 0, sizeof r);
    r.algo = a.id;
    r.status = STATUS_SUCCESS;
    r.time = -1.0f;  // a heuristic, not a measurement
    r.memory = a.workspace ? workspace_bytes(g) : 0;
    r.determinism = a.determinism;
    r.math_type = cd->math;
  }
  return STATUS_SUCCESS;
}

Status workspace_size(int pass, Handle* h, const TensorDesc* x, const FilterDesc* w, const ConvDesc* cd,
                      const TensorDesc* y, int algo, size_t* bytes) {
  if (!h) return STATUS_NOT_INITIALIZED;
  if (!bytes) return STATUS_BAD_PARAM_NULL_POINTER;
  Geometry g{};
  const char* why = "";
  if (Status s = geometry(x, w, cd, y, &g, &why); s != STATUS_SUCCESS) return s;
  for (const Algo& a : algorithms(pass))
    if (a.id == algo) {
      *bytes = a.workspace ? workspace_bytes(g) : 0;
      return STATUS_SUCCESS;
    }
  return STATUS_NOT_SUPPORTED;
}

}  // namespace

#define DNN_API extern "C" __attribute__((visibility("default")))

DNN_API size_t cudnnGetVersion() { return 90000; }  // reads as cuDNN 9.0.0

DNN_API const char* cudnnGetErrorString(Status s) {
  switch (s) {
    case STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case STATUS_NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED";
    case STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case STATUS_BAD_PARAM_NULL_POINTER: return "CUDNN_STATUS_BAD_PARAM_NULL_POINTER";
    case STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    case STATUS_INTERNAL_ERROR: return "CUDNN_STATUS_INTERNAL_ERROR";
    case STATUS_EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
  }
  return "CUDNN_STATUS_UNKNOWN";
}

DNN_API Status cudnnCreate(Handle** h) {
  if (!h) return STATUS_BAD_PARAM_NULL_POINTER;
  const int device = tessel_emu_current_device();
  if (device < 0) return STATUS_NOT_INITIALIZED;  // no current context
  *h = new Handle{device, nullptr};
  return STATUS_SUCCESS;
}

DNN_API Status cudnnDestroy(Handle* h) {
  if (!h) return STATUS_NOT_INITIALIZED;
  delete h;
  return STATUS_SUCCESS;
}

// All work is done at call time, so any stream orders it.
DNN_API Status cudnnSetStream(Handle* h, void* stream) {
  if (!h) return STATUS_NOT_INITIALIZED;
  h->stream = stream;
  return STATUS_SUCCESS;
}

DNN_API Status cudnnCreateTensorDescriptor(TensorDesc** d) {
  if (!d) return STATUS_BAD_PARAM_NULL_POINTER;
  *d = new TensorDesc;
  return STATUS_SUCCESS;
}

DNN_API Status cudnnSetTensor4dDescriptor(TensorDesc* d, int format, int type, int n, int c, int h, int w) {
  if (!d) return STATUS_BAD_PARAM_NULL_POINTER;
  if (format != TENSOR_NCHW || (type != DATA_FLOAT && type != DATA_DOUBLE)) return STATUS_NOT_SUPPORTED;
  if (n < 0 || c < 0 || h < 1 || w < 1) return STATUS_BAD_PARAM;
  *d = TensorDesc{true, type, n, c, h, w};
  return STATUS_SUCCESS;
}

DNN_API Status cudnnDestroyTensorDescriptor(TensorDesc* d) {
  delete d;
  return STATUS_SUCCESS;
}

DNN_API Status cudnnCreateFilterDescriptor(FilterDesc** d) {
  if (!d) return STATUS_BAD_PARAM_NULL_POINTER;
  *d = new FilterDesc;
  return STATUS_SUCCESS;
}

DNN_API Status cudnnSetFilter4dDescriptor(FilterDesc* d, int type, int format, int k, int c, int h, int w) {
  if (!d) return STATUS_BAD_PARAM_NULL_POINTER;
  if (format != TENSOR_NCHW || (type != DATA_FLOAT && type != DATA_DOUBLE)) return STATUS_NOT_SUPPORTED;
  if (k < 0 || c < 0 || h < 1 || w < 1) return STATUS_BAD_PARAM;
  *d = FilterDesc{true, type, k, c, h, w};
  return STATUS_SUCCESS;
}

DNN_API Status cudnnDestroyFilterDescriptor(FilterDesc* d) {
  delete d;
  return STATUS_SUCCESS;
}

DNN_API Status cudnnCreateConvolutionDescriptor(ConvDesc** d) {
  if (!d) return STATUS_BAD_PARAM_NULL_POINTER;
  *d = new ConvDesc;
  return STATUS_SUCCESS;
}

DNN_API Status cudnnSetConvolution2dDescriptor(ConvDesc* d, int pad_h, int pad_w, int u, int v, int dilation_h,
                                               int dilation_w, int mode, int compute) {
  if (!d) return STATUS_BAD_PARAM_NULL_POINTER;
  if (pad_h < 0 || pad_w < 0 || u < 1 || v < 1 || dilation_h < 1 || dilation_w < 1) return STATUS_BAD_PARAM;
  if (mode != CROSS_CORRELATION && mode != 0) return STATUS_BAD_PARAM;
  d->set = true;
  d->pad_h = pad_h, d->pad_w = pad_w, d->u = u, d->v = v, d->dilation_h = dilation_h, d->dilation_w = dilation_w;
  d->mode = mode;
  d->compute = compute;
  return STATUS_SUCCESS;
}

DNN_API Status cudnnSetConvolutionGroupCount(ConvDesc* d, int groups) {
  if (!d) return STATUS_BAD_PARAM_NULL_POINTER;
  if (groups < 1) return STATUS_BAD_PARAM;
  d->groups = groups;
  return STATUS_SUCCESS;
}

DNN_API Status cudnnSetConvolutionMathType(ConvDesc* d, int math) {
  if (!d) return STATUS_BAD_PARAM_NULL_POINTER;
  if (math < 0 || math > FMA_MATH) return STATUS_BAD_PARAM;
  d->math = math;
  return STATUS_SUCCESS;
}

DNN_API Status cudnnDestroyConvolutionDescriptor(ConvDesc* d) {
  delete d;
  return STATUS_SUCCESS;
}

DNN_API Status cudnnGetConvolutionForwardAlgorithm_v7(Handle* h, TensorDesc* x, FilterDesc* w, ConvDesc* cd,
                                                      TensorDesc* y, int requested, int* returned, AlgoPerf* results) {
  return heuristic(FORWARD, h, x, w, cd, y, requested, returned, results);
}

DNN_API Status cudnnGetConvolutionBackwardDataAlgorithm_v7(Handle* h, FilterDesc* w, TensorDesc* dy, ConvDesc* cd,
                                                           TensorDesc* dx, int requested, int* returned,
                                                           AlgoPerf* results) {
  return heuristic(BACKWARD_DATA, h, dx, w, cd, dy, requested, returned, results);
}

DNN_API Status cudnnGetConvolutionBackwardFilterAlgorithm_v7(Handle* h, TensorDesc* x, TensorDesc* dy, ConvDesc* cd,
                                                             FilterDesc* dw, int requested, int* returned,
                                                             AlgoPerf* results) {
  return heuristic(BACKWARD_FILTER, h, x, dw, cd, dy, requested, returned, results);
}

DNN_API Status cudnnGetConvolutionForwardWorkspaceSize(Handle* h, TensorDesc* x, FilterDesc* w, ConvDesc* cd,
                                                       TensorDesc* y, int algo, size_t* bytes) {
  return workspace_size(FORWARD, h, x, w, cd, y, algo, bytes);
}

DNN_API Status cudnnGetConvolutionBackwardDataWorkspaceSize(Handle* h, FilterDesc* w, TensorDesc* dy, ConvDesc* cd,
                                                            TensorDesc* dx, int algo, size_t* bytes) {
  return workspace_size(BACKWARD_DATA, h, dx, w, cd, dy, algo, bytes);
}

DNN_API Status cudnnGetConvolutionBackwardFilterWorkspaceSize(Handle* h, TensorDesc* x, TensorDesc* dy, ConvDesc* cd,
                                                              FilterDesc* dw, int algo, size_t* bytes) {
  return workspace_size(BACKWARD_FILTER, h, x, dw, cd, dy, algo, bytes);
}

DNN_API Status cudnnConvolutionForward(Handle* h, const void* alpha, TensorDesc* xd, const void* x, FilterDesc* wd,
                                       const void* w, ConvDesc* cd, int algo, void* workspace, size_t workspace_size,
                                       const void* beta, TensorDesc* yd, void* y) {
  return convolve(FORWARD, h, alpha, xd, x, wd, w, cd, algo, workspace, workspace_size, beta, yd, y, y);
}

DNN_API Status cudnnConvolutionBackwardData(Handle* h, const void* alpha, FilterDesc* wd, const void* w,
                                            TensorDesc* dyd, const void* dy, ConvDesc* cd, int algo, void* workspace,
                                            size_t workspace_size, const void* beta, TensorDesc* dxd, void* dx) {
  return convolve(BACKWARD_DATA, h, alpha, dxd, dx, wd, w, cd, algo, workspace, workspace_size, beta, dyd, dy, dx);
}

DNN_API Status cudnnConvolutionBackwardFilter(Handle* h, const void* alpha, TensorDesc* xd, const void* x,
                                              TensorDesc* dyd, const void* dy, ConvDesc* cd, int algo,
                                              void* workspace, size_t workspace_size, const void* beta,
                                              FilterDesc* dwd, void* dw) {
  return convolve(BACKWARD_FILTER, h, alpha, xd, x, dwd, dw, cd, algo, workspace, workspace_size, beta, dyd, dy, dw);
}

// ---- for tests ----

/// Convolution calls that ran, per pass (0 forward, 1 backward data, 2 backward filter).
DNN_API unsigned long long tessel_emu_cudnn_convolutions(int pass) {
  return pass >= 0 && pass < 3 ? g_calls[pass].load() : 0;
}
/// The algorithm the last call of a pass ran (-1 before any).
DNN_API int tessel_emu_cudnn_last_algo(int pass) { return pass >= 0 && pass < 3 ? g_last_algo[pass].load() : -1; }
/// The workspace size the last call of a pass was given.
DNN_API unsigned long long tessel_emu_cudnn_last_workspace(int pass) {
  return pass >= 0 && pass < 3 ? g_last_workspace[pass].load() : 0;
}
/// From now on the heuristics offer no algorithm for data type `type` (0 f32, 1 f64; -1: none refused).
DNN_API void tessel_emu_cudnn_refuse(int type) { g_refused_type = type; }
