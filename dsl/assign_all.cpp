#include "dsl/assign_all.h"

#include <fmt/format.h>

#include "codegen/backend.h"
#include "codegen/movement.h"
#include "codegen/node_table.h"
#include "dsl/lazy_registry.h"
#include "runtime/storage.h"

namespace tessel {
namespace {

// Whether dst.assign_(v) is a plain write of memory: no autograd, no view
// that extends a graph, no broadcast or cast, dense destination.
bool plain_write(const Tensor& dst, const Tensor& v) {
  if (!dst.is_realized() || !(dst.device() == v.device()) || dst.dtype() != v.dtype() || !(dst.shape() == v.shape()))
    return false;
  if (grad_enabled() && (dst.requires_grad() || v.requires_grad())) return false;
  return ir::is_contiguous(dst.shape(), dst.buffer().strides);
}

}  // namespace

void assign_all_(const std::vector<Tensor>& dsts, std::vector<Tensor>&& values) {
  if (dsts.size() != values.size())
    throw ValueError(fmt::format("assign_all_: {} destinations but {} values; pass one value per destination",
                                 dsts.size(), values.size()));
  const size_t count = dsts.size();
  bool all_plain = true;
  for (size_t i = 0; i < count; ++i) {
    if (!dsts[i].defined() || !values[i].defined())
      throw ValueError(fmt::format("assign_all_: {} {} is an undefined tensor; give it a value first",
                                   dsts[i].defined() ? "value" : "destination", i));
    all_plain = all_plain && plain_write(dsts[i], values[i]);
  }
  if (!all_plain) {  // every value first, from the memory as it is, then assign_ each
    realize(values);
    for (size_t i = 0; i < count; ++i) dsts[i].assign_(values[i]);
    values.clear();
    return;
  }
  // Pending values go into one realization per device.
  ir::NodeTable refs;  // uses of each node inside the values' graphs
  std::vector<ir::NodePtr> roots;
  for (const Tensor& v : values) roots.push_back(v.node());
  for (ir::Node* n : ir::topo_order(roots))
    for (const auto& a : n->args) {
      const int* r = refs.find(a.get());
      refs.put(a.get(), r ? *r + 1 : 1);
    }
  roots.clear();  // holds no node from here on (use counts below)
  ir::NodeTable own;
  std::vector<const Storage*> storages;
  for (size_t i = 0; i < count; ++i) {
    own.put(values[i].node().get(), 1);
    storages.push_back(dsts[i].buffer().storage.get());
  }
  // Other lazy readers of the destinations see the old bytes.
  realize_readers_of(storages, own);
  std::vector<std::pair<Device, std::vector<size_t>>> groups;
  for (size_t i = 0; i < count; ++i) {
    auto g = std::find_if(groups.begin(), groups.end(), [&](auto& x) { return x.first == dsts[i].device(); });
    if (g == groups.end()) g = groups.insert(groups.end(), {dsts[i].device(), {}});
    if (!values[i].node()->realized()) g->second.push_back(i);
  }
  for (auto& [device, idx] : groups) {
    if (idx.empty()) continue;
    std::vector<ir::NodePtr> vs;
    std::vector<ir::BufferView> into;
    for (size_t i : idx) {
      const ir::NodePtr& n = values[i].node();
      // Only a value no one else can observe may become its destination's
      // memory: held by this one handle and read only inside these graphs.
      const int* uses = refs.find(n.get());
      const bool unshared = values[i].impl_ptr().use_count() == 1 && n.use_count() == 1 + (uses ? *uses : 0);
      vs.push_back(n);
      into.push_back(unshared ? dsts[i].buffer() : ir::BufferView{});
    }
    backend_for(device).realize_into(vs, into);
  }
  for (size_t i = 0; i < count; ++i) {
    const Tensor& dst = dsts[i];
    const ir::BufferView& d = dst.buffer();
    const ir::BufferView& v = *values[i].node()->buffer;
    if (!(v.storage == d.storage && v.offset == d.offset && v.strides == d.strides))
      backend_for(dst.device()).copy_into(d, v, dst.dtype(), dst.shape());
    ++dst.impl_ptr()->writes;
    d.storage->bump_version();
  }
  values.clear();
}

}  // namespace tessel
