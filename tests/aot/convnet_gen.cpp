// Build-time generator of the convnet AOT test: exports the kernels of one
// model of convnets.h (tracing, nothing runs), then runs the same steps with
// the JIT and saves the results beside the export, so the program linking the
// kernels can compare against the JIT path.
//   convnet_gen --out DIR --name NAME --model lenet-sigmoid|lenet-relu-bn|resnet
//             the eval-mode forward (no autograd) on a [B, 1, 28, 28] batch
//   convnet_gen ... --model M --backward --optimizer sgd:lr=0.1
//             a training step: train-mode forward (batch statistics),
//             cross_entropy, backward, the optimizer's step
#include <fmt/format.h>

#include <map>

#include "convnets.h"
#include "dsl/aot.h"
#include "dsl/io.h"

using namespace tessel;

namespace {

void snapshot(std::map<std::string, Tensor>& ref, const std::string& prefix, nn::Sequential& net) {
  for (auto& [k, t] : net->state_dict()) ref[prefix + k] = t.detach().clone();
}

}  // namespace

int main(int argc, char** argv) try {
  aot::GeneratorArgs g = aot::parse_generator_args(argc, argv);
  const std::string model = g.extra.count("model") ? g.extra["model"] : "";
  const aot_convnets::Spec& spec = aot_convnets::spec(model);
  manual_seed(aot_convnets::seed);
  nn::Sequential net = aot_convnets::make_initialized(model);
  aot_convnets::Batch b = aot_convnets::make_batch(spec);
  std::map<std::string, Tensor> ref;
  snapshot(ref, "init.", net);
  ref["x"] = b.x;
  ref["y"] = b.y;
  aot::Manifest m;
  if (!g.options.backward) {
    // As eval_logits runs it: with autograd on, the schedule keeps the values
    // backward would read, and the kernels differ.
    NoGradGuard no_grad;
    net->eval();
    m = aot::export_kernels(net, {b.x}, g.out, g.options);
    ref["logits"] = aot_convnets::eval_logits(net, b.x);
  } else {
    if (!g.options.optimizer) throw ValueError("a training export needs --optimizer");
    net->train();
    m = aot::export_traced(
        [&](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{aot_convnets::train_loss(net, in.at(0), in.at(1))};
        },
        {b.x, b.y}, g.out, g.options, net->parameters());
    // The trace wrote nothing: the model is as it was, running statistics and
    // batch counts included.
    for (auto& [k, t] : net->state_dict())
      if (!equal(t, ref.at("init." + k))) throw InternalError(fmt::format("the export changed the model's '{}'", k));
    std::unique_ptr<optim::Optimizer> opt = g.options.optimizer->make(net->parameters());
    for (int step = 0; step < spec.train_steps; ++step)
      ref[fmt::format("loss.{}", step)] = aot_convnets::train_step(net, *opt, b.x, b.y).detach();
    snapshot(ref, "trained.", net);
    ref["logits.trained"] = aot_convnets::eval_logits(net, b.x);
  }
  save(ref, g.out / "reference.safetensors");
  fmt::print("aot export '{}' ({}): {} kernels -> {}\n", g.options.name, model, m.kernels.size(), g.out.string());
  return 0;
} catch (const std::exception& e) {
  fmt::print(stderr, "convnet aot generator: {}\n", e.what());
  return 1;
}
