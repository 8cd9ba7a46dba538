#include "codegen/cuda/cuda_backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "codegen/cuda/cuda_emitter.h"
#include "codegen/executor.h"
#include "codegen/schedule.h"
#include "runtime/cuda/device_allocator.h"
#include "runtime/cuda/driver.h"
#include "runtime/cuda/nvrtc.h"
#include "runtime/errors.h"
#include "runtime/kernel_cache.h"
#include "runtime/precompiled_kernels.h"
#include "runtime/storage.h"
#include "tessel/config.h"

namespace tessel {

using ir::BufferView;
using ir::Node;
using ir::Op;

// ------------------------------------------------------------ the step loop

namespace cudagen {

BufferView ref_eval(const Node& n, const std::vector<BufferView>& args) {
  // A clone over leaves holding the values, so the real node keeps its laziness.
  auto clone = std::make_shared<Node>(n);
  clone->buffer.reset();
  for (size_t i = 0; i < n.args.size(); ++i) {
    auto leaf = std::make_shared<Node>();
    leaf->op = Op::Input;
    leaf->dtype = n.args[i]->dtype;
    leaf->shape = n.args[i]->shape;
    leaf->buffer = args[i];
    clone->args[i] = leaf;
  }
  clone->requires_grad = false;
  ref_backend().realize({clone}, false);
  return *clone->buffer;
}

void realize_steps(Executor& ex, const std::vector<ir::NodePtr>& roots, bool keep_grad_values) {
  sched::Schedule S = sched::schedule(roots, {16, keep_grad_values});
  exec::run_schedule(ex, roots, S, keep_grad_values);
}

}  // namespace cudagen

// ------------------------------------------------------------ the device

namespace {

std::mutex g_stats_mu;
CudaStats g_stats;
void bump(std::uint64_t CudaStats::*field) {
  std::lock_guard<std::mutex> l(g_stats_mu);
  ++(g_stats.*field);
}

bool is_dense(const Shape& s, const Strides& st) {
  int64_t expect = 1;
  for (size_t i = s.dims.size(); i-- > 0;) {
    if (s.dims[i] != 1 && st[i] != expect) return false;
    expect *= s.dims[i];
  }
  return true;
}

size_t bytes_of(DType t, const Shape& s) { return static_cast<size_t>(std::max<int64_t>(s.numel(), 0)) * dtype_size(t); }

BufferView alloc_on(Device d, DType t, const Shape& s) {
  BufferView v;
  v.storage = Storage::allocate(std::max<size_t>(bytes_of(t, s), dtype_size(t)), d);
  v.strides = contiguous_strides(s);
  return v;
}

struct Loaded {
  cuda::Module module;
  cuda::CUfunction fn = nullptr;
};

struct DeviceState {
  int ordinal = 0;
  int arch = 0;          // the device's
  int target_arch = 0;   // what NVRTC compiles for
  bool cubin = false;    // CUBIN when NVRTC knows the device's arch, else PTX the driver JITs
  unsigned max_blocks = 0;
  std::mutex mu;
  std::unordered_map<std::string, std::unique_ptr<Loaded>> kernels;  // kernel text -> loaded
};

DeviceState& device_state(int ordinal) {
  static std::mutex mu;
  static std::unordered_map<int, std::unique_ptr<DeviceState>> states;
  std::lock_guard<std::mutex> l(mu);
  auto& s = states[ordinal];
  if (!s) {
    s = std::make_unique<DeviceState>();
    s->ordinal = ordinal;
    cuda::DeviceProperties p = cuda::device_properties(ordinal);
    s->arch = p.arch();
    s->max_blocks = static_cast<unsigned>(std::max(p.multiprocessors, 1) * 32);
    std::vector<int> archs = cuda::nvrtc_supported_archs();
    int best = 0;
    for (int a : archs)
      if (a <= s->arch) best = std::max(best, a);
    s->cubin = std::find(archs.begin(), archs.end(), s->arch) != archs.end();
    s->target_arch = s->cubin ? s->arch : best;
    if (s->target_arch == 0)
      throw CompileError(fmt::format("NVRTC {} cannot target {} (compute capability {}.{})", cuda::nvrtc_version(),
                                     p.name, p.cc_major, p.cc_minor));
  }
  return *s;
}

cuda::CUfunction compiled(DeviceState& ds, const kir::Kernel& k) {
  std::string text = k.text();
  std::lock_guard<std::mutex> l(ds.mu);
  if (auto it = ds.kernels.find(text); it != ds.kernels.end()) return it->second->fn;
  // Kernels linked in ahead of time (codegen/aot) come first; with TESSEL_JIT=off nothing else may.
  if (const precompiled::Entry* pk = precompiled::find(text)) {
    if (const precompiled::CudaImage* img = precompiled::best_cuda_image(*pk, ds.arch); img && !pk->cuda_name.empty()) {
      auto loaded = std::make_unique<Loaded>();
      loaded->module = img->cubin ? cuda::Module::load_cubin(ds.ordinal, std::span<const char>(img->data, img->size))
                                  : cuda::Module::load_ptx(ds.ordinal, std::string_view(img->data, img->size));
      loaded->fn = loaded->module.function(std::string(pk->cuda_name).c_str());
      precompiled::note_hit(true);
      cuda::CUfunction fn = loaded->fn;
      ds.kernels.emplace(std::move(text), std::move(loaded));
      return fn;
    }
  }
  if (precompiled::jit_disabled()) precompiled::throw_jit_disabled("cuda", text);
  cudagen::CudaSource src = cudagen::emit_cuda(k);
  cuda::CompileOptions opts;
  opts.arch = ds.target_arch;
  opts.cubin = ds.cubin;
  std::string flags;
  for (const std::string& f : cuda::compile_flags(opts)) flags += f + ";";
  KernelKey key = make_key(src.source, flags, std::string("NVRTC ") + cuda::nvrtc_version() + " tessel " + TESSEL_VERSION,
                           fmt::format("{}_{}", opts.cubin ? "sm" : "compute", opts.arch));
  CacheOrigin origin = CacheOrigin::memory;
  double ms = 0;
  auto image = KernelCache::global().get_or_compile(key, [&] {
    cuda::CompiledKernel ck = cuda::compile(src.source, src.name, opts);
    ms = ck.compile_ms;
    if (opts.cubin) return ck.cubin;
    std::vector<char> ptx(ck.ptx.begin(), ck.ptx.end());
    ptx.push_back('\0');
    return ptx;
  }, &origin);
  {
    std::lock_guard<std::mutex> sl(g_stats_mu);
    if (origin == CacheOrigin::compiled) {
      ++g_stats.kernels_compiled;
      g_stats.compile_ms += ms;
    } else if (origin == CacheOrigin::disk) {
      ++g_stats.kernels_from_disk;
    }
  }
  if (detail::trace_enabled("jit"))
    detail::trace_line("jit", fmt::format("cuda kernel {} for {}_{}: {} ({:.2f} ms)", src.name, opts.cubin ? "sm" : "compute",
                                          opts.arch, origin == CacheOrigin::compiled ? "compiled" : origin == CacheOrigin::disk ? "from disk cache" : "in memory", ms));
  auto loaded = std::make_unique<Loaded>();
  loaded->module = opts.cubin ? cuda::Module::load_cubin(ds.ordinal, std::span<const char>(image->data(), image->size()))
                              : cuda::Module::load_ptx(ds.ordinal, std::string_view(image->data()));
  loaded->fn = loaded->module.function(src.name.c_str());
  cuda::CUfunction fn = loaded->fn;
  ds.kernels.emplace(std::move(text), std::move(loaded));
  return fn;
}

// Pinned host memory for staging copies, grown on demand; one at a time.
struct Staging {
  std::mutex mu;
  void* ptr = nullptr;
  size_t size = 0;
  void* get(size_t n) {
    if (n > size) {
      if (ptr) cuda::host_free_pinned(ptr);
      ptr = cuda::host_alloc_pinned(n);
      size = n;
    }
    return ptr;
  }
};
Staging& staging() {
  static Staging s;
  return s;
}

// Gathers a strided host view into dense `dst`.
void host_gather(std::byte* dst, const BufferView& v, DType t, const Shape& s) {
  const size_t es = dtype_size(t);
  const int64_t n = s.numel();
  if (n <= 0) return;
  if (is_dense(s, v.strides)) {
    std::memcpy(dst, v.bytes(t), static_cast<size_t>(n) * es);
    return;
  }
  std::vector<int64_t> idx(s.dims.size(), 0);
  const std::byte* base = v.bytes(t);
  for (int64_t k = 0; k < n; ++k) {
    int64_t off = 0;
    for (size_t i = 0; i < idx.size(); ++i) off += idx[i] * v.strides[i];
    std::memcpy(dst + static_cast<size_t>(k) * es, base + off * static_cast<int64_t>(es), es);
    for (size_t i = idx.size(); i-- > 0;) {
      if (++idx[i] < s.dims[i]) break;
      idx[i] = 0;
    }
  }
}

class DeviceExecutor final : public cudagen::Executor {
 public:
  explicit DeviceExecutor(int ordinal) : ds_(device_state(ordinal)), dev_(gpu(ordinal)) {}

  BufferView alloc(DType t, const Shape& s) override { return alloc_on(dev_, t, s); }

  void launch(const lower::Lowered& l) override {
    cudagen::LaunchShape shape = cudagen::launch_shape(l.kernel, l.args, ds_.max_blocks);
    if (shape.empty) return;
    cuda::CUfunction fn = compiled(ds_, l.kernel);
    std::vector<const void*> bufs;
    for (const BufferView& v : l.buffers) bufs.push_back(v.storage->data());
    std::vector<std::byte> packed = cudagen::pack_args(l.kernel, bufs, l.args);
    void* params[] = {packed.data()};
    cuda::launch_kernel(fn, {shape.grid}, {shape.block_x, shape.block_y}, 0, nullptr, params);
    bump(&CudaStats::kernels_launched);
  }

  BufferView host_eval(const Node& n, const std::vector<BufferView>& args) override {
    std::vector<BufferView> host;
    for (size_t i = 0; i < args.size(); ++i)
      host.push_back(copy_between_devices(args[i], n.args[i]->dtype, n.args[i]->shape, dev_, cpu()));
    BufferView r = cudagen::ref_eval(n, host);
    bump(&CudaStats::host_evals);
    return copy_between_devices(r, n.dtype, n.shape, cpu(), dev_);
  }

 private:
  DeviceState& ds_;
  Device dev_;
};

// A dense device copy of a strided device view (a copy kernel), or the view itself.
BufferView dense_on_device(const BufferView& v, DType t, const Shape& s, int ordinal) {
  if (is_dense(s, v.strides)) return v;
  DeviceExecutor ex(ordinal);
  BufferView out = ex.alloc(t, s);
  lower::Lowered l = lower::lower_copy(t, s, v, out);
  lower::coalesce(l);
  ex.launch(l);
  return out;
}

void* hook_allocate(size_t nbytes, int device) {
  return reinterpret_cast<void*>(cuda::device_allocator(device).allocate(nbytes, nullptr));
}
void hook_free(void* p, size_t, int device) {
  cuda::device_allocator(device).deallocate(reinterpret_cast<cuda::CUdeviceptr>(p));
}

cuda::CUdeviceptr dptr(const BufferView& v, DType t) { return reinterpret_cast<cuda::CUdeviceptr>(v.bytes(t)); }

}  // namespace

CudaStats cuda_stats() {
  std::lock_guard<std::mutex> l(g_stats_mu);
  return g_stats;
}

void install_cuda_storage_hooks() {
  static const bool once = [] {
    set_device_memory_hooks({&hook_allocate, &hook_free});
    return true;
  }();
  (void)once;
}

void cuda_realize(int device, const std::vector<ir::NodePtr>& roots, bool keep_grad_values) {
  check_device_exists(gpu(device));
  if (!cuda::nvrtc_available())
    throw CompileError(fmt::format("cannot compute on cuda:{}: this build of tessel has no NVRTC", device));
  install_cuda_storage_hooks();
  cuda::set_device(device);
  bump(&CudaStats::realizations);
  DeviceExecutor ex(device);
  cudagen::realize_steps(ex, roots, keep_grad_values);
}

BufferView copy_between_devices(const BufferView& v, DType t, const Shape& s, Device from, Device to) {
  const size_t n = bytes_of(t, s);
  if (from.is_cpu() && to.is_cpu()) {
    BufferView out = alloc_on(to, t, s);
    host_gather(static_cast<std::byte*>(out.storage->data()), v, t, s);
    return out;
  }
  install_cuda_storage_hooks();
  if (from.is_cpu()) {  // host -> device through pinned staging
    check_device_exists(to);
    cuda::set_device(to.index);
    BufferView out = alloc_on(to, t, s);
    if (n == 0) return out;
    std::lock_guard<std::mutex> l(staging().mu);
    auto* stage = static_cast<std::byte*>(staging().get(n));
    host_gather(stage, v, t, s);
    cuda::memcpy_htod_async(dptr(out, t), stage, n, nullptr);
    cuda::stream_synchronize(nullptr);  // the staging buffer is reused by the next copy
    return out;
  }
  check_device_exists(from);
  cuda::set_device(from.index);
  BufferView src = dense_on_device(v, t, s, from.index);
  if (to.is_cpu()) {  // device -> host through pinned staging
    BufferView out = alloc_on(to, t, s);
    if (n == 0) return out;
    std::lock_guard<std::mutex> l(staging().mu);
    auto* stage = static_cast<std::byte*>(staging().get(n));
    cuda::memcpy_dtoh_async(stage, dptr(src, t), n, nullptr);
    cuda::stream_synchronize(nullptr);
    std::memcpy(out.storage->data(), stage, n);
    return out;
  }
  check_device_exists(to);
  BufferView out = alloc_on(to, t, s);
  if (n == 0) return out;
  if (from == to) {
    cuda::memcpy_dtod_async(dptr(out, t), dptr(src, t), n, nullptr);
  } else {
    cuda::memcpy_peer_async(dptr(out, t), to.index, dptr(src, t), from.index, n, nullptr);
  }
  cuda::stream_synchronize(nullptr);
  return out;
}

}  // namespace tessel

namespace tessel {
namespace {
// Storage on GPUs works from the start (empty(s, gpu(0)) needs no computation first).
const bool g_hooks_installed = (install_cuda_storage_hooks(), true);
}  // namespace
}  // namespace tessel
