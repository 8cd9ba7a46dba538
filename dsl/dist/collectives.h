// Collectives on tensors, over the default process group (or the one given).
// Like PyTorch's torch.distributed: all_reduce and broadcast write their
// result into the tensor; the *_async forms return a TensorWork to wait on,
// so computation can go on while the data moves. CPU tensors go through the
// "gloo" backend, GPU tensors through "nccl"; the staging copies a call makes
// stay on the tensor's device, so a GPU tensor never passes through the host.
//
//   dist::init_process_group({.backend = "gloo"});
//   Tensor g = full({3}, dist::default_group()->rank() + 1.0);
//   dist::all_reduce(g);                                   // [3, 3, 3] with 2 ranks (1 + 2)
//   auto work = dist::all_reduce_async(g, dist::ReduceOp::max);
//   ...                                                    // other work meanwhile
//   work.wait();                                           // g holds the max now
//   std::vector<Tensor> all = dist::all_gather(g);         // one tensor per rank
#pragma once

#include <functional>
#include <vector>

#include "dsl/tensor.h"
#include "runtime/dist/init.h"

namespace tessel::dist {

/// A collective in flight. wait() blocks until it is done, writes its result
/// into the tensors it was given and rethrows its error (a DistError). A
/// TensorWork dropped without wait() still waits (without writing) so the
/// memory it uses outlives it.
class TensorWork {
 public:
  TensorWork() = default;
  TensorWork(WorkPtr work, std::function<void()> finish) : work_(std::move(work)), finish_(std::move(finish)) {}
  TensorWork(TensorWork&&) = default;
  TensorWork& operator=(TensorWork&&) = default;
  ~TensorWork();
  void wait();
  bool is_completed() const { return !work_ || work_->is_completed(); }

 private:
  WorkPtr work_;
  std::function<void()> finish_;
};

TensorWork all_reduce_async(const Tensor& t, ReduceOp op = ReduceOp::sum, ProcessGroup* group = nullptr);
TensorWork broadcast_async(const Tensor& t, int root, ProcessGroup* group = nullptr);
/// `out` gets one tensor per rank (rank order), each of `t`'s shape, when the work is waited.
TensorWork all_gather_async(std::vector<Tensor>& out, const Tensor& t, ProcessGroup* group = nullptr);
/// `input` is size() chunks along dim 0; `output` (one chunk's shape) gets this rank's chunk reduced.
TensorWork reduce_scatter_async(const Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::sum,
                                ProcessGroup* group = nullptr);

void all_reduce(const Tensor& t, ReduceOp op = ReduceOp::sum, ProcessGroup* group = nullptr);
void broadcast(const Tensor& t, int root, ProcessGroup* group = nullptr);
std::vector<Tensor> all_gather(const Tensor& t, ProcessGroup* group = nullptr);
void reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::sum,
                    ProcessGroup* group = nullptr);
void barrier(ProcessGroup* group = nullptr);

/// The memory of a realized, contiguous tensor as a collective's buffer.
CommBuffer comm_buffer(const Tensor& t);

}  // namespace tessel::dist
