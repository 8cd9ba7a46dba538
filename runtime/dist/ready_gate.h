// ReadyGate: what a collective whose memory is still being written waits at
// before its payload moves. The ranks agree on the call (ProcessGroup's check
// of kind, shape and dtype) while the caller is still producing the data --
// DDP submits a bucket's all_reduce when backward starts and opens its gate
// when the bucket's last gradient is in, so the agreement's round trip
// overlaps backward instead of adding to it.
//
//   auto gate = std::make_shared<dist::ReadyGate>();
//   dist::WorkPtr w = pg->all_reduce_after(buf, dist::ReduceOp::avg, gate);  // agreement starts now
//   ... write buf ...
//   gate->open();   // the transfer starts;  gate->cancel(): it never will
//   w->wait();
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace tessel::dist {

class ReadyGate {
 public:
  enum class State { waiting, open, cancelled };
  void open() { set(State::open); }
  void cancel() { set(State::cancelled); }
  /// Blocks until opened or cancelled, or `timeout` passes (then: waiting).
  State wait(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return state_ != State::waiting; });
    return state_;
  }

 private:
  void set(State s) {
    {
      std::lock_guard lock(mu_);
      if (state_ == State::waiting) state_ = s;
    }
    cv_.notify_all();
  }
  std::mutex mu_;
  std::condition_variable cv_;
  State state_ = State::waiting;
};

}  // namespace tessel::dist
