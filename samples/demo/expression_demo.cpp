// Builds an expression tree, shows its IR, evaluates it and prints values.
#include "dsl/tessel.h"

using namespace tessel;

int main() {
  manual_seed(0);
  Tensor x = tensor({{1., 2.}, {3., 4.}});
  Tensor w = tensor({{0.5, -1.}, {2., 0.25}});
  Tensor b = tensor({1., -1.});
  auto e = relu(x * w + b);
  Tensor y = e;
  fmt::print("IR of relu(x * w + b):\n{}", ir::to_string(y.node()));
  fmt::print("y = {}\n", y);
  fmt::print("y.sum() = {}\n", y.sum());
  fmt::print("structural key: {:#x}\n", decltype(e)::structural_key);
  Tensor X = rand({2, 20});
  fmt::print("{}\n", X.matmul(rand({20, 3})).shape());
  Tensor r = randn({3, 4});
  fmt::print("{}\n{}\n", r, arange(4));
  Tensor a = ones({2, 3});
  a[0][1] = 42;
  a.data() += 1;
  fmt::print("{}\n", a);
  Tensor s = a.sum();
  while (s > 1) s /= 2;
  fmt::print("{}\n", s);
  Tensor p = rand({3}).requires_grad_();
  Tensor loss = (p * p).sum();
  fmt::print("{}\n", loss);
  loss.backward();
  fmt::print("grad {} vs 2p {}\n", p.grad(), p.data() * 2);
}
