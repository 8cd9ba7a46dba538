// assign_all_ and the optimizers built on it: every update of a step in one
// realization, written into the parameters' own memory where that is safe,
// with the numbers of the same updates made one assign_ at a time.
#include <catch2/catch.hpp>

#include <cstring>

#include "codegen/backend.h"
#include "codegen/cpu/cpu_backend.h"
#include "dsl/tessel.h"
#include "dsl/train/optimizer.h"
#include "runtime/host_allocator.h"

using namespace tessel;

namespace {

std::vector<float> values(const Tensor& t) { return t.data().contiguous().to_vector<float>(); }

// The backends to check: the interpreter, and the compiled one where built.
std::vector<Backend*> backends() {
  std::vector<Backend*> b{&ref_backend()};
  if (cpu_jit_backend()) b.push_back(cpu_jit_backend());
  return b;
}

bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("assign_all_ computes every value from the memory as it was before any write", "[train][assign_all]") {
  for (Backend* be : backends()) {
    BackendOverride o(*be);
    NoGradGuard g;
    Tensor a = tensor({1., 2.}), b = tensor({10., 20.});
    a.eval();
    b.eval();
    std::vector<Tensor> v{b + 1, a + 1};
    assign_all_({a, b}, std::move(v));
    CHECK(values(a) == std::vector<float>{11, 21});
    CHECK(values(b) == std::vector<float>{2, 3});
  }
}

TEST_CASE("assign_all_ does not write over a destination its value reads transposed", "[train][assign_all]") {
  for (Backend* be : backends()) {
    BackendOverride o(*be);
    NoGradGuard g;
    Tensor w = tensor({{1., 2.}, {3., 4.}});
    w.eval();
    std::vector<Tensor> v{w.t() + 0};
    assign_all_({w}, std::move(v));
    CHECK(values(w) == std::vector<float>{1, 3, 2, 4});
  }
}

TEST_CASE("assign_all_ leaves pending readers and held values their own numbers", "[train][assign_all]") {
  for (Backend* be : backends()) {
    BackendOverride o(*be);
    NoGradGuard g;
    Tensor w = tensor({1., 2., 3.});
    w.eval();
    Tensor y = w * 2;      // lazy: must see w before the write
    Tensor held = w - 1;   // the caller keeps the value: it must not become w's memory
    std::vector<Tensor> v{held};
    assign_all_({w}, std::move(v));
    CHECK(values(w) == std::vector<float>{0, 1, 2});
    w -= 5;
    CHECK(values(y) == std::vector<float>{2, 4, 6});
    CHECK(values(held) == std::vector<float>{0, 1, 2});
  }
}

TEST_CASE("assign_all_ refuses mismatched lists", "[train][assign_all][error]") {
  Tensor w = zeros({2});
  std::vector<Tensor> v;
  CHECK_THROWS_WITH(assign_all_({w}, std::move(v)),
                    "assign_all_: 1 destinations but 0 values; pass one value per destination");
}

namespace {

// Random parameters with gradients, the same for every call with one seed.
std::vector<nn::Parameter> params_with_grads(uint64_t seed) {
  manual_seed(seed);
  std::vector<nn::Parameter> ps;
  for (Shape s : {Shape{64, 33}, Shape{33}, Shape{7, 64}}) {
    nn::Parameter p(randn(s));
    p.data().eval();
    ps.push_back(p);
  }
  return ps;
}
void set_grads(std::vector<nn::Parameter>& ps, uint64_t seed) {
  manual_seed(seed);
  for (auto& p : ps) {
    Tensor g = randn(p.shape());
    g.eval();
    p.set_grad(g);
  }
}

// The updates written out one assign_ at a time (the optimizers' rules
// before they batched them).
struct ByHand {
  double lr, momentum = 0, wd = 0;
  bool nesterov = false;
  std::vector<Tensor> buf;
  void sgd(std::vector<nn::Parameter>& ps) {
    NoGradGuard g;
    buf.resize(ps.size());
    for (size_t i = 0; i < ps.size(); ++i) {
      Tensor w = ps[i].data(), d = ps[i].grad();
      if (wd != 0) d = d + w * wd;
      if (momentum != 0) {
        if (!buf[i].defined()) buf[i] = d.clone();
        else buf[i].assign_(buf[i] * momentum + d);
        d = nesterov ? d + buf[i] * momentum : buf[i];
      }
      w -= d * lr;
    }
  }
};

}  // namespace

TEST_CASE("SGD's batched in-place step is bit-equal to one assign_ per parameter", "[train][assign_all][sgd]") {
  struct Case {
    double momentum, wd;
    bool nesterov;
  };
  for (Backend* be : backends()) {
    BackendOverride o(*be);
    for (Case c : {Case{0, 0, false}, Case{0.9, 0, false}, Case{0.9, 1e-2, true}}) {
      auto a = params_with_grads(1), b = params_with_grads(1);
      optim::SGD opt(a, {.lr = 0.05, .momentum = c.momentum, .weight_decay = c.wd, .nesterov = c.nesterov});
      ByHand hand{.lr = 0.05, .momentum = c.momentum, .wd = c.wd, .nesterov = c.nesterov};
      for (int step = 0; step < 3; ++step) {
        set_grads(a, 10 + step);
        set_grads(b, 10 + step);
        opt.step();
        hand.sgd(b);
      }
      INFO("backend " << be->name() << ", momentum " << c.momentum << ", nesterov " << c.nesterov);
      for (size_t i = 0; i < a.size(); ++i) CHECK(bit_equal(values(a[i]), values(b[i])));
    }
  }
}

TEST_CASE("Adam and AdamW's batched in-place steps are bit-equal to one assign_ per parameter", "[train][assign_all][adam]") {
  for (Backend* be : backends()) {
    BackendOverride o(*be);
    for (bool decoupled : {false, true}) {
      auto a = params_with_grads(2), b = params_with_grads(2);
      const double lr = 1e-2, b1 = 0.9, b2 = 0.99, eps = 1e-8, wd = 0.1;
      optim::AdamOptions opts{.lr = lr, .beta1 = b1, .beta2 = b2, .eps = eps, .weight_decay = wd};
      opts.decoupled = decoupled;
      optim::Adam opt(a, opts);
      std::vector<Tensor> m(b.size()), v(b.size());
      for (int t = 1; t <= 3; ++t) {
        set_grads(a, 20 + t);
        set_grads(b, 20 + t);
        opt.step();
        NoGradGuard g;
        const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
        for (size_t i = 0; i < b.size(); ++i) {
          Tensor w = b[i].data(), gr = b[i].grad();
          if (!decoupled) gr = gr + w * wd;
          if (!m[i].defined()) {
            m[i] = zeros(w.shape());
            v[i] = zeros(w.shape());
          }
          m[i].assign_(m[i] * b1 + gr * (1 - b1));
          v[i].assign_(v[i] * b2 + (gr * gr) * (1 - b2));
          Tensor step = (m[i] / bc1) / ((v[i] / bc2).sqrt() + eps) * lr;
          w.assign_((decoupled ? w * (1 - lr * wd) : w) - step);
        }
      }
      INFO("backend " << be->name() << ", decoupled " << decoupled);
      for (size_t i = 0; i < a.size(); ++i) CHECK(bit_equal(values(a[i]), values(b[i])));
    }
  }
}

TEST_CASE("a steady SGD or Adam step on the compiled backend allocates no memory", "[train][assign_all]") {
  if (!cpu_jit_backend()) return;  // no compiled CPU backend in this build
  BackendOverride o(*cpu_jit_backend());
  auto ps = params_with_grads(3);
  set_grads(ps, 4);
  optim::SGD sgd(ps, {.lr = 0.1, .momentum = 0.9});
  optim::Adam adam(ps, {.lr = 1e-3});
  sgd.step();  // the first steps make the momentum and moment buffers
  adam.step();
  const uint64_t before = host_allocator_stats().allocations;
  sgd.step();
  adam.step();
  CHECK(host_allocator_stats().allocations == before);
}
