// Mistakes with pad, cat, stack, split, chunk, tril, masked_fill, gather,
// index_select and embedding: each a clear error naming the op, never a
// silent value.
#include "error_testing.h"

using namespace tessel;
using namespace tessel::testing;

TEST_CASE("pad widths that are not pairs, pad more dims than exist, or crop past the size", "[error]") {
  Tensor x = ones({2, 3});
  REQUIRE_ERROR(pad(x, {1, 2, 3}), ValueError, "pad: the widths (1, 2, 3) must come in (before, after) pairs");
  REQUIRE_ERROR(pad(x, {1, 1, 1, 1, 1, 1}), ValueError, "pad: 6 widths pad 3 dims, but the input has shape [2, 3] (2 dims)");
  REQUIRE_ERROR(pad(x, {-2, -2}), ShapeError, "pad: widths -2 before and -2 after dim 1 of shape [2, 3] leave -1 elements");
}

TEST_CASE("cat and stack of mismatched tensors", "[error]") {
  REQUIRE_ERROR(cat({}), ValueError, "cat: expected a non-empty list of tensors");
  REQUIRE_ERROR(cat({ones({2, 3}), ones({2, 4})}), ShapeError,
                "cat: tensor 1 has shape [2, 4] but tensor 0 has [2, 3]; every dim but dim 0 must match");
  REQUIRE_ERROR(cat({ones({2}), ones({2}, DType::f64)}), DTypeError, "cat: tensor 1 has dtype f64 but tensor 0 has f32");
  REQUIRE_ERROR(cat({ones({2}), ones({2})}, 1), IndexError, "cat: dim 1 is out of range for a tensor of shape [2]");
  REQUIRE_ERROR(cat({zeros({})}), ShapeError, "cat: zero-dimensional tensors cannot be concatenated");
  REQUIRE_ERROR(stack({ones({2}), ones({3})}), ShapeError,
                "stack: expects each tensor to be equal size, but got [2] at entry 0 and [3] at entry 1");
}

TEST_CASE("split and chunk with sizes that do not fit", "[error]") {
  Tensor x = ones({5});
  REQUIRE_ERROR(split(x, 0), ValueError, "split: split_size must be positive, got 0");
  REQUIRE_ERROR(split(x, std::vector<int64_t>{2, 2}), ValueError,
                "split: sizes (2, 2) add up to 4, but dim 0 of shape [5] has 5 elements");
  REQUIRE_ERROR(chunk(x, 0), ValueError, "chunk: number of chunks must be positive, got 0");
}

TEST_CASE("tril of a vector and masked_fill with a non-bool or non-broadcasting mask", "[error]") {
  REQUIRE_ERROR(tril(ones({3})), ShapeError, "tril: input tensor must have at least 2 dimensions, got shape [3]");
  REQUIRE_ERROR(masked_fill(ones({2, 2}), ones({2, 2}), 0.0), DTypeError, "masked_fill: the mask must be a bool tensor, got f32");
  REQUIRE_ERROR(masked_fill(ones({2, 2}), zeros({3}, DType::b8), 0.0), ShapeError, "masked_fill: shapes [2, 2] and [3] do not broadcast");
  REQUIRE_ERROR(masked_fill(ones({2}), zeros({2, 2}, DType::b8), 0.0), ShapeError,
                "masked_fill: the mask's shape [2, 2] must broadcast to the input's shape [2]");
}

TEST_CASE("gather, index_select and embedding with indices out of range or of the wrong kind", "[error]") {
  Tensor x = ones({2, 3});
  REQUIRE_ERROR(gather(x, 1, tensor({{0, 3}, {1, 1}})), IndexError,
                "gather: index 3 is out of range for dim 1 of size 3 (indices must be in [0, 3))");
  REQUIRE_ERROR(gather(x, 1, tensor({{0.0, 1.0}})), DTypeError, "gather: indices must be an integer tensor, got f32");
  REQUIRE_ERROR(gather(x, 1, tensor({0, 1})), ShapeError, "gather: the index (shape [2]) must have the input's number of dims");
  REQUIRE_ERROR(index_select(x, 0, tensor({-1})), IndexError, "index_select: index -1 is out of range for dim 0 of size 2");
  REQUIRE_ERROR(index_select(x, 0, tensor({{0}})), ShapeError, "index_select: the index must be 1-D, got shape [1, 1]");
  nn::Embedding emb(4, 2);
  REQUIRE_ERROR(emb(tensor({1, 4})), IndexError, "embedding: index 4 is out of range for dim 0 of size 4");
  REQUIRE_ERROR(emb(tensor({1.0})), DTypeError, "Embedding): expected integer ids, got a f32 tensor");
}
