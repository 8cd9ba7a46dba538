// Optimizer and scheduler state: state_dict() saved to a file and loaded into
// a fresh optimizer continues the updates exactly; parameter groups give
// AdamW's weight decay per group.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "dsl/io.h"
#include "dsl/tessel.h"
#include "dsl/train/lr_scheduler.h"
#include "dsl/train/optimizer.h"

using namespace tessel;
namespace fs = std::filesystem;

namespace {

fs::path temp_file(const std::string& name) {
  return fs::temp_directory_path() / fmt::format("tessel_optim_state_{}_{}.safetensors", name, ::getpid());
}

// Two parameters with fixed values; gradient i of step s is a fixed function of (i, s).
std::vector<nn::Parameter> make_params() {
  return {nn::Parameter(tensor({{1., -2.}, {0.5, 3.}})), nn::Parameter(tensor({0.25, -1., 2.}))};
}
void set_grads(const std::vector<nn::Parameter>& ps, int step) {
  for (size_t i = 0; i < ps.size(); ++i) {
    std::vector<float> g(static_cast<size_t>(ps[i].numel()));
    for (size_t j = 0; j < g.size(); ++j) g[j] = static_cast<float>((j + 1) * (step % 3 + 1)) * (i ? -0.1f : 0.2f);
    ps[i].set_grad(from_vector<float>(g, ps[i].shape()));
  }
}
std::vector<float> values(const Tensor& t) { return t.data().to_vector<float>(); }
std::vector<nn::Parameter> copy_params(const std::vector<nn::Parameter>& ps) {
  std::vector<nn::Parameter> out;
  for (auto& p : ps) out.emplace_back(p.data().clone());
  return out;
}

// Trains `a` 3 steps, saves its state, loads it into `b` (over copies of the
// parameters), then steps both 3 more times: the parameters stay equal.
template <class Make>
void check_resume(Make make) {
  auto pa = make_params();
  auto a = make(pa);
  for (int s = 0; s < 3; ++s) {
    set_grads(pa, s);
    a.step();
  }
  auto file = temp_file("resume");
  save(a.state_dict(), file);
  auto pb = copy_params(pa);
  auto b = make(pb);
  b.load_state_dict(load_dict(file));
  fs::remove(file);
  for (int s = 3; s < 6; ++s) {
    set_grads(pa, s);
    set_grads(pb, s);
    a.step();
    b.step();
  }
  for (size_t i = 0; i < pa.size(); ++i) CHECK(values(pa[i]) == values(pb[i]));
  CHECK(a.state_dict()["step"].template item<int64_t>() == 6);
  CHECK(b.state_dict()["step"].template item<int64_t>() == 6);
}

}  // namespace

TEST_CASE("Adam's state_dict holds step, lr and both moments under PyTorch's names", "[train][adam][state]") {
  auto ps = make_params();
  optim::Adam opt(ps, {.lr = 0.01});
  CHECK(opt.state_dict().keys() == std::vector<std::string>{"step", "lr"});  // no moments before a step
  set_grads(ps, 0);
  opt.step();
  auto sd = opt.state_dict();
  CHECK(sd.keys() == std::vector<std::string>{"step", "lr", "exp_avg.0", "exp_avg_sq.0", "exp_avg.1", "exp_avg_sq.1"});
  CHECK(sd["step"].dtype() == DType::i64);
  CHECK(sd["step"].item<int64_t>() == 1);
  CHECK(sd["lr"].item<double>() == 0.01);
  CHECK(sd["exp_avg.1"].shape() == Shape{3});
  // The moments are copies: a later step does not change a saved state.
  std::vector<float> m = sd["exp_avg.0"].to_vector<float>();
  set_grads(ps, 1);
  opt.step();
  CHECK(sd["exp_avg.0"].to_vector<float>() == m);
}

TEST_CASE("AdamW resumed from a saved state_dict takes the same steps", "[train][adam][state]") {
  check_resume([](std::vector<nn::Parameter> ps) { return optim::AdamW(std::move(ps), {.lr = 0.05, .weight_decay = 0.1}); });
}

TEST_CASE("SGD with momentum resumed from a saved state_dict takes the same steps", "[train][sgd][state]") {
  check_resume([](std::vector<nn::Parameter> ps) { return optim::SGD(std::move(ps), {.lr = 0.1, .momentum = 0.9}); });
}

TEST_CASE("a state_dict that does not fit the optimizer is a ValueError naming the key", "[train][state][error]") {
  auto ps = make_params();
  optim::Adam opt(ps, {});
  auto one = OrderedDict<Tensor>{{"exp_avg.0", zeros({2, 2})}, {"exp_avg_sq.0", zeros({2, 2})}};
  CHECK_NOTHROW(opt.load_state_dict(one));
  CHECK_THROWS_WITH(opt.load_state_dict({{"exp_avg.1", zeros({2, 2})}, {"exp_avg_sq.1", zeros({2, 2})}}),
                    Catch::Contains("'exp_avg.1' has shape [2, 2]"));
  CHECK_THROWS_WITH(opt.load_state_dict({{"exp_avg.2", zeros({3})}}), Catch::Contains("names parameter 2"));
  CHECK_THROWS_WITH(opt.load_state_dict({{"momentum_buffer.0", zeros({2, 2})}}),
                    Catch::Contains("unexpected key 'momentum_buffer.0'"));
  CHECK_THROWS_WITH(opt.load_state_dict({{"exp_avg.0", zeros({2, 2})}}), Catch::Contains("not exp_avg_sq"));
}

TEST_CASE("AdamW's parameter groups decay each group by its own rate", "[train][adam]") {
  nn::Parameter w(tensor({1., 1.})), b(tensor({1., 1.}));
  auto opt = optim::AdamW(std::vector<optim::ParamGroup>{{{w}, 0.5}, {{b}, 0.0}}, {.lr = 0.1});
  CHECK(opt.weight_decay(0) == 0.5);
  CHECK(opt.weight_decay(1) == 0.0);
  w.set_grad(zeros({2}));
  b.set_grad(zeros({2}));
  opt.step();  // zero gradients: only the decay moves a weight, by lr * wd
  CHECK(values(w)[0] == Approx(1 - 0.1 * 0.5));
  CHECK(values(b)[0] == 1.0f);
  // A group without a rate of its own takes the optimizer's.
  auto opt2 = optim::AdamW(std::vector<optim::ParamGroup>{{{w}, std::nullopt}, {{b}, 0.0}}, {.lr = 0.1, .weight_decay = 0.2});
  CHECK(opt2.weight_decay(0) == 0.2);
  CHECK(opt2.params().size() == 2);
}

TEST_CASE("a scheduler's state_dict resumes its epoch and sets the lr for it", "[train][state]") {
  auto ps = make_params();
  optim::Adam a(ps, {.lr = 1.0});
  optim::CosineWithWarmup sa(a, 10, 100, 0.1);
  for (int i = 0; i < 37; ++i) sa.step();
  auto file = temp_file("sched");
  save(sa.state_dict(), file);
  optim::Adam b(ps, {.lr = 1.0});
  optim::CosineWithWarmup sb(b, 10, 100, 0.1);
  sb.load_state_dict(load_dict(file));
  fs::remove(file);
  CHECK(sb.last_epoch() == 37);
  CHECK(b.lr() == a.lr());
  sa.step();
  sb.step();
  CHECK(b.lr() == a.lr());
  CHECK_THROWS_AS(sb.load_state_dict({}), ValueError);
}
