#include "codegen/backend.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "codegen/cpu/cpu_backend.h"
#include "runtime/errors.h"

namespace tessel {
namespace {
Backend* g_compiled_cpu = nullptr;
thread_local Backend* t_override = nullptr;
std::atomic<std::uint64_t> g_ref_realizations{0};
}  // namespace

RefStats ref_stats() { return {g_ref_realizations.load(std::memory_order_relaxed)}; }
void detail::count_ref_realization() { g_ref_realizations.fetch_add(1, std::memory_order_relaxed); }

void register_cpu_backend(Backend* b) { g_compiled_cpu = b; }

Backend& cpu_backend() {
  if (t_override) return *t_override;
  static const std::string choice = [] {
    const char* e = std::getenv("TESSEL_BACKEND");
    return std::string(e ? e : "");
  }();
  // Referencing the compiled backend links it in (it registers itself at
  // start-up); null in a build without LLVM.
  static Backend* const compiled = cpu_jit_backend();
  if (!g_compiled_cpu) g_compiled_cpu = compiled;
  if (choice == "ref" || !g_compiled_cpu) return ref_backend();
  return *g_compiled_cpu;
  return *g_compiled_cpu;
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
