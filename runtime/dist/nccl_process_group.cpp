#include "runtime/dist/nccl_process_group.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/cuda/device_allocator.h"
#include "runtime/cuda/driver.h"
#include "runtime/cuda/nccl.h"
#include "runtime/dist/call_signature.h"
#include "runtime/dist/comm_thread.h"
#include "runtime/dist/failure_report.h"
#include "runtime/errors.h"

namespace tessel::dist {

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kSignatureBytes = CallSignature::kWords * sizeof(int64_t);

// The k-th nccl group a rank makes on a store meets the other ranks' k-th
// under one prefix. Counted per rank, not per process: ranks may be threads
// of one process (one process driving several GPUs, or a test).
std::string next_group_prefix(const Store& store, int rank) {
  static std::mutex mu;
  static std::map<std::pair<std::string, int>, int> made;
  std::lock_guard lock(mu);
  return fmt::format("nccl{}", made[{store.describe(), rank}]++);
}

cuda::NcclRedOp nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return cuda::NcclRedOp::sum;
    case ReduceOp::avg: return cuda::NcclRedOp::avg;
    case ReduceOp::max: return cuda::NcclRedOp::max;
  }
  return cuda::NcclRedOp::sum;
}

cuda::CUdeviceptr device_ptr(const CommBuffer& b) { return reinterpret_cast<cuda::CUdeviceptr>(b.data); }

// A point on a device's legacy default stream, where tessel's CUDA backend
// queues every kernel and copy: what a buffer's producer had queued by then.
struct ComputePoint {
  cuda::CUevent event;
  explicit ComputePoint(int device) : event(cuda::event_create(device)) {  // makes `device` current here
    try {
      cuda::event_record(event, nullptr);
    } catch (...) {
      cuda::event_destroy(event);
      throw;
    }
  }
  ~ComputePoint() {
    try {
      cuda::event_destroy(event);
    } catch (...) {
    }
  }
  ComputePoint(const ComputePoint&) = delete;
  ComputePoint& operator=(const ComputePoint&) = delete;
};

// What a rank holds once the communicator is made: it, the stream the
// collectives run on, an event to poll and room for the call signatures.
struct Connection {
  int device = -1;
  cuda::NcclComm comm;
  cuda::CUstream stream = nullptr;
  cuda::CUevent done = nullptr;
  cuda::CUdeviceptr scratch = 0;  // this rank's signature, then every rank's

  ~Connection() {
    try {
      if (stream && comm) cuda::stream_synchronize(stream);
      if (scratch) cuda::device_allocator(device).deallocate(scratch);
      if (done) cuda::event_destroy(done);
    } catch (...) {
    }
    // Abort, not destroy: nothing is in flight by now (every task waited for
    // its work), and destroying may wait on peers that are gone or hung.
    comm.abort();
    try {
      if (stream) cuda::stream_destroy(stream);
    } catch (...) {
    }
  }
};

class NcclProcessGroup : public ProcessGroup {
 public:
  NcclProcessGroup(std::shared_ptr<Store> store, int rank, int size, std::chrono::milliseconds timeout, int device)
      : store_(std::move(store)),
        scoped_(next_group_prefix(*store_, rank), *store_),
        rank_(rank),
        size_(size),
        timeout_(timeout),
        // As the gloo group: transfers give up at 4/5 of the timeout, leaving
        // the last fifth for the ranks to tell each other who saw the failure.
        transfer_timeout_(timeout * 4 / 5),
        device_hint_(device) {
    if (!cuda::nccl_available())
      throw DeviceError(fmt::format("the nccl backend: {}; or use the gloo backend for CPU tensors",
                                    cuda::nccl_unavailable_reason()));
    if (cuda::device_count() == 0) {
      std::string why = cuda::driver_unavailable_reason();
      throw DeviceError(fmt::format("the nccl backend needs a CUDA GPU and this process sees none ({}); use the gloo "
                                    "backend for CPU tensors",
                                    why.empty() ? "the driver reports 0 devices" : why));
    }
    if (device_hint_ >= cuda::device_count())
      throw DeviceError(fmt::format("the nccl backend: rank {} was given cuda:{} but this process sees {} GPU(s)",
                                    rank_, device_hint_, cuda::device_count()));
    // The unique id names the communicator: rank 0's, handed round by the store.
    if (rank_ == 0) {
      id_ = cuda::nccl_unique_id();
      scoped_.set("nccl/unique_id", std::vector<char>(id_.bytes.begin(), id_.bytes.end()));
    } else {
      std::vector<char> v = scoped_.get("nccl/unique_id", timeout_);
      if (v.size() != id_.bytes.size())
        throw DistError(fmt::format("nccl rendezvous through {}: rank 0's unique id has {} bytes, not {}; do all ranks "
                                    "run the same tessel?",
                                    scoped_.describe(), v.size(), id_.bytes.size()));
      std::copy(v.begin(), v.end(), id_.bytes.begin());
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }
  std::chrono::milliseconds timeout() const override { return timeout_; }
  Device::Kind device_kind() const override { return Device::Kind::cuda; }

  WorkPtr all_reduce(CommBuffer buf, ReduceOp op) override {
    int device = bind("all_reduce", buf);
    check_reducible("all_reduce", buf.dtype, op);
    return submit({"all_reduce", static_cast<int64_t>(op), buf.dtype, buf.shape}, after_compute(device),
                  [this, buf, op] {
                    if (buf.numel() == 0) return;
                    conn_->comm.all_reduce(device_ptr(buf), device_ptr(buf), static_cast<size_t>(buf.numel()),
                                           buf.dtype, nccl_op(op), conn_->stream);
                  });
  }

  WorkPtr broadcast(CommBuffer buf, int root) override {
    int device = bind("broadcast", buf);
    if (root < 0 || root >= size_)
      throw ValueError(fmt::format("broadcast: root {} is not a rank of this group (0..{})", root, size_ - 1));
    return submit({"broadcast", root, buf.dtype, buf.shape}, after_compute(device), [this, buf, root] {
      if (buf.numel() == 0) return;
      conn_->comm.broadcast(device_ptr(buf), device_ptr(buf), static_cast<size_t>(buf.numel()), buf.dtype, root,
                            conn_->stream);
    });
  }

  WorkPtr all_gather(CommBuffer out, CommBuffer in) override {
    bind("all_gather", out);
    int device = bind("all_gather", in);
    if (out.dtype != in.dtype || out.numel() != in.numel() * size_)
      throw ShapeError(fmt::format("all_gather: the output must hold {} (world size) times the input's {} {} "
                                   "elements, as {}; it holds {} {}",
                                   size_, in.numel(), dtype_name(in.dtype), dtype_name(in.dtype), out.numel(),
                                   dtype_name(out.dtype)));
    return submit({"all_gather", 0, in.dtype, in.shape}, after_compute(device), [this, out, in] {
      if (in.numel() == 0) return;
      conn_->comm.all_gather(device_ptr(in), device_ptr(out), static_cast<size_t>(in.numel()), in.dtype,
                             conn_->stream);
    });
  }

  WorkPtr reduce_scatter(CommBuffer out, CommBuffer in, ReduceOp op) override {
    bind("reduce_scatter", out);
    int device = bind("reduce_scatter", in);
    if (out.dtype != in.dtype || in.numel() != out.numel() * size_)
      throw ShapeError(fmt::format("reduce_scatter: the input must hold {} (world size) times the output's {} {} "
                                   "elements, as {}; it holds {} {}",
                                   size_, out.numel(), dtype_name(out.dtype), dtype_name(out.dtype), in.numel(),
                                   dtype_name(in.dtype)));
    check_reducible("reduce_scatter", in.dtype, op);
    return submit({"reduce_scatter", static_cast<int64_t>(op), in.dtype, in.shape}, after_compute(device),
                  [this, out, in, op] {
                    if (out.numel() == 0) return;
                    conn_->comm.reduce_scatter(device_ptr(in), device_ptr(out), static_cast<size_t>(out.numel()),
                                               in.dtype, nccl_op(op), conn_->stream);
                  });
  }

  // The signatures' all-gather, which every rank must join, is the barrier.
  WorkPtr barrier() override {
    bind_for_barrier();
    return submit({"barrier", 0, DType::f32, Shape{}}, nullptr, [] {});
  }

 private:
  // The rank's GPU: fixed by its first collective, the same for every later one.
  int bind(const char* call, const CommBuffer& b) {
    if (!b.device.is_cuda())
      throw DeviceError(fmt::format("{}: the nccl backend works on GPU tensors, this one is on {}; move it with "
                                    ".cuda(i) (one GPU per rank), or use the gloo backend for CPU tensors",
                                    call, b.device.str()));
    std::lock_guard lock(device_mu_);
    if (device_ < 0) device_ = b.device.index;
    if (device_ != b.device.index)
      throw DeviceError(fmt::format("{}: rank {}'s nccl group works on cuda:{} (the GPU of its first collective) but "
                                    "this tensor is on {}; NCCL runs one GPU per rank, so keep every tensor this rank "
                                    "communicates on cuda:{}",
                                    call, rank_, device_, b.device.str(), device_));
    return device_;
  }

  void bind_for_barrier() {
    std::lock_guard lock(device_mu_);
    if (device_ >= 0) return;
    device_ = device_hint_ >= 0 ? device_hint_ : cuda::current_device();
    if (device_ < 0)
      throw DeviceError(fmt::format("barrier: rank {}'s nccl group has no GPU yet (a collective on a GPU tensor picks "
                                    "it); run one first, or make this rank's GPU current",
                                    rank_));
  }

  static void check_reducible(const char* call, DType t, ReduceOp op) {
    switch (t) {
      case DType::f32:
      case DType::f64:
      case DType::i32:
      case DType::i64: break;
      case DType::b8:
      case DType::f16:
      case DType::bf16:
        throw DTypeError(fmt::format("{}: the nccl backend reduces f32, f64, i32 and i64 tensors, not {}; convert "
                                     "first with .to(DType::f32)",
                                     call, dtype_name(t)));
    }
    check_average_of(call, t, op);
  }

  static std::shared_ptr<ComputePoint> after_compute(int device) { return std::make_shared<ComputePoint>(device); }

  // Runs on the communication thread: agree on `sig`, then `payload` on the
  // group's stream once `ready` is reached, then wait for it on the device.
  WorkPtr submit(CallSignature sig, std::shared_ptr<ComputePoint> ready, std::function<void()> payload) {
    uint64_t seq = ++seq_;
    return comm_.submit([this, sig, seq, ready = std::move(ready), payload = std::move(payload)] {
      const auto start = Clock::now(), deadline = start + transfer_timeout_;
      {
        std::lock_guard lock(broken_mu_);
        if (!broken_.empty())
          throw DistError(fmt::format("{} (collective #{}): this process group failed earlier and cannot be used: {}",
                                      sig.call, seq, broken_));
      }
      std::vector<CallSignature> by_rank;
      try {
        connect(deadline);
        by_rank = exchange(sig, deadline);
      } catch (const std::exception& e) {
        fail(seq, sig.call, e.what(), start);
      }
      check_same_call(by_rank, seq);  // every rank saw the same signatures and says so; the group is still in step
      try {
        if (ready) cuda::stream_wait_event(conn_->stream, ready->event);
        payload();
        wait_for_stream(deadline);
      } catch (const std::exception& e) {
        fail(seq, sig.call, e.what(), start);
      }
    });
  }

  [[noreturn]] void fail(uint64_t seq, std::string_view call, const std::string& cause, Clock::time_point start) {
    if (conn_) conn_->comm.abort();  // ends this rank's work in flight; its peers see the communicator fail
    try {
      raise_collective_failure(scoped_, rank_, size_, seq, call, cause, start + timeout_);
    } catch (const DistError& failure) {
      std::lock_guard lock(broken_mu_);
      broken_ = failure.what();
      throw;
    }
  }

  // The communicator, made at the first collective.
  void connect(Clock::time_point deadline) {
    if (conn_) {
      cuda::set_device(conn_->device);
      return;
    }
    int device = -1;
    {
      std::lock_guard lock(device_mu_);
      device = device_;
    }
    // NCCL's init waits for every rank with no timeout of its own: the ranks
    // meet on the store first, so one that never comes is named, not waited for.
    scoped_.set(fmt::format("nccl/joined/{}", rank_), {'1'});
    std::vector<int> missing;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      auto left = std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()),
                           std::chrono::milliseconds(0));
      if (!scoped_.try_get(fmt::format("nccl/joined/{}", r), left)) missing.push_back(r);
    }
    if (!missing.empty())
      throw DistError(fmt::format("rank{} {} never reached the first collective, where the NCCL communicator is made",
                                  missing.size() > 1 ? "s" : "", fmt::join(missing, ", ")));
    auto c = std::make_unique<Connection>();
    c->device = device;
    c->comm = cuda::NcclComm::init_rank(device, size_, id_, rank_);
    c->stream = cuda::stream_create(device);
    c->done = cuda::event_create(device);
    c->scratch = cuda::device_allocator(device).allocate(kSignatureBytes * static_cast<size_t>(size_ + 1), c->stream);
    conn_ = std::move(c);
  }

  // Every rank's signature of this call, by a small all-gather on the device.
  std::vector<CallSignature> exchange(const CallSignature& sig, Clock::time_point deadline) {
    Connection& c = *conn_;
    auto mine = sig.encode();
    std::vector<int64_t> all(static_cast<size_t>(CallSignature::kWords * size_));
    cuda::memcpy_htod_async(c.scratch, mine.data(), kSignatureBytes, c.stream);
    c.comm.all_gather(c.scratch, c.scratch + kSignatureBytes, CallSignature::kWords, DType::i64, c.stream);
    wait_for_stream(deadline);
    cuda::memcpy_dtoh_async(all.data(), c.scratch + kSignatureBytes, kSignatureBytes * static_cast<size_t>(size_),
                            c.stream);
    cuda::stream_synchronize(c.stream);
    std::vector<CallSignature> by_rank;
    for (int r = 0; r < size_; ++r) by_rank.push_back(CallSignature::decode(all.data() + r * CallSignature::kWords));
    return by_rank;
  }

  // Polls rather than blocks: a peer that never comes leaves NCCL's kernels
  // waiting forever, and only a watcher with a deadline can end that.
  void wait_for_stream(Clock::time_point deadline) {
    Connection& c = *conn_;
    cuda::event_record(c.done, c.stream);
    auto pause = std::chrono::microseconds(20);
    for (;;) {
      const bool finished = cuda::event_query(c.done);
      if (std::string e = c.comm.async_error(); !e.empty()) throw DeviceError(fmt::format("NCCL reported {}", e));
      if (finished) return;
      if (Clock::now() >= deadline)
        throw DeviceError(fmt::format("nothing completed on cuda:{} within {} ms", c.device,
                                      transfer_timeout_.count()));
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(2000));
    }
  }

  std::shared_ptr<Store> store_;
  PrefixStore scoped_;
  int rank_, size_;
  std::chrono::milliseconds timeout_, transfer_timeout_;
  int device_hint_;
  cuda::NcclUniqueId id_;
  std::mutex device_mu_;
  int device_ = -1;
  std::unique_ptr<Connection> conn_;  // used by the communication thread only
  std::atomic<uint64_t> seq_{0};
  std::mutex broken_mu_;
  std::string broken_;
  CommThread comm_;  // last: joined first, while the connection is alive
};

}  // namespace

std::shared_ptr<ProcessGroup> make_nccl_process_group(std::shared_ptr<Store> store, int rank, int size,
                                                      std::chrono::milliseconds timeout, int device) {
  return std::make_shared<NcclProcessGroup>(std::move(store), rank, size, timeout, device);
}

}  // namespace tessel::dist
