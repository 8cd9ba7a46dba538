#include "codegen/backend.h"

#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>

#include "runtime/errors.h"

namespace tessel {
namespace {
thread_local Backend* t_override = nullptr;
std::atomic<std::uint64_t> g_ref_realizations{0};

// The registered backends. They register from static initializers in other
// files, which run in no fixed order: the registry is made on first use, and
// `version` tells a cached choice that a backend registered after it.
struct Registry {
  std::mutex mu;
  std::vector<BackendInfo> backends;
  std::atomic<std::uint64_t> version{0};
};
Registry& registry() {
  static Registry* r = [] {
    detail::link_backends();  // so that a program linking this file links every backend
    return new Registry;      // never destroyed: threads may realize at exit
  }();
  return *r;
}

// The backend of device kind `kind` named `name`, else the highest-ranked one.
std::optional<BackendInfo> find_backend(Device::Kind kind, std::string_view name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> l(r.mu);
  std::optional<BackendInfo> best;
  for (const BackendInfo& b : r.backends) {
    if (b.device != kind) continue;
    if (!name.empty() && b.name == name) return b;
    if (!best || b.rank > best->rank) best = b;
  }
  return best;
}

// Copies `src` (same shape and dtype as dst) into dst's strided memory.
void strided_copy(const ir::BufferView& dst, const ir::BufferView& src, DType dt, const Shape& shape) {
  const int64_t es = static_cast<int64_t>(dtype_size(dt));
  if (shape.numel() == 0) return;
  // Merge dims both views walk contiguously (an optimizer step's whole
  // parameter becomes one memcpy), then copy the innermost run per row.
  std::vector<int64_t> dims, ds, ss;
  for (size_t i = 0; i < shape.dims.size(); ++i) {
    int64_t n = shape.dims[i];
    if (n == 1) continue;
    if (!dims.empty() && ds.back() == dst.strides[i] * n && ss.back() == src.strides[i] * n) {
      dims.back() *= n;
      ds.back() = dst.strides[i];
      ss.back() = src.strides[i];
    } else {
      dims.push_back(n);
      ds.push_back(dst.strides[i]);
      ss.push_back(src.strides[i]);
    }
  }
  if (dims.empty()) dims = {1}, ds = {1}, ss = {1};
  std::byte* d = dst.bytes(dt);
  const std::byte* s = src.bytes(dt);
  const size_t r = dims.size();
  const int64_t inner = dims[r - 1];
  const bool run = ds[r - 1] == 1 && ss[r - 1] == 1;
  std::vector<int64_t> idx(r - 1, 0);
  for (;;) {
    int64_t od = 0, os = 0;
    for (size_t i = 0; i + 1 < r; ++i) {
      od += idx[i] * ds[i];
      os += idx[i] * ss[i];
    }
    if (run) {
      std::memcpy(d + od * es, s + os * es, static_cast<size_t>(inner * es));
    } else {
      for (int64_t k = 0; k < inner; ++k)
        std::memcpy(d + (od + k * ds[r - 1]) * es, s + (os + k * ss[r - 1]) * es, static_cast<size_t>(es));
    }
    size_t i = r - 1;
    while (i-- > 0) {
      if (++idx[i] < dims[i]) break;
      idx[i] = 0;
    }
    if (i == static_cast<size_t>(-1)) return;
  }
}
}  // namespace

RefStats ref_stats() { return {g_ref_realizations.load(std::memory_order_relaxed)}; }
void detail::count_ref_realization() { g_ref_realizations.fetch_add(1, std::memory_order_relaxed); }

void register_backend(const BackendInfo& info) {
  Registry& r = registry();
  std::lock_guard<std::mutex> l(r.mu);
  r.backends.push_back(info);
  r.version.fetch_add(1, std::memory_order_release);
}

Backend& cpu_backend() {
  if (t_override) return *t_override;
  static const std::string choice = [] {
    const char* e = std::getenv("TESSEL_BACKEND");
    return std::string(e ? e : "");
  }();
  // Chosen once per thread, without a lock on later calls, and again once
  // another backend has registered: a realization made while static
  // initializers run may come before some backends have. Until a CPU backend
  // registers, the interpreter computes.
  struct Choice {
    std::uint64_t version = ~std::uint64_t{0};
    Backend* backend = nullptr;
  };
  thread_local Choice chosen;
  const std::uint64_t version = registry().version.load(std::memory_order_acquire);
  if (chosen.version != version) {
    std::optional<BackendInfo> b = find_backend(Device::Kind::cpu, choice);
    chosen = {version, b ? &b->get(0) : &ref_backend()};
  }
  return *chosen.backend;
}

Backend& backend_for(Device d) {
  if (d.is_cpu()) return cpu_backend();
  std::optional<BackendInfo> b = find_backend(d.kind, {});
  if (!b) throw InternalError(fmt::format("no backend computes on {} in this build of tessel", d.str()));
  return b->get(d.index);
}

void Backend::copy_into(const ir::BufferView& dst, const ir::BufferView& src, DType t, const Shape& s) {
  if (src.storage == dst.storage && src.offset == dst.offset && src.strides == dst.strides) return;  // x.copy_(x)
  if (src.storage == dst.storage) {  // overlapping: a row copied over would be read again
    ir::BufferView aside = host_dense(t, s);
    strided_copy(aside, src, t, s);
    strided_copy(dst, aside, t, s);
    return;
  }
  strided_copy(dst, src, t, s);
}

ir::BufferView Backend::transfer(const ir::BufferView& v, DType t, const Shape& s, Device from, Device to) {
  if (!from.is_cpu() || !to.is_cpu())
    throw InternalError(fmt::format("backend {}: transfer from {} to {} needs a device backend", name(), from.str(), to.str()));
  ir::BufferView out = host_dense(t, s);
  strided_copy(out, v, t, s);
  return out;
}

ir::BufferView transfer(const ir::BufferView& v, DType t, const Shape& s, Device from, Device to) {
  return backend_for(from.is_cpu() ? to : from).transfer(v, t, s, from, to);
}

BackendOverride::BackendOverride(Backend& b) : prev_(t_override) { t_override = &b; }
BackendOverride::~BackendOverride() { t_override = prev_; }

ir::BufferView host_dense(DType t, const Shape& s) {
  ir::BufferView v;
  v.storage = Storage::allocate(static_cast<size_t>(std::max<int64_t>(s.numel(), 1)) * dtype_size(t));
  v.strides = contiguous_strides(s);
  return v;
}

ir::BufferView eval_with_ref(const ir::Node& n, const std::vector<ir::BufferView>& args) {
  auto clone = std::make_shared<ir::Node>(n);
  clone->buffer.reset();
  for (size_t i = 0; i < n.args.size(); ++i) {
    auto leaf = std::make_shared<ir::Node>();
    leaf->op = ir::Op::Input;
    leaf->dtype = n.args[i]->dtype;
    leaf->shape = n.args[i]->shape;
    leaf->buffer = args[i];
    clone->args[i] = leaf;
  }
  clone->requires_grad = false;
  ref_backend().realize({clone}, false);
  return *clone->buffer;
}

}  // namespace tessel
