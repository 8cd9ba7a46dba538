// Convolutional networks -- D2L's LeNet in both variants and the ResNet sample
// -- from kernels exported at BUILD time (convnet_gen.cpp,
// tessel_add_aot_kernels in CMakeLists.txt). With TESSEL_JIT=off and an empty
// cache folder, the eval-mode forward and a few optimizer steps in train mode
// (batch statistics, cross_entropy, backward) compile nothing, and every
// logit, loss, weight and running statistic is bit-equal to the JIT's run of
// the same model, seed and batch (made by the generator). Bit-equal, not
// close: convolutions are the same oneDNN calls on both sides and matmuls the
// same BLAS calls; pooling, batch norm, the activations, the loss and SGD are
// the exported kernels, the very code the JIT compiles (same LLVM pipeline,
// no fast math), so not even an ulp may differ.
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
#include "convnets.h"
#include "dsl/aot.h"
#include "dsl/io.h"
#include "lenet_bn_fwd_kernels.h"
#include "lenet_bn_train_kernels.h"
#include "lenet_sigmoid_fwd_kernels.h"
#include "lenet_sigmoid_train_kernels.h"
#include "resnet_fwd_kernels.h"
#include "resnet_train_kernels.h"
#include "runtime/precompiled_kernels.h"

using namespace tessel;
namespace fs = std::filesystem;

namespace {

using aot_test::Counters;
using aot_test::JitOff;
using aot_test::reference;
using aot_test::require_equal;
using aot_test::require_no_compiles;

// Whether two tensors hold the same values, read on the host (no kernel).
bool same_values(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.to_vector<double>() == b.to_vector<double>();
}

// A fresh model with the generator's first weights and running statistics,
// loaded as a deployment loads a checkpoint. The layers' constructors draw
// PyTorch's default init, overwritten at once: the ref interpreter computes
// it, as that kernel is no part of the model's steps.
nn::Sequential load_model(std::string_view name, const std::map<std::string, Tensor>& ref) {
  nn::Sequential net = [&] {
    BackendOverride interp(ref_backend());
    nn::Sequential n = aot_convnets::make_model(name);
    for (auto& [k, t] : n->state_dict()) t.eval();
    return n;
  }();
  OrderedDict<Tensor> init;
  for (auto& [k, t] : net->state_dict()) init.insert(k, ref.at("init." + k));
  net->load_state_dict(init);
  return net;
}

void forward_equals_jit(std::string_view name, const char* dir) {
  JitOff off("tessel_aot_convnet");
  auto ref = reference(dir);
  nn::Sequential net = load_model(name, ref);
  Tensor x = ref.at("x");
  Counters before;
  precompiled::reset_stats();
  Tensor logits;
  REQUIRE_NOTHROW(logits = aot_convnets::eval_logits(net, x));
  require_no_compiles(before);
  CHECK(precompiled::stats().cpu_hits > 0);
  require_equal(logits, ref.at("logits"), "logits");
  // Real values: the logits are finite and vary across the batch and classes.
  std::vector<float> l = logits.to_vector<float>();
  CHECK(std::all_of(l.begin(), l.end(), [](float v) { return std::isfinite(v); }));
  CHECK(*std::max_element(l.begin(), l.end()) > *std::min_element(l.begin(), l.end()));
}

void training_equals_jit(std::string_view name, const char* dir, const char* optimizer) {
  JitOff off("tessel_aot_convnet");
  const aot_convnets::Spec& spec = aot_convnets::spec(name);
  auto ref = reference(dir);
  // The optimizer the export traced, from the same text (TesselAot.cmake passes it on).
  CHECK(std::string_view(optimizer) == spec.optimizer);
  nn::Sequential net = load_model(name, ref);
  std::unique_ptr<optim::Optimizer> opt = aot::parse_optimizer(optimizer)->make(net->parameters());
  Tensor x = ref.at("x"), y = ref.at("y");
  Counters before;
  precompiled::reset_stats();
  std::vector<double> losses;
  for (int step = 0; step < spec.train_steps; ++step) {
    INFO("step " << step);
    Tensor loss;
    REQUIRE_NOTHROW(loss = aot_convnets::train_step(net, *opt, x, y));
    require_no_compiles(before);
    require_equal(loss, ref.at(fmt::format("loss.{}", step)), "loss");
    losses.push_back(loss.item<double>());
  }
  CHECK(precompiled::stats().cpu_hits > 0);
  // The steps learn: on this one batch the loss falls at every step, from
  // about ln 10 (ten classes, untrained weights).
  INFO("losses " << fmt::format("{}", fmt::join(losses, ", ")));
  CHECK(losses.front() > 1.5);
  CHECK(losses.front() < 3.5);
  for (size_t i = 1; i < losses.size(); ++i) CHECK(losses[i] < losses[i - 1]);
  // Weights, running statistics and batch counts as the JIT left them, and
  // moved by the steps (the comparison is not trivially true).
  for (auto& [k, t] : net->state_dict()) {
    require_equal(t, ref.at("trained." + k), "trained." + k);
    INFO(k);
    if (k.ends_with("num_batches_tracked")) CHECK(t.item<int64_t>() == spec.train_steps);
    else CHECK_FALSE(same_values(t, ref.at("init." + k)));
  }
  // The eval-mode forward after training (updated running statistics), from
  // the forward export's kernels.
  require_equal(aot_convnets::eval_logits(net, x), ref.at("logits.trained"), "logits after training");
  require_no_compiles(before);
}

}  // namespace

TEST_CASE("the convnets' exported kernels are registered at start-up", "[aot]") {
  CHECK(precompiled::errors().empty());
  for (const char* dir : {TESSEL_AOT_DIR_lenet_sigmoid_fwd, TESSEL_AOT_DIR_lenet_sigmoid_train,
                          TESSEL_AOT_DIR_lenet_bn_fwd, TESSEL_AOT_DIR_lenet_bn_train, TESSEL_AOT_DIR_resnet_fwd,
                          TESSEL_AOT_DIR_resnet_train}) {
    INFO(dir);
    aot::Manifest m = aot::read_manifest(dir);
    CHECK(!m.kernels.empty());
    for (const auto& k : m.kernels) {
      const precompiled::Entry* e = precompiled::find(*KernelKey::from_hex(k.key));
      REQUIRE(e);
      CHECK(e->cpu_fn != nullptr);
    }
  }
  // A training step adds backward's and the optimizer's kernels to the forward's.
  namespace g = aot::generated;
  CHECK(g::lenet_sigmoid_train_kernel_count() > g::lenet_sigmoid_fwd_kernel_count());
  CHECK(g::lenet_bn_train_kernel_count() > g::lenet_bn_fwd_kernel_count());
  CHECK(g::resnet_train_kernel_count() > g::resnet_fwd_kernel_count());
}

TEST_CASE("LeNet (sigmoid): the eval forward runs from AOT kernels with the JIT off, bit-equal to the JIT", "[aot]") {
  forward_equals_jit("lenet-sigmoid", TESSEL_AOT_DIR_lenet_sigmoid_fwd);
}

TEST_CASE("LeNet (relu-bn): the eval forward runs from AOT kernels with the JIT off, bit-equal to the JIT", "[aot]") {
  forward_equals_jit("lenet-relu-bn", TESSEL_AOT_DIR_lenet_bn_fwd);
}

TEST_CASE("ResNet: the eval forward runs from AOT kernels with the JIT off, bit-equal to the JIT", "[aot]") {
  forward_equals_jit("resnet", TESSEL_AOT_DIR_resnet_fwd);
}

TEST_CASE("LeNet (sigmoid): SGD steps run from AOT kernels with the JIT off, bit-equal to the JIT, the loss falling",
          "[aot]") {
  training_equals_jit("lenet-sigmoid", TESSEL_AOT_DIR_lenet_sigmoid_train, TESSEL_AOT_OPTIMIZER_lenet_sigmoid_train);
}

TEST_CASE("LeNet (relu-bn): SGD steps with batch statistics run from AOT kernels with the JIT off, bit-equal to "
          "the JIT, the loss falling",
          "[aot]") {
  training_equals_jit("lenet-relu-bn", TESSEL_AOT_DIR_lenet_bn_train, TESSEL_AOT_OPTIMIZER_lenet_bn_train);
}

TEST_CASE("ResNet: SGD steps (momentum, weight decay, batch statistics) run from AOT kernels with the JIT off, "
          "bit-equal to the JIT, the loss falling",
          "[aot]") {
  training_equals_jit("resnet", TESSEL_AOT_DIR_resnet_train, TESSEL_AOT_OPTIMIZER_resnet_train);
}
