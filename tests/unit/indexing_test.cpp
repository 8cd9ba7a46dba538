// pad, cat, stack, split, chunk, tril, triu, masked_fill, eye and arange:
// exact values against what PyTorch gives (worked out by hand here), on the
// default backend and on ref, and their gradients.
#include "tests/support/tensor_testing.h"

#include <cmath>

#include "codegen/cpu/cpu_backend.h"

using namespace tessel;
using namespace tessel::testing;

namespace {
Tensor grid() { return tensor({{0., 1., 2.}, {3., 4., 5.}}); }

// vals() on the default backend and on ref agree and are `want`.
void same_on_both(const std::function<Tensor()>& f, const std::vector<double>& want) {
  CHECK(vals(f()) == want);
  BackendOverride r(ref_backend());
  CHECK(vals(f()) == want);
}
}  // namespace

TEST_CASE("pad: widths from the last dim, a fill value, negative widths crop", "[indexing]") {
  same_on_both([] { return pad(grid(), {1, 2}); }, {0, 0, 1, 2, 0, 0, 0, 3, 4, 5, 0, 0});
  CHECK(pad(grid(), {1, 2}).shape() == Shape{2, 6});
  same_on_both([] { return pad(grid(), {0, 0, 1, 0}, -1.5); }, {-1.5, -1.5, -1.5, 0, 1, 2, 3, 4, 5});
  same_on_both([] { return pad(grid(), {-1, 1}); }, {1, 2, 0, 4, 5, 0});
  same_on_both([] { return pad(grid(), {1, -2, -1, 0}); }, {0, 3});
  CHECK(pad(grid(), {}).shape() == Shape{2, 3});
  Tensor i = pad(tensor({{1, 2}}), {1, 1}, 7);
  CHECK(i.dtype() == DType::i64);
  CHECK(ivals(i) == std::vector<int64_t>{7, 1, 2, 7});
}

TEST_CASE("pad of a computed value fuses into one kernel with its reader", "[indexing]") {
  Tensor x = rand({33, 17}), y = rand({33, 21});
  x.eval();
  y.eval();
  Tensor want;
  {
    BackendOverride r(ref_backend());
    want = Tensor(pad(Tensor(x * 2.0).relu(), {2, 2}) + y) * 3.0;
    want.eval();
  }
  reset_cpu_jit_stats();
  Tensor got = Tensor(pad(Tensor(x * 2.0).relu(), {2, 2}) + y) * 3.0;
  got.eval();
  if (cpu_backend().name() == "cpu") CHECK(cpu_jit_stats().kernels_launched == 1);
  CHECK(vals(got) == vals(want));
}

TEST_CASE("cat along each dim, three parts and a dtype each", "[indexing]") {
  same_on_both([] { return cat({grid(), tensor({{9., 8., 7.}})}); }, {0, 1, 2, 3, 4, 5, 9, 8, 7});
  same_on_both([] { return cat({grid(), tensor({{9.}, {8.}}), grid()}, 1); },
               {0, 1, 2, 9, 0, 1, 2, 3, 4, 5, 8, 3, 4, 5});
  same_on_both([] { return cat({grid(), grid()}, -1).sum({1}); }, {6, 24});
  Tensor b = cat({tensor({true, false}), tensor({true})});
  CHECK(b.dtype() == DType::b8);
  CHECK(ivals(b.to(DType::i64)) == std::vector<int64_t>{1, 0, 1});
  CHECK(cat({grid()}).shape() == Shape{2, 3});
  CHECK(cat({grid(), zeros({0, 3})}).shape() == Shape{2, 3});
}

TEST_CASE("cat of computed parts is one kernel", "[indexing]") {
  Tensor a = rand({40, 5}), b = rand({40, 7});
  a.eval();
  b.eval();
  reset_cpu_jit_stats();
  Tensor y = Tensor(cat({a.exp(), Tensor(b * 2.0)}, 1)).relu() - 1.0;
  y.eval();
  if (cpu_backend().name() == "cpu") CHECK(cpu_jit_stats().kernels_launched == 1);
  BackendOverride r(ref_backend());
  require_close(vals(y), vals(Tensor(cat({a.exp(), Tensor(b * 2.0)}, 1)).relu() - 1.0), 1e-6, 0);
}

TEST_CASE("stack, split and chunk as PyTorch", "[indexing]") {
  Tensor s = stack({tensor({1., 2.}), tensor({3., 4.})});
  CHECK(s.shape() == Shape{2, 2});
  CHECK(vals(s) == std::vector<double>{1, 2, 3, 4});
  Tensor s1 = stack({tensor({1., 2.}), tensor({3., 4.})}, 1);
  CHECK(vals(s1) == std::vector<double>{1, 3, 2, 4});
  Tensor x = arange(0, 7, 1, DType::f64);
  auto parts = split(x, 3);
  REQUIRE(parts.size() == 3);
  CHECK(vals(parts[0]) == std::vector<double>{0, 1, 2});
  CHECK(vals(parts[2]) == std::vector<double>{6});
  auto sized = split(x, std::vector<int64_t>{2, 5});
  CHECK(vals(sized[1]) == std::vector<double>{2, 3, 4, 5, 6});
  auto chunks = chunk(x, 3);
  REQUIRE(chunks.size() == 3);
  CHECK(vals(chunks[1]) == std::vector<double>{3, 4, 5});
  CHECK(chunk(arange(0, 4, 1, DType::f64), 3).size() == 2);  // PyTorch: sizes 2 and 2
  // The pieces are views: a write through one is seen in the base.
  Tensor base = zeros({4});
  split(base, 2)[1][0] = 5.0;
  CHECK(vals(base) == std::vector<double>{0, 0, 5, 0});
}

TEST_CASE("tril, triu, masked_fill and eye compute their masks in the kernel", "[indexing]") {
  Tensor x = tensor({{1., 2., 3.}, {4., 5., 6.}, {7., 8., 9.}});
  same_on_both([&] { return tril(x); }, {1, 0, 0, 4, 5, 0, 7, 8, 9});
  same_on_both([&] { return triu(x, 1); }, {0, 2, 3, 0, 0, 6, 0, 0, 0});
  same_on_both([&] { return tril(x, -1); }, {0, 0, 0, 4, 0, 0, 7, 8, 0});
  same_on_both([&] { return masked_fill(x, Tensor(x > 4.0), -1.0); }, {1, 2, 3, 4, -1, -1, -1, -1, -1});
  same_on_both([] { return eye(2, 3); }, {1, 0, 0, 0, 1, 0});
  CHECK(eye(3).shape() == Shape{3, 3});
  CHECK(eye(2, DType::i64).dtype() == DType::i64);
  // A causal mask as attention builds it: one kernel, no index buffers.
  Tensor scores = rand({4, 6, 6});
  scores.eval();
  reset_cpu_jit_stats();
  Tensor masked = masked_fill(scores, Tensor(triu(ones({6, 6}), 1) > 0.0), -INFINITY);
  masked.eval();
  if (cpu_backend().name() == "cpu") CHECK(cpu_jit_stats().kernels_launched == 1);
  std::vector<double> m = vals(masked), sc = vals(scores);
  for (int b = 0; b < 4; ++b)
    for (int i = 0; i < 6; ++i)
      for (int j = 0; j < 6; ++j) {
        double v = m[static_cast<size_t>(b * 36 + i * 6 + j)];
        if (j > i) CHECK(std::isinf(v));
        else CHECK(v == sc[static_cast<size_t>(b * 36 + i * 6 + j)]);
      }
}

TEST_CASE("gradients of pad, cat and strided slices are pads and windows", "[indexing][autograd]") {
  Tensor x = tensor({{1., 2., 3.}, {4., 5., 6.}});
  x.requires_grad_(true);
  Tensor w = arange(0, 18, 1, DType::f32).reshape({3, 6});
  Tensor y = (pad(x, {2, 1, 0, 1}, 9.0) * w).sum();
  y.backward();
  // d/dx = w at the positions x landed on: rows 0-1, cols 2-4.
  CHECK(vals(x.grad()) == std::vector<double>{2, 3, 4, 8, 9, 10});
  Tensor a = tensor({1., 2.}), b = tensor({3., 4., 5.});
  a.requires_grad_(true);
  b.requires_grad_(true);
  Tensor c = cat({a, b});
  CHECK(c.grad_fn_name() == "CatBackward0");
  (c * tensor({1., 2., 3., 4., 5.})).sum().backward();
  CHECK(vals(a.grad()) == std::vector<double>{1, 2});
  CHECK(vals(b.grad()) == std::vector<double>{3, 4, 5});
  Tensor z = arange(0, 10, 1, DType::f32);
  z.requires_grad_(true);
  (z.slice(0, 1, 9, 3) * tensor({1., 10., 100.})).sum().backward();
  CHECK(vals(z.grad()) == std::vector<double>{0, 1, 0, 0, 10, 0, 0, 100, 0, 0});
}

TEST_CASE("gather, index_select and embedding read at indices, in one kernel with their readers", "[indexing]") {
  Tensor x = tensor({{10., 11., 12.}, {20., 21., 22.}});
  same_on_both([&] { return gather(x, 1, tensor({{2, 0}, {1, 1}})); }, {12, 10, 21, 21});
  same_on_both([&] { return gather(x, 0, tensor({{1, 0, 1}})); }, {20, 11, 22});
  same_on_both([&] { return index_select(x, 1, tensor({2, 2, 0})); }, {12, 12, 10, 22, 22, 20});
  same_on_both([&] { return index_select(x, 0, tensor({1})); }, {20, 21, 22});
  Tensor table = arange(0, 12, 1, DType::f32).reshape({4, 3});
  Tensor ids = tensor({{3, 0}, {1, 3}});
  Tensor e = embedding(ids, table);
  CHECK(e.shape() == Shape{2, 2, 3});
  CHECK(vals(e) == std::vector<double>{9, 10, 11, 0, 1, 2, 3, 4, 5, 9, 10, 11});
  // A gather feeding elementwise work is one kernel.
  Tensor big = rand({50, 64});
  Tensor rows = tensor({49, 0, 7, 7, 3});
  big.eval();
  rows.eval();
  Tensor y = Tensor(index_select(big, 0, rows) * 2.0).relu();  // the index check runs here
  reset_cpu_jit_stats();
  y.eval();
  if (cpu_backend().name() == "cpu") CHECK(cpu_jit_stats().kernels_launched == 1);
  std::vector<double> b = vals(big), got = vals(y);
  const int64_t picks[] = {49, 0, 7, 7, 3};
  for (int r = 0; r < 5; ++r)
    for (int c = 0; c < 64; ++c) CHECK(got[static_cast<size_t>(r * 64 + c)] == std::max(0.0, 2 * b[static_cast<size_t>(picks[r] * 64 + c)]));
}

TEST_CASE("the gradient of a gather adds each row's gradient into the rows it read", "[indexing][autograd]") {
  Tensor table = tensor({{1., 2.}, {3., 4.}, {5., 6.}});
  table.requires_grad_(true);
  Tensor e = embedding(tensor({2, 0, 2, 2}), table);
  (e * tensor({{1., 10.}, {100., 1000.}, {2., 20.}, {3., 30.}})).sum().backward();
  // Row 2 was read three times: its gradient is the sum of those rows'.
  CHECK(vals(table.grad()) == std::vector<double>{100, 1000, 0, 0, 6, 60});
  Tensor x = tensor({{1., 2., 3.}});
  x.requires_grad_(true);
  Tensor g = gather(x, 1, tensor({{2, 2, 0}}));
  CHECK(g.grad_fn_name() == "GatherBackward0");
  (g * tensor({{1., 2., 4.}})).sum().backward();
  CHECK(vals(x.grad()) == std::vector<double>{4, 0, 3});
}

TEST_CASE("nn::Embedding: PyTorch's weight key, N(0, 1) init and shapes", "[indexing][nn]") {
  manual_seed(3);
  nn::Embedding emb(10, 4);
  auto sd = emb->state_dict();
  REQUIRE(sd.size() == 1);
  CHECK(sd.contains("weight"));
  CHECK(emb->weight.shape() == Shape{10, 4});
  double m = emb->weight.mean().item<double>();
  CHECK(std::fabs(m) < 0.6);
  Tensor out = emb(tensor({{1, 2, 3}}));
  CHECK(out.shape() == Shape{1, 3, 4});
  CHECK(vals(out[0][1]) == vals(emb->weight[2]));
  CHECK(emb->repr() == "Embedding(10, 4)");
}
