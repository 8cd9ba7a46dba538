// The GPT sample's model (samples/gpt/gpt_model.h, a tiny configuration) from
// kernels exported at BUILD time (gpt_gen.cpp, tessel_add_aot_kernels in
// CMakeLists.txt). With TESSEL_JIT=off and an empty cache folder, the
// eval-mode forward (embeddings, causal self-attention, GELU MLP, layer
// norms, the tied lm_head) and AdamW training steps (cross_entropy, backward
// through the tied weight, the optimizer's step) compile nothing, and every
// logit, loss and weight is bit-equal to the JIT's run of the same model,
// seed and batch (made by the generator): matmuls are the same BLAS calls on
// both sides, everything else the exported kernels, the very code the JIT
// compiles.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "aot_run_support.h"
#include "codegen/cpu/cpu_backend.h"
#include "dsl/aot.h"
#include "dsl/io.h"
#include "gpt_aot.h"
#include "gpt_fwd_kernels.h"
#include "gpt_train_kernels.h"
#include "runtime/precompiled_kernels.h"

using namespace tessel;
namespace fs = std::filesystem;

namespace {

using aot_test::Counters;
using aot_test::JitOff;
using aot_test::reference;
using aot_test::require_equal;
using aot_test::require_no_compiles;

// A fresh model with the generator's first weights, loaded as a deployment
// loads a checkpoint (the constructor's init computed by the ref
// interpreter, as that kernel is no part of the model's steps).
gpt::GPT load_model(const std::map<std::string, Tensor>& ref) {
  gpt::GPT model = [&] {
    BackendOverride interp(ref_backend());
    gpt::GPT m(aot_gpt::config());
    for (auto& [k, t] : m->state_dict()) t.eval();
    return m;
  }();
  OrderedDict<Tensor> init;
  for (auto& [k, t] : model->state_dict()) init.insert(k, ref.at("init." + k));
  model->load_state_dict(init);
  REQUIRE(model->lm_head->weight.is_same(model->transformer->wte->weight));
  return model;
}

}  // namespace

TEST_CASE("the GPT's exported kernels are registered at start-up", "[aot][gpt]") {
  CHECK(precompiled::errors().empty());
  for (const char* dir : {TESSEL_AOT_DIR_gpt_fwd, TESSEL_AOT_DIR_gpt_train}) {
    INFO(dir);
    aot::Manifest m = aot::read_manifest(dir);
    CHECK(!m.kernels.empty());
    for (const auto& k : m.kernels) {
      const precompiled::Entry* e = precompiled::find(*KernelKey::from_hex(k.key));
      REQUIRE(e);
      CHECK(e->cpu_fn != nullptr);
    }
  }
  CHECK(aot::generated::gpt_train_kernel_count() > aot::generated::gpt_fwd_kernel_count());
}

TEST_CASE("GPT: the eval forward runs from AOT kernels with the JIT off, bit-equal to the JIT", "[aot][gpt]") {
  JitOff off("tessel_aot_gpt");
  auto ref = reference(TESSEL_AOT_DIR_gpt_fwd);
  gpt::GPT model = load_model(ref);
  Counters before;
  precompiled::reset_stats();
  Tensor logits;
  REQUIRE_NOTHROW(logits = aot_gpt::eval_logits(model, ref.at("x")));
  require_no_compiles(before);
  CHECK(precompiled::stats().cpu_hits > 0);
  require_equal(logits, ref.at("logits"), "logits");
  std::vector<float> l = logits.to_vector<float>();
  CHECK(std::all_of(l.begin(), l.end(), [](float v) { return std::isfinite(v); }));
  CHECK(*std::max_element(l.begin(), l.end()) > *std::min_element(l.begin(), l.end()));
}

TEST_CASE("GPT: AdamW steps run from AOT kernels with the JIT off, bit-equal to the JIT, the loss falling",
          "[aot][gpt]") {
  JitOff off("tessel_aot_gpt");
  auto ref = reference(TESSEL_AOT_DIR_gpt_train);
  CHECK(std::string_view(TESSEL_AOT_OPTIMIZER_gpt_train) == aot_gpt::optimizer);
  gpt::GPT model = load_model(ref);
  std::unique_ptr<optim::Optimizer> opt = aot::parse_optimizer(TESSEL_AOT_OPTIMIZER_gpt_train)->make(model->parameters());
  Tensor x = ref.at("x"), y = ref.at("y");
  Counters before;
  precompiled::reset_stats();
  std::vector<double> losses;
  for (int step = 0; step < aot_gpt::train_steps; ++step) {
    INFO("step " << step);
    Tensor loss;
    REQUIRE_NOTHROW(loss = aot_gpt::train_step(model, *opt, x, y));
    require_no_compiles(before);
    require_equal(loss, ref.at(fmt::format("loss.{}", step)), "loss");
    losses.push_back(loss.item<double>());
  }
  CHECK(precompiled::stats().cpu_hits > 0);
  // About ln 40 untrained (GPT-2's small init), falling on this one batch.
  INFO("losses " << fmt::format("{}", fmt::join(losses, ", ")));
  CHECK(std::abs(losses.front() - std::log(40.0)) < 0.2);
  for (size_t i = 1; i < losses.size(); ++i) CHECK(losses[i] < losses[i - 1]);
  for (auto& [k, t] : model->state_dict()) {
    require_equal(t, ref.at("trained." + k), "trained." + k);
    INFO(k);
    CHECK(t.to_vector<double>() != ref.at("init." + k).to_vector<double>());
  }
  CHECK(model->lm_head->weight.is_same(model->transformer->wte->weight));
  require_equal(aot_gpt::eval_logits(model, x), ref.at("logits.trained"), "logits after training");
  require_no_compiles(before);
}
