#include "runtime/dist/gloo_process_group.h"

#include <fmt/format.h>
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <signal.h>

#include <atomic>
#include <cstring>
#include <mutex>

#include "runtime/dist/call_signature.h"
#include "runtime/dist/comm_thread.h"
#include "runtime/dist/failure_report.h"
#include "runtime/errors.h"

namespace tessel::dist {

namespace {

// Gloo's rendezvous asks a gloo Store; this one forwards to tessel's.
class GlooStore : public gloo::rendezvous::Store {
 public:
  GlooStore(dist::Store& base, std::chrono::milliseconds timeout) : base_(base), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override { base_.set(key, data); }
  std::vector<char> get(const std::string& key) override { return base_.get(key, timeout_); }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    for (const auto& k : keys)
      if (!base_.try_get(k, timeout))
        throw DistError(fmt::format("rendezvous through {}: not every rank joined within {} ms (no '{}' yet); check "
                                    "that WORLD_SIZE is the number of processes started and that all of them run",
                                    base_.describe(), timeout.count(), k));
  }

 private:
  dist::Store& base_;
  std::chrono::milliseconds timeout_;
};

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

template <class T>
gloo::AllreduceOptions::Func reducer(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return static_cast<ReduceFn>(&gloo::sum<T>);
    case ReduceOp::avg: return static_cast<ReduceFn>(&gloo::sum<T>);  // divided by the world size afterwards
    case ReduceOp::max: return static_cast<ReduceFn>(&gloo::max<T>);
  }
  return nullptr;
}

gloo::AllreduceOptions::Func reducer(DType t, ReduceOp op) {
  switch (t) {
    case DType::f32: return reducer<float>(op);
    case DType::f64: return reducer<double>(op);
    case DType::i32: return reducer<int32_t>(op);
    case DType::i64: return reducer<int64_t>(op);
    case DType::b8:
    case DType::f16:
    case DType::bf16: return nullptr;
  }
  return nullptr;
}

void divide(CommBuffer& b, int n) {
  if (b.dtype == DType::f32)
    for (int64_t i = 0; i < b.numel(); ++i) static_cast<float*>(b.data)[i] /= static_cast<float>(n);
  else
    for (int64_t i = 0; i < b.numel(); ++i) static_cast<double*>(b.data)[i] /= n;
}

int next_group_id() {
  static std::atomic<int> id{0};
  return id++;
}

class GlooProcessGroup : public ProcessGroup {
 public:
  GlooProcessGroup(std::shared_ptr<Store> store, int rank, int size, std::chrono::milliseconds timeout,
                   const std::string& host, bool iface)
      : store_(std::move(store)),
        scoped_(fmt::format("pg{}", next_group_id()), *store_),
        rank_(rank),
        size_(size),
        timeout_(timeout),
        // Transfers give up at 4/5 of the timeout, which leaves the ranks the
        // last fifth to tell each other who saw the failure, so all of them
        // fail within the timeout itself.
        transfer_timeout_(timeout * 4 / 5) {
    gloo::transport::tcp::attr attr;
    if (iface) attr.iface = host;
    else attr.hostname = host;
    std::shared_ptr<gloo::transport::Device> device;
    try {
      device = gloo::transport::tcp::CreateDevice(attr);
    } catch (const std::exception& e) {
      throw DistError(fmt::format("gloo: cannot open a TCP device on {} '{}' ({}); set GLOO_SOCKET_IFNAME to an "
                                  "interface the other ranks can reach",
                                  iface ? "interface" : "host", host, e.what()));
    }
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    context->setTimeout(timeout);
    PrefixStore gloo_keys("gloo", scoped_);
    GlooStore adapter(gloo_keys, timeout);
    try {
      context->connectFullMesh(adapter, device);
    } catch (const DistError&) {
      throw;
    } catch (const std::exception& e) {
      throw DistError(fmt::format("gloo: rank {} of {} could not connect to the others within {} ms ({})", rank, size,
                                  timeout.count(), e.what()));
    }
    context_ = context;
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "gloo"; }
  std::chrono::milliseconds timeout() const override { return timeout_; }
  Device::Kind device_kind() const override { return Device::Kind::cpu; }

  WorkPtr all_reduce(CommBuffer buf, ReduceOp op) override { return submit_all_reduce(buf, op, nullptr); }

  bool agrees_ahead() const override { return true; }

  WorkPtr all_reduce_after(CommBuffer buf, ReduceOp op, std::shared_ptr<ReadyGate> gate) override {
    return submit_all_reduce(buf, op, std::move(gate));
  }

  WorkPtr broadcast(CommBuffer buf, int root) override {
    check_cpu("broadcast", buf);
    check_root("broadcast", root);
    return submit({"broadcast", root, buf.dtype, buf.shape}, [this, buf, root](uint32_t tag) {
      if (buf.numel() == 0) return;
      gloo::BroadcastOptions o(context_);
      o.setOutput(static_cast<char*>(buf.data), static_cast<size_t>(buf.numel()) * dtype_size(buf.dtype));
      o.setRoot(root);
      o.setTag(tag);
      o.setTimeout(transfer_timeout_);
      gloo::broadcast(o);
    });
  }

  WorkPtr all_gather(CommBuffer out, CommBuffer in) override {
    check_cpu("all_gather", out);
    check_cpu("all_gather", in);
    if (out.dtype != in.dtype || out.numel() != in.numel() * size_)
      throw ShapeError(fmt::format("all_gather: the output must hold {} (world size) times the input's {} {} "
                                   "elements, as {}; it holds {} {}",
                                   size_, in.numel(), dtype_name(in.dtype), dtype_name(in.dtype), out.numel(),
                                   dtype_name(out.dtype)));
    return submit({"all_gather", 0, in.dtype, in.shape}, [this, out, in](uint32_t tag) {
      if (in.numel() == 0) return;
      size_t bytes = static_cast<size_t>(in.numel()) * dtype_size(in.dtype);
      gloo::AllgatherOptions o(context_);
      o.setInput(static_cast<char*>(in.data), bytes);
      o.setOutput(static_cast<char*>(out.data), bytes * static_cast<size_t>(size_));
      o.setTag(tag);
      o.setTimeout(transfer_timeout_);
      gloo::allgather(o);
    });
  }

  WorkPtr reduce_scatter(CommBuffer out, CommBuffer in, ReduceOp op) override {
    check_cpu("reduce_scatter", out);
    check_cpu("reduce_scatter", in);
    if (out.dtype != in.dtype || in.numel() != out.numel() * size_)
      throw ShapeError(fmt::format("reduce_scatter: the input must hold {} (world size) times the output's {} {} "
                                   "elements, as {}; it holds {} {}",
                                   size_, out.numel(), dtype_name(out.dtype), dtype_name(out.dtype), in.numel(),
                                   dtype_name(in.dtype)));
    auto fn = checked_reducer("reduce_scatter", in.dtype, op);
    // Gloo's reduce-scatter takes uneven per-rank counts; ours are even, and an
    // all-reduce of the whole input followed by taking this rank's chunk is the
    // definition itself (PyTorch's gloo backend does the same). `in` is the scratch.
    return submit({"reduce_scatter", static_cast<int64_t>(op), in.dtype, in.shape},
                  [this, out, in, op, fn](uint32_t tag) {
                    run_all_reduce(in, op, fn, tag);
                    size_t bytes = static_cast<size_t>(out.numel()) * dtype_size(out.dtype);
                    if (bytes)
                      std::memcpy(out.data, static_cast<const char*>(in.data) + bytes * static_cast<size_t>(rank_),
                                  bytes);
                  });
  }

  WorkPtr barrier() override {
    return submit({"barrier", 0, DType::f32, Shape{}}, [this](uint32_t tag) {
      gloo::BarrierOptions o(context_);
      o.setTag(tag);
      o.setTimeout(transfer_timeout_);
      gloo::barrier(o);
    });
  }

 private:
  void check_cpu(const char* call, const CommBuffer& b) const {
    if (!b.device.is_cpu())
      throw DeviceError(fmt::format("{}: the gloo backend works on CPU tensors, this one is on {}; use the nccl "
                                    "backend for GPU tensors, or move it with .cpu()",
                                    call, b.device.str()));
  }
  // The reduction function for `t` under `op`, or a DTypeError naming `call`.
  static gloo::AllreduceOptions::Func checked_reducer(const char* call, DType t, ReduceOp op) {
    auto fn = reducer(t, op);
    if (!fn)
      throw DTypeError(fmt::format("{}: the gloo backend reduces f32, f64, i32 and i64 tensors, not {}; convert "
                                   "first with .to(DType::f32)",
                                   call, dtype_name(t)));
    check_average_of(call, t, op);
    return fn;
  }
  void check_root(const char* call, int root) const {
    if (root < 0 || root >= size_)
      throw ValueError(fmt::format("{}: root {} is not a rank of this group (0..{})", call, root, size_ - 1));
  }

  // all_reduce, and all_reduce_after when `gate` is set: the payload then
  // waits for the gate after the ranks agreed on the call.
  WorkPtr submit_all_reduce(CommBuffer buf, ReduceOp op, std::shared_ptr<ReadyGate> gate) {
    check_cpu("all_reduce", buf);
    auto fn = checked_reducer("all_reduce", buf.dtype, op);
    return submit({"all_reduce", static_cast<int64_t>(op), buf.dtype, buf.shape},
                  [this, buf, op, fn, gate](uint32_t tag) {
                    if (gate) wait_for(*gate);
                    run_all_reduce(buf, op, fn, tag);
                  });
  }

  // Throws unless `gate` opens within the timeout. This rank then skips a
  // transfer the others make, so the group is out of step for good.
  void wait_for(ReadyGate& gate) {
    const ReadyGate::State s = gate.wait(timeout_);
    if (s == ReadyGate::State::open) return;
    std::string why = s == ReadyGate::State::cancelled
                          ? "its caller cancelled it before the data was ready"
                          : fmt::format("its data was not ready within {} ms", timeout_.count());
    std::lock_guard lock(broken_mu_);
    broken_ = fmt::format("an all_reduce on rank {} never moved its data: {}", rank_, why);
    throw DistError(broken_);
  }

  void run_all_reduce(CommBuffer b, ReduceOp op, const gloo::AllreduceOptions::Func& fn, uint32_t tag) {
    if (b.numel() == 0) return;
    gloo::AllreduceOptions o(context_);
    set_typed_output(o, b);
    o.setReduceFunction(fn);
    o.setTag(tag);
    o.setTimeout(transfer_timeout_);
    gloo::allreduce(o);
    if (op == ReduceOp::avg) divide(b, size_);
  }

  // Gloo sizes elements from setOutput<T>; the real element type lets the
  // reduction function see whole elements.
  static void set_typed_output(gloo::AllreduceOptions& o, const CommBuffer& b) {
    switch (b.dtype) {
      case DType::f32: o.setOutput(static_cast<float*>(b.data), static_cast<size_t>(b.numel())); return;
      case DType::f64: o.setOutput(static_cast<double*>(b.data), static_cast<size_t>(b.numel())); return;
      case DType::i32: o.setOutput(static_cast<int32_t*>(b.data), static_cast<size_t>(b.numel())); return;
      case DType::i64: o.setOutput(static_cast<int64_t*>(b.data), static_cast<size_t>(b.numel())); return;
      case DType::b8:
      case DType::f16:
      case DType::bf16: return;
    }
  }

  // Runs `payload` on the communication thread after the ranks agree on `sig`.
  WorkPtr submit(CallSignature sig, std::function<void(uint32_t tag)> payload) {
    uint64_t seq = ++seq_;
    return comm_.submit([this, sig, seq, payload = std::move(payload)] {
      auto start = std::chrono::steady_clock::now();
      {
        std::lock_guard lock(broken_mu_);
        if (!broken_.empty())
          throw DistError(fmt::format("{} (collective #{}): this process group failed earlier and cannot be used: {}",
                                      sig.call, seq, broken_));
      }
      try {
        agree(sig, seq);
        payload(static_cast<uint32_t>(2 * seq + 1));
      } catch (const DistError&) {
        throw;  // ranks disagree: every rank saw the same signatures and says so; the group is still in step
      } catch (const std::exception& e) {
        try {
          raise_collective_failure(scoped_, rank_, size_, seq, sig.call, e.what(), start + timeout_);
        } catch (const DistError& failure) {
          std::lock_guard lock(broken_mu_);
          broken_ = failure.what();
          throw;
        }
      }
    });
  }

  void agree(const CallSignature& sig, uint64_t seq) {
    std::vector<int64_t> mine(CallSignature::kWords), all(static_cast<size_t>(CallSignature::kWords * size_));
    auto words = sig.encode();
    std::copy(words.begin(), words.end(), mine.begin());
    gloo::AllgatherOptions o(context_);
    o.setInput(mine.data(), mine.size());
    o.setOutput(all.data(), all.size());
    o.setTag(static_cast<uint32_t>(2 * seq));
    o.setTimeout(transfer_timeout_);
    gloo::allgather(o);
    std::vector<CallSignature> by_rank;
    for (int r = 0; r < size_; ++r) by_rank.push_back(CallSignature::decode(all.data() + r * CallSignature::kWords));
    check_same_call(by_rank, seq);
  }

  std::shared_ptr<Store> store_;
  PrefixStore scoped_;
  int rank_, size_;
  std::chrono::milliseconds timeout_, transfer_timeout_;
  std::shared_ptr<gloo::Context> context_;
  std::atomic<uint64_t> seq_{0};
  std::mutex broken_mu_;
  std::string broken_;
  CommThread comm_;  // last: joined first, while the context is alive
};

}  // namespace

std::shared_ptr<ProcessGroup> make_gloo_process_group(std::shared_ptr<Store> store, int rank, int size,
                                                      std::chrono::milliseconds timeout, const std::string& host,
                                                      bool iface) {
  // Gloo writes to its peers' sockets with writev, which raises SIGPIPE once a
  // peer has died. Its default action ends this rank at once and silently,
  // before the collective can fail with the DistError that names the dead
  // rank (seen when one of four ranks is killed). Ignored, as Python ignores
  // it for PyTorch, the write fails with EPIPE and gloo reports it. A handler
  // the program installed is left alone.
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);
  return std::make_shared<GlooProcessGroup>(std::move(store), rank, size, timeout, host, iface);
}

}  // namespace tessel::dist
