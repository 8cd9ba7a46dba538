// Reductions over all elements and over dims, with keepdim and negative dims.
#include "tests/support/tensor_testing.h"

#include <limits>

using namespace tessel;
using namespace tessel::testing;

namespace {
// [[0,1,2,3],[4,5,6,7],[8,9,10,11]] as f64
Tensor grid() { return arange(12, DType::f64).reshape({3, 4}); }
Tensor cube() { return arange(24, DType::f64).reshape({2, 3, 4}); }
}  // namespace

TEST_CASE("sum over everything is 0-d", "[reduce]") {
  Tensor s = grid().sum();
  CHECK(s.dim() == 0);
  CHECK(s.item<double>() == 66);
}

TEST_CASE("sum over one dim", "[reduce]") {
  CHECK(vals(grid().sum({0})) == std::vector<double>{12, 15, 18, 21});
  CHECK(vals(grid().sum({1})) == std::vector<double>{6, 22, 38});
  CHECK(dims(grid().sum({1})) == std::vector<int64_t>{3});
}

TEST_CASE("sum with keepdim keeps size-1 axes", "[reduce]") {
  Tensor s = grid().sum({1}, true);
  CHECK(dims(s) == std::vector<int64_t>{3, 1});
  CHECK(vals(s) == std::vector<double>{6, 22, 38});
  CHECK(dims(cube().sum({0, 2}, true)) == std::vector<int64_t>{1, 3, 1});
}

TEST_CASE("sum with negative dims", "[reduce]") {
  CHECK(vals(grid().sum({-1})) == std::vector<double>{6, 22, 38});
  CHECK(vals(grid().sum({-2})) == std::vector<double>{12, 15, 18, 21});
  CHECK(vals(cube().sum({-1, 0})) == vals(cube().sum({0, 2})));
}

TEST_CASE("sum over several dims", "[reduce]") {
  Tensor c = cube();
  CHECK(vals(c.sum({0, 2})) == std::vector<double>{60, 92, 124});
  CHECK(vals(c.sum({0, 1})) == std::vector<double>{60, 66, 72, 78});
  CHECK(vals(c.sum({1, 2})) == std::vector<double>{66, 210});
  CHECK(c.sum({0, 1, 2}).item<double>() == 276);
}

TEST_CASE("mean over everything and over dims", "[reduce]") {
  CHECK(grid().mean().item<double>() == 5.5);
  CHECK(vals(grid().mean({0})) == std::vector<double>{4, 5, 6, 7});
  CHECK(vals(grid().mean({1}, true)) == std::vector<double>{1.5, 5.5, 9.5});
  CHECK(dims(grid().mean({1}, true)) == std::vector<int64_t>{3, 1});
  CHECK(vals(cube().mean({-1, -3})) == std::vector<double>{7.5, 11.5, 15.5});
}

TEST_CASE("max and min over everything", "[reduce]") {
  Tensor t = tensor({{3., -1.}, {7., 2.}});
  CHECK(t.max().item<double>() == 7);
  CHECK(t.min().item<double>() == -1);
  CHECK(t.max().dim() == 0);
}

TEST_CASE("max and min over a dim, with keepdim", "[reduce]") {
  Tensor t = tensor({{3., -1., 5.}, {7., 2., 0.}});
  CHECK(vals(t.max(0)) == std::vector<double>{7, 2, 5});
  CHECK(vals(t.max(1)) == std::vector<double>{5, 7});
  CHECK(vals(t.min(-1)) == std::vector<double>{-1, 0});
  CHECK(dims(t.min(0, true)) == std::vector<int64_t>{1, 3});
  CHECK(vals(t.min(0, true)) == std::vector<double>{3, -1, 0});
}

TEST_CASE("max and min on integers", "[reduce]") {
  Tensor t = tensor({{3, -9}, {7, 2}});
  CHECK(t.max().item<int64_t>() == 7);
  CHECK(t.min().item<int64_t>() == -9);
  CHECK(ivals(t.max(1)) == std::vector<int64_t>{3, 7});
  CHECK(t.max().dtype() == DType::i64);
}

TEST_CASE("max and min propagate nan", "[reduce]") {
  double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor t = from_vector<double>({1, nan, 3, 4}, {2, 2});
  CHECK(std::isnan(t.max().item<double>()));
  CHECK(std::isnan(t.min().item<double>()));
  auto m = vals(t.max(1));
  CHECK(std::isnan(m[0]));
  CHECK(m[1] == 4);
  Tensor first = from_vector<double>({nan, 1}, {2});
  CHECK(std::isnan(first.max().item<double>()));
  CHECK(std::isnan(first.min().item<double>()));
}

TEST_CASE("argmax over everything indexes the flattened tensor", "[reduce]") {
  Tensor t = tensor({{3., -1.}, {7., 2.}});
  CHECK(t.argmax().item<int64_t>() == 2);
  CHECK(t.argmax().dim() == 0);
  CHECK(tensor({5., 9., 1.}).argmax().item<int64_t>() == 1);
}

TEST_CASE("argmax over a dim", "[reduce]") {
  Tensor t = tensor({{3., -1., 5.}, {7., 2., 0.}});
  CHECK(ivals(t.argmax(0)) == std::vector<int64_t>{1, 1, 0});
  CHECK(ivals(t.argmax(1)) == std::vector<int64_t>{2, 0});
  CHECK(ivals(t.argmax(-1, true)) == std::vector<int64_t>{2, 0});
  CHECK(dims(t.argmax(-1, true)) == std::vector<int64_t>{2, 1});
}

TEST_CASE("argmax picks the first of equal maxima", "[reduce]") {
  CHECK(tensor({1., 4., 4., 2.}).argmax().item<int64_t>() == 1);
  CHECK(ivals(tensor({{2, 2}, {1, 3}}).argmax(1)) == std::vector<int64_t>{0, 1});
}

TEST_CASE("argmax of nan is its index", "[reduce]") {
  double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(from_vector<double>({1, 5, nan, 7}, {4}).argmax().item<int64_t>() == 2);
}

TEST_CASE("sum of bool and int tensors", "[reduce]") {
  Tensor b = tensor({{1, 0, 1}, {1, 1, 1}}) > 0;
  CHECK(b.sum().item<int64_t>() == 5);
  CHECK(ivals(b.sum({1})) == std::vector<int64_t>{2, 3});
  CHECK(b.sum({1}).dtype() == DType::i64);
  CHECK(tensor({1, 2, 3}, DType::i32).sum().item<int64_t>() == 6);
}

TEST_CASE("sum over an empty axis is zero, mean is nan", "[reduce]") {
  Tensor e = zeros({0, 3});
  CHECK(vals(e.sum({0})) == std::vector<double>{0, 0, 0});
  CHECK(e.sum().item<double>() == 0);
  CHECK(std::isnan(e.mean().item<double>()));
}

TEST_CASE("reductions of a 0-d tensor", "[reduce]") {
  Tensor s = full({}, 4.0);
  CHECK(s.sum().item<double>() == 4);
  CHECK(s.mean().item<double>() == 4);
  CHECK(s.max().item<double>() == 4);
  CHECK(s.argmax().item<int64_t>() == 0);
  CHECK(s.sum({0}).item<double>() == 4);
}

TEST_CASE("reductions of non-contiguous views", "[reduce]") {
  Tensor t = grid().t();  // [4,3]
  CHECK(vals(t.sum({0})) == std::vector<double>{6, 22, 38});
  CHECK(vals(t.max(1)) == std::vector<double>{8, 9, 10, 11});
  Tensor s = grid().slice(1, 0, 4, 2);  // columns 0, 2
  CHECK(vals(s.sum({1})) == std::vector<double>{2, 10, 18});
  CHECK(ivals(grid().t().argmax(0)) == std::vector<int64_t>{3, 3, 3});
}

TEST_CASE("reductions of lazy trees", "[reduce]") {
  Tensor x = grid();
  Tensor r = Tensor(x * 2 - 1).sum({1}) + x.mean({1});
  CHECK(vals(r) == std::vector<double>{8 + 1.5, 40 + 5.5, 72 + 9.5});
}

TEST_CASE("sum of f32 accumulates precisely", "[reduce]") {
  Tensor t = full({10000}, 0.1, DType::f32);
  // Exact sum of 10000 copies of float(0.1), rounded once to f32.
  CHECK(t.sum().item<float>() == static_cast<float>(10000.0 * static_cast<double>(0.1f)));
}

TEST_CASE("all() and any(), whole tensors and along a dim, empty ones included", "[reduction]") {
  Tensor x = tensor({{1.0, 0.0, 2.0}, {3.0, 4.0, 5.0}});
  CHECK((x > -1).all().item<bool>());
  CHECK_FALSE(x.all().item<bool>());
  CHECK(x.any().item<bool>());
  CHECK_FALSE((x > 9).any().item<bool>());
  CHECK(x.all(1).to_vector<int64_t>() == std::vector<int64_t>{0, 1});
  CHECK(x.all(0).to_vector<int64_t>() == std::vector<int64_t>{1, 0, 1});
  CHECK((x > 3).any(1).to_vector<int64_t>() == std::vector<int64_t>{0, 1});
  CHECK(x.all().dtype() == DType::b8);
  CHECK(zeros({0}).all().item<bool>());
  CHECK_FALSE(zeros({0}).any().item<bool>());
  // The hint the ambiguous-bool error gives works as written.
  Tensor y = ones({2, 2});
  CHECK(static_cast<bool>((y > 0).all()));
}

namespace {
// The prod cases below, on one backend.
void check_prod_values() {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  Tensor t = tensor({{1., 2., 3.}, {4., 5., 6.}});
  CHECK(t.prod().dim() == 0);
  CHECK(t.prod().item<double>() == 720);
  CHECK(vals(t.prod(0)) == std::vector<double>{4, 10, 18});
  CHECK(vals(t.prod(1)) == std::vector<double>{6, 120});
  CHECK(vals(t.prod(-1)) == std::vector<double>{6, 120});
  CHECK(vals(prod(t, 0, true)) == std::vector<double>{4, 10, 18});
  CHECK(dims(prod(t, 0, true)) == std::vector<int64_t>{1, 3});
  CHECK(dims(t.prod(1, true)) == std::vector<int64_t>{2, 1});
  CHECK(dims(t.prod(1)) == std::vector<int64_t>{2});
  CHECK(dims(cube().prod(1, true)) == std::vector<int64_t>{2, 1, 4});
  // cube()[0, :, 1] is 1, 5, 9.
  CHECK(vals(cube().prod(1))[1] == 45);
  CHECK(prod(t).item<double>() == 720);
  // Zeros and negatives: a zero anywhere in the row makes it 0.
  Tensor z = tensor({{-1., 0., 2.}, {-3., -2., 0.5}});
  CHECK(vals(z.prod(1)) == std::vector<double>{0, 3});
  CHECK(vals(z.prod(0)) == std::vector<double>{3, 0, 1});
  CHECK(z.prod().item<double>() == 0);
  CHECK(tensor({-2., -3., -4.}).prod().item<double>() == -24);
  // Integers and bools give int64, multiplied exactly (3^39 needs 62 bits: no
  // double accumulator holds it).
  Tensor i = tensor({{1, 2, 3}, {-4, 5, 6}});
  CHECK(i.prod(1).dtype() == DType::i64);
  CHECK(ivals(i.prod(1)) == std::vector<int64_t>{6, -120});
  CHECK(i.prod().item<int64_t>() == -720);
  CHECK(tensor({2, 3, 7}, DType::i32).prod().dtype() == DType::i64);
  CHECK(tensor({2, 3, 7}, DType::i32).prod().item<int64_t>() == 42);
  CHECK(full({39}, 3, DType::i64).prod().item<int64_t>() == 4052555153018976267LL);
  Tensor b = tensor({{1, 1, 1}, {1, 0, 1}}) > 0;
  CHECK(b.prod(1).dtype() == DType::i64);
  CHECK(ivals(b.prod(1)) == std::vector<int64_t>{1, 0});
  // An empty product is 1.
  CHECK(zeros({0}).prod().item<double>() == 1);
  CHECK(vals(zeros({0, 3}).prod(0)) == std::vector<double>{1, 1, 1});
  CHECK(vals(zeros({2, 0}).prod(1, true)) == std::vector<double>{1, 1});
  CHECK(dims(zeros({2, 0}).prod(1, true)) == std::vector<int64_t>{2, 1});
  CHECK(zeros({0}, DType::i64).prod().item<int64_t>() == 1);
  // A 0-d tensor is its own product.
  CHECK(full({}, 4.0).prod().item<double>() == 4);
  CHECK(full({}, 4.0).prod(0).item<double>() == 4);
  // NaN propagates; inf * 0 is NaN.
  CHECK(std::isnan(from_vector<double>({1, nan, 2}, {3}).prod().item<double>()));
  CHECK(std::isnan(from_vector<double>({inf, 0}, {2}).prod().item<double>()));
  // Halves are multiplied in f32 and stored back.
  Tensor h = tensor({1.5, 2.0, -4.0}).to(DType::f16);
  CHECK(h.prod().dtype() == DType::f16);
  CHECK(h.prod().item<double>() == -12);
  CHECK(tensor({1.5, 2.0, -4.0}).to(DType::bf16).prod().item<double>() == -12);
  // Views and lazy producers.
  CHECK(vals(t.t().prod(1)) == std::vector<double>{4, 10, 18});
  CHECK(vals(Tensor(t * 2).prod(1)) == std::vector<double>{48, 960});
  CHECK(vals((t * 2).prod(1, true)) == std::vector<double>{48, 960});  // on an expression
  CHECK((t * 2).prod().item<double>() == 46080);
  CHECK(vals(grid().slice(1, 1, 4, 2).prod(1)) == std::vector<double>{3, 35, 99});
}
}  // namespace

TEST_CASE("prod over everything and along a dim, as torch.prod", "[reduce]") {
  check_prod_values();
  BackendOverride ref(ref_backend());
  check_prod_values();
}
