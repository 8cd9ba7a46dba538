// NumPy broadcasting: result shapes and the values every element sees.
#include "tests/support/tensor_testing.h"

using namespace tessel;
using namespace tessel::testing;

TEST_CASE("broadcast_shapes follows NumPy", "[broadcast]") {
  CHECK(ir::broadcast_shapes("add", Shape{3, 1}, Shape{1, 4}) == Shape{3, 4});
  CHECK(ir::broadcast_shapes("add", Shape{2, 3}, Shape{3}) == Shape{2, 3});
  CHECK(ir::broadcast_shapes("add", Shape{}, Shape{2, 2}) == Shape{2, 2});
  CHECK(ir::broadcast_shapes("add", Shape{4, 1, 3}, Shape{2, 1}) == Shape{4, 2, 3});
  CHECK(ir::broadcast_shapes("add", Shape{0, 3}, Shape{1, 3}) == Shape{0, 3});
  CHECK(ir::broadcast_shapes("add", Shape{1}, Shape{0}) == Shape{0});
}

TEST_CASE("column + row gives the outer sum", "[broadcast]") {
  Tensor c = tensor({{1}, {2}, {3}}), r = tensor({{10, 20, 30, 40}});
  Tensor s = c + r;
  CHECK(dims(s) == std::vector<int64_t>{3, 4});
  CHECK(ivals(s) == std::vector<int64_t>{11, 21, 31, 41, 12, 22, 32, 42, 13, 23, 33, 43});
}

TEST_CASE("matrix + vector adds the vector to every row", "[broadcast]") {
  Tensor m = tensor({{1., 2., 3.}, {4., 5., 6.}}), v = tensor({10., 20., 30.});
  CHECK(vals(m + v) == std::vector<double>{11, 22, 33, 14, 25, 36});
  CHECK(vals(v - m) == std::vector<double>{9, 18, 27, 6, 15, 24});
}

TEST_CASE("rank-3 broadcasting with size-1 axes on both sides", "[broadcast]") {
  Tensor a = arange(4).reshape({4, 1, 1}).to(DType::f64);  // [4,1,1]
  Tensor b = tensor({{1., 2., 3.}, {4., 5., 6.}}, DType::f64).reshape({1, 2, 3});
  Tensor p = a * b;
  CHECK(dims(p) == std::vector<int64_t>{4, 2, 3});
  auto v = vals(p);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 2; ++j)
      for (int k = 0; k < 3; ++k) CHECK(v[static_cast<size_t>(i * 6 + j * 3 + k)] == i * (j * 3 + k + 1));
}

TEST_CASE("0-d tensor broadcasts against anything", "[broadcast]") {
  Tensor s = full({}, 2.0);
  Tensor m = tensor({{1., 2.}, {3., 4.}});
  CHECK(vals(m * s) == std::vector<double>{2, 4, 6, 8});
  CHECK(dims(s * m) == std::vector<int64_t>{2, 2});
}

TEST_CASE("broadcast against a zero-size axis gives an empty result", "[broadcast]") {
  Tensor e = zeros({0, 3}) + ones({1, 3});
  CHECK(dims(e) == std::vector<int64_t>{0, 3});
  CHECK(e.numel() == 0);
}

TEST_CASE("broadcasting a transposed view", "[broadcast]") {
  Tensor m = tensor({{1, 2, 3}, {4, 5, 6}});
  Tensor t = m.t();  // [3,2], strides [1,3]
  Tensor r = t + tensor({100, 200});
  CHECK(ivals(r) == std::vector<int64_t>{101, 204, 102, 205, 103, 206});
}

TEST_CASE("comparisons and where broadcast", "[broadcast]") {
  Tensor x = tensor({{1., 5.}, {7., 2.}});
  Tensor th = tensor({{3.}, {6.}});
  CHECK(vals(x > th) == std::vector<double>{0, 1, 1, 0});
  Tensor w = where(x > th, x, tensor({-1., -2.}));
  CHECK(vals(w) == std::vector<double>{-1, 5, 7, -2});
  Tensor three = where(tensor({1, 0}) > 0, tensor({{1.}, {2.}}), full({}, 9.0));
  CHECK(dims(three) == std::vector<int64_t>{2, 2});
  CHECK(vals(three) == std::vector<double>{1, 9, 2, 9});
}

TEST_CASE("expand: broadcast view with zero strides", "[broadcast]") {
  Tensor v = tensor({1., 2., 3.});
  Tensor e = v.expand({2, 3});
  CHECK(dims(e) == std::vector<int64_t>{2, 3});
  CHECK(vals(e) == std::vector<double>{1, 2, 3, 1, 2, 3});
  CHECK(e.strides() == Strides{0, 1});
  Tensor c = tensor({{1.}, {2.}}).expand({-1, 3});
  CHECK(vals(c) == std::vector<double>{1, 1, 1, 2, 2, 2});
}

TEST_CASE("expand of a lazy tensor is a zero-stride view like any expand", "[broadcast]") {
  Tensor v = tensor({1., 2.}) * 2;
  Tensor e = v.expand({3, 2});
  CHECK(vals(e) == std::vector<double>{2, 4, 2, 4, 2, 4});
  CHECK(e.strides() == Strides{0, 1});
  CHECK(v.is_realized());
}

TEST_CASE("in-place ops broadcast the right operand", "[broadcast]") {
  Tensor m = zeros({2, 3});
  m += tensor({1., 2., 3.});
  m *= tensor({{2.}, {3.}});
  CHECK(vals(m) == std::vector<double>{2, 4, 6, 3, 6, 9});
}

TEST_CASE("copy_ broadcasts the source", "[broadcast]") {
  Tensor m = zeros({2, 2}, DType::i64);
  m.copy_(tensor({5, 6}));
  CHECK(ivals(m) == std::vector<int64_t>{5, 6, 5, 6});
}

TEST_CASE("broadcast with promotion in one op", "[broadcast]") {
  Tensor i = tensor({{1}, {2}});
  Tensor f = tensor({0.5, 0.25}, DType::f64);
  Tensor r = i * f;
  CHECK(r.dtype() == DType::f64);
  CHECK(vals(r) == std::vector<double>{0.5, 0.25, 1, 0.5});
}
