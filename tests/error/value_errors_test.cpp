#include "error_testing.h"

using namespace tessel;

TEST_CASE("item() on many elements", "[error]") {
  REQUIRE_ERROR(ones({2, 3}).item<double>(), ValueError, "item()", "6 elements", "[2, 3]");
}

TEST_CASE("item() on an empty tensor", "[error]") {
  REQUIRE_ERROR(zeros({0}).item<double>(), ValueError, "item()", "0 elements");
}

TEST_CASE("bool of many elements", "[error]") {
  Tensor t = ones({3});
  REQUIRE_ERROR(static_cast<bool>(t), ValueError, "boolean value", "3 elements", "ambiguous");
}

TEST_CASE("bool of a many-element comparison in control flow", "[error]") {
  Tensor t = ones({2, 2});
  auto use = [&] {
    if (t > 0) return 1;
    return 0;
  };
  REQUIRE_ERROR(use(), ValueError, "ambiguous", "[2, 2]");
}

TEST_CASE("reading an undefined tensor", "[error]") {
  Tensor t;
  CHECK(!t.defined());
  REQUIRE_ERROR(t.shape(), ValueError, "undefined");
  REQUIRE_ERROR(t.item<double>(), ValueError, "undefined");
  REQUIRE_ERROR(t.to_vector<float>(), ValueError, "undefined");
}

TEST_CASE("using an undefined tensor in an op", "[error]") {
  Tensor t;
  REQUIRE_ERROR(Tensor(t + 1), ValueError, "undefined");
  REQUIRE_ERROR(Tensor(ones({2}) * t), ValueError, "undefined");
  REQUIRE_ERROR(t.sum(), ValueError, "undefined");
}

TEST_CASE("max of an empty dimension", "[error]") {
  REQUIRE_ERROR(zeros({0, 3}).max(0), ValueError, "max", "empty", "[0, 3]");
}

TEST_CASE("argmax of an empty dimension", "[error]") {
  REQUIRE_ERROR(zeros({0, 3}).argmax(0), ValueError, "argmax", "empty", "[0, 3]");
  REQUIRE_ERROR(zeros({2, 0}).argmax(), ValueError, "argmax", "empty", "[0]");
}

TEST_CASE("slice with a non-positive step", "[error]") {
  REQUIRE_ERROR(ones({4}).slice(0, 0, 4, 0), ValueError, "slice", "step");
  REQUIRE_ERROR(ones({4}).slice(0, 0, 4, -1), ValueError, "step", "-1");
}

TEST_CASE("arange with an infinite or negative range", "[error]") {
  REQUIRE_ERROR(arange(-1), ValueError, "arange", "-1");
  REQUIRE_ERROR(arange(0.0, 1.0, 0.0), ValueError, "arange", "step 0");
  REQUIRE_ERROR(arange(0.0, 1.0, -1.0), ValueError, "arange");
}

TEST_CASE("an unbound symbolic parameter", "[error]") {
  Tensor x = ones({1, 2});
  REQUIRE_ERROR(Tensor(x % param<"W1">), ValueError, "W1", "not bound");
}

TEST_CASE("in-place write into an expanded view", "[error]") {
  Tensor e = tensor({1., 2.}).expand({3, 2});
  REQUIRE_ERROR(e += 1, ValueError, "in-place", "[3, 2]", "share memory", "clone()");
}

TEST_CASE("in-place write into a lazy expanded view", "[error]") {
  Tensor e = Tensor(tensor({1., 2.}) * 2).expand({2, 2});
  REQUIRE_ERROR(e.fill_(0), ValueError, "share memory");
}

TEST_CASE("an integer tensor to a negative integer power is an error, as in PyTorch", "[error]") {
  Tensor x = tensor({1, 2, 4});
  REQUIRE_ERROR(x.pow(-1), ValueError, "pow", "negative integer powers", "i64", "-1", "to(DType::f32)");
  REQUIRE_ERROR(Tensor(pow(x, -2)), ValueError, "pow", "-2");
  CHECK(x.pow(2).to_vector<int64_t>() == std::vector<int64_t>{1, 4, 16});
  CHECK(x.to(DType::f32).pow(-1).to_vector<double>() == std::vector<double>{1, 0.5, 0.25});
}

TEST_CASE("load_state_dict into a lazy model whose checkpoint lacks the weight", "[error]") {
  nn::Sequential lazy(nn::LazyLinear(4));
  OrderedDict<Tensor> dict;
  dict.insert("0.bias", zeros({4}));
  REQUIRE_ERROR(lazy->load_state_dict(dict), CheckpointError, "missing keys: 0.weight",
                "0.bias: not loaded, net.0 is still lazy (the key that gives its shape is missing)");
  nn::LoadResult r = lazy->load_state_dict(dict, /*strict=*/false);
  CHECK(r.missing_keys == std::vector<std::string>{"0.weight"});
  REQUIRE(r.mismatched_keys.size() == 1);
  CHECK(r.mismatched_keys[0].rfind("0.bias: not loaded", 0) == 0);
}

TEST_CASE("errors about undefined tensors and lazy parameters speak of the user's objects", "[error]") {
  Tensor t;
  try {
    (void)Tensor(t + 1);
    FAIL("expected ValueError");
  } catch (const ValueError& e) {
    CHECK(std::string(e.what()).rfind("an undefined tensor (default-constructed", 0) == 0);  // no internal word first
  }
  nn::LazyLinear lazy(4);
  REQUIRE_ERROR(lazy->weight.shape(), ValueError, "LazyLinear.weight is an UninitializedParameter",
                "run a forward pass");
  REQUIRE_ERROR(Tensor().backward(), ValueError, "backward: an undefined tensor");
}

TEST_CASE("gelu with an unknown approximation", "[error]") {
  REQUIRE_ERROR(gelu(ones({2}), "erf"), ValueError, "gelu", "approximate", "\"none\" or \"tanh\"", "\"erf\"");
  REQUIRE_ERROR(nn::GELU("fast"), ValueError, "GELU", "approximate", "\"none\" or \"tanh\"", "\"fast\"");
}

TEST_CASE("clamp without a bound", "[error]") {
  REQUIRE_ERROR(ones({2}).clamp(std::nullopt, std::nullopt), ValueError, "clamp", "at least one of min and max",
                "x.clamp(0.0, 1.0)");
}
