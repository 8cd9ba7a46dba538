// Executors that run the CUDA backend's step loop over host memory: one that
// only collects the kernels a realization launches (for NVRTC), one that
// launches them through kernels compiled from the generated CUDA source
// against the host emulation header.
#pragma once

#include <algorithm>

#include <fmt/format.h>

#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "codegen/cuda/cuda_backend.h"
#include "codegen/cuda/cuda_emitter.h"
#include "codegen/kernel_ir.h"
#include "runtime/storage.h"

namespace cuda_codegen_test {

inline tessel::ir::BufferView host_alloc(tessel::DType t, const tessel::Shape& s) {
  tessel::ir::BufferView v;
  v.storage = tessel::Storage::allocate(static_cast<size_t>(std::max<int64_t>(s.numel(), 1)) * tessel::dtype_size(t));
  v.strides = tessel::contiguous_strides(s);
  return v;
}

/// Records every kernel (by text); launches nothing. Matmuls and fallbacks
/// still run on the ref backend, so the steps after them lower as they would.
class CollectExecutor : public tessel::cudagen::Executor {
 public:
  std::map<std::string, tessel::kir::Kernel> kernels;
  tessel::ir::BufferView alloc(tessel::DType t, const tessel::Shape& s) override { return host_alloc(t, s); }
  void launch(const tessel::lower::Lowered& l) override { kernels.emplace(l.kernel.text(), l.kernel); }
  tessel::ir::BufferView host_eval(const tessel::ir::Node& n, const std::vector<tessel::ir::BufferView>& args) override {
    return tessel::eval_with_ref(n, args);
  }
};

/// The emulated launch entry points generated next to each kernel: the plain
/// and vectorized kernels take the packed argument struct; the two passes of a
/// split reduction also the partials buffer (accumulator dtype) and the split count.
using EmuLaunchFn = void (*)(const void* packed, unsigned grid, unsigned block_x, unsigned block_y);
using EmuSplitFn = void (*)(const void* packed, void* partials, int64_t splits, unsigned grid, unsigned block_x);

/// The host source of a set of kernels: the emulation header, each kernel's
/// exact CUDA source, and per kernel extern "C" launchers
/// `emu_<symbol>(packed args, grid, block_x, block_y)` for <name> and
/// <name>_vec, `emu_<symbol>(packed, partials, splits, grid, block_x)` for
/// <name>_part and <name>_fin.
inline std::string emulation_source(const std::map<std::string, tessel::kir::Kernel>& kernels) {
  using tessel::cudagen::Variant;
  using tessel::cudagen::variant_name;
  std::string s = "#include \"cuda_emulation.h\"\n#include <cstring>\n";
  for (const auto& [text, k] : kernels) {
    tessel::cudagen::CudaSource src = tessel::cudagen::emit_cuda(k);
    s += src.source;
    s += fmt::format("static_assert(sizeof({}) == {}, \"argument struct layout\");\n", src.args_type,
                     8 * (src.num_bufs + src.num_args));
    const std::vector<Variant> vs = tessel::cudagen::variants(k);
    const bool red = std::find(vs.begin(), vs.end(), Variant::partial) != vs.end();
    for (Variant v : vs)
      if (v == Variant::plain || v == Variant::vector)
        s += fmt::format(
            "extern \"C\" void emu_{1}(const void* packed, unsigned g, unsigned bx, unsigned by) {{\n"
            "  {0} a;\n  std::memcpy(&a, packed, sizeof a);\n"
            "  emu::launch({1}, dim3(g), dim3(bx, by), a);\n}}\n",
            src.args_type, variant_name(src.name, v));
    if (red) {
      const char* acc = k.acc_dtype == tessel::DType::f64 ? "double" : "int64_t";
      for (Variant v : {Variant::partial, Variant::finish})
        s += fmt::format(
            "extern \"C\" void emu_{1}(const void* packed, void* partials, int64_t splits, unsigned g, unsigned bx) {{\n"
            "  {0} a;\n  std::memcpy(&a, packed, sizeof a);\n"
            "  emu::launch({1}, dim3(g), dim3(bx), a, static_cast<{2}*>(partials), splits);\n}}\n",
            src.args_type, variant_name(src.name, v), acc);
    }
  }
  return s;
}

/// Launches kernels through the emulated launchers found by `lookup`, picking
/// the variant (plain, vectorized, split in two passes) by the backend's launch rule.
class EmulatedExecutor : public tessel::cudagen::Executor {
 public:
  std::function<void*(const std::string& symbol)> lookup;
  tessel::cudagen::LaunchLimits limits{.max_blocks = 64};
  int launches = 0;
  int vector_launches = 0;  // of them: the vectorized variant
  int split_launches = 0;   // of them: reductions in two passes

  tessel::ir::BufferView alloc(tessel::DType t, const tessel::Shape& s) override { return host_alloc(t, s); }
  void launch(const tessel::lower::Lowered& l) override {
    using tessel::cudagen::Variant;
    std::vector<const void*> bufs;
    for (const auto& v : l.buffers) bufs.push_back(v.storage->data());
    tessel::cudagen::LaunchShape shape = tessel::cudagen::launch_shape(l.kernel, l.args, bufs, limits);
    if (shape.empty) return;
    const std::string name = tessel::cudagen::kernel_name(l.kernel);
    auto find = [&](Variant v) {
      void* fn = lookup(tessel::cudagen::variant_name(name, v));
      if (!fn) throw std::runtime_error("no emulated kernel " + tessel::cudagen::variant_name(name, v) + " for\n" + l.kernel.text());
      return fn;
    };
    auto packed = tessel::cudagen::pack_args(l.kernel, bufs, l.args);
    ++launches;
    if (shape.splits > 1) {
      // Filled with garbage: the first pass must write every partial the second reads.
      std::vector<int64_t> partials(static_cast<size_t>(shape.partials), int64_t{0x7ff4dead7ff4dead});
      reinterpret_cast<EmuSplitFn>(find(Variant::partial))(packed.data(), partials.data(), shape.splits, shape.grid,
                                                           shape.block_x);
      reinterpret_cast<EmuSplitFn>(find(Variant::finish))(packed.data(), partials.data(), shape.splits,
                                                          shape.finish_grid, shape.finish_block);
      ++split_launches;
      return;
    }
    Variant v = shape.vector > 1 ? Variant::vector : Variant::plain;
    vector_launches += shape.vector > 1;
    reinterpret_cast<EmuLaunchFn>(find(v))(packed.data(), shape.grid, shape.block_x, shape.block_y);
  }
  tessel::ir::BufferView host_eval(const tessel::ir::Node& n, const std::vector<tessel::ir::BufferView>& args) override {
    return tessel::eval_with_ref(n, args);
  }
};

}  // namespace cuda_codegen_test
