#include "error_testing.h"

using namespace tessel;
using namespace tessel::testing;

TEST_CASE("index out of range", "[error]") {
  Tensor t = ones({2, 3});
  REQUIRE_ERROR(t[2], IndexError, "index 2", "dimension 0", "size 2");
}

TEST_CASE("negative index out of range", "[error]") {
  Tensor t = ones({2, 3});
  REQUIRE_ERROR(t[0][-4], IndexError, "index -4", "size 3");
}

TEST_CASE("select on a bad dim", "[error]") {
  REQUIRE_ERROR(ones({2, 3}).select(2, 0), IndexError, "select", "dim 2", "[2, 3]");
}

TEST_CASE("indexing a 0-d tensor", "[error]") {
  REQUIRE_ERROR(full({}, 1.0)[0], IndexError, "0-d", "item()");
}

TEST_CASE("sum over a bad dim", "[error]") {
  REQUIRE_ERROR(ones({2, 3}).sum({2}), IndexError, "sum", "dim 2", "[2, 3]", "-2..1");
}

TEST_CASE("sum over a bad negative dim", "[error]") {
  REQUIRE_ERROR(ones({2, 3}).sum({-3}), IndexError, "sum", "dim -3");
}

TEST_CASE("max over a bad dim", "[error]") {
  REQUIRE_ERROR(ones({4}).max(1), IndexError, "max", "dim 1");
}

TEST_CASE("argmax over a bad dim", "[error]") {
  REQUIRE_ERROR(ones({4}).argmax(-2), IndexError, "argmax", "dim -2");
}

TEST_CASE("sum over a repeated dim", "[error]") {
  REQUIRE_ERROR(ones({2, 3}).sum({1, -1}), IndexError, "sum", "more than once");
}

TEST_CASE("transpose with a bad dim", "[error]") {
  REQUIRE_ERROR(ones({2, 3}).transpose(0, 2), IndexError, "transpose", "dim 2");
}

TEST_CASE("permute with a repeated dim", "[error]") {
  REQUIRE_ERROR(ones({2, 3}).permute({1, 1}), IndexError, "permute", "repeated");
}

TEST_CASE("permute with an out-of-range dim", "[error]") {
  REQUIRE_ERROR(ones({2, 3}).permute({0, 5}), IndexError, "permute", "dim 5");
}

TEST_CASE("unsqueeze past the end", "[error]") {
  REQUIRE_ERROR(ones({2, 3}).unsqueeze(4), IndexError, "unsqueeze", "dim 4");
}

TEST_CASE("squeeze with a bad dim", "[error]") {
  REQUIRE_ERROR(ones({2}).squeeze(1), IndexError, "squeeze", "dim 1");
}

TEST_CASE("slice with a bad dim", "[error]") {
  REQUIRE_ERROR(ones({2}).slice(1, 0, 1), IndexError, "slice", "dim 1");
}

TEST_CASE("size() with a bad dim", "[error]") {
  REQUIRE_ERROR(ones({2}).size(3), IndexError, "size", "dim 3");
}

TEST_CASE("flatten with a bad dim", "[error]") {
  REQUIRE_ERROR(ones({2, 3}).flatten(0, 2), IndexError, "flatten", "dim 2");
}

TEST_CASE("cross_entropy and one_hot with a label outside 0..C-1", "[error]") {
  Tensor logits = zeros({3, 4});
  REQUIRE_ERROR(cross_entropy(logits, tensor({0, 4, 1})), IndexError, "cross_entropy", "label 4 (at index 1)",
                "outside [0, 4)", "C = 4 classes");
  REQUIRE_ERROR(cross_entropy(logits, tensor({0, 1, -1})), IndexError, "cross_entropy", "label -1 (at index 2)");
  REQUIRE_ERROR(one_hot(tensor({2, 7}), 5), IndexError, "one_hot", "label 7 (at index 1)", "outside [0, 5)");
  REQUIRE_ERROR(one_hot(tensor({0}), 0), ValueError, "one_hot", "number of classes must be positive");
  // In range, the loss is ln(4) for uniform logits.
  CHECK(cross_entropy(logits, tensor({0, 3, 1})).item<double>() == Approx(std::log(4.0)));
}

TEST_CASE("flatten with start_dim after end_dim", "[error]") {
  REQUIRE_ERROR(ones({2, 1, 3}).flatten(1, 0), IndexError, "flatten", "start_dim 1 comes after end_dim 0",
                "[2, 1, 3]");
}

TEST_CASE("narrow past the end of a dimension, huge lengths included", "[error]") {
  Tensor x = arange(0, 3);
  REQUIRE_ERROR(x.narrow(0, 3, INT64_MAX), IndexError, "narrow", "start (3) + length (9223372036854775807)",
                "dimension 0 of size 3", "[0, 0]");
  REQUIRE_ERROR(x.narrow(0, 1, 3), IndexError, "narrow", "start (1) + length (3)", "[0, 2]");
  REQUIRE_ERROR(x.narrow(0, -4, 1), IndexError, "narrow", "start -4 is out of range");
  REQUIRE_ERROR(x.narrow(0, 0, -1), IndexError, "narrow", "length (-1)");
  CHECK(ivals(x.narrow(0, -2, 2)) == std::vector<int64_t>{1, 2});
  CHECK(x.narrow(0, 3, 0).numel() == 0);
}

TEST_CASE("slice with a huge step or end is the elements that exist, not an overflow", "[error]") {
  Tensor x = arange(0, 5);
  CHECK(ivals(x.slice(0, 0, 3, INT64_MAX)) == std::vector<int64_t>{0});
  CHECK(ivals(x.slice(0, 1, INT64_MAX, 2)) == std::vector<int64_t>{1, 3});
  CHECK(x.slice(0, 4, 2).numel() == 0);
}
