// Lazy tensors whose value is not computed yet. Before memory is written in
// place, every pending tensor that reads it is realized first, so laziness
// never changes a result: `y = x * 2; x += 1;` leaves y at the old x * 2.
#pragma once

#include <memory>

#include "runtime/storage.h"

namespace tessel {

struct TensorImpl;

void register_pending(const std::shared_ptr<TensorImpl>& impl);
/// Realizes every pending tensor whose graph reads `storage`.
void realize_readers_of(const Storage* storage);

}  // namespace tessel
