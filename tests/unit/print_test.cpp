// Printing: exactly PyTorch's text (torch/_tensor_str.py) for the same values.
#include "tests/support/tensor_testing.h"

#include <cmath>

using namespace tessel;
using namespace tessel::testing;

TEST_CASE("print: 2-d floats with integer values", "[print]") {
  CHECK(tensor({{1., 2.}, {3., 4.}}).str() == "tensor([[1., 2.],\n        [3., 4.]])");
}

TEST_CASE("print: 0-d float", "[print]") {
  CHECK(full({}, 3.5).str() == "tensor(3.5000)");
  CHECK(full({}, 3.0).str() == "tensor(3.)");
}

TEST_CASE("print: integers", "[print]") {
  CHECK(tensor({1, 2, 3}).str() == "tensor([1, 2, 3])");
  CHECK(tensor({-10, 2, 300}).str() == "tensor([-10,   2, 300])");
  CHECK(tensor(5).str() == "tensor(5)");
}

TEST_CASE("print: bools", "[print]") {
  CHECK((tensor({1, 0}) > 0).str() == "tensor([ True, False])");
  CHECK((tensor(5) > 3).str() == "tensor(True)");
  CHECK((tensor({1, 1}) > 0).str() == "tensor([True, True])");
}

TEST_CASE("print: fixed-point with 4 decimals, aligned", "[print]") {
  CHECK(tensor({-1.5, 2.25}).str() == "tensor([-1.5000,  2.2500])");
  CHECK(tensor({0.5, 10.25, -3.}).str() == "tensor([ 0.5000, 10.2500, -3.0000])");
  CHECK(tensor({-0.5, 0.}).str() == "tensor([-0.5000,  0.0000])");
  CHECK(tensor({123456.789}).str() == "tensor([123456.7891])");
}

TEST_CASE("print: zeros only", "[print]") {
  CHECK(tensor({0., 0.}).str() == "tensor([0., 0.])");
}

TEST_CASE("print: scientific mode for small values", "[print]") {
  CHECK(tensor({1e-5, 1.}).str() == "tensor([1.0000e-05, 1.0000e+00])");
  CHECK(tensor({-1e-5, 1.}).str() == "tensor([-1.0000e-05,  1.0000e+00])");
}

TEST_CASE("print: scientific mode for large values", "[print]") {
  CHECK(tensor({1e9}).str() == "tensor([1.0000e+09])");
  CHECK(tensor({1.5e9, 2.5}).str() == "tensor([1.5000e+09, 2.5000e+00])");
}

TEST_CASE("print: integer-valued floats with a wide range use scientific mode", "[print]") {
  // PyTorch: int_mode switches to sci when max / min > 1000, as in non-int mode.
  CHECK(tensor({1., 2000.}).str() == "tensor([1.0000e+00, 2.0000e+03])");
  CHECK(tensor({1., 1000.}).str() == "tensor([   1., 1000.])");
}

TEST_CASE("print: nan and inf", "[print]") {
  CHECK(tensor({1.5, INFINITY}).str() == "tensor([1.5000,    inf])");
  // Width comes from the finite nonzero values only.
  CHECK(tensor({1., NAN}).str() == "tensor([1., nan])");
  CHECK(tensor({1., -INFINITY}).str() == "tensor([1., -inf])");
  CHECK(tensor({NAN, NAN}).str() == "tensor([nan, nan])");
}

TEST_CASE("print: float64 has a dtype suffix", "[print]") {
  CHECK(tensor({1.5, 2.}, DType::f64).str() == "tensor([1.5000, 2.0000], dtype=float64)");
  CHECK(tensor({1., 2.}, DType::f64).str() == "tensor([1., 2.], dtype=float64)");
}

TEST_CASE("print: other non-default dtypes have a suffix", "[print]") {
  CHECK(tensor({1, 2}, DType::i32).str() == "tensor([1, 2], dtype=int32)");
  CHECK(tensor({1., 2.}).to(DType::f16).str() == "tensor([1., 2.], dtype=float16)");
  CHECK(tensor({1., 2.}).to(DType::bf16).str() == "tensor([1., 2.], dtype=bfloat16)");
}

TEST_CASE("print: 3-d tensors separate blocks with a blank line", "[print]") {
  CHECK(tensor({{{1, 2}, {3, 4}}, {{5, 6}, {7, 8}}}).str() ==
        "tensor([[[1, 2],\n         [3, 4]],\n\n        [[5, 6],\n         [7, 8]]])");
}

TEST_CASE("print: a transposed view prints in logical order", "[print]") {
  CHECK(tensor({{1, 2}, {3, 4}}).t().str() == "tensor([[1, 3],\n        [2, 4]])");
}

TEST_CASE("print: long rows wrap at 80 columns", "[print]") {
  CHECK(arange(30).str() ==
        "tensor([ 0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11, 12, 13, 14, 15, 16, 17,\n"
        "        18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29])");
}

TEST_CASE("print: above 1000 elements a 1-d tensor is summarized", "[print]") {
  CHECK(arange(2000).str() == "tensor([   0,    1,    2,  ..., 1997, 1998, 1999])");
  CHECK(arange(1000).str().find("...") == std::string::npos);
  CHECK(arange(1001).str().find("...") != std::string::npos);
}

TEST_CASE("print: summarized floats choose their format from the printed elements", "[print]") {
  CHECK(arange(2000, DType::f32).str() ==
        "tensor([0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 1.9970e+03, 1.9980e+03,\n        1.9990e+03])");
  Tensor t = zeros({2000});
  t[1000] = 123.5;  // not printed, so it does not change the format
  CHECK(t.str() == "tensor([0., 0., 0.,  ..., 0., 0., 0.])");
}

TEST_CASE("print: a summarized 2-d tensor", "[print]") {
  CHECK(zeros({100, 100}).str() ==
        "tensor([[0., 0., 0.,  ..., 0., 0., 0.],\n"
        "        [0., 0., 0.,  ..., 0., 0., 0.],\n"
        "        [0., 0., 0.,  ..., 0., 0., 0.],\n"
        "        ...,\n"
        "        [0., 0., 0.,  ..., 0., 0., 0.],\n"
        "        [0., 0., 0.,  ..., 0., 0., 0.],\n"
        "        [0., 0., 0.,  ..., 0., 0., 0.]])");
  CHECK(zeros({2, 1000}).str() ==
        "tensor([[0., 0., 0.,  ..., 0., 0., 0.],\n"
        "        [0., 0., 0.,  ..., 0., 0., 0.]])");
}

TEST_CASE("print: empty tensors", "[print]") {
  CHECK(zeros({0}).str() == "tensor([])");
  CHECK(zeros({2, 0}).str() == "tensor([], size=(2, 0))");
  CHECK(zeros({0}, DType::i64).str() == "tensor([], dtype=int64)");
}

TEST_CASE("print: requires_grad=True on a leaf", "[print]") {
  Tensor x = tensor({1., 2.}).requires_grad_();
  CHECK(x.str() == "tensor([1., 2.], requires_grad=True)");
}

TEST_CASE("print: grad_fn on computed tensors", "[print]") {
  Tensor x = tensor({1., 2.}).requires_grad_();
  CHECK((x * 2).str() == "tensor([2., 4.], grad_fn=<MulBackward0>)");
  CHECK((x * 2).sum().str() == "tensor(6., grad_fn=<SumBackward0>)");
  CHECK((x + x).str() == "tensor([2., 4.], grad_fn=<AddBackward0>)");
  CHECK(x.mean().str() == "tensor(1.5000, grad_fn=<MeanBackward0>)");
  Tensor d = tensor({1., 2.}, DType::f64).requires_grad_();
  CHECK((d * 1).str() == "tensor([1., 2.], dtype=float64, grad_fn=<MulBackward0>)");
}

TEST_CASE("print: no grad suffix inside a no-grad scope or after detach", "[print]") {
  Tensor x = tensor({1., 2.}).requires_grad_();
  {
    NoGradGuard g;
    CHECK((x * 2).str() == "tensor([2., 4.])");
  }
  CHECK(x.detach().str() == "tensor([1., 2.])");
}

TEST_CASE("print: undefined tensor", "[print]") {
  CHECK(Tensor().str() == "tensor(undefined)");
}

TEST_CASE("fmt formatters for Tensor, Shape, DType, Device", "[print]") {
  Tensor t = tensor({1, 2});
  CHECK(fmt::format("{}", t) == t.str());
  CHECK(fmt::format("{}", Shape{2, 10}) == "[2, 10]");
  CHECK(fmt::format("{}", Shape{}) == "[]");
  CHECK(fmt::format("{}", DType::f64) == "f64");
  CHECK(fmt::format("{}", cpu()) == "cpu");
  CHECK(fmt::format("{}", gpu(1)) == "cuda:1");
  CHECK(fmt::format("{}", tensor({1., 2.}) * 2) == "tensor([2., 4.])");
}

TEST_CASE("print: a summarized 3-d tensor", "[print]") {
  Tensor t = arange(7 * 2 * 100).reshape({7, 2, 100});
  std::string s = t.str();
  std::string expect =
      "tensor([[[   0,    1,    2,  ...,   97,   98,   99],\n"
      "         [ 100,  101,  102,  ...,  197,  198,  199]],\n"
      "\n"
      "        [[ 200,  201,  202,  ...,  297,  298,  299],\n"
      "         [ 300,  301,  302,  ...,  397,  398,  399]],\n"
      "\n"
      "        [[ 400,  401,  402,  ...,  497,  498,  499],\n"
      "         [ 500,  501,  502,  ...,  597,  598,  599]],\n"
      "\n"
      "        ...,\n"
      "\n"
      "        [[ 800,  801,  802,  ...,  897,  898,  899],\n"
      "         [ 900,  901,  902,  ...,  997,  998,  999]],\n"
      "\n"
      "        [[1000, 1001, 1002,  ..., 1097, 1098, 1099],\n"
      "         [1100, 1101, 1102,  ..., 1197, 1198, 1199]],\n"
      "\n"
      "        [[1200, 1201, 1202,  ..., 1297, 1298, 1299],\n"
      "         [1300, 1301, 1302,  ..., 1397, 1398, 1399]]])";
  CHECK(s == expect);
}

TEST_CASE("print: negative zero and mixed signs in integer mode", "[print]") {
  CHECK(tensor({-0.0}).str() == "tensor([-0.])");
  CHECK(tensor({-1., 10.}).str() == "tensor([-1., 10.])");
}

TEST_CASE("print: f16 values print their stored value", "[print]") {
  CHECK(tensor({0.1, 1.5}).to(DType::f16).str() == "tensor([0.1000, 1.5000], dtype=float16)");
}
