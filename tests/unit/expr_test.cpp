// Expression templates: the type is the tree, its structural key is a
// compile-time constant, and lowering gives the same IR as the functional ops.
#include "tests/support/tensor_testing.h"

using namespace tessel;
using namespace tessel::testing;

namespace {
Tensor x, y, z;  // only their types matter to decltype
template <uint64_t K> struct KeyTag { static constexpr uint64_t value = K; };
}  // namespace

TEST_CASE("expr: equal tree types have equal keys", "[expr]") {
  using A = decltype(relu(x * y + z));
  using B = decltype(relu(z * x + y));
  static_assert(A::structural_key == B::structural_key);
  static_assert(expr::structural_key_v<A> == expr::structural_key_v<B>);
  static_assert(std::is_same_v<A, B>);
  CHECK(A::structural_key == B::structural_key);
}

TEST_CASE("expr: different ops give different keys", "[expr]") {
  static_assert(decltype(x + y)::structural_key != decltype(x - y)::structural_key);
  static_assert(decltype(x * y)::structural_key != decltype(x / y)::structural_key);
  static_assert(decltype(exp(x))::structural_key != decltype(log(x))::structural_key);
  static_assert(decltype(x < y)::structural_key != decltype(x > y)::structural_key);
  static_assert(decltype(x % y)::structural_key != decltype(x * y)::structural_key);
  CHECK(true);
}

TEST_CASE("expr: different shapes of tree give different keys", "[expr]") {
  static_assert(decltype((x + y) * z)::structural_key != decltype(x + (y * z))::structural_key);
  static_assert(decltype(relu(x) + y)::structural_key != decltype(relu(x + y))::structural_key);
  static_assert(decltype(-(-x))::structural_key != decltype(-x)::structural_key);
  static_assert(decltype(sigmoid(tanh(x)))::structural_key != decltype(tanh(sigmoid(x)))::structural_key);
  CHECK(true);
}

TEST_CASE("expr: int, float and bool scalar leaves have distinct keys", "[expr]") {
  static_assert(decltype(x * 2)::structural_key != decltype(x * 2.0)::structural_key);
  static_assert(decltype(x * 2)::structural_key != decltype(x * true)::structural_key);
  static_assert(decltype(x * 2)::structural_key == decltype(x * 7)::structural_key);  // values are not structure
  static_assert(decltype(x * 2.0f)::structural_key == decltype(x * 0.5)::structural_key);
  static_assert(decltype(x * 2)::structural_key != decltype(x * y)::structural_key);
  CHECK(true);
}

TEST_CASE("expr: the key is usable as a template argument", "[expr]") {
  auto e = relu(x * y + 1.0);
  using Tag = KeyTag<decltype(e)::structural_key>;
  static_assert(Tag::value == decltype(relu(z * z + 2.0))::structural_key);
  CHECK(Tag::value != 0);
}

TEST_CASE("expr: symbolic parameters key by name", "[expr]") {
  static_assert(decltype(x % param<"W1">)::structural_key == decltype(y % param<"W1">)::structural_key);
  static_assert(decltype(x % param<"W1">)::structural_key != decltype(x % param<"W2">)::structural_key);
  static_assert(decltype(x % param<"W1">)::structural_key != decltype(x % y)::structural_key);
  CHECK(true);
}

TEST_CASE("expr: symbolic parameters bind through a symbol table", "[expr]") {
  Tensor in = tensor({{1., 2.}});
  SymbolTable env{{"W1", tensor({{1., 0.}, {0., 2.}})}, {"b1", tensor({10., 20.})}};
  auto e = relu(in % param<"W1"> + param<"b1">);
  CHECK(vals(e.eval(&env)) == std::vector<double>{11, 24});
}

TEST_CASE("expr: lowering gives the IR the functional ops give", "[expr]") {
  Tensor a = rand({3, 4}), b = rand({4}), w = rand({4, 2});
  Tensor e = sigmoid((a * b - 1.5) % w);
  Tensor f = matmul(binary_op(ir::Op::Sub, mul(a, b), Scalar(1.5)), w).sigmoid();
  CHECK(ir::to_string(e.node()) == ir::to_string(f.node()));
  CHECK(vals(e) == vals(f));
}

TEST_CASE("expr: tensor-like methods on an expression", "[expr]") {
  Tensor a = tensor({1., -2., 3.});
  auto e = a * 2;
  CHECK(e.shape() == Shape{3});
  CHECK(e.dtype() == DType::f32);
  CHECK(e.sum().item<double>() == 4);
  CHECK(e.abs().sum().item<double>() == 12);
  CHECK(e.max().item<double>() == 6);
  CHECK(e.mean().item<double>() == Approx(4.0 / 3));
  CHECK(e.str() == "tensor([ 2., -4.,  6.])");
  CHECK((a.sum() * 1).item<double>() == 2);
}

TEST_CASE("expr: every Tensor op is a method of an expression too", "[expr]") {
  Tensor m = tensor({{1., -2., 3.}, {-4., 5., -6.}});
  auto e = m * 2;  // [[2, -4, 6], [-8, 10, -12]]
  CHECK(e.dim() == 2);
  CHECK(e.size(1) == 3);
  CHECK(e.numel() == 6);
  CHECK(e.device() == cpu());
  CHECK_FALSE(e.requires_grad());
  CHECK(e.to_vector<double>() == std::vector<double>{2, -4, 6, -8, 10, -12});
  CHECK(vals(e.sum({1})) == std::vector<double>{4, -10});
  CHECK(vals(e.mean({0}, true)) == std::vector<double>{-3, 3, -3});
  CHECK(dims(e.mean({0}, true)) == std::vector<int64_t>{1, 3});
  CHECK(vals(e.max(1)) == std::vector<double>{6, 10});
  CHECK(vals(e.min(0)) == std::vector<double>{-8, -4, -12});
  CHECK(vals(e.argmax(1)) == std::vector<double>{2, 1});
  CHECK(e.argmax().item<int64_t>() == 4);
  CHECK(vals(e.relu()) == std::vector<double>{2, 0, 6, 0, 10, 0});
  CHECK(vals(e.t()) == std::vector<double>{2, -8, -4, 10, 6, -12});
  CHECK(dims(e.reshape({3, 2})) == std::vector<int64_t>{3, 2});
  CHECK(dims(e.flatten()) == std::vector<int64_t>{6});
  CHECK(dims(e.unsqueeze(0)) == std::vector<int64_t>{1, 2, 3});
  CHECK(vals(e[1]) == std::vector<double>{-8, 10, -12});
  CHECK(vals(e.slice(1, 0, 3, 2)) == std::vector<double>{2, 6, -8, -12});
  CHECK(vals(e.narrow(1, 1, 1)) == std::vector<double>{-4, 10});
  require_close(vals(e.abs().pow(0.5).pow(2.0)), {2, 4, 6, 8, 10, 12}, 1e-6, 1e-6);
  CHECK(e.to(DType::i64).dtype() == DType::i64);
  CHECK(vals(e.matmul(tensor({{1.}, {0.}, {1.}}))) == std::vector<double>{8, -20});
  require_close(vals(e.neg().exp().log()), {-2, 4, -6, 8, -10, 12}, 1e-6, 1e-6);
}

TEST_CASE("expr: where, maximum, minimum, pow and matmul as expressions", "[expr]") {
  Tensor a = tensor({1., -2., 3.}), b = tensor({0., 0., 5.});
  CHECK(vals(where(a > 0, a, 0.0)) == std::vector<double>{1, 0, 3});
  CHECK(vals(where(a > 0, -1.0, b)) == std::vector<double>{-1, 0, -1});
  CHECK(vals(maximum(a * 1, b)) == std::vector<double>{1, 0, 5});
  CHECK(vals(minimum(a, b * 1)) == std::vector<double>{0, -2, 3});
  CHECK(vals(pow(a, 2)) == std::vector<double>{1, 4, 9});
  CHECK(vals(pow(a * 1, 2.0)) == std::vector<double>{1, 4, 9});
  CHECK(matmul(a * 1, b).item<double>() == 15);
}

TEST_CASE("expr: an expression used twice lowers the same leaf once", "[expr]") {
  Tensor a = tensor({2.});
  Tensor r = a * a * a;
  std::string s = ir::to_string(r.node());
  CHECK(s.find("%1 = input") == std::string::npos);
  CHECK(r.item<double>() == 8);
}

TEST_CASE("expr: operators apply to expression subtrees and tensors alike", "[expr]") {
  Tensor a = tensor({1., 2.});
  auto e1 = a + 1;
  auto e2 = e1 * e1;  // a subtree used twice
  Tensor t = e2;
  CHECK(vals(t) == std::vector<double>{4, 9});
  CHECK(vals(-e1) == std::vector<double>{-2, -3});
  CHECK(vals(!(a > 1)) == std::vector<double>{1, 0});
}
