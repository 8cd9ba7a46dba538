#include "codegen/cpu/jit_code_lifetime.h"

#include <atomic>
#include <mutex>
#include <shared_mutex>

namespace tessel::cpujit {

namespace {

// One word, so a thread that sees the count reach zero also knows which
// retirements happened before: high 32 bits count retirements (an epoch),
// low 32 bits the threads inside a CodeInUse.
std::atomic<std::uint64_t> g_word{0};
constexpr std::uint64_t kCountMask = 0xffffffffu;
constexpr std::uint64_t kEpochOne = std::uint64_t{1} << 32;

std::atomic<std::uint64_t> g_generation{0};
std::atomic<bool> g_pending{false};  // something waits to be freed

struct Retired {
  std::uint64_t epoch;
  std::shared_ptr<void> garbage;
};
// Never destroyed: code retired late may outlive static destructors.
std::mutex& retire_mu() {
  static auto* m = new std::mutex;
  return *m;
}
std::vector<Retired>& retired() {
  static auto* r = new std::vector<Retired>;
  return *r;
}
std::shared_mutex& insert_mu() {
  static auto* m = new std::shared_mutex;
  return *m;
}

thread_local int t_depth = 0;

// Everything retired at or before `epoch` can go: the count was zero after it.
void reclaim(std::uint64_t epoch) {
  std::vector<Retired> done;
  {
    std::lock_guard lock(retire_mu());
    auto& r = retired();
    for (auto it = r.begin(); it != r.end();) {
      if (it->epoch <= epoch) {
        done.push_back(std::move(*it));
        it = r.erase(it);
      } else {
        ++it;
      }
    }
    g_pending.store(!r.empty(), std::memory_order_relaxed);
  }
  // `done` is destroyed here, outside the lock: freeing code takes a while.
}

}  // namespace

CodeInUse::CodeInUse() {
  if (t_depth++ == 0) g_word.fetch_add(1, std::memory_order_seq_cst);
}

CodeInUse::~CodeInUse() {
  if (--t_depth != 0) return;
  const std::uint64_t before = g_word.fetch_sub(1, std::memory_order_seq_cst);
  if ((before & kCountMask) == 1 && g_pending.load(std::memory_order_relaxed)) reclaim(before >> 32);
}

std::uint64_t code_generation() { return g_generation.load(std::memory_order_acquire); }

void free_when_unused(std::shared_ptr<void> garbage) {
  std::lock_guard lock(retire_mu());
  // After this increment, a zero count means every thread counted now has left.
  const std::uint64_t epoch = (g_word.fetch_add(kEpochOne, std::memory_order_seq_cst) >> 32) + 1;
  retired().push_back({epoch, std::move(garbage)});
  g_pending.store(true, std::memory_order_relaxed);
}

void new_code_generation(const std::function<void(Garbage&)>& drop) {
  auto garbage = std::make_shared<Garbage>();
  {
    std::unique_lock lock(insert_mu());
    drop(*garbage);
    g_generation.fetch_add(1, std::memory_order_seq_cst);
  }
  free_when_unused(std::move(garbage));
  // Nobody inside: free now rather than at some later exit.
  if (t_depth == 0) {
    const std::uint64_t now = g_word.load(std::memory_order_seq_cst);
    if ((now & kCountMask) == 0) reclaim(now >> 32);
  }
}

bool insert_if_current(std::uint64_t gen, const std::function<void()>& insert) {
  std::shared_lock lock(insert_mu());
  if (g_generation.load(std::memory_order_acquire) != gen) return false;
  insert();
  return true;
}

}  // namespace tessel::cpujit
