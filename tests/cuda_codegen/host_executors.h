// Executors that run the CUDA backend's step loop over host memory: one that
// only collects the kernels a realization launches (for NVRTC), one that
// launches them through kernels compiled from the generated CUDA source
// against the host emulation header.
#pragma once

#include <fmt/format.h>

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
    return tessel::cudagen::ref_eval(n, args);
  }
};

/// The emulated launch entry point generated next to each kernel.
using EmuLaunchFn = void (*)(const void* packed, unsigned grid, unsigned block_x, unsigned block_y);

/// The host source of a set of kernels: the emulation header, each kernel's
/// exact CUDA source, and per kernel an extern "C" launcher
/// `emu_<name>(packed args, grid, block_x, block_y)`.
inline std::string emulation_source(const std::map<std::string, tessel::kir::Kernel>& kernels) {
  std::string s = "#include \"cuda_emulation.h\"\n#include <cstring>\n";
  for (const auto& [text, k] : kernels) {
    tessel::cudagen::CudaSource src = tessel::cudagen::emit_cuda(k);
    s += src.source;
    s += fmt::format(
        "static_assert(sizeof({0}) == {1}, \"argument struct layout\");\n"
        "extern \"C\" void emu_{2}(const void* packed, unsigned g, unsigned bx, unsigned by) {{\n"
        "  {0} a;\n  std::memcpy(&a, packed, sizeof a);\n"
        "  emu::launch({2}, dim3(g), dim3(bx, by), a);\n}}\n",
        src.args_type, 8 * (src.num_bufs + src.num_args), src.name);
  }
  return s;
}

/// Launches kernels through the emulated launchers found by `lookup`.
class EmulatedExecutor : public tessel::cudagen::Executor {
 public:
  std::function<EmuLaunchFn(const std::string& name)> lookup;
  unsigned max_blocks = 64;
  int launches = 0;

  tessel::ir::BufferView alloc(tessel::DType t, const tessel::Shape& s) override { return host_alloc(t, s); }
  void launch(const tessel::lower::Lowered& l) override {
    tessel::cudagen::LaunchShape shape = tessel::cudagen::launch_shape(l.kernel, l.args, max_blocks);
    if (shape.empty) return;
    EmuLaunchFn fn = lookup(tessel::cudagen::kernel_name(l.kernel));
    if (!fn) throw std::runtime_error("no emulated kernel for\n" + l.kernel.text());
    std::vector<const void*> bufs;
    for (const auto& v : l.buffers) bufs.push_back(v.storage->data());
    auto packed = tessel::cudagen::pack_args(l.kernel, bufs, l.args);
    fn(packed.data(), shape.grid, shape.block_x, shape.block_y);
    ++launches;
  }
  tessel::ir::BufferView host_eval(const tessel::ir::Node& n, const std::vector<tessel::ir::BufferView>& args) override {
    return tessel::cudagen::ref_eval(n, args);
  }
};

}  // namespace cuda_codegen_test
