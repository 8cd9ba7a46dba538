// Symbolic models exported from their type and input shape alone (the shape
// pass of dsl/nn/symbolic.h, aot::export_symbolic), and optimizer steps in an
// export: what they derive, that nothing is evaluated or compiled, that the
// model is left as it was, and the errors a user gets.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "codegen/backend.h"
#include "codegen/cpu/cpu_backend.h"
#include "dsl/aot.h"
#include "models.h"
#include "runtime/kernel_cache.h"

using namespace tessel;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / fmt::format("tessel_aot_sym_{}_{}", name, ::getpid());
  fs::remove_all(d);
  return d;
}

std::vector<std::string> keys(const aot::Manifest& m) {
  std::vector<std::string> out;
  for (const auto& k : m.kernels) out.push_back(k.key);
  return out;
}

std::vector<std::string> shapes(const nn::SymbolicShapes& s) {
  std::vector<std::string> out;
  for (const auto& p : s.params) out.push_back(p.name + " " + p.shape.str());
  return out;
}

// Everything that would show an evaluation or a compile.
struct Work {
  RefStats ref = ref_stats();
  CpuJitStats cpu = cpu_jit_stats();
  KernelCacheStats cache = KernelCache::global().stats();
};
void require_no_work(const Work& before) {
  CHECK(ref_stats().realizations == before.ref.realizations);
  CHECK(cpu_jit_stats().realizations == before.cpu.realizations);
  CHECK(cpu_jit_stats().kernels_launched == before.cpu.kernels_launched);
  CHECK(cpu_jit_stats().kernels_compiled == before.cpu.kernels_compiled);
  CHECK(cpu_jit_stats().matmuls == before.cpu.matmuls);
  CHECK(KernelCache::global().stats().compiles == before.cache.compiles);
  CHECK(KernelCache::global().stats().misses == before.cache.misses);
}

// A real model: weights initialized and one forward computed, on the interpreter.
template <class Net>
void run_forward(Net& net, const Tensor& x) {
  BackendOverride interp(ref_backend());
  Tensor y = net(x);
  y.eval();
}

const aot::ExportOptions kTrainSgd{.name = "mlp", .backward = true, .optimizer = aot::sgd({.lr = 0.1, .momentum = 0.9}),
                                   .cuda = false};

}  // namespace

TEST_CASE("the shape pass sizes every parameter from the type and the input shape", "[aot][symbolic]") {
  Work before;
  nn::SymbolicShapes s = nn::infer_shapes(aot_models::mlp_expr(), aot_models::mlp_options(), Shape{64, 20});
  CHECK(s.output == Shape{64, 10});
  CHECK(shapes(s) == std::vector<std::string>{"W1 [20, 256]", "b1 [256]", "W2 [256, 10]", "b2 [10]"});
  // First values as torch.nn.Linear's: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for a weight and the bias after it.
  CHECK(s.find("W1")->init_bound == Approx(1 / std::sqrt(20.0)));
  CHECK(s.find("b1")->init_bound == Approx(1 / std::sqrt(20.0)));
  CHECK(s.find("W2")->init_bound == Approx(0.0625));
  CHECK(s.find("b2")->init_bound == Approx(0.0625));
  CHECK(s.find("W1")->inferred);
  CHECK(s.find("X") == nullptr);  // the input is not a parameter

  // Batched inputs broadcast through the matmuls.
  CHECK(nn::infer_shapes(aot_models::mlp_expr(), aot_models::mlp_options(), Shape{8, 64, 20}).output == Shape{8, 64, 10});

  // W % X: the weight takes its input width from the rows of the operand on its right.
  auto left = param<"W"> % param<"X"> + param<"c">;
  nn::SymbolicShapes l = nn::infer_shapes(left, {.widths = {{"W", 5}}}, Shape{3, 7});
  CHECK(shapes(l) == std::vector<std::string>{"W [5, 3]", "c [7]"});
  CHECK(l.output == Shape{5, 7});

  // A captured tensor gives its shape only: a lazy one stays lazy.
  Tensor scale = ones({4}) * 3.0;
  auto scaled = param<"X"> * scale + param<"b">;
  nn::SymbolicShapes sc = nn::infer_shapes(scaled, {}, Shape{2, 4});
  CHECK(shapes(sc) == std::vector<std::string>{"b [4]"});
  CHECK(sc.find("b")->init_bound == 0);  // no matmul before it: zeros
  CHECK_FALSE(scale.is_realized());
  require_no_work(before);
}

TEST_CASE("a model keeps the shapes it has and the pass checks the input against them", "[aot][symbolic]") {
  auto net = aot_models::make_mlp();
  const std::uint64_t evaluations = ref_stats().realizations;
  run_forward(net, randn({2, 20}));
  CHECK(ref_stats().realizations > evaluations);  // the counter the no-work checks rely on does count
  nn::SymbolicShapes s = net->infer_shapes({5, 20});
  CHECK(s.output == Shape{5, 10});
  CHECK(shapes(s) == std::vector<std::string>{"W1 [20, 256]", "b1 [256]", "W2 [256, 10]", "b2 [10]"});
  CHECK_FALSE(s.find("W1")->inferred);
  // 3 features where the weights take 20: the message names the symbols and both shapes.
  REQUIRE_THROWS_AS(net->infer_shapes({5, 3}), ShapeError);
  CHECK_THROWS_WITH(net->infer_shapes({5, 3}),
                    "net: in X % W1: matmul: shapes [5, 3] and [20, 256] cannot be multiplied: inner dimensions 3 and "
                    "20 differ");
}

TEST_CASE("exporting a symbolic MLP evaluates nothing and compiles nothing", "[aot][symbolic]") {
  fs::path dir = fresh_dir("nowork");

  SECTION("from the expression and the input shape alone") {
    Work before;
    aot::Manifest m = aot::export_symbolic(aot_models::mlp_expr(), aot_models::mlp_options(), Shape{64, 20}, dir,
                                           kTrainSgd);
    require_no_work(before);
    CHECK(m.kernels.size() >= 4);
    CHECK(fs::exists(dir / "mlp.o"));
  }
  SECTION("from a model that never ran, with a lazy example input") {
    auto net = aot_models::make_mlp();
    Tensor x = randn({64, 20}) * 2.0;
    REQUIRE_FALSE(x.is_realized());
    Work before;
    aot::Manifest m = aot::export_kernels(net, {x}, dir, kTrainSgd);
    require_no_work(before);
    CHECK(m.kernels.size() >= 4);
    // The model and the input are as they were: the trace used stand-ins.
    for (auto& [n, p] : net->named_parameters()) {
      INFO(n);
      CHECK_FALSE(p.is_initialized());
    }
    CHECK_FALSE(x.is_realized());
  }
  fs::remove_all(dir);
}

TEST_CASE("a symbolic export has the kernels of an export after a real forward", "[aot][symbolic]") {
  fs::path a = fresh_dir("sym"), b = fresh_dir("real"), c = fresh_dir("model");
  manual_seed(11);
  auto net = aot_models::make_mlp();
  Tensor x = randn({64, 20});
  run_forward(net, x);
  auto traced_path = [&](const fs::path& dir, const aot::ExportOptions& o) {  // the tracer on the model as it runs
    return aot::export_traced([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{net(in[0])}; }, {x}, dir, o,
                              net->parameters());
  };

  SECTION("forward") {
    aot::ExportOptions o{.name = "mlp", .cuda = false};
    aot::Manifest sym = aot::export_symbolic(aot_models::mlp_expr(), aot_models::mlp_options(), Shape{64, 20}, a, o);
    aot::Manifest real = traced_path(b, o);
    aot::Manifest model = aot::export_kernels(net, {x}, c, o);
    REQUIRE(!sym.kernels.empty());
    CHECK(keys(sym) == keys(real));
    CHECK(keys(model) == keys(real));
  }
  SECTION("forward, backward and SGD steps") {
    aot::Manifest sym = aot::export_symbolic(aot_models::mlp_expr(), aot_models::mlp_options(), Shape{64, 20}, a,
                                             kTrainSgd);
    aot::Manifest real = traced_path(b, kTrainSgd);
    aot::Manifest model = aot::export_kernels(net, {x}, c, kTrainSgd);
    REQUIRE(!sym.kernels.empty());
    CHECK(keys(sym) == keys(real));
    CHECK(keys(model) == keys(real));
  }
  for (auto& d : {a, b, c}) fs::remove_all(d);
}

TEST_CASE("an optimizer in the export adds the kernels of its steps", "[aot][symbolic]") {
  fs::path dir = fresh_dir("opt");
  auto export_with = [&](std::shared_ptr<const aot::OptimizerSpec> opt) {
    aot::ExportOptions o{.name = "mlp", .backward = true, .optimizer = std::move(opt), .cuda = false};
    return aot::export_symbolic(aot_models::mlp_expr(), aot_models::mlp_options(), Shape{64, 20}, dir, o);
  };
  std::vector<std::string> backward = keys(export_with(nullptr));
  aot::Manifest plain = export_with(aot::sgd({.lr = 0.1}));
  aot::Manifest momentum = export_with(aot::sgd({.lr = 0.1, .momentum = 0.9}));
  aot::Manifest adam = export_with(aot::adam({.lr = 1e-3}));
  auto extra = [&](const aot::Manifest& m) {
    std::vector<std::string> ks = keys(m);
    REQUIRE(ks.size() > backward.size());
    CHECK(std::vector<std::string>(ks.begin(), ks.begin() + static_cast<long>(backward.size())) == backward);
    std::vector<std::string> nodes;
    for (size_t i = backward.size(); i < m.kernels.size(); ++i) nodes.push_back(m.kernels[i].role + " " + m.kernels[i].node);
    return nodes;
  };
  auto count = [](const std::vector<std::string>& v, const std::string& s) { return std::count(v.begin(), v.end(), s); };
  // w -= lr * grad, one fused kernel per layout of (w, grad): at most one per parameter.
  std::vector<std::string> p = extra(plain);
  CHECK(count(p, "elementwise sub") == static_cast<long>(p.size()));
  CHECK(p.size() <= 4);
  // Momentum: the buffer's update (buf * momentum + grad) on top.
  std::vector<std::string> m = extra(momentum);
  CHECK(m.size() > p.size());
  CHECK(count(m, "elementwise add") >= 1);
  // Adam: both moments, their bias corrections and the update.
  std::vector<std::string> a = extra(adam);
  CHECK(a.size() > m.size());
  CHECK(count(a, "elementwise sub") >= 1);
  CHECK(count(a, "elementwise add") >= 2);
  fs::remove_all(dir);
}

TEST_CASE("tracing an optimizer step leaves the model's weights and gradients as they were", "[aot][symbolic]") {
  fs::path dir = fresh_dir("restore");
  manual_seed(5);
  auto net = aot_models::make_mlp();
  Tensor x = randn({64, 20});
  {
    BackendOverride interp(ref_backend());
    Tensor y = net(x);
    y.sum().backward();
  }
  std::map<std::string, std::vector<float>> values, grads;
  std::map<std::string, const TensorImpl*> grad_ids;
  for (auto& [n, p] : net->named_parameters()) {
    values[n] = p.to_vector<float>();
    grads[n] = p.grad().to_vector<float>();
    grad_ids[n] = p.grad().impl();
  }
  Tensor pending = net->named_parameters()["b2"] * 2.0;  // a lazy reader of a weight's memory
  Work before;
  aot::export_kernels(net, {x}, dir, {.name = "mlp", .backward = true, .optimizer = aot::adam({}), .cuda = false});
  require_no_work(before);
  CHECK_FALSE(pending.is_realized());
  for (auto& [n, p] : net->named_parameters()) {
    INFO(n);
    CHECK(p.to_vector<float>() == values[n]);
    CHECK(p.grad().impl() == grad_ids[n]);
    CHECK(p.grad().to_vector<float>() == grads[n]);
  }
  BackendOverride interp(ref_backend());
  std::vector<float> twice = pending.to_vector<float>();
  for (size_t i = 0; i < twice.size(); ++i) CHECK(twice[i] == 2 * values["b2"][i]);
  fs::remove_all(dir);
}

TEST_CASE("a symbolic export's shape mistakes are ShapeErrors that name the symbol", "[aot][symbolic][error]") {
  fs::path dir = fresh_dir("errors");
  aot::ExportOptions o{.name = "mlp", .cuda = false};
  auto expect = [&](auto&& fn, const std::string& message) {
    REQUIRE_THROWS_AS(fn(), ShapeError);
    CHECK_THROWS_WITH(fn(), message);
    CHECK_FALSE(fs::exists(dir));  // nothing written
  };
  SECTION("a matmul weight without a width") {
    expect([&] { aot::export_symbolic(aot_models::mlp_expr(), {.widths = {{"W1", 256}}}, Shape{64, 20}, dir, o); },
           "mlp: the output width of 'W2' is unknown; pass it as widths = {{\"W2\", N}}");
  }
  SECTION("an input without dimensions") {
    expect([&] { aot::export_symbolic(aot_models::mlp_expr(), aot_models::mlp_options(), Shape{}, dir, o); },
           "mlp: cannot infer the shape of symbol 'W1' (MatMul): the operand beside it, X, has shape [] and no "
           "dimension to size it by");
  }
  SECTION("an input of the wrong rank for the weights a model has") {
    auto net = aot_models::make_mlp();
    run_forward(net, randn({2, 20}));
    expect([&] { aot::export_kernels(net, {randn({64, 20, 3})}, dir, o); },
           "net: in X % W1: matmul: shapes [64, 20, 3] and [20, 256] cannot be multiplied: inner dimensions 3 and 20 "
           "differ");
  }
  SECTION("a parameter with no tensor beside it") {
    auto e = param<"X"> % param<"W"> + exp(param<"c">);
    expect([&] { aot::export_symbolic(e, {.widths = {{"W", 4}}}, Shape{2, 3}, dir, o); },
           "mlp: cannot infer the shape of symbol 'c' (unary use): it needs a tensor operand beside it in a binary op");
  }
  SECTION("operands that do not broadcast") {
    Tensor t = randn({7});
    auto e = param<"X"> % param<"W"> + t;
    expect([&] { aot::export_symbolic(e, {.widths = {{"W", 4}}}, Shape{2, 3}, dir, o); },
           "mlp: in X % W + a tensor of shape [7]: add: shapes [2, 4] and [7] do not broadcast: dimension 1 is 4 vs 7 "
           "(sizes must match or one must be 1)");
  }
}

TEST_CASE("a symbolic export's other mistakes are clear errors", "[aot][symbolic][error]") {
  fs::path dir = fresh_dir("errors2");
  aot::ExportOptions o{.name = "mlp", .cuda = false};
  CHECK_THROWS_AS(aot::export_symbolic(aot_models::mlp_expr(), {.widths = {{"W1", 256}, {"W2", 10}, {"W3", 4}}},
                                       Shape{64, 20}, dir, o),
                  ValueError);
  CHECK_THROWS_WITH(aot::export_symbolic(aot_models::mlp_expr(), {.widths = {{"W1", 256}, {"W2", 10}, {"W3", 4}}},
                                         Shape{64, 20}, dir, o),
                    "mlp: widths names 'W3', which is not a symbol of the expression (its symbols: X, W1, b1, W2, b2)");
  CHECK_THROWS_WITH(aot::export_symbolic(aot_models::mlp_expr(), {.input = "x", .widths = {{"W1", 256}, {"W2", 10}}},
                                         Shape{64, 20}, dir, o),
                    "mlp: the expression has no symbol 'x' for its input (SymbolicOptions::input); its symbols are X, "
                    "W1, b1, W2, b2: set .input to the one that stands for the input");
  auto net = aot_models::make_mlp();
  CHECK_THROWS_WITH(aot::export_kernels(net, {randn({4, 20}), randn({4, 20})}, dir, o),
                    "net: a symbolic model takes one input ('X'), but the export got 2 example inputs");
  CHECK_THROWS_WITH(aot::export_symbolic(aot_models::mlp_expr(), aot_models::mlp_options(), Shape{64, 20}, dir,
                                         {.name = "mlp", .optimizer = aot::sgd({.lr = 0.1}), .cuda = false}),
                    "aot export: an optimizer step ('sgd') needs gradients: set .backward = true as well");
  CHECK_FALSE(fs::exists(dir));
}

TEST_CASE("optimizers from text, as command lines give them", "[aot][error]") {
  CHECK(aot::parse_optimizer("sgd")->name == "sgd");
  CHECK(aot::parse_optimizer("adamw:lr=0.002,weight_decay=0.1")->name == "adamw");
  // The settings reach the optimizer: a step with lr 0.5 moves w = 1 with gradient 2 to 0.
  nn::Parameter w(ones({3}));
  w.set_grad(full({3}, 2.0));
  {
    BackendOverride interp(ref_backend());
    aot::parse_optimizer("sgd:lr=0.5")->make({w})->step();
    CHECK(w.to_vector<float>() == std::vector<float>{0, 0, 0});
  }
  CHECK_THROWS_WITH(aot::parse_optimizer("rmsprop:lr=0.1"),
                    "optimizer 'rmsprop:lr=0.1': unknown kind 'rmsprop'; use sgd, adam or adamw (e.g. sgd:lr=0.1)");
  CHECK_THROWS_WITH(aot::parse_optimizer("sgd:beta1=0.9"),
                    "optimizer 'sgd:beta1=0.9': unknown setting 'beta1'; sgd takes lr, momentum, weight_decay, nesterov");
  CHECK_THROWS_WITH(aot::parse_optimizer("sgd:lr=fast"),
                    "optimizer 'sgd:lr=fast': 'lr=fast' is not key=number (e.g. sgd:lr=0.1,momentum=0.9)");
  CHECK_THROWS_AS(aot::parse_optimizer("sgd:lr"), ValueError);
}
