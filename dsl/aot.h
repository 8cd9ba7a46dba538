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
// Training too: `.backward = true` adds the kernels of backward, and
// `.optimizer = aot::sgd({.lr = 0.1})` (or adam, adamw, your own) those of the
// optimizer's step, so `opt.zero_grad(); loss.backward(); opt.step();` in the
// deployment compiles nothing either.
//
// Kernels are specialized on structure and on the rank left after merging
// contiguous dims, so export with the shapes (at least the ranks and
// broadcasting patterns) the deployment uses.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "codegen/aot/export.h"
#include "dsl/nn/module.h"
#include "dsl/nn/symbolic.h"
#include "dsl/tensor.h"
#include "dsl/train/optimizer.h"

namespace tessel::aot {

using Forward = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
using OptimizerFactory = std::function<std::unique_ptr<optim::Optimizer>(std::vector<nn::Parameter>)>;

/// The optimizer whose steps an export traces (ExportOptions::optimizer),
/// built over the parameters the trace uses, as the training loop it stands
/// for builds `optim::SGD opt(net->parameters(), {.lr = 0.1})`. Only which
/// terms are on (momentum, weight decay, Nesterov, AdamW's decoupling) shapes
/// the kernels; the numbers are launch arguments.
struct OptimizerSpec {
  std::string name;      // in messages: "sgd", "adam", "adamw" or yours
  OptimizerFactory make;
};
std::shared_ptr<const OptimizerSpec> sgd(optim::SGDOptions o = {});
std::shared_ptr<const OptimizerSpec> adam(optim::AdamOptions o = {});
std::shared_ptr<const OptimizerSpec> adamw(optim::AdamOptions o = {});
/// Your own optimizer class: `make` builds it over the parameters.
std::shared_ptr<const OptimizerSpec> optimizer(std::string name, OptimizerFactory make);
/// From text, for command lines: "sgd", "sgd:lr=0.1,momentum=0.9",
/// "adam:lr=1e-3,weight_decay=0.01", "adamw". Keys are the fields of
/// optim::SGDOptions / optim::AdamOptions; ValueError names an unknown one.
std::shared_ptr<const OptimizerSpec> parse_optimizer(std::string_view text);

/// Traces `forward` on `inputs` and writes the export. With options.backward
/// it traces the loop `zero_grad(); forward; loss.backward()` (loss: the sum
/// of the outputs), with options.optimizer also `opt.step()` over `params`.
/// `params` trace on stand-ins of their memory: their values and gradients
/// are as before afterwards.
Manifest export_traced(const Forward& forward, const std::vector<Tensor>& inputs, const std::filesystem::path& out_dir,
                       const ExportOptions& options, const std::vector<nn::Parameter>& params = {});

/// Gives a module's lazy parameters their shapes and first values. A symbolic
/// model sizes them by its shape pass; any other module by one forward on the
/// ref interpreter (no compile), so tracing never reads uninitialized weights.
void materialize_lazy(nn::Module& m, const std::vector<Tensor>& inputs);

/// Exports a module's kernels (export_kernels with a module). A symbolic model
/// (nn::SymbolicImpl) is never run: parameter shapes come from its shape pass
/// and uninitialized ones trace as stand-ins, so the model is left as it was.
Manifest export_module(nn::Module& m, const std::vector<Tensor>& inputs, const std::filesystem::path& out_dir,
                       const ExportOptions& options);

/// Exports the kernels of a symbolic model from its expression type and input
/// shape alone: no model object, no example tensor, nothing evaluated or
/// compiled. Parameter shapes come from the shape pass (dsl/nn/symbolic.h); a
/// shape mistake is a ShapeError naming the symbol.
///
///   auto mlp = relu(param<"X"> % param<"W1"> + param<"b1">) % param<"W2"> + param<"b2">;
///   aot::export_symbolic(mlp, {.widths = {{"W1", 256}, {"W2", 10}}}, Shape{64, 20}, "out/mlp",
///                        {.name = "mlp", .backward = true, .optimizer = aot::sgd({.lr = 0.1})});
///
/// The kernels are those of `nn::symbolic(mlp, ...)` run on a [64, 20] input.
template <class E>
  requires expr::Expression<E>
Manifest export_symbolic(const E& expression, const nn::SymbolicOptions& opt, const Shape& input,
                         const std::filesystem::path& out_dir, const ExportOptions& options = {}) {
  nn::SymbolicImpl<E> model(expression, opt);  // parameters stay uninitialized: only stand-ins are traced
  model.set_name(options.name);
  return export_module(model, {empty(input)}, out_dir, options);
}

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
    return export_module(fn_or_module, inputs, out_dir, options);
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
/// [--backward] [--optimizer sgd:lr=0.1] [--no-cuda] [--cpu CPU] [--model M] ...;
/// unknown `--key value` pairs land in `extra`.
struct GeneratorArgs {
  std::filesystem::path out;
  ExportOptions options;
  std::map<std::string, std::string> extra;
};
GeneratorArgs parse_generator_args(int argc, char** argv);

}  // namespace tessel::aot
