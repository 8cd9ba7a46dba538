// User mistakes in var, std, logsumexp, norm, argmin, prod and max/min with
// indices: integer inputs, dims out of range or repeated, empty dims.
#include "error_testing.h"

#include "dsl/reductions.h"

using namespace tessel;

TEST_CASE("var, std, logsumexp and norm of an integer tensor", "[error]") {
  Tensor i = tensor({{1, 2}, {3, 4}});
  REQUIRE_ERROR(i.var({1}), DTypeError, "var: input dtype is i64, but var needs a floating dtype",
                "x.to(DType::f32).var(");
  REQUIRE_ERROR(i.std(), DTypeError, "std: input dtype is i64, but std needs a floating dtype");
  REQUIRE_ERROR(logsumexp(i, {1}), DTypeError, "logsumexp: input dtype is i64, but logsumexp needs a floating dtype");
  REQUIRE_ERROR(norm(i), DTypeError, "norm: input dtype is i64, but norm needs a floating dtype");
}

TEST_CASE("var, logsumexp and norm with a dim out of range or repeated", "[error]") {
  Tensor x = ones({2, 3});
  REQUIRE_ERROR(x.var({2}), IndexError, "var: dim 2 is out of range for a tensor of shape [2, 3] (valid dims are -2..1)");
  REQUIRE_ERROR(x.std({-3}), IndexError, "std: dim -3 is out of range");
  REQUIRE_ERROR(logsumexp(x, {5}), IndexError, "logsumexp: dim 5 is out of range");
  REQUIRE_ERROR(x.norm(2.0, {1, -1}), IndexError, "norm: dim 1 appears more than once in dims [1, 1]");
}

TEST_CASE("argmin and max or min with indices with a bad or empty dim", "[error]") {
  Tensor x = ones({2, 3});
  REQUIRE_ERROR(x.argmin(2), IndexError, "argmin: dim 2 is out of range");
  REQUIRE_ERROR(x.max_with_indices(-3), IndexError, "max: dim -3 is out of range");
  REQUIRE_ERROR(x.min_with_indices(7), IndexError, "min: dim 7 is out of range");
  REQUIRE_ERROR(ones({2, 0}).max_with_indices(1), ValueError, "max: cannot reduce over an empty dimension");
  REQUIRE_ERROR(ones({0}).argmin(), ValueError, "argmin: cannot reduce over an empty tensor");
}

TEST_CASE("norm with a NaN order", "[error]") {
  REQUIRE_ERROR(norm(ones({2}), NAN), ValueError, "norm: the order p is NaN");
}

TEST_CASE("prod with a dim out of range", "[error]") {
  Tensor x = ones({2, 3});
  REQUIRE_ERROR(x.prod(2), IndexError, "prod: dim 2 is out of range for a tensor of shape [2, 3] (valid dims are -2..1)");
  REQUIRE_ERROR(prod(x, -3, true), IndexError, "prod: dim -3 is out of range");
  REQUIRE_ERROR(full({}, 2.0).prod(1), IndexError, "prod: dim 1 is out of range");
}
