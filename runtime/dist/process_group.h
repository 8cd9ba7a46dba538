// ProcessGroup: the ranks of a distributed run and the collectives among them.
// Every collective is asynchronous: it returns a Work handle at once and runs
// on the group's communication thread, in the order the calls were made, so
// every rank must issue the same collectives in the same order (as with
// PyTorch's process groups). Before its payload moves, each collective checks
// that every rank passed the same kind of call with the same shape and dtype;
// a difference is a DistError naming the first rank that differs, never
// silently mixed memory. A rank that dies or hangs makes the others fail
// within `timeout` with a DistError naming it.
//
// This layer moves raw memory (runtime/ knows no Tensor); dsl/dist/collectives.h
// offers the same calls on tensors:
//   auto pg = dist::init_process_group({.backend = "gloo"});   // RANK, WORLD_SIZE, MASTER_ADDR, ...
//   dist::all_reduce(t);                                        // t: the sum over ranks, in place
// Backends: "gloo" (CPU memory, gloo_process_group.h), "nccl" (GPU memory, nccl_process_group.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "runtime/device.h"
#include "runtime/dist/ready_gate.h"
#include "runtime/errors.h"
#include "runtime/dtype.h"
#include "runtime/shape.h"

namespace tessel::dist {

enum class ReduceOp : uint8_t { sum, avg, max };
std::string_view reduce_op_name(ReduceOp op);
/// Every backend's rule for `op` on dtype `t`: an average of integers would
/// truncate, so it is a DTypeError naming `call` ("all_reduce", ...).
void check_average_of(const char* call, DType t, ReduceOp op);

/// A contiguous block of one rank's memory taking part in a collective.
struct CommBuffer {
  void* data = nullptr;
  DType dtype = DType::f32;
  Shape shape;
  Device device;
  int64_t numel() const { return shape.numel(); }
};

/// An asynchronous collective. wait() blocks until it is done and rethrows its
/// error (a DistError); the memory it works on must stay alive until then.
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  virtual bool is_completed() const = 0;
};
using WorkPtr = std::shared_ptr<Work>;

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;
  virtual std::chrono::milliseconds timeout() const = 0;
  /// Where the memory this group's collectives move lives: CPU (gloo) or CUDA (nccl).
  virtual Device::Kind device_kind() const = 0;

  /// Every rank's `buf` becomes the reduction over ranks (avg: the sum / size(); floating only).
  virtual WorkPtr all_reduce(CommBuffer buf, ReduceOp op) = 0;
  /// Every rank's `buf` becomes `root`'s.
  virtual WorkPtr broadcast(CommBuffer buf, int root) = 0;
  /// `out` (size() times `in`'s elements) becomes every rank's `in`, in rank order.
  virtual WorkPtr all_gather(CommBuffer out, CommBuffer in) = 0;
  /// `in` holds size() equal chunks; `out` becomes the reduction of chunk rank() over ranks.
  virtual WorkPtr reduce_scatter(CommBuffer out, CommBuffer in, ReduceOp op) = 0;
  /// Completes when every rank has reached it.
  virtual WorkPtr barrier() = 0;

  /// Whether all_reduce_after() agrees on the call before its data is ready.
  virtual bool agrees_ahead() const { return false; }
  /// all_reduce of memory still being written: the ranks agree on the call
  /// now, and the data moves once `gate` opens (ready_gate.h). A cancelled
  /// gate skips the transfer, which the other ranks still make: this group is
  /// then out of step, so it fails every later call, and the others fail
  /// within the timeout naming this rank. A gate left waiting for the whole
  /// timeout is a DistError too. Only where agrees_ahead().
  virtual WorkPtr all_reduce_after(CommBuffer, ReduceOp, std::shared_ptr<ReadyGate>) {
    throw InternalError("all_reduce_after on a " + backend() + " process group, which does not agree ahead");
  }
};

}  // namespace tessel::dist
