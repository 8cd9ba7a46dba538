#include "runtime/cuda/cudnn.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <climits>
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
namespace dnn {

// --- the cuDNN 9 legacy-API ABI tessel uses (same sizes and values as cudnn.h) ---
using Status = int;  // cudnnStatus_t
struct Context;
struct TensorOpaque;
struct FilterOpaque;
struct ConvOpaque;
using Handle = Context*;
using TensorDesc = TensorOpaque*;
using FilterDesc = FilterOpaque*;
using ConvDesc = ConvOpaque*;
// cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t: one layout for all three.
struct AlgoPerf {
  int algo;
  Status status;
  float time;
  size_t memory;
  int determinism;
  int math_type;
  int reserved[3];
};

constexpr Status STATUS_SUCCESS = 0;
// Status categories (cudnnStatus_t / 1000 * 1000): "not supported" is an answer, not a failure.
constexpr Status STATUS_NOT_SUPPORTED = 3000;
constexpr int DATA_FLOAT = 0, DATA_DOUBLE = 1;  // cudnnDataType_t
constexpr int TENSOR_NCHW = 0;                  // cudnnTensorFormat_t
constexpr int CROSS_CORRELATION = 1;            // cudnnConvolutionMode_t
constexpr int DEFAULT_MATH = 0, FMA_MATH = 3;   // cudnnMathType_t
constexpr int DETERMINISTIC = 1;                // cudnnDeterminism_t
// The most algorithms any direction has (CUDNN_CONVOLUTION_FWD_ALGO_COUNT).
constexpr int kAlgoCount = 8;

struct Api {
  void* lib = nullptr;
  std::string library;
  std::string unavailable;
  size_t (*GetVersion)() = nullptr;
  const char* (*GetErrorString)(Status) = nullptr;
  Status (*Create)(Handle*) = nullptr;
  Status (*SetStream)(Handle, CUstream) = nullptr;
  Status (*CreateTensorDescriptor)(TensorDesc*) = nullptr;
  Status (*SetTensor4dDescriptor)(TensorDesc, int format, int type, int n, int c, int h, int w) = nullptr;
  Status (*DestroyTensorDescriptor)(TensorDesc) = nullptr;
  Status (*CreateFilterDescriptor)(FilterDesc*) = nullptr;
  Status (*SetFilter4dDescriptor)(FilterDesc, int type, int format, int k, int c, int h, int w) = nullptr;
  Status (*DestroyFilterDescriptor)(FilterDesc) = nullptr;
  Status (*CreateConvolutionDescriptor)(ConvDesc*) = nullptr;
  Status (*SetConvolution2dDescriptor)(ConvDesc, int pad_h, int pad_w, int u, int v, int dilation_h, int dilation_w,
                                       int mode, int compute_type) = nullptr;
  Status (*SetConvolutionGroupCount)(ConvDesc, int groups) = nullptr;
  Status (*SetConvolutionMathType)(ConvDesc, int math) = nullptr;
  Status (*DestroyConvolutionDescriptor)(ConvDesc) = nullptr;
  Status (*GetForwardAlgorithm)(Handle, TensorDesc x, FilterDesc w, ConvDesc, TensorDesc y, int requested,
                                int* returned, AlgoPerf* results) = nullptr;
  Status (*GetBackwardDataAlgorithm)(Handle, FilterDesc w, TensorDesc dy, ConvDesc, TensorDesc dx, int requested,
                                     int* returned, AlgoPerf* results) = nullptr;
  Status (*GetBackwardFilterAlgorithm)(Handle, TensorDesc x, TensorDesc dy, ConvDesc, FilterDesc dw, int requested,
                                       int* returned, AlgoPerf* results) = nullptr;
  Status (*GetForwardWorkspaceSize)(Handle, TensorDesc x, FilterDesc w, ConvDesc, TensorDesc y, int algo,
                                    size_t* bytes) = nullptr;
  Status (*GetBackwardDataWorkspaceSize)(Handle, FilterDesc w, TensorDesc dy, ConvDesc, TensorDesc dx, int algo,
                                         size_t* bytes) = nullptr;
  Status (*GetBackwardFilterWorkspaceSize)(Handle, TensorDesc x, TensorDesc dy, ConvDesc, FilterDesc dw, int algo,
                                           size_t* bytes) = nullptr;
  Status (*ConvolutionForward)(Handle, const void* alpha, TensorDesc xd, const void* x, FilterDesc wd, const void* w,
                               ConvDesc, int algo, void* workspace, size_t workspace_bytes, const void* beta,
                               TensorDesc yd, void* y) = nullptr;
  Status (*ConvolutionBackwardData)(Handle, const void* alpha, FilterDesc wd, const void* w, TensorDesc dyd,
                                    const void* dy, ConvDesc, int algo, void* workspace, size_t workspace_bytes,
                                    const void* beta, TensorDesc dxd, void* dx) = nullptr;
  Status (*ConvolutionBackwardFilter)(Handle, const void* alpha, TensorDesc xd, const void* x, TensorDesc dyd,
                                      const void* dy, ConvDesc, int algo, void* workspace, size_t workspace_bytes,
                                      const void* beta, FilterDesc dwd, void* dw) = nullptr;
};

}  // namespace dnn
}  // namespace tessel::cuda

// Where the toolkit's header is at hand, the declarations above are checked against it.
#if __has_include(<cudnn.h>)
#include <cudnn.h>
namespace tessel::cuda::dnn {
static_assert(sizeof(AlgoPerf) == sizeof(cudnnConvolutionFwdAlgoPerf_t) &&
              sizeof(AlgoPerf) == sizeof(cudnnConvolutionBwdDataAlgoPerf_t) &&
              sizeof(AlgoPerf) == sizeof(cudnnConvolutionBwdFilterAlgoPerf_t));
static_assert(offsetof(AlgoPerf, status) == offsetof(cudnnConvolutionFwdAlgoPerf_t, status) &&
              offsetof(AlgoPerf, memory) == offsetof(cudnnConvolutionFwdAlgoPerf_t, memory) &&
              offsetof(AlgoPerf, determinism) == offsetof(cudnnConvolutionFwdAlgoPerf_t, determinism) &&
              offsetof(AlgoPerf, math_type) == offsetof(cudnnConvolutionFwdAlgoPerf_t, mathType));
static_assert(offsetof(AlgoPerf, memory) == offsetof(cudnnConvolutionBwdDataAlgoPerf_t, memory) &&
              offsetof(AlgoPerf, memory) == offsetof(cudnnConvolutionBwdFilterAlgoPerf_t, memory));
static_assert(STATUS_SUCCESS == CUDNN_STATUS_SUCCESS && STATUS_NOT_SUPPORTED == CUDNN_STATUS_NOT_SUPPORTED);
static_assert(DATA_FLOAT == CUDNN_DATA_FLOAT && DATA_DOUBLE == CUDNN_DATA_DOUBLE);
static_assert(TENSOR_NCHW == CUDNN_TENSOR_NCHW && CROSS_CORRELATION == CUDNN_CROSS_CORRELATION);
static_assert(DEFAULT_MATH == CUDNN_DEFAULT_MATH && FMA_MATH == CUDNN_FMA_MATH && DETERMINISTIC == CUDNN_DETERMINISTIC);
static_assert(kAlgoCount >= CUDNN_CONVOLUTION_FWD_ALGO_COUNT && kAlgoCount >= CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT &&
              kAlgoCount >= CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);
}  // namespace tessel::cuda::dnn
#endif

namespace tessel::cuda {
namespace {

using dnn::Status;

dnn::Api load() noexcept {
  dnn::Api a;
  try {
    // Candidates in order (see the header): the loader, then the toolkit tessel was built with.
    std::vector<std::string> defaults{"libcudnn.so.9"};
#ifdef TESSEL_CUDA_LIBRARY_DIR
    defaults.push_back(std::string(TESSEL_CUDA_LIBRARY_DIR) + "/libcudnn.so.9");
#endif
    SharedLibrary lib = open_shared_library({"cuDNN", "TESSEL_CUDNN", "libcudnn.so.9"}, std::move(defaults));
    a.lib = lib.handle;
    a.library = lib.path;
    if (!a.lib) {
      a.unavailable = lib.error;
      return a;
    }
    const std::string note = lib.override;
    std::string missing;
    bind_symbol(a.lib, a.GetVersion, "cudnnGetVersion", missing);
    bind_symbol(a.lib, a.GetErrorString, "cudnnGetErrorString", missing);
    bind_symbol(a.lib, a.Create, "cudnnCreate", missing);
    bind_symbol(a.lib, a.SetStream, "cudnnSetStream", missing);
    bind_symbol(a.lib, a.CreateTensorDescriptor, "cudnnCreateTensorDescriptor", missing);
    bind_symbol(a.lib, a.SetTensor4dDescriptor, "cudnnSetTensor4dDescriptor", missing);
    bind_symbol(a.lib, a.DestroyTensorDescriptor, "cudnnDestroyTensorDescriptor", missing);
    bind_symbol(a.lib, a.CreateFilterDescriptor, "cudnnCreateFilterDescriptor", missing);
    bind_symbol(a.lib, a.SetFilter4dDescriptor, "cudnnSetFilter4dDescriptor", missing);
    bind_symbol(a.lib, a.DestroyFilterDescriptor, "cudnnDestroyFilterDescriptor", missing);
    bind_symbol(a.lib, a.CreateConvolutionDescriptor, "cudnnCreateConvolutionDescriptor", missing);
    bind_symbol(a.lib, a.SetConvolution2dDescriptor, "cudnnSetConvolution2dDescriptor", missing);
    bind_symbol(a.lib, a.SetConvolutionGroupCount, "cudnnSetConvolutionGroupCount", missing);
    bind_symbol(a.lib, a.SetConvolutionMathType, "cudnnSetConvolutionMathType", missing);
    bind_symbol(a.lib, a.DestroyConvolutionDescriptor, "cudnnDestroyConvolutionDescriptor", missing);
    bind_symbol(a.lib, a.GetForwardAlgorithm, "cudnnGetConvolutionForwardAlgorithm_v7", missing);
    bind_symbol(a.lib, a.GetBackwardDataAlgorithm, "cudnnGetConvolutionBackwardDataAlgorithm_v7", missing);
    bind_symbol(a.lib, a.GetBackwardFilterAlgorithm, "cudnnGetConvolutionBackwardFilterAlgorithm_v7", missing);
    bind_symbol(a.lib, a.GetForwardWorkspaceSize, "cudnnGetConvolutionForwardWorkspaceSize", missing);
    bind_symbol(a.lib, a.GetBackwardDataWorkspaceSize, "cudnnGetConvolutionBackwardDataWorkspaceSize", missing);
    bind_symbol(a.lib, a.GetBackwardFilterWorkspaceSize, "cudnnGetConvolutionBackwardFilterWorkspaceSize", missing);
    bind_symbol(a.lib, a.ConvolutionForward, "cudnnConvolutionForward", missing);
    bind_symbol(a.lib, a.ConvolutionBackwardData, "cudnnConvolutionBackwardData", missing);
    bind_symbol(a.lib, a.ConvolutionBackwardFilter, "cudnnConvolutionBackwardFilter", missing);
    if (!missing.empty())
      a.unavailable = fmt::format("{}{} lacks {}: not cuDNN, or one without the legacy convolution API (cuDNN 7 to 9)",
                                  a.library, note.empty() ? "" : " (named by TESSEL_CUDNN)", missing);
  } catch (...) {
    a.unavailable = "failed to load cuDNN";
  }
  return a;
}

const dnn::Api& api() noexcept {
  static const dnn::Api a = load();
  return a;
}

const dnn::Api& need(std::string_view call) {
  const dnn::Api& a = api();
  if (!a.unavailable.empty()) throw DeviceError(fmt::format("{}: {}", call, a.unavailable));
  return a;
}

[[noreturn]] void fail(const dnn::Api& a, std::string_view call, Status s, std::string_view what) {
  const char* name = a.GetErrorString ? a.GetErrorString(s) : nullptr;
  throw DeviceError(fmt::format("cuDNN call {} failed: {} ({}) for {}", call, name ? name : "unknown status", s, what));
}

bool not_supported(Status s) { return s / 1000 * 1000 == dnn::STATUS_NOT_SUPPORTED; }

// One handle per device, created with its context current and kept for the
// process (destroying it at exit would race the driver's own teardown). A
// handle carries its stream, so a call sets the stream and runs under the
// handle's lock: two threads never interleave on one handle.
struct DeviceHandle {
  dnn::Handle h = nullptr;
  std::mutex mu;
};
DeviceHandle& handle(const dnn::Api& a, int device) {
  static std::mutex mu;
  static std::map<int, std::unique_ptr<DeviceHandle>> handles;
  std::lock_guard<std::mutex> l(mu);
  auto& dh = handles[device];
  if (!dh) {
    auto made = std::make_unique<DeviceHandle>();
    set_device(device);
    if (Status s = a.Create(&made->h); s != dnn::STATUS_SUCCESS) fail(a, "cudnnCreate", s, fmt::format("cuda:{}", device));
    dh = std::move(made);
  }
  return *dh;
}

// Descriptors freed on every path.
struct Descriptors {
  const dnn::Api& a;
  dnn::TensorDesc x = nullptr, y = nullptr;
  dnn::FilterDesc w = nullptr;
  dnn::ConvDesc conv = nullptr;
  ~Descriptors() {
    if (x) a.DestroyTensorDescriptor(x);
    if (y) a.DestroyTensorDescriptor(y);
    if (w) a.DestroyFilterDescriptor(w);
    if (conv) a.DestroyConvolutionDescriptor(conv);
  }
};

int as_int(int64_t v) { return static_cast<int>(v); }

void describe(Descriptors& d, DType t, const ConvProblem& p, const std::string& what) {
  const dnn::Api& a = d.a;
  const int dt = t == DType::f32 ? dnn::DATA_FLOAT : dnn::DATA_DOUBLE;
  auto check = [&](std::string_view call, Status s) {
    if (s != dnn::STATUS_SUCCESS) fail(a, call, s, what);
  };
  check("cudnnCreateTensorDescriptor", a.CreateTensorDescriptor(&d.x));
  check("cudnnCreateTensorDescriptor", a.CreateTensorDescriptor(&d.y));
  check("cudnnCreateFilterDescriptor", a.CreateFilterDescriptor(&d.w));
  check("cudnnCreateConvolutionDescriptor", a.CreateConvolutionDescriptor(&d.conv));
  check("cudnnSetTensor4dDescriptor",
        a.SetTensor4dDescriptor(d.x, dnn::TENSOR_NCHW, dt, as_int(p.n), as_int(p.c), as_int(p.h), as_int(p.w)));
  check("cudnnSetTensor4dDescriptor", a.SetTensor4dDescriptor(d.y, dnn::TENSOR_NCHW, dt, as_int(p.n), as_int(p.o),
                                                              as_int(p.out_h()), as_int(p.out_w())));
  check("cudnnSetFilter4dDescriptor", a.SetFilter4dDescriptor(d.w, dt, dnn::TENSOR_NCHW, as_int(p.o),
                                                              as_int(p.c / p.groups), as_int(p.kh), as_int(p.kw)));
  check("cudnnSetConvolution2dDescriptor",
        a.SetConvolution2dDescriptor(d.conv, as_int(p.pad_h), as_int(p.pad_w), as_int(p.stride_h), as_int(p.stride_w),
                                     as_int(p.dilation_h), as_int(p.dilation_w), dnn::CROSS_CORRELATION, dt));
  check("cudnnSetConvolutionGroupCount", a.SetConvolutionGroupCount(d.conv, as_int(p.groups)));
  // FMA math: f32 sums stay f32 (no TF32), as cuBLASLt's products do.
  check("cudnnSetConvolutionMathType",
        a.SetConvolutionMathType(d.conv, t == DType::f32 ? dnn::FMA_MATH : dnn::DEFAULT_MATH));
}

// Why `p` is no convolution ("" when it is one).
std::string invalid(const ConvProblem& p) {
  if (p.n < 0 || p.c < 0 || p.o < 0) return "negative sizes";
  if (p.h < 1 || p.w < 1 || p.kh < 1 || p.kw < 1) return "empty spatial dims";
  if (p.groups < 1 || p.c % p.groups != 0 || p.o % p.groups != 0) return "groups must divide both c and o";
  if (p.pad_h < 0 || p.pad_w < 0) return "negative padding";
  if (p.stride_h < 1 || p.stride_w < 1 || p.dilation_h < 1 || p.dilation_w < 1)
    return "strides and dilations must be positive";
  if (p.h + 2 * p.pad_h < p.dilation_h * (p.kh - 1) + 1 || p.w + 2 * p.pad_w < p.dilation_w * (p.kw - 1) + 1)
    return "the kernel is larger than the padded input";
  return "";
}

// cuDNN's descriptors take int sizes, and its kernels int element counts.
bool fits_int(const ConvProblem& p) {
  const int64_t cg = p.c / std::max<int64_t>(p.groups, 1);
  for (int64_t v : {p.n, p.c, p.h, p.w, p.o, p.kh, p.kw, p.pad_h, p.pad_w, p.stride_h, p.stride_w, p.dilation_h,
                    p.dilation_w, p.groups})
    if (v > INT_MAX) return false;
  const double x = double(p.n) * double(p.c) * double(p.h) * double(p.w);
  const double w = double(p.o) * double(cg) * double(p.kh) * double(p.kw);
  const double y = double(p.n) * double(p.o) * double(p.out_h()) * double(p.out_w());
  return x <= INT_MAX && w <= INT_MAX && y <= INT_MAX;
}

// Elements the pass writes, and terms summed into each.
int64_t outputs(ConvPass pass, const ConvProblem& p) {
  switch (pass) {
    case ConvPass::forward: return p.n * p.o * p.out_h() * p.out_w();
    case ConvPass::backward_data: return p.n * p.c * p.h * p.w;
    case ConvPass::backward_filter: return p.o * (p.c / p.groups) * p.kh * p.kw;
  }
  return 0;
}
int64_t terms(ConvPass pass, const ConvProblem& p) {
  switch (pass) {
    case ConvPass::forward: return (p.c / p.groups) * p.kh * p.kw;
    case ConvPass::backward_data: return (p.o / p.groups) * p.kh * p.kw;
    case ConvPass::backward_filter: return p.n * p.out_h() * p.out_w();
  }
  return 0;
}

std::string describe_call(DType t, ConvPass pass, const ConvProblem& p) {
  return fmt::format("{} convolution {} ({})", dtype_name(t), conv_pass_name(pass), p.str());
}

void check_problem(DType t, ConvPass pass, const ConvProblem& p, const std::string& what) {
  if (t != DType::f32 && t != DType::f64)
    throw DTypeError(fmt::format("cuDNN convolution: {}: only f32 and f64 convolutions run on cuDNN", what));
  if (std::string why = invalid(p); !why.empty())
    throw ValueError(fmt::format("cuDNN convolution: {}: {}", what, why));
  if (!fits_int(p))
    throw ValueError(fmt::format("cuDNN convolution: {}: a size or an element count exceeds cuDNN's 32-bit int", what));
}

// The heuristic's pick for one problem, kept: asking costs more than a small convolution.
struct AlgoKey {
  int device;
  int dtype;
  int pass;
  ConvProblem p;
  auto tie() const {
    return std::tie(device, dtype, pass, p.n, p.c, p.h, p.w, p.o, p.kh, p.kw, p.groups, p.pad_h, p.pad_w, p.stride_h,
                    p.stride_w, p.dilation_h, p.dilation_w);
  }
  bool operator<(const AlgoKey& o) const { return tie() < o.tie(); }
};
struct Chosen {
  int algo = -1;  // -1: cuDNN has none
  size_t workspace = 0;
};

// Workspace an algorithm may ask for; ones that want more are passed over.
constexpr size_t kMaxWorkspace = size_t(512) << 20;

// Heuristic order, deterministic algorithms first (a training run repeats),
// the first whose workspace query succeeds: the query refuses configurations
// the algorithm does not implement.
Chosen choose(const dnn::Api& a, dnn::Handle h, const Descriptors& d, ConvPass pass, const std::string& what) {
  dnn::AlgoPerf perf[dnn::kAlgoCount] = {};
  int returned = 0;
  Status s = dnn::STATUS_SUCCESS;
  std::string_view call;
  switch (pass) {
    case ConvPass::forward:
      call = "cudnnGetConvolutionForwardAlgorithm_v7";
      s = a.GetForwardAlgorithm(h, d.x, d.w, d.conv, d.y, dnn::kAlgoCount, &returned, perf);
      break;
    case ConvPass::backward_data:
      call = "cudnnGetConvolutionBackwardDataAlgorithm_v7";
      s = a.GetBackwardDataAlgorithm(h, d.w, d.y, d.conv, d.x, dnn::kAlgoCount, &returned, perf);
      break;
    case ConvPass::backward_filter:
      call = "cudnnGetConvolutionBackwardFilterAlgorithm_v7";
      s = a.GetBackwardFilterAlgorithm(h, d.x, d.y, d.conv, d.w, dnn::kAlgoCount, &returned, perf);
      break;
  }
  if (not_supported(s)) return {};
  if (s != dnn::STATUS_SUCCESS) fail(a, call, s, what);
  returned = std::clamp(returned, 0, dnn::kAlgoCount);
  for (bool deterministic_only : {true, false}) {
    for (int i = 0; i < returned; ++i) {
      const dnn::AlgoPerf& r = perf[i];
      if (r.status != dnn::STATUS_SUCCESS || r.memory > kMaxWorkspace) continue;
      if (deterministic_only && r.determinism != dnn::DETERMINISTIC) continue;
      size_t bytes = 0;
      Status q = dnn::STATUS_SUCCESS;
      std::string_view query;
      switch (pass) {
        case ConvPass::forward:
          query = "cudnnGetConvolutionForwardWorkspaceSize";
          q = a.GetForwardWorkspaceSize(h, d.x, d.w, d.conv, d.y, r.algo, &bytes);
          break;
        case ConvPass::backward_data:
          query = "cudnnGetConvolutionBackwardDataWorkspaceSize";
          q = a.GetBackwardDataWorkspaceSize(h, d.w, d.y, d.conv, d.x, r.algo, &bytes);
          break;
        case ConvPass::backward_filter:
          query = "cudnnGetConvolutionBackwardFilterWorkspaceSize";
          q = a.GetBackwardFilterWorkspaceSize(h, d.x, d.y, d.conv, d.w, r.algo, &bytes);
          break;
      }
      if (q == dnn::STATUS_SUCCESS && bytes <= kMaxWorkspace) return {r.algo, bytes};
      if (q != dnn::STATUS_SUCCESS && !not_supported(q)) fail(a, query, q, what);
    }
  }
  return {};
}

// The cached pick; the caller holds the handle's lock.
Chosen chosen_for(const dnn::Api& a, dnn::Handle h, const Descriptors& d, int device, DType t, ConvPass pass,
                  const ConvProblem& p, const std::string& what) {
  static std::mutex mu;
  static std::map<AlgoKey, Chosen> cache;
  const AlgoKey key{device, static_cast<int>(t), static_cast<int>(pass), p};
  {
    std::lock_guard<std::mutex> l(mu);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  Chosen c = choose(a, h, d, pass, what);
  std::lock_guard<std::mutex> l(mu);
  cache.emplace(key, c);
  return c;
}

// Runs one pass: reads two of x, w, y and writes the third (dense device memory).
void run(int device, CUstream stream, DType t, ConvPass pass, const ConvProblem& p, CUdeviceptr x, CUdeviceptr w,
         CUdeviceptr y) {
  const std::string what = describe_call(t, pass, p);
  check_problem(t, pass, p, what);
  const int64_t n_out = outputs(pass, p);
  if (n_out == 0) return;
  const CUdeviceptr out = pass == ConvPass::forward ? y : pass == ConvPass::backward_data ? x : w;
  if (terms(pass, p) == 0) {  // an empty sum: zeros, and nothing cuDNN would accept
    set_device(device);
    memset_d8_async(out, 0, static_cast<size_t>(n_out) * dtype_size(t), stream);
    return;
  }
  const dnn::Api& A = need("cuDNN convolution");
  DeviceHandle& dh = handle(A, device);
  std::lock_guard<std::mutex> hold(dh.mu);
  set_device(device);
  if (Status s = A.SetStream(dh.h, stream); s != dnn::STATUS_SUCCESS) fail(A, "cudnnSetStream", s, what);
  Descriptors d{A};
  describe(d, t, p, what);
  const Chosen c = chosen_for(A, dh.h, d, device, t, pass, p, what);
  if (c.algo < 0)
    throw DeviceError(fmt::format("cuDNN ({}) has no algorithm for {} on cuda:{}", A.library, what, device));
  // The workspace goes back to the cache right after the launch is queued:
  // the allocator hands it out again only to later work on the same stream.
  CachingDeviceAllocator& alloc = device_allocator(device);
  CUdeviceptr ws = c.workspace ? alloc.allocate(c.workspace, stream) : 0;
  struct Release {
    CachingDeviceAllocator& alloc;
    CUdeviceptr p;
    ~Release() { alloc.deallocate(p); }
  } release{alloc, ws};
  const float one_f = 1.0f, zero_f = 0.0f;
  const double one_d = 1.0, zero_d = 0.0;
  const void* alpha = t == DType::f32 ? static_cast<const void*>(&one_f) : &one_d;
  const void* beta = t == DType::f32 ? static_cast<const void*>(&zero_f) : &zero_d;
  void* wsp = reinterpret_cast<void*>(ws);
  auto ptr = [](CUdeviceptr v) { return reinterpret_cast<void*>(v); };
  switch (pass) {
    case ConvPass::forward:
      if (Status s = A.ConvolutionForward(dh.h, alpha, d.x, ptr(x), d.w, ptr(w), d.conv, c.algo, wsp, c.workspace, beta,
                                          d.y, ptr(y));
          s != dnn::STATUS_SUCCESS)
        fail(A, "cudnnConvolutionForward", s, what);
      break;
    case ConvPass::backward_data:
      if (Status s = A.ConvolutionBackwardData(dh.h, alpha, d.w, ptr(w), d.y, ptr(y), d.conv, c.algo, wsp, c.workspace,
                                               beta, d.x, ptr(x));
          s != dnn::STATUS_SUCCESS)
        fail(A, "cudnnConvolutionBackwardData", s, what);
      break;
    case ConvPass::backward_filter:
      if (Status s = A.ConvolutionBackwardFilter(dh.h, alpha, d.x, ptr(x), d.y, ptr(y), d.conv, c.algo, wsp,
                                                 c.workspace, beta, d.w, ptr(w));
          s != dnn::STATUS_SUCCESS)
        fail(A, "cudnnConvolutionBackwardFilter", s, what);
      break;
  }
}

}  // namespace

bool cudnn_available() noexcept { return api().unavailable.empty(); }
std::string cudnn_unavailable_reason() { return api().unavailable; }
std::string cudnn_library() { return api().library; }
std::size_t cudnn_version() { return need("cudnnGetVersion").GetVersion(); }

std::string ConvProblem::str() const {
  return fmt::format("input [{}, {}, {}, {}], weight [{}, {}, {}, {}], groups {}, stride ({}, {}), padding ({}, {}), "
                     "dilation ({}, {})",
                     n, c, h, w, o, groups > 0 ? c / groups : c, kh, kw, groups, stride_h, stride_w, pad_h, pad_w,
                     dilation_h, dilation_w);
}

std::string_view conv_pass_name(ConvPass p) {
  switch (p) {
    case ConvPass::forward: return "forward";
    case ConvPass::backward_data: return "backward data";
    case ConvPass::backward_filter: return "backward filter";
  }
  return "?";
}

bool conv_supported(int device, DType t, ConvPass pass, const ConvProblem& p) {
  if (t != DType::f32 && t != DType::f64) return false;
  if (!invalid(p).empty() || !fits_int(p)) return false;
  if (outputs(pass, p) == 0 || terms(pass, p) == 0) return true;  // no cuDNN call needed
  const std::string what = describe_call(t, pass, p);
  const dnn::Api& A = need("cuDNN convolution");
  DeviceHandle& dh = handle(A, device);
  std::lock_guard<std::mutex> hold(dh.mu);
  set_device(device);
  Descriptors d{A};
  describe(d, t, p, what);
  return chosen_for(A, dh.h, d, device, t, pass, p, what).algo >= 0;
}

void conv_forward(int device, CUstream stream, DType t, const ConvProblem& p, CUdeviceptr x, CUdeviceptr w,
                  CUdeviceptr y) {
  run(device, stream, t, ConvPass::forward, p, x, w, y);
}

void conv_backward_data(int device, CUstream stream, DType t, const ConvProblem& p, CUdeviceptr w, CUdeviceptr gy,
                        CUdeviceptr gx) {
  run(device, stream, t, ConvPass::backward_data, p, gx, w, gy);
}

void conv_backward_filter(int device, CUstream stream, DType t, const ConvProblem& p, CUdeviceptr x, CUdeviceptr gy,
                          CUdeviceptr gw) {
  run(device, stream, t, ConvPass::backward_filter, p, x, gw, gy);
}

}  // namespace tessel::cuda
