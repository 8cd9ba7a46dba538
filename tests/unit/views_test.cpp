// Views share memory with their base: writes through one are seen by the other.
#include "tests/support/tensor_testing.h"

using namespace tessel;
using namespace tessel::testing;

namespace {
Tensor grid() { return tensor({{0., 1., 2., 3.}, {4., 5., 6., 7.}, {8., 9., 10., 11.}}); }
}  // namespace

TEST_CASE("t[0][0] = 42 writes through to the tensor", "[views]") {
  Tensor t = ones({2, 3});
  t[0][0] = 42;
  CHECK(vals(t) == std::vector<double>{42, 1, 1, 1, 1, 1});
  t[1][2] = -1.5;
  CHECK(vals(t) == std::vector<double>{42, 1, 1, 1, 1, -1.5});
}

TEST_CASE("t[1] = value fills a row", "[views]") {
  Tensor t = zeros({2, 3}, DType::i64);
  t[1] = 7;
  CHECK(ivals(t) == std::vector<int64_t>{0, 0, 0, 7, 7, 7});
}

TEST_CASE("t[0] = other copies a tensor into a row", "[views]") {
  Tensor t = zeros({2, 3});
  t[0] = tensor({1., 2., 3.});
  CHECK(vals(t) == std::vector<double>{1, 2, 3, 0, 0, 0});
}

TEST_CASE("t.data() += 1 writes through", "[views]") {
  Tensor t = tensor({1., 2.});
  t.data() += 1;
  CHECK(vals(t) == std::vector<double>{2, 3});
  t.data()[0] *= 10;
  CHECK(vals(t) == std::vector<double>{20, 3});
}

TEST_CASE("in-place ops on a row view change the base", "[views]") {
  Tensor t = grid();
  t[1] *= 2;
  t[2] -= 8;
  CHECK(vals(t) == std::vector<double>{0, 1, 2, 3, 8, 10, 12, 14, 0, 1, 2, 3});
}

TEST_CASE("select and operator[] pick elements", "[views]") {
  Tensor t = grid();
  CHECK(vals(t[1]) == std::vector<double>{4, 5, 6, 7});
  CHECK(vals(t.select(1, 2)) == std::vector<double>{2, 6, 10});
  CHECK(vals(t.select(-1, -1)) == std::vector<double>{3, 7, 11});
  CHECK(t[2][3].item<double>() == 11);
  CHECK(t[-1][0].item<double>() == 8);
  CHECK(t[0].dim() == 1);
  CHECK(t[0][0].dim() == 0);
}

TEST_CASE("slice with start, end and step", "[views]") {
  Tensor t = grid();
  Tensor s = t.slice(1, 0, 4, 2);
  CHECK(dims(s) == std::vector<int64_t>{3, 2});
  CHECK(vals(s) == std::vector<double>{0, 2, 4, 6, 8, 10});
  CHECK(vals(t.slice(0, 1, 3)) == std::vector<double>{4, 5, 6, 7, 8, 9, 10, 11});
  CHECK(vals(t.slice(1, -2, 4)) == std::vector<double>{2, 3, 6, 7, 10, 11});
  CHECK(vals(t.slice(1, 1, -1)) == std::vector<double>{1, 2, 5, 6, 9, 10});
  CHECK(t.slice(0, 2, 100).numel() == 4);   // end clamps
  CHECK(t.slice(0, 3, 1).numel() == 0);     // empty range
  CHECK(vals(t.slice(1, 1, 4, 3)) == std::vector<double>{1, 5, 9});
}

TEST_CASE("a strided slice writes through", "[views]") {
  Tensor t = grid();
  Tensor s = t.slice(1, 1, 4, 2);  // columns 1 and 3
  s.fill_(-1);
  CHECK(vals(t) == std::vector<double>{0, -1, 2, -1, 4, -1, 6, -1, 8, -1, 10, -1});
}

TEST_CASE("narrow is slice by length", "[views]") {
  Tensor t = grid();
  CHECK(vals(t.narrow(1, 1, 2)) == std::vector<double>{1, 2, 5, 6, 9, 10});
  t.narrow(0, 0, 1).zero_();
  CHECK(vals(t[0]) == std::vector<double>{0, 0, 0, 0});
}

TEST_CASE("transpose is a view: strides swap, writes go through", "[views]") {
  Tensor t = tensor({{1., 2., 3.}, {4., 5., 6.}});
  Tensor tt = t.t();
  CHECK(dims(tt) == std::vector<int64_t>{3, 2});
  CHECK(tt.strides() == Strides{1, 3});
  CHECK(!tt.is_contiguous());
  CHECK(vals(tt) == std::vector<double>{1, 4, 2, 5, 3, 6});
  tt[0][1] = 9;
  CHECK(vals(t) == std::vector<double>{1, 2, 3, 9, 5, 6});
}

TEST_CASE("transpose with negative dims and t() on 1-d", "[views]") {
  Tensor t = arange(24).reshape({2, 3, 4});
  Tensor a = t.transpose(-1, 0);
  CHECK(dims(a) == std::vector<int64_t>{4, 3, 2});
  CHECK(a[3][2][1].item<int64_t>() == t[1][2][3].item<int64_t>());
  Tensor v = arange(3);
  CHECK(v.t().is_same(v));
}

TEST_CASE("permute reorders axes", "[views]") {
  Tensor t = arange(24).reshape({2, 3, 4});
  Tensor p = t.permute({2, 0, 1});
  CHECK(dims(p) == std::vector<int64_t>{4, 2, 3});
  CHECK(p.strides() == Strides{1, 12, 4});
  auto v = ivals(p);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t k = 0; k < 3; ++k) CHECK(v[static_cast<size_t>(i * 6 + j * 3 + k)] == j * 12 + k * 4 + i);
  CHECK(t.permute({0, 1, 2}).is_same(t));
  CHECK(dims(t.permute({-1, -2, -3})) == std::vector<int64_t>{4, 3, 2});
}

TEST_CASE("reshape of a contiguous tensor shares memory", "[views]") {
  Tensor t = arange(6);
  Tensor r = t.reshape({2, 3});
  CHECK(dims(r) == std::vector<int64_t>{2, 3});
  r[1][0] = 100;
  CHECK(ivals(t) == std::vector<int64_t>{0, 1, 2, 100, 4, 5});
  Tensor v = t.view({3, -1});
  CHECK(dims(v) == std::vector<int64_t>{3, 2});
}

TEST_CASE("reshape infers one -1", "[views]") {
  Tensor t = arange(24);
  CHECK(dims(t.reshape({-1, 4})) == std::vector<int64_t>{6, 4});
  CHECK(dims(t.reshape({2, -1, 3})) == std::vector<int64_t>{2, 4, 3});
  CHECK(dims(t.reshape({-1})) == std::vector<int64_t>{24});
  CHECK(dims(zeros({0, 4}).reshape({-1, 2})) == std::vector<int64_t>{0, 2});
}

TEST_CASE("reshape of a transposed tensor copies in logical order", "[views]") {
  Tensor t = tensor({{1, 2, 3}, {4, 5, 6}}).t();  // [[1,4],[2,5],[3,6]]
  Tensor r = t.reshape({6});
  CHECK(ivals(r) == std::vector<int64_t>{1, 4, 2, 5, 3, 6});
  CHECK(ivals(t.reshape({2, 3})) == std::vector<int64_t>{1, 4, 2, 5, 3, 6});
}

TEST_CASE("flatten, unsqueeze and squeeze", "[views]") {
  Tensor t = arange(24).reshape({2, 3, 4});
  CHECK(dims(t.flatten()) == std::vector<int64_t>{24});
  CHECK(dims(t.flatten(1)) == std::vector<int64_t>{2, 12});
  CHECK(dims(t.flatten(0, 1)) == std::vector<int64_t>{6, 4});
  CHECK(dims(full({}, 1.0).flatten()) == std::vector<int64_t>{1});
  CHECK(dims(t.unsqueeze(0)) == std::vector<int64_t>{1, 2, 3, 4});
  CHECK(dims(t.unsqueeze(-1)) == std::vector<int64_t>{2, 3, 4, 1});
  CHECK(dims(t.unsqueeze(2)) == std::vector<int64_t>{2, 3, 1, 4});
  Tensor u = t.unsqueeze(1);
  CHECK(dims(u.squeeze(1)) == std::vector<int64_t>{2, 3, 4});
  CHECK(dims(t.squeeze(0)) == std::vector<int64_t>{2, 3, 4});  // size 2: unchanged
  CHECK(ivals(t.flatten()) == ivals(t));
}

TEST_CASE("contiguous copies a non-contiguous view only", "[views]") {
  Tensor t = tensor({{1., 2.}, {3., 4.}});
  CHECK(t.contiguous().is_same(t));
  Tensor c = t.t().contiguous();
  CHECK(c.is_contiguous());
  CHECK(c.strides() == Strides{2, 1});
  CHECK(vals(c) == std::vector<double>{1, 3, 2, 4});
  c[0][0] = 50;
  CHECK(vals(t)[0] == 1);
}

TEST_CASE("clone owns its memory, even of a view", "[views]") {
  Tensor t = grid();
  Tensor c = t.slice(1, 1, 3).clone();
  CHECK(c.is_contiguous());
  CHECK(vals(c) == std::vector<double>{1, 2, 5, 6, 9, 10});
  c.fill_(0);
  CHECK(vals(t)[1] == 1);
}

TEST_CASE("detach shares memory", "[views]") {
  Tensor t = tensor({1., 2.});
  Tensor d = t.detach();
  d[0] = 5;
  CHECK(vals(t) == std::vector<double>{5, 2});
}

TEST_CASE("copy_ casts the source to the destination dtype", "[views]") {
  Tensor t = zeros({3}, DType::f64);
  t.copy_(tensor({1, 2, 3}));
  CHECK(t.dtype() == DType::f64);
  CHECK(vals(t) == std::vector<double>{1, 2, 3});
  Tensor i = zeros({2}, DType::i32);
  i.copy_(tensor({1.9, -1.9}));
  CHECK(ivals(i) == std::vector<int64_t>{1, -1});
}

TEST_CASE("copy_ into a transposed view", "[views]") {
  Tensor t = zeros({2, 3});
  t.t().copy_(tensor({{1., 2.}, {3., 4.}, {5., 6.}}));
  CHECK(vals(t) == std::vector<double>{1, 3, 5, 2, 4, 6});
}

TEST_CASE("fill_ and zero_ on a whole tensor", "[views]") {
  Tensor t = ones({2, 2}, DType::i32);
  t.fill_(9);
  CHECK(ivals(t) == std::vector<int64_t>{9, 9, 9, 9});
  t.zero_();
  CHECK(ivals(t) == std::vector<int64_t>{0, 0, 0, 0});
}

TEST_CASE("size() and dim() with negative indices", "[views]") {
  Tensor t = zeros({2, 3, 5});
  CHECK(t.dim() == 3);
  CHECK(t.size(0) == 2);
  CHECK(t.size(-1) == 5);
  CHECK(t.sizes() == Shape{2, 3, 5});
}

TEST_CASE("ops on views read the view, not the base", "[views]") {
  Tensor t = grid();
  Tensor col = t.select(1, 1);  // [1, 5, 9], stride 4
  CHECK(vals(col * 2) == std::vector<double>{2, 10, 18});
  CHECK(col.sum().item<double>() == 15);
  Tensor sub = t.slice(0, 1, 3).slice(1, 1, 3);  // [[5,6],[9,10]]
  CHECK(vals(sub + sub.t()) == std::vector<double>{10, 15, 15, 20});
}

TEST_CASE("handles are shallow: a copied handle is the same tensor", "[views]") {
  Tensor a = tensor({1., 2.});
  Tensor b = a;
  b += 1;
  CHECK(vals(a) == std::vector<double>{2, 3});
  CHECK(a.is_same(b));
}

TEST_CASE("one element of an expanded view is its single memory location", "[views]") {
  // As in PyTorch: the 0-d element view does not overlap itself, so the write
  // is allowed and lands in the expanded tensor's memory.
  Tensor base = tensor({{5.}});
  Tensor e = base.expand({2, 3});
  e.reshape({-1})[1] = 0;
  CHECK(base.item<double>() == 0);
  CHECK(vals(e) == std::vector<double>(6, 0.0));
}

TEST_CASE("view never copies: writes through a view always reach the tensor", "[views]") {
  Tensor t = arange(6, DType::f64).reshape({2, 3});
  t.view({3, 2})[2][1] = -1;
  CHECK(vals(t)[5] == -1);
  Tensor col = t.slice(1, 0, 1);  // [2, 1] with strides [3, 1]
  col.view({2})[1] = 9;
  CHECK(vals(t)[3] == 9);
}

TEST_CASE("reshape of a non-contiguous tensor copies, so writes do not reach it", "[views]") {
  // As in PyTorch: reshape returns a view when it can and a copy otherwise.
  Tensor t = arange(6, DType::f64).reshape({2, 3}).t();  // [3, 2], strides [1, 3]
  Tensor r = t.reshape({6});
  r[0] = 100;
  CHECK(vals(t)[0] == 0);
  Tensor u = t.reshape({3, 2, 1});  // only a size-1 dim added: a view
  u[0][0][0] = 100;
  CHECK(vals(t)[0] == 100);
}
