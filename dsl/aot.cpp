#include "dsl/aot.h"

#include <fmt/format.h>

#include <algorithm>

#include "codegen/backend.h"
#include "codegen/grad_mode.h"
#include "dsl/nn/parameter.h"
#include "runtime/kernel_cache.h"

namespace tessel::aot {

void materialize_lazy(nn::Module& m, const std::vector<Tensor>& inputs) {
  bool lazy = false;
  for (auto& [name, p] : m.named_parameters()) lazy = lazy || !p.is_initialized();
  if (!lazy) return;
  NoGradGuard g;
  BackendOverride ref(ref_backend());
  Tensor y = m.forward(inputs.at(0));
  y.eval();
}

Manifest export_traced(const Forward& forward, const std::vector<Tensor>& inputs, const std::filesystem::path& out_dir,
                       const ExportOptions& options, const std::vector<Tensor>& params) {
  if (inputs.empty()) throw ValueError("aot::export_kernels: give at least one example input");
  // Backward accumulates into .grad: keep the parameters' gradients as they were.
  std::vector<Tensor> saved;
  for (const Tensor& p : params) saved.push_back(p.grad());
  TraceBackend tb;
  {
    BackendOverride trace(tb);
    std::vector<Tensor> outs = forward(inputs);
    if (outs.empty()) throw ValueError("aot::export_kernels: the traced function returned no tensor");
    // A training step reads its outputs (the loss) before backward: realize them first.
    realize(outs);
    if (options.backward) {
      Tensor loss = outs[0].sum();
      for (size_t i = 1; i < outs.size(); ++i) loss = add(loss, outs[i].sum());
      if (!loss.requires_grad())
        throw ValueError("aot::export_kernels: backward was requested but no output depends on a tensor that requires grad");
      loss.backward();
    }
  }
  for (size_t i = 0; i < params.size(); ++i) params[i].set_grad(saved[i]);
  if (detail::trace_enabled("jit"))
    detail::trace_line("jit", fmt::format("aot export '{}': {} kernels from {} realizations ({} matmuls, {} fallbacks)",
                                          options.name, tb.kernels().size(), tb.realizations(), tb.matmuls(), tb.fallbacks()));
  return write_artifacts(tb.kernels(), out_dir, options);
}

}  // namespace tessel::aot

namespace tessel::aot {

namespace {
std::vector<int> int_list(const std::string& s) {
  std::vector<int> out;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find_first_of(",; ", i);
    if (j == std::string::npos) j = s.size();
    if (j > i) out.push_back(std::stoi(s.substr(i, j - i)));
    i = j + 1;
  }
  return out;
}
}  // namespace

GeneratorArgs parse_generator_args(int argc, char** argv) {
  GeneratorArgs g;
  bool cubin_given = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw ValueError(fmt::format("aot generator: {} needs a value", a));
      return argv[++i];
    };
    if (a == "--out") g.out = value();
    else if (a == "--name") g.options.name = value();
    else if (a == "--archs") g.options.ptx_archs = int_list(value());
    else if (a == "--cubin-archs") { g.options.cubin_archs = int_list(value()); cubin_given = true; }
    else if (a == "--backward") g.options.backward = true;
    else if (a == "--no-cuda") g.options.cuda = false;
    else if (a == "--no-cpu") g.options.cpu = false;
    else if (a == "--cpu") g.options.cpu_target = value();
    else if (a.rfind("--", 0) == 0) g.extra[a.substr(2)] = value();
    else throw ValueError(fmt::format("aot generator: unexpected argument '{}'", a));
  }
  if (g.out.empty()) throw ValueError("aot generator: --out DIR is required");
  // CUBIN for the newest listed arch unless told otherwise.
  if (!cubin_given && !g.options.ptx_archs.empty())
    g.options.cubin_archs = {*std::max_element(g.options.ptx_archs.begin(), g.options.ptx_archs.end())};
  return g;
}

}  // namespace tessel::aot
