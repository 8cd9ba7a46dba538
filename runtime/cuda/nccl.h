// NCCL collectives between GPUs, the library loaded at run time.
//
// libnccl is opened with dlopen on first use, like the driver and cuBLASLt:
// tessel builds without it and runs without it (where it is missing, asking
// whether it is there never throws and everything else raises
// tessel::DeviceError saying what was tried). The library comes from, in order:
//   - $TESSEL_NCCL, a path (or soname) -- and nothing else when it is set;
//   - libnccl.so.2, wherever the loader finds it;
//   - libnccl.so.2 in the lib folder of the CUDA toolkit tessel was built with.
// NCCL 2.10 or newer (the first with ncclAvg). The few NCCL types and values
// used are declared in nccl.cpp, so no header users include needs NCCL's.
//
// One communicator per rank and GPU; every rank of it must make the same
// calls in the same order (runtime/dist/nccl_process_group.h sees to that):
//
//   using namespace tessel::cuda;
//   NcclUniqueId id = nccl_unique_id();              // on rank 0, then handed to the others
//   NcclComm comm = NcclComm::init_rank(device, world, id, rank);   // blocks until every rank joined
//   comm.all_reduce(buf, buf, n, DType::f32, NcclRedOp::sum, stream); // queued on `stream`
//   if (std::string e = comm.async_error(); !e.empty()) comm.abort();
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/cuda/driver.h"
#include "runtime/dtype.h"

namespace tessel::cuda {

/// True when libnccl loaded, has every entry point tessel uses and is new enough (never throws).
bool nccl_available() noexcept;
/// "" when available; else every library tried and why each failed, and how
/// to point tessel at one (TESSEL_NCCL).
std::string nccl_unavailable_reason();
/// The library that loaded, as it was named to dlopen ("" when none did).
std::string nccl_library();
/// ncclGetVersion(): major * 10000 + minor * 100 + patch (22809 for 2.28.9).
/// DeviceError when the library cannot be loaded.
int nccl_version();

/// What names one communicator: made by one rank, sent to the others (nccl.h's ncclUniqueId).
struct NcclUniqueId {
  static constexpr std::size_t kBytes = 128;
  std::array<char, kBytes> bytes{};
};
/// A fresh id (ncclGetUniqueId). DeviceError when NCCL is unavailable or fails.
NcclUniqueId nccl_unique_id();

/// The reductions of nccl.h's ncclRedOp_t that tessel names.
enum class NcclRedOp : uint8_t { sum, prod, max, min, avg };
std::string_view nccl_red_op_name(NcclRedOp op);

/// One rank's handle on a communicator. Move-only; destroying it releases
/// the rank's part (ncclCommDestroy), or nothing more after abort().
class NcclComm {
 public:
  NcclComm() = default;
  /// Joins rank `rank` of `nranks` to the communicator `id` names, on device
  /// `device` (made current first). Blocks until every rank has joined; NCCL
  /// itself has no timeout for that. DeviceError when NCCL fails.
  static NcclComm init_rank(int device, int nranks, const NcclUniqueId& id, int rank);
  NcclComm(NcclComm&& o) noexcept : comm_(o.comm_), device_(o.device_) { o.comm_ = nullptr; }
  NcclComm& operator=(NcclComm&& o) noexcept;
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;
  ~NcclComm() { destroy(); }

  explicit operator bool() const { return comm_ != nullptr; }
  int device() const { return device_; }
  /// "" while the communicator is healthy; else NCCL's error for work already
  /// queued (a peer that died, a network failure), as "ncclRemoteError (...)".
  std::string async_error() const;
  /// Ends the communicator now, also work in flight (ncclCommAbort); never throws.
  void abort() noexcept;

  // Queued on `stream` (a stream of device()); `count` elements of `t` per
  // rank as NCCL counts them. send == recv works in place. DeviceError when
  // NCCL refuses the call, with what NCCL said about it.
  void all_reduce(CUdeviceptr send, CUdeviceptr recv, std::size_t count, DType t, NcclRedOp op, CUstream stream);
  void broadcast(CUdeviceptr send, CUdeviceptr recv, std::size_t count, DType t, int root, CUstream stream);
  /// recv holds nranks * send_count elements, rank r's at r * send_count.
  void all_gather(CUdeviceptr send, CUdeviceptr recv, std::size_t send_count, DType t, CUstream stream);
  /// send holds nranks * recv_count elements; recv gets chunk `rank` reduced.
  void reduce_scatter(CUdeviceptr send, CUdeviceptr recv, std::size_t recv_count, DType t, NcclRedOp op,
                      CUstream stream);

 private:
  NcclComm(void* c, int device) : comm_(c), device_(device) {}
  void destroy() noexcept;
  void* comm_ = nullptr;  // ncclComm_t
  int device_ = -1;
};

}  // namespace tessel::cuda
