// A program built against kernels exported at BUILD time (tessel_add_aot_kernels
// in CMakeLists.txt): with TESSEL_JIT=off and an empty cache folder it runs the
// models with zero compiles, and its outputs equal the JIT's (computed by the
// generator and saved beside the export).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "chain_kernels.h"
#include "aot_run_support.h"
#include "codegen/cpu/cpu_backend.h"
#include "dsl/aot.h"
#include "dsl/io.h"
#include "mlp_kernels.h"
#include "models.h"
#include "runtime/precompiled_kernels.h"
#include "train_kernels.h"

using namespace tessel;
namespace fs = std::filesystem;

namespace {

using aot_test::Counters;
using aot_test::JitOff;
using aot_test::reference;
using aot_test::require_equal;
using aot_test::require_no_compiles;

}  // namespace

TEST_CASE("the exported kernels are registered at start-up", "[aot]") {
  CHECK(precompiled::errors().empty());
  // The exports may share kernels (a bias add, say): those register once.
  const size_t mlp = aot::generated::mlp_kernel_count(), chain = aot::generated::chain_kernel_count(),
               train = aot::generated::train_kernel_count();
  CHECK(precompiled::size() >= std::max({mlp, chain, train}));
  CHECK(precompiled::size() <= mlp + chain + train);
  CHECK(mlp > 0);
  CHECK(chain > 0);
  // Training adds the optimizer's kernels to the MLP's forward and backward.
  CHECK(train > mlp);
  aot::Manifest m = aot::read_manifest(TESSEL_AOT_DIR_mlp);
  for (const auto& k : m.kernels) {
    const precompiled::Entry* e = precompiled::find(*KernelKey::from_hex(k.key));
    REQUIRE(e);
    CHECK(e->cpu_fn != nullptr);
  }
}

TEST_CASE("the MLP (forward and backward) runs from AOT kernels with the JIT off, equal to the JIT", "[aot]") {
  JitOff off("tessel_aot_run");
  auto ref = reference(TESSEL_AOT_DIR_mlp);
  auto net = aot_models::make_mlp();
  Tensor x = ref.at("input");
  {
    // Weights come from a file in a deployment; the ref interpreter sizes them.
    BackendOverride interp(ref_backend());
    aot::materialize_lazy(*net, {x});
    NoGradGuard g;
    for (auto& [n, p] : net->named_parameters()) p.data().copy_(ref.at("param." + n));
    for (auto& [n, p] : net->named_parameters()) p.eval();
  }
  Counters before;
  precompiled::reset_stats();
  Tensor y = aot_models::mlp_step(net, x);
  y.eval();
  for (auto& [n, p] : net->named_parameters()) p.grad().eval();
  require_no_compiles(before);
  CHECK(precompiled::stats().cpu_hits > 0);
  require_equal(y, ref.at("output"), "output");
  for (auto& [n, p] : net->named_parameters()) require_equal(p.grad(), ref.at("grad." + n), "grad." + n);
}

TEST_CASE("a training loop (forward, backward, SGD with momentum) runs from AOT kernels with the JIT off, equal to "
          "the JIT",
          "[aot]") {
  JitOff off("tessel_aot_run");
  auto ref = reference(TESSEL_AOT_DIR_train);
  // The export came from the expression type and the input shape alone; a
  // deployment loads its weights into a fresh model (no init, no forward).
  auto net = aot_models::make_mlp();
  OrderedDict<Tensor> weights;
  for (const std::string n : {"W1", "b1", "W2", "b2"}) weights.insert(n, ref.at("param." + n));
  net->load_state_dict(weights);
  for (auto& [n, p] : net->named_parameters()) REQUIRE(p.shape() == ref.at("param." + n).shape());
  // The optimizer the export traced, from the same text (TesselAot.cmake passes it on).
  CHECK(std::string(TESSEL_AOT_OPTIMIZER_train) == "sgd:lr=0.05,momentum=0.9");
  std::unique_ptr<optim::Optimizer> opt = aot::parse_optimizer(TESSEL_AOT_OPTIMIZER_train)->make(net->parameters());
  Tensor x = ref.at("input");

  Counters before;
  precompiled::reset_stats();
  for (int step = 0; step < aot_models::train_steps; ++step) {
    INFO("step " << step);
    Tensor y = aot_models::train_step(net, *opt, x);
    require_no_compiles(before);
    require_equal(y, ref.at(fmt::format("output.{}", step)), "output");
  }
  CHECK(precompiled::stats().cpu_hits > 0);
  for (auto& [n, p] : net->named_parameters()) {
    require_equal(p.grad(), ref.at("grad." + n), "grad." + n);
    require_equal(p.detach(), ref.at("trained." + n), "trained." + n);
    // The steps did move the weights: the comparison above is not trivially true.
    CHECK(p.detach().to_vector<float>() != ref.at("param." + n).to_vector<float>());
  }
  require_no_compiles(before);
}

TEST_CASE("the elementwise chain and softmax run from AOT kernels with the JIT off, equal to the JIT", "[aot]") {
  JitOff off("tessel_aot_run");
  auto ref = reference(TESSEL_AOT_DIR_chain);
  Counters before;
  std::vector<Tensor> outs = aot_models::chain(ref.at("x"), ref.at("b"));
  realize(outs);
  require_no_compiles(before);
  require_equal(outs[0], ref.at("t"), "t");
  require_equal(outs[1], ref.at("s"), "s");
}

TEST_CASE("with the JIT off, a kernel that was not exported is a CompileError, not a compile", "[aot]") {
  JitOff off("tessel_aot_run");
  Tensor x = ones({5, 7});
  {
    BackendOverride interp(ref_backend());
    x.eval();
  }
  auto odd = [&] {  // no export has this structure
    Tensor a = x * 3.0;
    Tensor y = a.sqrt() * x.exp() - x.tanh();
    y.eval();
  };
  Counters before;
  REQUIRE_THROWS_AS(odd(), CompileError);
  try {
    odd();
  } catch (const CompileError& e) {
    CHECK_THAT(e.what(), Catch::Contains("TESSEL_JIT=off"));
    CHECK_THAT(e.what(), Catch::Contains("not among the"));
  }
  CHECK(KernelCache::global().stats().compiles == before.cache.compiles);
}
