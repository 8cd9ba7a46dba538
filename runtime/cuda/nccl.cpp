#include "runtime/cuda/nccl.h"

#include <fmt/format.h>

#include <cstring>
#include <string>
#include <vector>

#include "runtime/cuda/shared_library.h"
#include "runtime/errors.h"

namespace tessel::cuda {
namespace nc {

// --- the NCCL ABI tessel uses (same sizes and values as nccl.h) ---
using Result = int;  // ncclResult_t
using DataType = int;  // ncclDataType_t
using RedOp = int;     // ncclRedOp_t
struct CommOpaque;
using Comm = CommOpaque*;  // ncclComm_t
struct UniqueId {
  char internal[NcclUniqueId::kBytes];
};

constexpr Result SUCCESS = 0, IN_PROGRESS = 7;
constexpr Result kResultNames = 8;  // ncclNumResults
constexpr const char* kResultName[kResultNames] = {
    "ncclSuccess",        "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError",
    "ncclInvalidArgument", "ncclInvalidUsage",      "ncclRemoteError", "ncclInProgress"};
constexpr DataType UINT8 = 1, INT32 = 2, INT64 = 4, FLOAT16 = 6, FLOAT32 = 7, FLOAT64 = 8, BFLOAT16 = 9;
constexpr RedOp SUM = 0, PROD = 1, MAX = 2, MIN = 3, AVG = 4;
// ncclAvg came with 2.10; the code then is major * 10000 + minor * 100 + patch.
constexpr int kMinVersion = 21000;

struct Api {
  void* lib = nullptr;
  std::string library;
  std::string unavailable;
  int version = 0;
  Result (*GetVersion)(int*) = nullptr;
  Result (*GetUniqueId)(UniqueId*) = nullptr;
  Result (*CommInitRank)(Comm*, int nranks, UniqueId id, int rank) = nullptr;
  Result (*CommDestroy)(Comm) = nullptr;
  Result (*CommAbort)(Comm) = nullptr;
  Result (*CommGetAsyncError)(Comm, Result*) = nullptr;
  const char* (*GetErrorString)(Result) = nullptr;
  const char* (*GetLastError)(Comm) = nullptr;
  Result (*AllReduce)(const void*, void*, size_t, DataType, RedOp, Comm, CUstream) = nullptr;
  Result (*Broadcast)(const void*, void*, size_t, DataType, int root, Comm, CUstream) = nullptr;
  Result (*AllGather)(const void*, void*, size_t, DataType, Comm, CUstream) = nullptr;
  Result (*ReduceScatter)(const void*, void*, size_t, DataType, RedOp, Comm, CUstream) = nullptr;
};

}  // namespace nc
}  // namespace tessel::cuda

// Where NCCL's header is at hand, the declarations above are checked against it.
#if __has_include(<nccl.h>) && __has_include(<cuda_runtime.h>)
#include <nccl.h>
namespace tessel::cuda::nc {
static_assert(sizeof(UniqueId) == sizeof(ncclUniqueId) && NcclUniqueId::kBytes == NCCL_UNIQUE_ID_BYTES);
static_assert(SUCCESS == ncclSuccess && IN_PROGRESS == ncclInProgress && kResultNames == ncclNumResults);
static_assert(UINT8 == ncclUint8 && INT32 == ncclInt32 && INT64 == ncclInt64 && FLOAT16 == ncclFloat16 &&
              FLOAT32 == ncclFloat32 && FLOAT64 == ncclFloat64 && BFLOAT16 == ncclBfloat16);
static_assert(SUM == ncclSum && PROD == ncclProd && MAX == ncclMax && MIN == ncclMin && AVG == ncclAvg);
static_assert(sizeof(Result) == sizeof(ncclResult_t) && sizeof(DataType) == sizeof(ncclDataType_t) &&
              sizeof(RedOp) == sizeof(ncclRedOp_t));
}  // namespace tessel::cuda::nc
#endif

namespace tessel::cuda {
namespace {

nc::Api load() noexcept {
  nc::Api a;
  try {
    // Candidates in order (see the header): the loader, then the toolkit tessel was built with.
    std::vector<std::string> defaults{"libnccl.so.2"};
#ifdef TESSEL_CUDA_LIBRARY_DIR
    defaults.push_back(std::string(TESSEL_CUDA_LIBRARY_DIR) + "/libnccl.so.2");
#endif
    SharedLibrary lib = open_shared_library({"NCCL", "TESSEL_NCCL", "libnccl.so.2"}, std::move(defaults));
    a.lib = lib.handle;
    a.library = lib.path;
    if (!a.lib) {
      a.unavailable = lib.error;
      return a;
    }
    const std::string named = lib.override.empty() ? "" : " (named by TESSEL_NCCL)";
    std::string missing;
    bind_symbol(a.lib, a.GetVersion, "ncclGetVersion", missing);
    bind_symbol(a.lib, a.GetUniqueId, "ncclGetUniqueId", missing);
    bind_symbol(a.lib, a.CommInitRank, "ncclCommInitRank", missing);
    bind_symbol(a.lib, a.CommDestroy, "ncclCommDestroy", missing);
    bind_symbol(a.lib, a.CommAbort, "ncclCommAbort", missing);
    bind_symbol(a.lib, a.CommGetAsyncError, "ncclCommGetAsyncError", missing);
    bind_symbol(a.lib, a.GetErrorString, "ncclGetErrorString", missing);
    bind_symbol(a.lib, a.AllReduce, "ncclAllReduce", missing);
    bind_symbol(a.lib, a.Broadcast, "ncclBroadcast", missing);
    bind_symbol(a.lib, a.AllGather, "ncclAllGather", missing);
    bind_symbol(a.lib, a.ReduceScatter, "ncclReduceScatter", missing);
    if (!missing.empty()) {
      a.unavailable = fmt::format("{}{} lacks {}: not NCCL, or one older than 2.10", a.library, named, missing);
      return a;
    }
    // Optional (2.13+): the detail behind an error code.
    std::string optional;
    bind_symbol(a.lib, a.GetLastError, "ncclGetLastError", optional);
    if (a.GetVersion(&a.version) != nc::SUCCESS || a.version < nc::kMinVersion)
      a.unavailable = fmt::format("{}{} is NCCL {}; tessel needs 2.10 or newer (for ncclAvg)", a.library, named,
                                  a.version);
  } catch (...) {
    a.unavailable = "failed to load NCCL";
  }
  return a;
}

const nc::Api& api() noexcept {
  static const nc::Api a = load();
  return a;
}

const nc::Api& need(std::string_view call) {
  const nc::Api& a = api();
  if (!a.unavailable.empty()) throw DeviceError(fmt::format("{}: {}", call, a.unavailable));
  return a;
}

std::string result_text(const nc::Api& a, nc::Result r) {
  const char* name = r >= 0 && r < nc::kResultNames ? nc::kResultName[r] : "an unknown ncclResult_t";
  const char* text = a.GetErrorString ? a.GetErrorString(r) : nullptr;
  return fmt::format("{} ({}{})", name, r, text && *text ? fmt::format(": {}", text) : "");
}

[[noreturn]] void fail(const nc::Api& a, std::string_view call, nc::Result r, nc::Comm comm, std::string_view what) {
  const char* last = a.GetLastError ? a.GetLastError(comm) : nullptr;
  throw DeviceError(fmt::format("NCCL call {} failed: {} for {}{}", call, result_text(a, r), what,
                                last && *last ? fmt::format("; NCCL said: {}", last) : ""));
}

nc::DataType data_type(DType t) {
  switch (t) {
    case DType::b8: return nc::UINT8;
    case DType::i32: return nc::INT32;
    case DType::i64: return nc::INT64;
    case DType::f16: return nc::FLOAT16;
    case DType::f32: return nc::FLOAT32;
    case DType::f64: return nc::FLOAT64;
    case DType::bf16: return nc::BFLOAT16;
  }
  return nc::UINT8;
}

nc::RedOp red_op(NcclRedOp op) {
  switch (op) {
    case NcclRedOp::sum: return nc::SUM;
    case NcclRedOp::prod: return nc::PROD;
    case NcclRedOp::max: return nc::MAX;
    case NcclRedOp::min: return nc::MIN;
    case NcclRedOp::avg: return nc::AVG;
  }
  return nc::SUM;
}

nc::Comm handle(void* c) { return static_cast<nc::Comm>(c); }

}  // namespace

bool nccl_available() noexcept { return api().unavailable.empty(); }
std::string nccl_unavailable_reason() { return api().unavailable; }
std::string nccl_library() { return api().library; }
int nccl_version() { return need("ncclGetVersion").version; }

std::string_view nccl_red_op_name(NcclRedOp op) {
  switch (op) {
    case NcclRedOp::sum: return "sum";
    case NcclRedOp::prod: return "prod";
    case NcclRedOp::max: return "max";
    case NcclRedOp::min: return "min";
    case NcclRedOp::avg: return "avg";
  }
  return "?";
}

NcclUniqueId nccl_unique_id() {
  const nc::Api& a = need("ncclGetUniqueId");
  nc::UniqueId raw{};
  if (nc::Result r = a.GetUniqueId(&raw); r != nc::SUCCESS)
    fail(a, "ncclGetUniqueId", r, nullptr, "a new communicator");
  NcclUniqueId id;
  std::memcpy(id.bytes.data(), raw.internal, NcclUniqueId::kBytes);
  return id;
}

NcclComm NcclComm::init_rank(int device, int nranks, const NcclUniqueId& id, int rank) {
  const nc::Api& a = need("ncclCommInitRank");
  set_device(device);  // NCCL binds the communicator to the current device
  nc::UniqueId raw{};
  std::memcpy(raw.internal, id.bytes.data(), NcclUniqueId::kBytes);
  nc::Comm c = nullptr;
  if (nc::Result r = a.CommInitRank(&c, nranks, raw, rank); r != nc::SUCCESS)
    fail(a, "ncclCommInitRank", r, nullptr, fmt::format("rank {} of {} on cuda:{}", rank, nranks, device));
  return NcclComm(c, device);
}

NcclComm& NcclComm::operator=(NcclComm&& o) noexcept {
  if (this != &o) {
    destroy();
    comm_ = o.comm_;
    device_ = o.device_;
    o.comm_ = nullptr;
  }
  return *this;
}

void NcclComm::destroy() noexcept {
  if (!comm_) return;
  const nc::Api& a = api();
  if (a.CommDestroy) a.CommDestroy(handle(comm_));
  comm_ = nullptr;
}

void NcclComm::abort() noexcept {
  if (!comm_) return;
  const nc::Api& a = api();
  if (a.CommAbort) a.CommAbort(handle(comm_));
  comm_ = nullptr;
}

std::string NcclComm::async_error() const {
  if (!comm_) return "the communicator was aborted";
  const nc::Api& a = need("ncclCommGetAsyncError");
  nc::Comm c = handle(comm_);
  nc::Result state = nc::SUCCESS;
  nc::Result r = a.CommGetAsyncError(c, &state);
  if (r != nc::SUCCESS) state = r;
  if (state == nc::SUCCESS || state == nc::IN_PROGRESS) return "";
  const char* last = a.GetLastError ? a.GetLastError(c) : nullptr;
  return fmt::format("{}{}", result_text(a, state), last && *last ? fmt::format("; NCCL said: {}", last) : "");
}

namespace {
// Every collective: the communicator's device current, then the call, its refusal an error.
template <class F>
void enqueue(void* comm, int device, const char* call, std::string_view what, F&& f) {
  const nc::Api& a = need(call);
  if (!comm) throw DeviceError(fmt::format("NCCL call {} for {}: the communicator was aborted", call, what));
  set_device(device);
  nc::Comm c = handle(comm);
  if (nc::Result r = f(a, c); r != nc::SUCCESS) fail(a, call, r, c, what);
}
std::string describe(std::string_view coll, std::size_t count, DType t, int device) {
  return fmt::format("{} of {} {} elements on cuda:{}", coll, count, dtype_name(t), device);
}
}  // namespace

void NcclComm::all_reduce(CUdeviceptr send, CUdeviceptr recv, std::size_t count, DType t, NcclRedOp op,
                          CUstream stream) {
  enqueue(comm_, device_, "ncclAllReduce",
          describe(fmt::format("all_reduce({})", nccl_red_op_name(op)), count, t, device_),
          [&](const nc::Api& a, nc::Comm c) {
            return a.AllReduce(reinterpret_cast<const void*>(send), reinterpret_cast<void*>(recv), count,
                               data_type(t), red_op(op), c, stream);
          });
}

void NcclComm::broadcast(CUdeviceptr send, CUdeviceptr recv, std::size_t count, DType t, int root, CUstream stream) {
  enqueue(comm_, device_, "ncclBroadcast", describe(fmt::format("broadcast(root={})", root), count, t, device_),
          [&](const nc::Api& a, nc::Comm c) {
            return a.Broadcast(reinterpret_cast<const void*>(send), reinterpret_cast<void*>(recv), count,
                               data_type(t), root, c, stream);
          });
}

void NcclComm::all_gather(CUdeviceptr send, CUdeviceptr recv, std::size_t send_count, DType t, CUstream stream) {
  enqueue(comm_, device_, "ncclAllGather", describe("all_gather", send_count, t, device_),
          [&](const nc::Api& a, nc::Comm c) {
            return a.AllGather(reinterpret_cast<const void*>(send), reinterpret_cast<void*>(recv), send_count,
                               data_type(t), c, stream);
          });
}

void NcclComm::reduce_scatter(CUdeviceptr send, CUdeviceptr recv, std::size_t recv_count, DType t, NcclRedOp op,
                              CUstream stream) {
  enqueue(comm_, device_, "ncclReduceScatter",
          describe(fmt::format("reduce_scatter({})", nccl_red_op_name(op)), recv_count, t, device_),
          [&](const nc::Api& a, nc::Comm c) {
            return a.ReduceScatter(reinterpret_cast<const void*>(send), reinterpret_cast<void*>(recv), recv_count,
                                   data_type(t), red_op(op), c, stream);
          });
}

}  // namespace tessel::cuda
