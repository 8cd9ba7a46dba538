// Build-time generator of the GPT AOT test: exports the kernels of the tiny
// GPT of gpt_aot.h (tracing, nothing runs), then runs the same steps with the
// JIT and saves the results beside the export, so the program linking the
// kernels can compare against the JIT path.
//   gpt_gen --out DIR --name NAME               the eval-mode forward (no autograd)
//   gpt_gen ... --backward --optimizer adamw:... a training step: forward, cross_entropy,
//                                               backward, AdamW's step
#include <fmt/format.h>

#include <map>

#include "dsl/aot.h"
#include "dsl/io.h"
#include "gpt_aot.h"

using namespace tessel;

int main(int argc, char** argv) try {
  aot::GeneratorArgs g = aot::parse_generator_args(argc, argv);
  manual_seed(aot_gpt::seed);
  gpt::GPT model = aot_gpt::make_initialized();
  aot_gpt::Batch b = aot_gpt::make_batch();
  std::map<std::string, Tensor> ref;
  auto snapshot = [&](const std::string& prefix) {
    for (auto& [k, t] : model->state_dict()) ref[prefix + k] = t.detach().clone();
  };
  snapshot("init.");
  ref["x"] = b.x;
  ref["y"] = b.y;
  aot::Manifest m;
  if (!g.options.backward) {
    NoGradGuard no_grad;  // as eval_logits runs it
    model->eval();
    m = aot::export_kernels(*model, {b.x}, g.out, g.options);
    ref["logits"] = aot_gpt::eval_logits(model, b.x);
  } else {
    if (!g.options.optimizer) throw ValueError("a training export needs --optimizer");
    model->train();
    m = aot::export_traced(
        [&](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{aot_gpt::train_loss(model, in.at(0), in.at(1))};
        },
        {b.x, b.y}, g.out, g.options, model->parameters());
    for (auto& [k, t] : model->state_dict())
      if (!equal(t, ref.at("init." + k))) throw InternalError(fmt::format("the export changed the model's '{}'", k));
    std::unique_ptr<optim::Optimizer> opt = g.options.optimizer->make(model->parameters());
    for (int step = 0; step < aot_gpt::train_steps; ++step)
      ref[fmt::format("loss.{}", step)] = aot_gpt::train_step(model, *opt, b.x, b.y).detach();
    snapshot("trained.");
    ref["logits.trained"] = aot_gpt::eval_logits(model, b.x);
  }
  save(ref, g.out / "reference.safetensors");
  fmt::print("aot export '{}' (gpt): {} kernels -> {}\n", g.options.name, m.kernels.size(), g.out.string());
  return 0;
} catch (const std::exception& e) {
  fmt::print(stderr, "gpt aot generator: {}\n", e.what());
  return 1;
}
