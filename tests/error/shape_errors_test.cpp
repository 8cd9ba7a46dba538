#include "error_testing.h"

using namespace tessel;

TEST_CASE("bad broadcast names the op and both shapes", "[error]") {
  Tensor a = ones({2, 3}), b = ones({4});
  REQUIRE_ERROR(Tensor(a + b), ShapeError, "add", "[2, 3]", "[4]", "broadcast");
}

TEST_CASE("bad broadcast in mul from a lazy tree", "[error]") {
  Tensor a = ones({2, 3}), b = ones({3, 2});
  REQUIRE_ERROR(Tensor(a.exp() * b), ShapeError, "mul", "[2, 3]", "[3, 2]");
}

TEST_CASE("bad broadcast in a comparison", "[error]") {
  REQUIRE_ERROR(Tensor(ones({5}) < ones({4})), ShapeError, "lt", "[5]", "[4]");
}

TEST_CASE("bad broadcast in where", "[error]") {
  Tensor c = ones({3}) > 0;
  REQUIRE_ERROR(where(c, ones({2}), ones({3})), ShapeError, "where", "[3]", "[2]");
}

TEST_CASE("matmul inner dimensions differ", "[error]") {
  REQUIRE_ERROR(ones({2, 3}).matmul(ones({4, 5})), ShapeError, "matmul", "[2, 3]", "[4, 5]", "3", "4");
}

TEST_CASE("matmul of 1-d vectors of different length", "[error]") {
  REQUIRE_ERROR(ones({3}).matmul(ones({4})), ShapeError, "matmul", "[3]", "[4]");
}

TEST_CASE("matmul batch dims do not broadcast", "[error]") {
  REQUIRE_ERROR(ones({2, 3, 4}).matmul(ones({5, 4, 2})), ShapeError, "matmul", "[2]", "[5]");
}

TEST_CASE("matmul of a 0-d tensor", "[error]") {
  REQUIRE_ERROR(full({}, 1.0).matmul(ones({3})), ShapeError, "matmul", "at least 1");
}

TEST_CASE("reshape to a different element count", "[error]") {
  REQUIRE_ERROR(ones({2, 3}).reshape({4}), ShapeError, "reshape", "[2, 3]", "6", "[4]");
}

TEST_CASE("reshape of a lazy tensor to a different element count", "[error]") {
  REQUIRE_ERROR((ones({2, 3}) * 2).eval().reshape({5, 2}), ShapeError, "reshape", "[5, 2]");
  REQUIRE_ERROR(Tensor(ones({2, 3}) * 2).reshape({5, 2}), ShapeError, "reshape", "[5, 2]");
}

TEST_CASE("reshape with two -1", "[error]") {
  REQUIRE_ERROR(ones({4}).reshape({-1, -1}), ShapeError, "reshape", "-1");
}

TEST_CASE("reshape with -1 that cannot be inferred", "[error]") {
  REQUIRE_ERROR(ones({7}).reshape({2, -1}), ShapeError, "reshape", "[7]");
}

TEST_CASE("reshape with a negative size", "[error]") {
  REQUIRE_ERROR(ones({4}).reshape({-2, -2}), ShapeError, "reshape", "-2");
}

TEST_CASE("negative shape on creation", "[error]") {
  REQUIRE_ERROR(zeros({2, -1}), ShapeError, "negative", "-1");
  REQUIRE_ERROR(ones({-3}), ShapeError, "negative");
  REQUIRE_ERROR(empty({-3}), ShapeError, "negative");
  REQUIRE_ERROR(rand({-3}), ShapeError, "negative");
  REQUIRE_ERROR(randn({-3}), ShapeError, "negative");
}

TEST_CASE("ragged nested list", "[error]") {
  REQUIRE_ERROR(tensor({{1, 2}, {3}}), ShapeError, "tensor()", "[2]", "[1]");
}

TEST_CASE("ragged nested list at depth 3", "[error]") {
  REQUIRE_ERROR(tensor({{{1, 2}, {3, 4}}, {{5, 6}}}), ShapeError, "tensor()", "rectangular");
}

TEST_CASE("from_vector with the wrong number of values", "[error]") {
  REQUIRE_ERROR(from_vector<float>({1, 2, 3}, {2, 2}), ShapeError, "from_vector", "3", "[2, 2]");
}

TEST_CASE("in-place op that would change the shape", "[error]") {
  Tensor a = ones({3});
  REQUIRE_ERROR(a += ones({2, 3}), ShapeError, "in-place", "[2, 3]", "[3]");
}

TEST_CASE("in-place op whose operand does not broadcast", "[error]") {
  Tensor a = ones({3});
  REQUIRE_ERROR(a *= ones({4}), ShapeError, "[3]", "[4]");
}

TEST_CASE("copy_ from a tensor of another shape", "[error]") {
  REQUIRE_ERROR(ones({2, 2}).copy_(ones({3})), ShapeError, "[3]", "[2, 2]");
}

TEST_CASE("expand to a smaller rank", "[error]") {
  REQUIRE_ERROR(ones({2, 3}).expand({3}), ShapeError, "expand", "[2, 3]", "[3]");
}

TEST_CASE("expand of a non-singleton dimension", "[error]") {
  REQUIRE_ERROR(ones({2, 3}).expand({4, 3}), ShapeError, "expand", "[2, 3]", "[4, 3]");
}

TEST_CASE("permute with the wrong number of dims", "[error]") {
  REQUIRE_ERROR(ones({2, 3}).permute({0}), ShapeError, "permute", "[2, 3]");
}

TEST_CASE("t() of a 3-d tensor", "[error]") {
  REQUIRE_ERROR(ones({2, 3, 4}).t(), ShapeError, "t()", "[2, 3, 4]", "transpose");
}

TEST_CASE("backward with a gradient of the wrong shape", "[error]") {
  Tensor x = ones({3}).requires_grad_();
  Tensor y = x * 2;
  REQUIRE_ERROR(y.backward(ones({4})), ShapeError, "backward", "[4]", "[3]");
}

TEST_CASE("view of a transposed tensor that needs a copy", "[error]") {
  Tensor t = ones({2, 3}).t();
  REQUIRE_ERROR(t.view({6}), ShapeError, "view", "[3, 2]", "strides [1, 3]", "[6]", "reshape()");
  CHECK(t.reshape({6}).numel() == 6);  // reshape copies instead
}

TEST_CASE("expand to a negative size", "[error]") {
  REQUIRE_ERROR(ones({3}).expand({-1, 3}), ShapeError, "expand", "-1");
  REQUIRE_ERROR(ones({3}).expand({-2}), ShapeError, "expand", "-2");
}

TEST_CASE("shapes whose element count or byte size overflows int64", "[error]") {
  REQUIRE_ERROR(zeros({3, int64_t{1} << 62}), ShapeError, "zeros", "[3, 4611686018427387904]", "overflows");
  REQUIRE_ERROR(ones({int64_t{1} << 32, int64_t{1} << 32}), ShapeError, "[4294967296, 4294967296]", "overflows");
  REQUIRE_ERROR(ones({1}).expand({int64_t{1} << 40, int64_t{1} << 40}), ShapeError, "expand", "overflows");
  REQUIRE_ERROR(ones({2}).reshape({int64_t{1} << 62, 8, 0}), ShapeError, "reshape", "64-bit");
  // A zero dimension keeps the count at zero whatever the others are.
  CHECK(zeros({0, int64_t{1} << 62}).numel() == 0);
}

TEST_CASE("a huge but representable tensor is the out-of-memory error with figures", "[error]") {
  REQUIRE_ERROR(zeros({int64_t{1} << 40}), OutOfMemoryError, "CPU out of memory: tried to allocate 4.00 TiB",
                "total ", "available ", "allocated by tessel ", "cached ");
  CHECK(ones({4}).sum().item<double>() == 4.0);  // and the process goes on
}
