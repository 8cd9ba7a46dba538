// nn::DistributedDataParallel: data-parallel training as PyTorch's
// torch.nn.parallel.DistributedDataParallel. Every rank holds the same model
// and runs it on its own share of the batch; DDP keeps the replicas equal by
// averaging the gradients over ranks inside backward, so after backward every
// rank's .grad is the gradient of the whole (global) batch's mean loss, and
// the optimizer steps alike everywhere.
//
//   dist::init_process_group({.backend = "gloo"});           // tessel-run --nproc-per-node 2 ./train
//   auto net = nn::Sequential(nn::Linear(784, 256), nn::ReLU(), nn::Linear(256, 10));
//   nn::DistributedDataParallel ddp(net, {.bucket_cap_mb = 25});
//   optim::SGD opt(ddp->parameters(), {.lr = 0.1});
//   Tensor loss = cross_entropy(ddp(X_shard), y_shard);
//   opt.zero_grad();
//   loss.backward();          // all-reduces overlap backward; averaged .grad on return
//   opt.step();
//
// What it does, as PyTorch:
//  - at construction, checks that every rank built the same model (parameters
//    and buffers: count, names, shapes, dtypes; a ValueError names the first
//    difference and the ranks), then broadcasts rank 0's parameters and buffers;
//  - groups gradients into buckets of about bucket_cap_mb, in reverse parameter
//    order (the order backward produces them), one dtype per bucket; a tied
//    parameter (one Parameter registered twice) is in one bucket once;
//  - in backward, copies each gradient into its bucket the moment it is ready
//    (autograd::register_post_accumulate_grad_hook) and starts the bucket's
//    all-reduce (average) as soon as the bucket is full, in bucket order, so
//    communication runs on the process group's thread while backward goes on;
//  - waits for every bucket at the end of backward (autograd::queue_callback)
//    and writes the averaged gradients into .grad, so nothing is needed between
//    backward() and the optimizer's step(); finish_gradient_synchronization()
//    does the same wait by hand and is a no-op when there is nothing pending;
//  - no_sync(): while the guard lives, backward accumulates gradients locally
//    (gradient accumulation); the first backward after it synchronizes the
//    accumulated gradients;
//  - broadcasts rank 0's buffers (batch-norm statistics) before each forward
//    (broadcast_buffers).
// forward() runs the wrapped module. Like PyTorch, the wrapped module is the
// child "module", so state_dict() keys carry a "module." prefix
// ("module.0.weight"); save ddp->module()->state_dict() for keys a plain
// model loads. Every parameter must receive a gradient in every synchronized
// backward (PyTorch's find_unused_parameters=False); one that does not is a
// ValueError naming it. The model lives on one device per rank: the CPU with
// the gloo backend, this rank's GPU with nccl (buckets and all are kept there).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dsl/grad_hooks.h"
#include "dsl/nn/module.h"
#include "runtime/dist/init.h"

namespace tessel::nn {

struct DistributedDataParallelOptions {
  double bucket_cap_mb = 25;                   // a bucket closes once it holds this many MiB of gradients
  std::shared_ptr<dist::ProcessGroup> group;   // null: dist::default_group()
  bool broadcast_buffers = true;               // rank 0's buffers to every rank before each forward
};

class DistributedDataParallelImpl : public Module {
 public:
  DistributedDataParallelImpl(std::shared_ptr<Module> module, DistributedDataParallelOptions options = {});
  ~DistributedDataParallelImpl() override;

  Tensor forward(const Tensor& x) override;
  /// The wrapped model.
  const std::shared_ptr<Module>& module() const { return module_; }
  dist::ProcessGroup& group() const { return *group_; }

  /// While the returned guard lives, backward does not synchronize (gradients accumulate locally).
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallelImpl& d) : d_(&d), was_(d.sync_) { d.sync_ = false; }
    NoSyncGuard(NoSyncGuard&& o) noexcept : d_(o.d_), was_(o.was_) { o.d_ = nullptr; }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;
    ~NoSyncGuard() {
      if (d_) d_->sync_ = was_;
    }

   private:
    DistributedDataParallelImpl* d_;
    bool was_;
  };
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  /// Waits for the all-reduces of the backward that ran last and writes the
  /// averaged gradients (backward already did, on return; this is for code
  /// that must be sure). Rethrows a collective's DistError.
  void finish_gradient_synchronization();

  /// The buckets, in the order their all-reduces start: parameter names, elements, dtype.
  struct Bucket {
    std::vector<std::string> names;
    int64_t numel = 0;
    DType dtype = DType::f32;
  };
  std::vector<Bucket> buckets() const;
  /// What the last synchronized backward did, in order: "ready NAME" when a
  /// gradient was accumulated, "launch K" when bucket K's all-reduce started,
  /// "done K" when its averaged gradients were written back.
  const std::vector<std::string>& sync_log() const { return log_; }

 private:
  struct Slot {
    Parameter param;
    std::string name;
    size_t bucket = 0;
    int64_t offset = 0;  // elements into the bucket
    bool ready = false;  // its gradient arrived in this backward
  };
  struct BucketState {
    std::vector<size_t> slots;
    int64_t numel = 0;
    DType dtype = DType::f32;
    Tensor data;  // [numel] on the model's device; gradients are copied in, averaged, copied out
    size_t pending = 0;
    bool ready = false;
    dist::WorkPtr work;
    // Where the group agrees ahead: the all_reduce is submitted when backward
    // starts and moves the bucket when this opens.
    std::shared_ptr<dist::ReadyGate> gate;
  };
  Device model_device() const;
  void check_same_model_and_broadcast();
  void broadcast_buffers();
  void on_grad_ready(size_t slot);
  void launch_ready_buckets();
  void abandon_in_flight() noexcept;

  std::shared_ptr<Module> module_;
  DistributedDataParallelOptions opt_;
  std::shared_ptr<dist::ProcessGroup> group_;
  Device device_;  // where the model, its buckets and the collectives' tensors live
  std::vector<Slot> slots_;
  std::vector<BucketState> buckets_;
  std::vector<autograd::HookHandle> hooks_;
  bool sync_ = true;
  bool in_backward_ = false;
  size_t next_bucket_ = 0;
  std::vector<std::string> log_;
};

/// The shared handle: nn::DistributedDataParallel ddp(model, {.bucket_cap_mb = 25, .group = pg});
class DistributedDataParallel : public ModuleHolder<DistributedDataParallelImpl> {
 public:
  template <class M>
    requires(!std::is_same_v<std::remove_cvref_t<M>, DistributedDataParallel>)
  explicit DistributedDataParallel(M&& module, DistributedDataParallelOptions options = {})
      : ModuleHolder<DistributedDataParallelImpl>(std::make_shared<DistributedDataParallelImpl>(
            detail::to_module_ptr(std::forward<M>(module)), std::move(options))) {}
  DistributedDataParallel(std::shared_ptr<DistributedDataParallelImpl> p)
      : ModuleHolder<DistributedDataParallelImpl>(std::move(p)) {}
};

}  // namespace tessel::nn
