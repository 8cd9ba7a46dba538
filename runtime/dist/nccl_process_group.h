// The "nccl" backend: collectives on GPU memory through NCCL (loaded at run
// time, runtime/cuda/nccl.h), the library PyTorch's GPU backend uses.
//
// One GPU per rank: the device of the first collective's tensors (or, for a
// barrier before any, `device`, else the calling thread's current device);
// every later tensor must be on it. Rank 0 makes NCCL's unique id and leaves
// it on the store, where the others read it; the communicator itself is made
// at the first collective, once every rank has reached it.
//
// Ordering: tessel's CUDA backend queues all its work on the device's legacy
// default stream, so each call records an event there; the group's own stream
// waits for it before NCCL reads the memory (the collective follows the
// computation that produced it, without blocking the caller). Work::wait()
// returns when the collective has finished on the device; a communicator
// error (ncclCommGetAsyncError) or no completion within the timeout aborts the
// communicator and raises a DistError naming the ranks that did not arrive.
#pragma once

#include <chrono>
#include <memory>

#include "runtime/dist/process_group.h"
#include "runtime/dist/store.h"

namespace tessel::dist {

/// Joins `rank` of `size` through `store` (the unique id's exchange waits up to `timeout`).
/// DeviceError when NCCL or a GPU is missing; DistError when rendezvous fails.
std::shared_ptr<ProcessGroup> make_nccl_process_group(std::shared_ptr<Store> store, int rank, int size,
                                                      std::chrono::milliseconds timeout, int device = -1);

}  // namespace tessel::dist
