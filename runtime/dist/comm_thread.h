// CommThread: runs a process group's collectives one after another on a
// thread of their own, so the caller (a backward pass, say) goes on while
// they move data. Order is the call order, which is what keeps ranks matched.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "runtime/dist/process_group.h"

namespace tessel::dist {

class CommThread {
 public:
  CommThread();
  ~CommThread();  // finishes what was queued, then joins
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;
  /// Queues `task`; its exception, if any, is rethrown by the Work's wait().
  WorkPtr submit(std::function<void()> task);

 private:
  struct Item;
  void loop();
  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<std::shared_ptr<Item>> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tessel::dist
