// Ahead-of-time kernels for a model: trace it on example inputs, without
// running or compiling anything, and write every kernel it would launch as
// files a deployment links in (see codegen/aot/export.h for the folder).
//
//   auto net = nn::symbolic(relu(param<"X"> % param<"W1"> + param<"b1">) % param<"W2"> + param<"b2">,
//                           {.widths = {{"W1", 256}, {"W2", 10}}});
//   aot::Manifest m = aot::export_kernels(net, {rand({64, 20})}, "out/mlp", {.name = "mlp"});
//   // out/mlp: manifest.json, mlp.o, mlp_kernels.{h,cpp}, cuda/*.cu|ptx|cubin, kir/*.kir
//
// A program compiled with out/mlp/mlp_kernels.cpp and linked with out/mlp/mlp.o
// (cmake: tessel_add_aot_kernels, cmake/TesselAot.cmake) runs the model for
// those shapes with zero JIT compiles, even with TESSEL_JIT=off.
//
// Kernels are specialized on structure and on the rank left after merging
// contiguous dims, so export with the shapes (at least the ranks and
// broadcasting patterns) the deployment uses.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "codegen/aot/export.h"
#include "dsl/nn/module.h"
#include "dsl/tensor.h"

namespace tessel::aot {

using Forward = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

/// Traces `forward` on `inputs` (forward, and backward of the sum of the
/// outputs when options.backward) and writes the export. `params`: the
/// parameters whose gradients backward would touch, restored afterwards.
Manifest export_traced(const Forward& forward, const std::vector<Tensor>& inputs, const std::filesystem::path& out_dir,
                       const ExportOptions& options, const std::vector<Tensor>& params = {});

/// Materializes a module's lazy parameters by one forward on the ref
/// interpreter (no compile), so tracing never reads uninitialized weights.
void materialize_lazy(nn::Module& m, const std::vector<Tensor>& inputs);

/// Exports the kernels of a module (holder or Module&) or of a callable taking
/// the inputs as Tensors (or one std::vector<Tensor>) and returning a Tensor
/// or a std::vector<Tensor>.
template <class F>
Manifest export_kernels(F&& fn_or_module, const std::vector<Tensor>& inputs, const std::filesystem::path& out_dir,
                        const ExportOptions& options = {}) {
  using D = std::decay_t<F>;
  auto as_vec = [](auto&& r) -> std::vector<Tensor> {
    if constexpr (std::is_convertible_v<decltype(r), Tensor>) return {Tensor(r)};
    else return std::vector<Tensor>(r.begin(), r.end());
  };
  if constexpr (std::is_base_of_v<nn::Module, D>) {
    materialize_lazy(fn_or_module, inputs);
    std::vector<Tensor> ps;
    for (auto& item : fn_or_module.named_parameters()) ps.push_back(item.second);
    return export_traced([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{fn_or_module.forward(in.at(0))}; },
                         inputs, out_dir, options, ps);
  } else if constexpr (requires(const D& d) { d.ptr(); d->forward(inputs.at(0)); }) {
    return export_kernels(*fn_or_module, inputs, out_dir, options);
  } else if constexpr (std::is_invocable_v<F, const std::vector<Tensor>&>) {
    return export_traced([&](const std::vector<Tensor>& in) { return as_vec(fn_or_module(in)); }, inputs, out_dir, options);
  } else {
    return export_traced(
        [&](const std::vector<Tensor>& in) {
          if constexpr (std::is_invocable_v<F, const Tensor&>) return as_vec(fn_or_module(in.at(0)));
          else if constexpr (std::is_invocable_v<F, const Tensor&, const Tensor&>) return as_vec(fn_or_module(in.at(0), in.at(1)));
          else if constexpr (std::is_invocable_v<F, const Tensor&, const Tensor&, const Tensor&>)
            return as_vec(fn_or_module(in.at(0), in.at(1), in.at(2)));
          else static_assert(sizeof(F) == 0, "export_kernels: pass a module or a callable taking 1-3 Tensors or a std::vector<Tensor>");
        },
        inputs, out_dir, options);
  }
}

}  // namespace tessel::aot

namespace tessel::aot {

/// The command line tessel_add_aot_kernels (cmake/TesselAot.cmake) gives a
/// generator program: --out DIR --name NAME [--archs 80,90] [--cubin-archs 90]
/// [--backward] [--no-cuda] [--cpu CPU] [--model M] ...; unknown `--key value`
/// pairs land in `extra`.
struct GeneratorArgs {
  std::filesystem::path out;
  ExportOptions options;
  std::map<std::string, std::string> extra;
};
GeneratorArgs parse_generator_args(int argc, char** argv);

}  // namespace tessel::aot
