// Lazy tensors whose value is not computed yet. Before memory is written in
// place, every pending tensor that reads it is realized first, so laziness
// never changes a result: `y = x * 2; x += 1;` leaves y at the old x * 2.
#pragma once

#include <memory>
#include <vector>

#include "codegen/ir.h"
#include "codegen/node_table.h"
#include "runtime/storage.h"

namespace tessel {

struct TensorImpl;

void register_pending(const std::shared_ptr<TensorImpl>& impl);
/// Registers `impl` if its value is still lazy.
void register_if_lazy(const std::shared_ptr<TensorImpl>& impl);

/// While one is alive on this thread, tensors made lazy are not registered.
/// An expression template's intermediate results are never visible to users,
/// and the graph of its root -- which the registry searches -- holds them, so
/// only the root needs registering (register_if_lazy, after the scope).
class DeferPendingScope {
 public:
  DeferPendingScope();
  ~DeferPendingScope();
  DeferPendingScope(const DeferPendingScope&) = delete;
  DeferPendingScope& operator=(const DeferPendingScope&) = delete;
  /// True inside a scope on this thread.
  static bool active();
};
/// Realizes every pending tensor whose graph reads `storage`.
void realize_readers_of(const Storage* storage);
/// Realizes every pending tensor whose graph reads one of `storages`, but for
/// those whose value is one of `except` (the values about to be written there).
void realize_readers_of(const std::vector<const Storage*>& storages, const ir::NodeTable& except);

class Tensor;
/// The pending (lazy, still held) tensors whose value is one of `nodes`.
std::vector<Tensor> pending_among(const ir::NodeTable& nodes);

}  // namespace tessel
