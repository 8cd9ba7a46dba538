// NodeTable: an int per IR node for one graph walk (visited marks, positions
// in a topological order), with no allocation once its table has grown.
// Graph walks run on every realization and every backward; a hash map of
// nodes allocates per node and was a tenth of a training step's host time.
// clear() is O(1): a slot belongs to the current walk only when its
// generation is the table's. Not shared between threads: keep one per
// thread (thread_local) or per walk.
//
//   thread_local ir::NodeTable seen;
//   seen.clear();
//   if (!seen.find(n)) seen.put(n, 1);
#pragma once

#include <cstdint>
#include <vector>

namespace tessel::ir {

struct Node;

class NodeTable {
 public:
  /// Forgets every entry.
  void clear() {
    if (++generation_ == 0) {  // wrapped: old stamps could look current
      for (Slot& s : slots_) s.generation = 0;
      generation_ = 1;
    }
    size_ = 0;
  }
  /// The value stored for `n`, or nullptr.
  const int* find(const Node* n) const {
    if (slots_.empty()) return nullptr;
    for (size_t i = home(n);; i = (i + 1) & (slots_.size() - 1)) {
      const Slot& s = slots_[i];
      if (s.generation != generation_) return nullptr;
      if (s.node == n) return &s.value;
    }
  }
  int* find(const Node* n) { return const_cast<int*>(static_cast<const NodeTable&>(*this).find(n)); }
  /// Sets `n`'s value (inserting it when absent).
  void put(const Node* n, int value) {
    if (int* v = find(n)) {
      *v = value;
      return;
    }
    if (2 * (size_ + 1) > slots_.size()) grow();
    place(n, value);
    ++size_;
  }
  size_t size() const { return size_; }

 private:
  struct Slot {
    const Node* node = nullptr;
    int value = 0;
    uint32_t generation = 0;
  };
  // 512 bytes: under glibc's smallest "large" request, which would first
  // consolidate every freed small chunk.
  static constexpr size_t kFirstSlots = 32;
  std::vector<Slot> slots_;  // a power of two, at most half full
  uint32_t generation_ = 1;
  size_t size_ = 0;

  size_t home(const Node* n) const {
    uint64_t x = reinterpret_cast<uintptr_t>(n);
    x *= 0x9E3779B97F4A7C15ull;  // Fibonacci hashing: node addresses differ in their middle bits
    return static_cast<size_t>(x >> 32) & (slots_.size() - 1);
  }
  void place(const Node* n, int value) {
    size_t i = home(n);
    while (slots_[i].generation == generation_) i = (i + 1) & (slots_.size() - 1);
    slots_[i] = {n, value, generation_};
  }
  void grow() {
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.assign(old.empty() ? kFirstSlots : 2 * old.size(), Slot{});
    for (const Slot& s : old)
      if (s.generation == generation_) place(s.node, s.value);
  }
};

}  // namespace tessel::ir
