#include "error_testing.h"

using namespace tessel;

TEST_CASE("in-place on a leaf that requires grad", "[error]") {
  Tensor w = ones({3}).requires_grad_();
  REQUIRE_ERROR(w += 1, ValueError, "in-place", "leaf", "requires grad", ".data()");
}

TEST_CASE("in-place on a leaf that requires grad leaves it unchanged", "[error]") {
  Tensor w = ones({3}).requires_grad_();
  try {
    w *= 5;
  } catch (const ValueError&) {
  }
  CHECK(tessel::testing::vals(w) == std::vector<double>{1, 1, 1});
  CHECK(w.requires_grad());
}

TEST_CASE("fill_ on a leaf that requires grad", "[error]") {
  Tensor w = ones({3}).requires_grad_();
  REQUIRE_ERROR(w.fill_(0), ValueError, "leaf");
}

TEST_CASE("backward on a non-scalar without a gradient", "[error]") {
  Tensor x = ones({3}).requires_grad_();
  Tensor y = x * 2;
  REQUIRE_ERROR(y.backward(), ValueError, "backward", "one-element", "[3]");
}

TEST_CASE("backward on a tensor that does not require grad", "[error]") {
  Tensor y = ones({3}).sum();
  REQUIRE_ERROR(y.backward(), ValueError, "backward", "does not require grad");
}

TEST_CASE("backward on a tensor built under no_grad", "[error]") {
  Tensor x = ones({3}).requires_grad_();
  Tensor y;
  {
    NoGradGuard g;
    y = (x * 2).sum();
  }
  REQUIRE_ERROR(y.backward(), ValueError, "does not require grad", "NoGradGuard");
}

TEST_CASE("backward on a detached tensor", "[error]") {
  Tensor x = ones({3}).requires_grad_();
  REQUIRE_ERROR((x * 2).sum().detach().backward(), ValueError, "does not require grad");
}

TEST_CASE("backward on an undefined tensor", "[error]") {
  REQUIRE_ERROR(Tensor().backward(), ValueError, "undefined");
}

TEST_CASE("requires_grad_(false) on a non-leaf", "[error]") {
  Tensor x = ones({3}).requires_grad_();
  Tensor y = x * 2;
  REQUIRE_ERROR(y.requires_grad_(false), ValueError, "non-leaf", "detach");
}

TEST_CASE("writing into an element of a leaf that requires grad", "[error]") {
  Tensor w = ones({3}).requires_grad_();
  REQUIRE_ERROR(w[0] = 5, ValueError, "in-place", "view", "requires grad");
  CHECK(tessel::testing::vals(w) == std::vector<double>{1, 1, 1});
}

TEST_CASE("in-place on a transposed view of a leaf that requires grad", "[error]") {
  Tensor w = ones({2, 3}).requires_grad_();
  REQUIRE_ERROR(w.t() += 1, ValueError, "in-place", "view");
}

TEST_CASE("in-place on a reshaped view of a computed tensor that requires grad", "[error]") {
  Tensor w = ones({2, 3}).requires_grad_();
  Tensor h = w * 2;
  REQUIRE_ERROR(h.reshape({6}) *= 2, ValueError, "in-place", "view");
}

TEST_CASE("in-place on an element of a leaf works inside NoGradGuard", "[error]") {
  Tensor w = ones({3}).requires_grad_();
  {
    NoGradGuard g;
    w[0] = 5;
  }
  CHECK(tessel::testing::vals(w) == std::vector<double>{5, 1, 1});
  CHECK(w.requires_grad());
}

TEST_CASE("backward after an in-place change of a value the gradient needs", "[error]") {
  Tensor w = ones({2}, DType::f64).requires_grad_();
  Tensor loss = (w * w).sum();
  {
    NoGradGuard g;
    w += 1;  // the optimizer step came before backward
  }
  REQUIRE_ERROR(loss.backward(), ValueError, "backward", "modified in place", "[2]");
}

TEST_CASE("backward after an in-place change through data()", "[error]") {
  Tensor w = ones({2}, DType::f64).requires_grad_();
  Tensor c = tensor({1., 2.}, DType::f64);
  Tensor loss = (w * c).sum();  // d/dw reads c
  c.data() *= 3;
  REQUIRE_ERROR(loss.backward(), ValueError, "modified in place");
}

TEST_CASE("backward a second time through a spent graph", "[error]") {
  Tensor x = ones({3}).requires_grad_();
  Tensor y = (x * x).sum();
  y.backward();
  REQUIRE_ERROR(y.backward(), ValueError, "backward through the graph a second time", "retain_graph");
  // The gradient did not add up silently.
  CHECK(tessel::testing::vals(x.grad()) == std::vector<double>{2, 2, 2});
}
