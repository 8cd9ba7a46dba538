#include "codegen/cuda/cuda_backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "codegen/blas/gemm.h"
#include "codegen/cuda/attention_kernels.h"
#include "codegen/cuda/cuda_emitter.h"
#include "codegen/cuda/cudnn_conv.h"
#include "codegen/cuda/device_kernels.h"
#include "codegen/executor.h"
#include "codegen/kernel_ir_verifier.h"
#include "codegen/schedule.h"
#include "runtime/cuda/cublas.h"
#include "runtime/cuda/device_allocator.h"
#include "runtime/cuda/driver.h"
#include "runtime/cuda/nvrtc.h"
#include "runtime/errors.h"
#include "runtime/kernel_cache.h"
#include "runtime/precompiled_kernels.h"
#include "runtime/storage.h"
#include "runtime/trace.h"
#include "tessel/config.h"

namespace tessel {

using ir::BufferView;
using ir::Node;
using ir::Op;

// ------------------------------------------------------------ the step loop

namespace cudagen {


void realize_steps(Executor& ex, const std::vector<ir::NodePtr>& roots, bool keep_grad_values) {
  sched::Schedule S = sched::schedule(roots, {16, keep_grad_values});
  exec::run_schedule(ex, roots, S, keep_grad_values);
}

void copy_into(Executor& ex, const BufferView& dst, const BufferView& src, DType t, const Shape& s) {
  if (s.numel() <= 0) return;
  BufferView from = src;
  if (src.storage == dst.storage) {
    if (src.offset == dst.offset && src.strides == dst.strides) return;  // x.copy_(x)
    // Threads would read elements others already overwrote.
    from = exec::dense_copy(ex, t, s, src);
  }
  lower::Lowered l = lower::lower_copy(t, s, from, dst);
  kir::check_lowering(l);
  lower::coalesce(l);
  ex.launch(l);
}

std::optional<BlasEpilogue> blas_epilogue(const lower::Lowered& epi, const BufferView& product) {
  const kir::Kernel& k = epi.kernel;
  if (k.reduce != kir::ReduceKind::None || k.rank != 2 || k.value < 0 || epi.args.size() != k.num_args()) return {};
  const DType t = k.params[0].dtype;
  const int64_t M = epi.args[0], N = epi.args[1];
  // Does slot `slot` (0: the store) walk [M, N] with these strides?
  auto walks = [&](int slot, int64_t row, int64_t col) {
    const size_t b = k.slot_base(slot);
    return (M == 1 || epi.args[b + 1] == row) && (N == 1 || epi.args[b + 2] == col);
  };
  if (!walks(0, N, 1)) return {};
  auto stmt = [&](int i) -> const kir::Stmt& { return k.body[static_cast<size_t>(i)]; };
  auto load_of = [&](const kir::Stmt& st) -> const BufferView* {
    if (st.kind != kir::StmtKind::Load || st.dtype != t) return nullptr;
    const int p = k.load_params[static_cast<size_t>(st.slot)];
    return k.params[static_cast<size_t>(p)].dtype == t ? &epi.buffers[static_cast<size_t>(p)] : nullptr;
  };
  auto is_product = [&](const kir::Stmt& st) {
    const BufferView* v = load_of(st);
    return v && v->storage == product.storage && epi.args[k.slot_base(st.slot + 1)] == product.offset &&
           walks(st.slot + 1, N, 1);
  };
  auto is_bias = [&](const kir::Stmt& st) {
    const BufferView* v = load_of(st);
    return v && v->storage != product.storage && walks(st.slot + 1, 0, 1);
  };
  const kir::Stmt* v = &stmt(k.value);
  if (v->dtype != t) return {};
  bool relu = false;
  if (v->kind == kir::StmtKind::Op && v->op == Op::Relu) {
    relu = true;
    v = &stmt(v->args[0]);
  }
  if (is_product(*v)) {
    if (!relu) return {};  // a plain copy is no epilogue
    return BlasEpilogue{cuda::GemmEpilogue::relu, {}};
  }
  if (v->kind != kir::StmtKind::Op || v->op != Op::Add || v->dtype != t) return {};
  const kir::Stmt &x = stmt(v->args[0]), &y = stmt(v->args[1]);
  const kir::Stmt* b = is_product(x) && is_bias(y) ? &y : is_product(y) && is_bias(x) ? &x : nullptr;
  if (!b) return {};
  BufferView bias = *load_of(*b);
  bias.offset = epi.args[k.slot_base(b->slot + 1)];
  bias.strides = {1};
  return BlasEpilogue{relu ? cuda::GemmEpilogue::bias_relu : cuda::GemmEpilogue::bias, std::move(bias)};
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
  // The variants (cuda_emitter.h); null where the module lacks them (an
  // ahead-of-time image older than they are): then only the plain kernel runs.
  cuda::CUfunction vec = nullptr, part = nullptr, fin = nullptr;

  void resolve(const std::string& name, const kir::Kernel& k) {
    fn = module.function(name.c_str());
    auto optional = [&](cudagen::Variant v) -> cuda::CUfunction {
      try {
        return module.function(cudagen::variant_name(name, v).c_str());
      } catch (const DeviceError&) {
        return nullptr;
      }
    };
    for (cudagen::Variant v : cudagen::variants(k)) {
      if (v == cudagen::Variant::vector) vec = optional(v);
      if (v == cudagen::Variant::partial) part = optional(v);
      if (v == cudagen::Variant::finish) fin = optional(v);
    }
    if (!part || !fin) part = fin = nullptr;
  }
};

struct DeviceState {
  int ordinal = 0;
  int arch = 0;          // the device's
  int target_arch = 0;   // what NVRTC compiles for
  bool cubin = false;    // CUBIN when NVRTC knows the device's arch, else PTX the driver JITs
  unsigned max_blocks = 0;
  std::mutex mu;
  std::unordered_map<std::string, std::unique_ptr<Loaded>> kernels;  // kernel text -> loaded
  // Sources of the other engines (attention), by their canonical text.
  std::unordered_map<std::string, std::unique_ptr<cuda::Module>> sources;
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

// NVRTC's image of `src` for the device's target (memory, then disk kernel
// cache, then a compile), counted in the stats; loaded as a module.
cuda::Module compile_and_load(const DeviceState& ds, const std::string& source, const std::string& name) {
  cuda::CompileOptions opts;
  opts.arch = ds.target_arch;
  opts.cubin = ds.cubin;
  std::string flags;
  for (const std::string& f : cuda::compile_flags(opts)) flags += f + ";";
  KernelKey key = make_key(source, flags, std::string("NVRTC ") + cuda::nvrtc_version() + " tessel " + TESSEL_VERSION,
                           fmt::format("{}_{}", opts.cubin ? "sm" : "compute", opts.arch));
  CacheOrigin origin = CacheOrigin::memory;
  double ms = 0;
  auto image = KernelCache::global().get_or_compile(key, [&] {
    cuda::CompiledKernel ck = cuda::compile(source, name, opts);
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
    detail::trace_line("jit", fmt::format("cuda kernel {} for {}_{}: {} ({:.2f} ms)", name, opts.cubin ? "sm" : "compute",
                                          opts.arch, origin == CacheOrigin::compiled ? "compiled" : origin == CacheOrigin::disk ? "from disk cache" : "in memory", ms));
  return opts.cubin ? cuda::Module::load_cubin(ds.ordinal, std::span<const char>(image->data(), image->size()))
                    : cuda::Module::load_ptx(ds.ordinal, std::string_view(image->data()));
}

// The module of a precompiled entry for `text` (codegen/aot), if one has an image for this device.
std::optional<cuda::Module> load_precompiled(const DeviceState& ds, std::string_view text, std::string* name) {
  const precompiled::Entry* pk = precompiled::find(text);
  if (!pk) return std::nullopt;
  const precompiled::CudaImage* img = precompiled::best_cuda_image(*pk, ds.arch);
  if (!img || pk->cuda_name.empty()) return std::nullopt;
  *name = std::string(pk->cuda_name);
  precompiled::note_hit(true);
  return img->cubin ? cuda::Module::load_cubin(ds.ordinal, std::span<const char>(img->data, img->size))
                    : cuda::Module::load_ptx(ds.ordinal, std::string_view(img->data, img->size));
}

const Loaded& compiled(DeviceState& ds, const kir::Kernel& k) {
  std::string text = k.text();
  std::lock_guard<std::mutex> l(ds.mu);
  if (auto it = ds.kernels.find(text); it != ds.kernels.end()) return *it->second;
  // Kernels linked in ahead of time (codegen/aot) come first; with TESSEL_JIT=off nothing else may.
  std::string pk_name;
  if (std::optional<cuda::Module> m = load_precompiled(ds, text, &pk_name)) {
    auto loaded = std::make_unique<Loaded>();
    loaded->module = std::move(*m);
    loaded->resolve(pk_name, k);
    return *ds.kernels.emplace(std::move(text), std::move(loaded)).first->second;
  }
  if (precompiled::jit_disabled()) precompiled::throw_jit_disabled("cuda", text);
  cudagen::CudaSource src = cudagen::emit_cuda(k);
  auto loaded = std::make_unique<Loaded>();
  loaded->module = compile_and_load(ds, src.source, src.name);
  loaded->resolve(src.name, k);
  return *ds.kernels.emplace(std::move(text), std::move(loaded)).first->second;
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

cuda::CUdeviceptr dptr(const BufferView& v, DType t) { return reinterpret_cast<cuda::CUdeviceptr>(v.bytes(t)); }

class DeviceExecutor final : public cudagen::Executor {
 public:
  explicit DeviceExecutor(int ordinal) : ds_(device_state(ordinal)), dev_(gpu(ordinal)) {}

  BufferView alloc(DType t, const Shape& s) override { return alloc_on(dev_, t, s); }

  void launch(const lower::Lowered& l) override {
    std::vector<const void*> bufs;
    for (const BufferView& v : l.buffers) bufs.push_back(v.storage->data());
    cudagen::LaunchLimits limits{.max_blocks = ds_.max_blocks};
    cudagen::LaunchShape shape = cudagen::launch_shape(l.kernel, l.args, bufs, limits);
    if (shape.empty) return;
    const Loaded& k = compiled(ds_, l.kernel);
    if ((shape.vector > 1 && !k.vec) || (shape.splits > 1 && !(k.part && k.fin)))
      shape = cudagen::launch_shape(l.kernel, l.args, ds_.max_blocks);  // a module without the variants
    std::vector<std::byte> packed = cudagen::pack_args(l.kernel, bufs, l.args);
    if (shape.splits > 1) {
      // Partials in the accumulator dtype (8 bytes), stream-ordered: the
      // allocator hands the block out again only to later work on this stream.
      cuda::CachingDeviceAllocator& alloc = cuda::device_allocator(ds_.ordinal);
      cuda::CUdeviceptr partials = alloc.allocate(static_cast<size_t>(shape.partials) * 8, nullptr);
      int64_t splits = shape.splits;
      void* params[] = {packed.data(), &partials, &splits};
      try {
        cuda::launch_kernel(k.part, {shape.grid}, {shape.block_x, 1}, 0, nullptr, params);
        cuda::launch_kernel(k.fin, {shape.finish_grid}, {shape.finish_block, 1}, 0, nullptr, params);
      } catch (...) {
        alloc.deallocate(partials);
        throw;
      }
      alloc.deallocate(partials);
      bump(&CudaStats::split_launches);
    } else {
      void* params[] = {packed.data()};
      cuda::launch_kernel(shape.vector > 1 ? k.vec : k.fn, {shape.grid}, {shape.block_x, shape.block_y}, 0, nullptr,
                          params);
      if (shape.vector > 1) bump(&CudaStats::vector_launches);
    }
    bump(&CudaStats::kernels_launched);
  }

  BufferView host_eval(const Node& n, const std::vector<BufferView>& args) override {
    std::vector<BufferView> host;
    for (size_t i = 0; i < args.size(); ++i)
      host.push_back(copy_between_devices(args[i], n.args[i]->dtype, n.args[i]->shape, dev_, cpu()));
    BufferView r = eval_with_ref(n, host);
    bump(&CudaStats::host_evals);
    return copy_between_devices(r, n.dtype, n.shape, cpu(), dev_);
  }

  BufferView matmul(const Node& n, const std::vector<BufferView>& args) override {
    if (!on_blas(n)) return host_eval(n, args);
    BufferView out = alloc(n.dtype, n.shape);
    blas_product(n, args, out, cuda::GemmEpilogue::none, 0);
    return out;
  }

  // f32/f64 convolutions on cuDNN; other dtypes, and problems it has no
  // algorithm for, by the ref loops on the host.
  BufferView conv(const Node& n, const std::vector<BufferView>& args) override {
    if (!cudagen::conv_on_cudnn(ds_.ordinal, n)) return host_eval(n, args);
    BufferView out = cudagen::cudnn_conv(*this, ds_.ordinal, n, args);
    bump(&CudaStats::cudnn_convs);
    return out;
  }

  // Attention and AttentionGrad on the generated attention kernels
  // (codegen/cuda/attention_kernels.h); builders make them f32 or f64.
  BufferView attention(const Node& n, const std::vector<BufferView>& args) override {
    if (n.dtype != DType::f32 && n.dtype != DType::f64) return host_eval(n, args);
    return cudagen::attention_on_device(*this, ds_.ordinal, n, args);
  }

  void matmul_epilogue(const Node& mm, const std::vector<BufferView>& args, const BufferView& out,
                       const lower::Lowered& epi, const Node& epi_node) override {
    if (!on_blas(mm)) {
      exec::StepExecutor::matmul_epilogue(mm, args, out, epi, epi_node);  // product on the host
      return;
    }
    // cuBLASLt writes the epilogue's result straight into its buffer and the
    // product itself nowhere: only where nothing (backward) may read the
    // product later. Its ReLU maps NaN to 0 where tessel's keeps NaN.
    if (std::optional<cudagen::BlasEpilogue> e = cudagen::blas_epilogue(epi, out); e && !mm.requires_grad) {
      const cuda::CUdeviceptr bias = e->bias.storage ? dptr(e->bias, mm.dtype) : 0;
      blas_product(mm, args, epi.buffers[0], e->kind, bias);
      return;
    }
    blas_product(mm, args, out, cuda::GemmEpilogue::none, 0);
    launch(epi);
  }

 private:
  DeviceState& ds_;
  Device dev_;

  // Whether `n` runs on cuBLASLt: f32/f64 with something to sum, and the library there.
  static bool on_blas(const Node& n) {
    if (n.dtype != DType::f32 && n.dtype != DType::f64) return false;
    const Shape& sa = n.args[0]->shape;
    if (sa.dims.back() < 1) return false;
    if (cuda::cublaslt_available()) return true;
    static std::once_flag once;
    std::call_once(once, [] {
      if (detail::trace_enabled("jit"))
        detail::trace_line("jit", "cuda matmuls run on the host: " + cuda::cublaslt_unavailable_reason());
    });
    return false;
  }

  // C = epilogue(A @ B) for each batch element, into dense `c`.
  void blas_product(const Node& n, std::vector<BufferView> args, const BufferView& c, cuda::GemmEpilogue e,
                    cuda::CUdeviceptr bias) {
    const DType t = n.dtype;
    const size_t R = n.shape.dims.size();
    const int64_t M = n.shape.dims[R - 2], N = n.shape.dims[R - 1], K = n.args[0]->shape.dims[R - 1];
    std::optional<gemm::Operand> op[2];
    for (size_t i = 0; i < 2; ++i) {
      op[i] = gemm::operand(n.args[i]->shape, args[i]);
      if (!op[i]) {  // neither axis contiguous: a dense copy, by a kernel
        args[i] = exec::dense_copy(*this, t, n.args[i]->shape, args[i]);
        op[i] = gemm::operand(n.args[i]->shape, args[i]);
      }
    }
    const int64_t es = static_cast<int64_t>(dtype_size(t));
    const auto base_a = dptr(args[0], t), base_b = dptr(args[1], t), base_c = dptr(c, t);
    // Batch elements in row-major order; operands step by their batch strides (0 where broadcast).
    int64_t batches = 1;
    for (size_t d = 0; d + 2 < R; ++d) batches *= n.shape.dims[d];
    std::vector<int64_t> idx(R - 2, 0);
    for (int64_t bi = 0; bi < batches; ++bi) {
      int64_t oa = 0, ob = 0;
      for (size_t d = 0; d < idx.size(); ++d) {
        oa += idx[d] * args[0].strides[d];
        ob += idx[d] * args[1].strides[d];
      }
      cuda::gemm(ds_.ordinal, nullptr, t, M, N, K, {base_a + static_cast<cuda::CUdeviceptr>(oa * es), op[0]->ld, op[0]->trans},
                 {base_b + static_cast<cuda::CUdeviceptr>(ob * es), op[1]->ld, op[1]->trans},
                 base_c + static_cast<cuda::CUdeviceptr>(bi * M * N * es), N, e, bias);
      bump(&CudaStats::blas_matmuls);
      if (e != cuda::GemmEpilogue::none) bump(&CudaStats::blas_epilogues);
      for (size_t d = idx.size(); d-- > 0;) {
        if (++idx[d] < n.shape.dims[d]) break;
        idx[d] = 0;
      }
    }
  }
};

// A dense device copy of a strided device view (a copy kernel), or the view itself.
BufferView dense_on_device(const BufferView& v, DType t, const Shape& s, int ordinal) {
  if (is_dense(s, v.strides)) return v;
  DeviceExecutor ex(ordinal);
  BufferView out = ex.alloc(t, s);
  lower::Lowered l = lower::lower_copy(t, s, v, out);
  kir::check_lowering(l);
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


}  // namespace

namespace cudagen::detail {

const cuda::Module& load_source(int ordinal, std::string_view text, const std::string& source, const std::string& name) {
  DeviceState& ds = device_state(ordinal);
  std::lock_guard<std::mutex> l(ds.mu);
  if (auto it = ds.sources.find(std::string(text)); it != ds.sources.end()) return *it->second;
  std::string pk_name;
  std::optional<cuda::Module> m = load_precompiled(ds, text, &pk_name);
  if (!m) {
    if (precompiled::jit_disabled()) precompiled::throw_jit_disabled("cuda", text);
    m = compile_and_load(ds, source, name);
  }
  return *ds.sources.emplace(std::string(text), std::make_unique<cuda::Module>(std::move(*m))).first->second;
}

void bump_stat(std::uint64_t CudaStats::*field) { bump(field); }

}  // namespace cudagen::detail

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

void cuda_copy_into(int device, const BufferView& dst, const BufferView& src, DType t, const Shape& s) {
  check_device_exists(gpu(device));
  if (!cuda::nvrtc_available())
    throw CompileError(fmt::format("cannot write into a tensor on cuda:{}: this build of tessel has no NVRTC", device));
  install_cuda_storage_hooks();
  cuda::set_device(device);
  DeviceExecutor ex(device);
  cudagen::copy_into(ex, dst, src, t, s);
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

namespace {
class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int ordinal) : ordinal_(ordinal), name_(fmt::format("cuda:{}", ordinal)) {}
  std::string_view name() const override { return name_; }
  void realize(const std::vector<ir::NodePtr>& roots, bool keep_grad_values) override {
    cuda_realize(ordinal_, roots, keep_grad_values);
  }
  void copy_into(const BufferView& dst, const BufferView& src, DType t, const Shape& s) override {
    cuda_copy_into(ordinal_, dst, src, t, s);
  }
  BufferView transfer(const BufferView& v, DType t, const Shape& s, Device from, Device to) override {
    return copy_between_devices(v, t, s, from, to);
  }

 private:
  int ordinal_;
  std::string name_;
};
}  // namespace

Backend& cuda_backend(int ordinal) {
  check_device_exists(gpu(ordinal));
  static std::mutex mu;
  static std::unordered_map<int, std::unique_ptr<CudaBackend>> backends;
  std::lock_guard<std::mutex> l(mu);
  auto& b = backends[ordinal];
  if (!b) b = std::make_unique<CudaBackend>(ordinal);
  return *b;
}

}  // namespace tessel

namespace tessel {
namespace {
// Storage on GPUs works from the start (empty(s, gpu(0)) needs no computation first).
const bool g_hooks_installed = (install_cuda_storage_hooks(), true);
// What backend_for(gpu(i)) returns.
const BackendRegistration g_registration{{"cuda", Device::Kind::cuda, 0, [](int i) -> Backend& { return cuda_backend(i); }}};
}  // namespace
TESSEL_BACKEND_ANCHOR(cuda)
}  // namespace tessel
