#include "error_testing.h"

using namespace tessel;

TEST_CASE("matmul dtype mismatch", "[error]") {
  REQUIRE_ERROR(ones({2, 2}).matmul(ones({2, 2}, DType::f64)), DTypeError, "matmul", "f32", "f64");
}

TEST_CASE("matmul of bool tensors", "[error]") {
  Tensor b = ones({2, 2}) > 0;
  REQUIRE_ERROR(b.matmul(b), DTypeError, "matmul", "bool");
}

TEST_CASE("in-place dtype narrowing: int /= 2", "[error]") {
  Tensor i = tensor({1, 2, 3});
  REQUIRE_ERROR(i /= 2, DTypeError, "in-place", "f32", "i64");
  CHECK(tensor({1, 2}).dtype() == DType::i64);
}

TEST_CASE("in-place dtype narrowing: int *= 0.5", "[error]") {
  Tensor i = tensor({1, 2, 3});
  REQUIRE_ERROR(i *= 0.5, DTypeError, "in-place", "i64");
}

TEST_CASE("in-place dtype narrowing: int += float tensor", "[error]") {
  Tensor i = tensor({1, 2});
  REQUIRE_ERROR(i += tensor({0.5, 0.5}), DTypeError, "in-place", "f32", "i64");
}

TEST_CASE("in-place into bool from int", "[error]") {
  Tensor b = tensor({1, 0}) > 0;
  REQUIRE_ERROR(b += 1, DTypeError, "in-place", "bool");
}

TEST_CASE("in-place narrowing leaves the tensor unchanged", "[error]") {
  Tensor i = tensor({1, 2, 3});
  try {
    i /= 2;
  } catch (const DTypeError&) {
  }
  CHECK(tessel::testing::ivals(i) == std::vector<int64_t>{1, 2, 3});
}

TEST_CASE("mean of an int tensor", "[error]") {
  REQUIRE_ERROR(tensor({1, 2}).mean(), DTypeError, "mean", "i64", "floating");
}

TEST_CASE("mean of a bool tensor over a dim", "[error]") {
  Tensor b = tensor({{1, 0}}) > 0;
  REQUIRE_ERROR(b.mean({1}), DTypeError, "mean", "bool");
}

TEST_CASE("negation of a bool tensor", "[error]") {
  Tensor b = tensor({1, 0}) > 0;
  REQUIRE_ERROR(b.neg(), DTypeError, "neg", "bool");
}

TEST_CASE("subtraction of two bool tensors", "[error]") {
  Tensor b = tensor({1, 0}) > 0;
  REQUIRE_ERROR(Tensor(b - b), DTypeError, "sub", "bool");
}

TEST_CASE("rand with an integer dtype", "[error]") {
  REQUIRE_ERROR(rand({2}, DType::i64), DTypeError, "rand", "i64");
  REQUIRE_ERROR(randn({2}, DType::b8), DTypeError, "randn", "bool");
}

TEST_CASE("requires_grad on an integer tensor", "[error]") {
  REQUIRE_ERROR(tensor({1, 2}).requires_grad_(), DTypeError, "requires_grad", "i64");
}

TEST_CASE("softmax and log_softmax of an integer tensor", "[error]") {
  Tensor i = tensor({1, 2, 3});
  REQUIRE_ERROR(softmax(i, 0), DTypeError, "softmax", "floating-point", "i64", "x.to(DType::f32)");
  REQUIRE_ERROR(log_softmax(i, 0), DTypeError, "log_softmax", "floating-point", "i64");
}

TEST_CASE("gelu silu and softplus of an integer tensor", "[error]") {
  Tensor i = tensor({1, 2});
  REQUIRE_ERROR(gelu(i), DTypeError, "gelu", "floating-point", "i64", "x.to(DType::f32)");
  REQUIRE_ERROR(silu(i), DTypeError, "silu", "floating-point", "i64", "x.to(DType::f32)");
  REQUIRE_ERROR(softplus(i), DTypeError, "softplus", "floating-point", "i64", "x.to(DType::f32)");
  REQUIRE_ERROR(nn::GELU()(i), DTypeError, "gelu", "i64");
}
