// Post-accumulate-grad hooks and queue_callback (dsl/grad_hooks.h): when they
// run, what they see, and that a backward realized in stages for them gives
// the gradients an unhooked backward gives.
#include "dsl/grad_hooks.h"
#include "tests/support/tensor_testing.h"

using namespace tessel;
using namespace tessel::testing;

namespace {
Tensor leaf(std::vector<double> v, Shape s) { return from_vector<double>(v, s).requires_grad_(); }

struct Mlp {
  Tensor w1, b1, w2, b2, x;
  Mlp() {
    manual_seed(3);
    w1 = randn({8, 5}, DType::f64).requires_grad_();
    b1 = randn({8}, DType::f64).requires_grad_();
    w2 = randn({3, 8}, DType::f64).requires_grad_();
    b2 = randn({3}, DType::f64).requires_grad_();
    x = randn({4, 5}, DType::f64);
  }
  Tensor loss() const { return (relu(x.matmul(w1.t()) + b1).matmul(w2.t()) + b2).tanh().sum(); }
  std::vector<Tensor> leaves() const { return {w1, b1, w2, b2}; }
};
}  // namespace

TEST_CASE("grad hooks: run once per backward, after accumulation, last layer first", "[autograd]") {
  Mlp m;
  std::vector<std::string> order;
  std::vector<autograd::HookHandle> hs;
  const char* names[] = {"w1", "b1", "w2", "b2"};
  for (size_t i = 0; i < 4; ++i)
    hs.push_back(autograd::register_post_accumulate_grad_hook(m.leaves()[i], [&, i](const Tensor& t) {
      CHECK(t.is_same(m.leaves()[i]));
      CHECK(t.grad().defined());
      CHECK(t.grad().is_realized());
      order.push_back(names[i]);
    }));
  m.loss().backward();
  REQUIRE(order.size() == 4);
  CHECK(order.back() == "w1");  // the first layer's weight is complete last
  CHECK(std::find(order.begin(), order.end(), "w2") < std::find(order.begin(), order.end(), "b1"));
  order.clear();
  m.loss().backward();  // accumulates: each hook again, once
  CHECK(order.size() == 4);
  for (auto& h : hs) h.remove();
  order.clear();
  m.loss().backward();
  CHECK(order.empty());
}

TEST_CASE("grad hooks: a staged backward gives the same gradients as one realization", "[autograd]") {
  Mlp plain, hooked;
  plain.loss().backward();
  int calls = 0;
  std::vector<autograd::HookHandle> hs;
  for (auto& t : hooked.leaves())
    hs.push_back(autograd::register_post_accumulate_grad_hook(t, [&](const Tensor&) { ++calls; }));
  Tensor l = hooked.loss();
  l.backward();
  CHECK(calls == 4);
  CHECK(l.is_realized());
  for (size_t i = 0; i < 4; ++i) CHECK(vals(hooked.leaves()[i].grad()) == vals(plain.leaves()[i].grad()));
  for (auto& h : hs) h.remove();
}

TEST_CASE("grad hooks: a hook sees its own gradient, the others' may still be pending", "[autograd]") {
  Tensor x = leaf({1, 2}, {2}), y = leaf({3, 4}, {2});
  bool y_seen_before_x = false;
  auto hx = autograd::register_post_accumulate_grad_hook(x, [&](const Tensor&) { y_seen_before_x = y.grad().defined(); });
  ((x * 2).exp().sum() * (y * y).sum()).backward();
  CHECK(vals(x.grad()).size() == 2);
  const double S = std::exp(2.0) + std::exp(4.0);
  CHECK(vals(y.grad())[0] == Approx(6 * S));
  CHECK(vals(y.grad())[1] == Approx(8 * S));
  (void)y_seen_before_x;  // either order is a valid reverse sweep; the values are what matter
  hx.remove();
}

TEST_CASE("queue_callback runs once at the end of backward, after every hook", "[autograd]") {
  Mlp m;
  std::vector<std::string> events;
  std::vector<autograd::HookHandle> hs;
  for (auto& t : m.leaves())
    hs.push_back(autograd::register_post_accumulate_grad_hook(t, [&](const Tensor&) {
      if (events.empty()) autograd::queue_callback([&] { events.push_back("end"); });
      events.push_back("hook");
    }));
  m.loss().backward();
  CHECK(events == std::vector<std::string>{"hook", "hook", "hook", "hook", "end"});
  for (auto& h : hs) h.remove();
  CHECK_THROWS_MATCHES(autograd::queue_callback([] {}), ValueError,
                       Catch::Message("queue_callback: no backward() is running on this thread; call it from a gradient "
                                      "hook"));
}

TEST_CASE("grad hooks: only leaves that require grad take one, and a throwing hook ends backward", "[autograd]") {
  Tensor x = leaf({1, 2}, {2});
  CHECK_THROWS_AS(autograd::register_post_accumulate_grad_hook(x * 2, [](const Tensor&) {}), ValueError);
  CHECK_THROWS_AS(autograd::register_post_accumulate_grad_hook(from_vector<double>({1}, {1}), [](const Tensor&) {}),
                  ValueError);
  auto h = autograd::register_post_accumulate_grad_hook(x, [](const Tensor&) { throw ValueError("from the hook"); });
  CHECK_THROWS_MATCHES((x * x).sum().backward(), ValueError, Catch::Message("from the hook"));
  h.remove();
  (x * x).sum().backward();  // a later backward is unaffected
}
