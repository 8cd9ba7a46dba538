// Type promotion and casts: the dtype each op returns, and the values.
#include "tests/support/tensor_testing.h"

using namespace tessel;
using namespace tessel::testing;

TEST_CASE("promotion table: category, then width", "[dtype]") {
  CHECK(promote(DType::i32, DType::i64) == DType::i64);
  CHECK(promote(DType::b8, DType::i32) == DType::i32);
  CHECK(promote(DType::i64, DType::f16) == DType::f16);
  CHECK(promote(DType::f16, DType::bf16) == DType::f32);
  CHECK(promote(DType::bf16, DType::f32) == DType::f32);
  CHECK(promote(DType::f32, DType::f64) == DType::f64);
  CHECK(promote(DType::b8, DType::b8) == DType::b8);
  CHECK(compute_dtype(DType::f16) == DType::f32);
  CHECK(compute_dtype(DType::bf16) == DType::f32);
  CHECK(compute_dtype(DType::i32) == DType::i32);
}

TEST_CASE("int tensor * 0.5 is float32", "[dtype]") {
  Tensor t = tensor({1, 2, 3});
  Tensor r = t * 0.5;
  CHECK(r.dtype() == DType::f32);
  CHECK(vals(r) == std::vector<double>{0.5, 1, 1.5});
  Tensor i32 = tensor({3, 5}, DType::i32);
  CHECK((i32 * 0.5).dtype() == DType::f32);
  CHECK(vals(i32 * 0.5) == std::vector<double>{1.5, 2.5});
}

TEST_CASE("int / int is true division in float32", "[dtype]") {
  Tensor a = tensor({7, -7, 1}), b = tensor({2, 2, 3});
  Tensor r = a / b;
  CHECK(r.dtype() == DType::f32);
  CHECK(vals(r) == std::vector<double>{3.5, -3.5, static_cast<double>(1.0f / 3.0f)});
  CHECK((a / 2).dtype() == DType::f32);
  CHECK(vals(a / 2) == std::vector<double>{3.5, -3.5, 0.5});
}

TEST_CASE("int scalars keep the tensor's integer width", "[dtype]") {
  Tensor i32 = tensor({1, 2}, DType::i32);
  CHECK((i32 + 1).dtype() == DType::i32);
  CHECK(ivals(i32 + 1) == std::vector<int64_t>{2, 3});
  CHECK((i32 + tensor({1, 1})).dtype() == DType::i64);
}

TEST_CASE("float scalars keep the tensor's float width", "[dtype]") {
  Tensor d = tensor({1.0}, DType::f64);
  CHECK((d + 0.1).dtype() == DType::f64);
  CHECK((d + 0.1).item<double>() == 1.0 + 0.1);  // the scalar stays a double
  Tensor f = tensor({1.0});
  CHECK((f + 0.1).dtype() == DType::f32);
  CHECK((f + 0.1).item<float>() == 1.0f + 0.1f);
}

TEST_CASE("bool tensors: + int scalar is int64, bool + bool stays bool", "[dtype]") {
  Tensor b = tensor({1, 0}) > 0;
  CHECK(b.dtype() == DType::b8);
  CHECK((b + 1).dtype() == DType::i64);
  CHECK(ivals(b + 1) == std::vector<int64_t>{2, 1});
  Tensor bb = b + b;
  CHECK(bb.dtype() == DType::b8);
  CHECK(vals(bb) == std::vector<double>{1, 0});
  CHECK((b * 2.5).dtype() == DType::f32);
  CHECK(vals(b * 2.5) == std::vector<double>{2.5, 0});
}

TEST_CASE("mixed tensor dtypes promote", "[dtype]") {
  Tensor f = tensor({1.5}), d = tensor({0.25}, DType::f64), i = tensor({2}), h = tensor({0.5}).to(DType::f16);
  CHECK((f + d).dtype() == DType::f64);
  CHECK((f + d).item<double>() == 1.75);
  CHECK((i + f).dtype() == DType::f32);
  CHECK((i + h).dtype() == DType::f16);
  CHECK((i + h).item<double>() == 2.5);
  CHECK((h + f).dtype() == DType::f32);
  CHECK((h + tensor({1.0}).to(DType::bf16)).dtype() == DType::f32);
}

TEST_CASE("comparisons give bool", "[dtype]") {
  Tensor a = tensor({1, 2, 3});
  for (Tensor c : std::vector<Tensor>{a < 2, a <= 2, a > 2, a >= 2, a == 2, a != 2, a < 2.5})
    CHECK(c.dtype() == DType::b8);
  CHECK(vals(a < 2.5) == std::vector<double>{1, 1, 0});
}

TEST_CASE("sum of bool counts in int64", "[dtype]") {
  Tensor b = tensor({1, 0, 1, 1}) > 0;
  Tensor s = b.sum();
  CHECK(s.dtype() == DType::i64);
  CHECK(s.item<int64_t>() == 3);
}

TEST_CASE("sum of int32 is int64 while max of int32 stays int32", "[dtype]") {
  Tensor t = tensor({2000000000, 2000000000}, DType::i32);
  CHECK(t.sum().dtype() == DType::i64);
  CHECK(t.sum().item<int64_t>() == 4000000000LL);  // no overflow
  CHECK(t.max().dtype() == DType::i32);
  CHECK(t.max().item<int64_t>() == 2000000000);
}

TEST_CASE("mean keeps a floating dtype", "[dtype]") {
  CHECK(tensor({1., 2.}, DType::f64).mean().dtype() == DType::f64);
  CHECK(tensor({1., 2.}).mean().dtype() == DType::f32);
}

TEST_CASE("argmax is int64", "[dtype]") {
  CHECK(tensor({1., 3., 2.}).argmax().dtype() == DType::i64);
}

TEST_CASE("float math on ints gives float32", "[dtype]") {
  Tensor i = tensor({1, 4});
  for (Tensor r : std::vector<Tensor>{i.exp(), i.log(), i.sqrt(), i.tanh(), i.sigmoid()}) CHECK(r.dtype() == DType::f32);
  CHECK(vals(i.sqrt()) == std::vector<double>{1, 2});
  CHECK(i.abs().dtype() == DType::i64);
  CHECK(i.neg().dtype() == DType::i64);
  CHECK(i.relu().dtype() == DType::i64);
}

TEST_CASE("cast float to int truncates toward zero", "[dtype]") {
  Tensor f = tensor({2.7, -2.7, 0.5, -0.5}, DType::f64);
  CHECK(ivals(f.to(DType::i64)) == std::vector<int64_t>{2, -2, 0, 0});
  CHECK(ivals(f.to(DType::i32)) == std::vector<int64_t>{2, -2, 0, 0});
  CHECK(f.to(DType::i32).dtype() == DType::i32);
}

TEST_CASE("cast to bool: nonzero is true", "[dtype]") {
  Tensor f = tensor({0.0, -0.5, 3.0});
  CHECK(vals(f.to(DType::b8)) == std::vector<double>{0, 1, 1});
  CHECK(vals(tensor({0, 7}).to(DType::b8)) == std::vector<double>{0, 1});
}

TEST_CASE("cast bool and int to float", "[dtype]") {
  Tensor b = tensor({1, 0}) > 0;
  CHECK(vals(b.to(DType::f32)) == std::vector<double>{1, 0});
  Tensor big = from_vector<int64_t>({int64_t{1} << 40}, {1}).to(DType::f64);
  CHECK(big.item<double>() == 1099511627776.0);
}

TEST_CASE("int64 values keep all 64 bits through casts", "[dtype]") {
  int64_t big = (int64_t{1} << 62) + 1;
  Tensor t = from_vector<int64_t>({big}, {1});
  CHECK(t.to(DType::i64).item<int64_t>() == big);
  CHECK((t + 0).item<int64_t>() == big);
  CHECK(t.sum().item<int64_t>() == big);
}

TEST_CASE("to() the same dtype returns the same tensor", "[dtype]") {
  Tensor t = tensor({1.});
  CHECK(t.to(DType::f32).is_same(t));
}

TEST_CASE("where promotes its two branches", "[dtype]") {
  Tensor c = tensor({1, 0}) > 0;
  Tensor r = where(c, tensor({1, 2}), tensor({0.5, 0.25}));
  CHECK(r.dtype() == DType::f32);
  CHECK(vals(r) == std::vector<double>{1, 0.25});
}

TEST_CASE("dtype names", "[dtype]") {
  CHECK(dtype_name(DType::f32) == "f32");
  CHECK(dtype_name(DType::b8) == "bool");
  CHECK(dtype_torch_name(DType::f64) == "float64");
  CHECK(dtype_torch_name(DType::bf16) == "bfloat16");
  CHECK(dtype_size(DType::f16) == 2);
  CHECK(dtype_size(DType::i64) == 8);
  CHECK(fmt::format("{}", DType::i32) == "i32");
}
