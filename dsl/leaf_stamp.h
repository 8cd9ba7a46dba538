// The `auto` trap of expression templates, guarded. An expression object
// (`auto y = x * 2;`) holds its leaves, not their values: evaluated after a
// leaf was written in place, it would read the new values, where
// `Tensor y = x * 2;` read the old ones. Each tensor leaf records what it held
// when the tree was built (the handle's write count and, when realized, its
// memory's version); evaluating the tree after either changed is a
// ValueError that says to store the expression in a Tensor instead.
//
//   Tensor x = ones({2});
//   auto y = x * 2;   // an expression object
//   x += 1;
//   Tensor(y);        // ValueError: ... written in place after the expression was built ...
#pragma once

#include <cstdint>

#include "dsl/tensor.h"

namespace tessel {

class Storage;

struct LeafStamp {
  uint64_t writes = 0;              // in-place writes through the leaf's handle
  const Storage* storage = nullptr;  // its memory, when it was realized then
  uint64_t version = 0;             // that memory's version then

  /// What `t` holds now (reads fields only: evaluates nothing).
  static LeafStamp of(const Tensor& t) noexcept {
    LeafStamp s;
    const TensorImpl* impl = t.impl_ptr().get();
    if (!impl) return s;
    s.writes = impl->writes;
    if (impl->node && impl->node->realized() && impl->node->buffer->storage) {
      s.storage = impl->node->buffer->storage.get();
      s.version = s.storage->version();
    }
    return s;
  }
  /// ValueError naming the leaf when `t` was written since this stamp.
  void check(const Tensor& t) const {
    const TensorImpl* impl = t.impl_ptr().get();
    if (!impl) return;
    if (impl->writes != writes || (storage && storage->version() != version)) throw_written(t);
  }

 private:
  [[noreturn]] static void throw_written(const Tensor& t);
};

}  // namespace tessel
