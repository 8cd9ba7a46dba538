#include "runtime/dist/comm_thread.h"

namespace tessel::dist {

struct CommThread::Item : Work {
  std::function<void()> task;
  mutable std::mutex mu;
  std::condition_variable finished;
  bool done = false;
  std::exception_ptr error;

  void wait() override {
    std::unique_lock lock(mu);
    finished.wait(lock, [&] { return done; });
    if (error) std::rethrow_exception(error);
  }
  bool is_completed() const override {
    std::lock_guard lock(mu);
    return done;
  }
};

CommThread::CommThread() : thread_([this] { loop(); }) {}

CommThread::~CommThread() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  ready_.notify_all();
  thread_.join();
}

WorkPtr CommThread::submit(std::function<void()> task) {
  auto item = std::make_shared<Item>();
  item->task = std::move(task);
  {
    std::lock_guard lock(mu_);
    queue_.push_back(item);
  }
  ready_.notify_one();
  return item;
}

void CommThread::loop() {
  for (;;) {
    std::shared_ptr<Item> item;
    {
      std::unique_lock lock(mu_);
      ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    std::exception_ptr error;
    try {
      item->task();
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard lock(item->mu);
      item->error = error;
      item->done = true;
      item->task = nullptr;  // drops what the task held (buffers) now, not at the handle's death
    }
    item->finished.notify_all();
  }
}

}  // namespace tessel::dist
