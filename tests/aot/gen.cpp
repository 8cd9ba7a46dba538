// Build-time generator of the AOT tests: exports a model's kernels (tracing,
// nothing runs) and then computes its outputs with the JIT, saved beside the
// export so the AOT program can compare against the JIT path.
//   aot_gen --out DIR --name NAME --archs 80,90 --model mlp|chain [--backward]
//   aot_gen ... --model mlp_train --backward --optimizer sgd:lr=0.05,momentum=0.9
#include <fmt/format.h>

#include <map>

#include "dsl/aot.h"
#include "dsl/io.h"
#include "models.h"

using namespace tessel;

int main(int argc, char** argv) try {
  aot::GeneratorArgs g = aot::parse_generator_args(argc, argv);
  const std::string model = g.extra.count("model") ? g.extra["model"] : "mlp";
  manual_seed(7);
  std::map<std::string, Tensor> ref;
  aot::Manifest m;
  if (model == "mlp") {
    auto net = aot_models::make_mlp();
    Tensor x = randn(aot_models::mlp_input_shape());
    x.eval();
    aot::materialize_lazy(*net, {x});
    if (g.options.backward) {
      m = aot::export_traced([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{net(in[0])}; }, {x}, g.out,
                             g.options, net->parameters());
      Tensor y = aot_models::mlp_step(net, x);
      for (auto& [n, p] : net->named_parameters()) ref["grad." + n] = p.grad();
      ref["output"] = y;
    } else {
      m = aot::export_kernels(net, {x}, g.out, g.options);
      ref["output"] = net(x);
    }
    for (auto& [n, p] : net->named_parameters()) ref["param." + n] = p.detach();
    ref["input"] = x;
  } else if (model == "mlp_train") {
    // The kernels from the expression type and the input shape alone (no
    // model object), forward + backward + the optimizer's steps.
    if (!g.options.backward || !g.options.optimizer) throw ValueError("--model mlp_train needs --backward and --optimizer");
    m = aot::export_symbolic(aot_models::mlp_expr(), aot_models::mlp_options(), aot_models::mlp_input_shape(), g.out,
                             g.options);
    // The JIT's run of the loop the deployment runs, from the same first weights.
    auto net = aot_models::make_mlp();
    Tensor x = randn(aot_models::mlp_input_shape());
    x.eval();
    aot::materialize_lazy(*net, {x});
    for (auto& [n, p] : net->named_parameters()) ref["param." + n] = p.detach().clone();
    std::unique_ptr<optim::Optimizer> opt = g.options.optimizer->make(net->parameters());
    for (int step = 0; step < aot_models::train_steps; ++step)
      ref[fmt::format("output.{}", step)] = aot_models::train_step(net, *opt, x);
    for (auto& [n, p] : net->named_parameters()) {
      ref["grad." + n] = p.grad();
      ref["trained." + n] = p.detach();
    }
    ref["input"] = x;
  } else if (model == "chain") {
    Tensor x = randn(aot_models::chain_x_shape()), b = randn(aot_models::chain_b_shape());
    x.eval();
    b.eval();
    m = aot::export_kernels(aot_models::chain, {x, b}, g.out, g.options);
    std::vector<Tensor> outs = aot_models::chain(x, b);
    ref["x"] = x;
    ref["b"] = b;
    ref["t"] = outs[0];
    ref["s"] = outs[1];
  } else {
    throw ValueError(fmt::format("unknown --model '{}'", model));
  }
  save(ref, g.out / "reference.safetensors");
  fmt::print("aot export '{}' ({}): {} kernels -> {}\n", g.options.name, model, m.kernels.size(), g.out.string());
  return 0;
} catch (const std::exception& e) {
  fmt::print(stderr, "aot generator: {}\n", e.what());
  return 1;
}
