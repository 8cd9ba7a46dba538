// S6: saving and loading tensors, lists, dicts and state dicts.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "dsl/io.h"
#include "dsl/tessel.h"
#include "tests/support/temp_dir.h"

using namespace tessel;
namespace fs = std::filesystem;

namespace {
fs::path temp_file(const std::string& name) {
  return testing::process_temp_dir("tessel-io") / name;
}
nn::Sequential make_mlp() { return nn::Sequential(nn::LazyLinear(256), nn::ReLU(), nn::LazyLinear(10)); }
}  // namespace

TEST_CASE("S6.1 one tensor round-trips with its dtype", "[io][S6.1]") {
  auto p = temp_file("x-file");
  save(arange(4), p);
  Tensor x2 = load_tensor(p);
  CHECK(x2.dtype() == DType::i64);
  CHECK(x2.str() == "tensor([0, 1, 2, 3])");
  CHECK(load(p).kind == CheckpointKind::tensor);
}

TEST_CASE("S6.2 a list and a dict of tensors round-trip", "[io][S6.2]") {
  auto p = temp_file("x-files");
  save(std::vector<Tensor>{arange(4), zeros({4})}, p);
  auto xs = load_list(p);
  REQUIRE(xs.size() == 2);
  CHECK(xs[0].str() == "tensor([0, 1, 2, 3])");
  CHECK(xs[1].str() == "tensor([0., 0., 0., 0.])");
  auto q = temp_file("mydict");
  save(OrderedDict<Tensor>{{"x", arange(4)}, {"y", zeros({4})}}, q);
  auto d = load_dict(q);
  CHECK(d.keys() == std::vector<std::string>{"x", "y"});
  CHECK(d["y"].str() == "tensor([0., 0., 0., 0.])");
}

TEST_CASE("every dtype round-trips bit-exactly, including views", "[io]") {
  manual_seed(1);
  Tensor base = randn({3, 4});
  OrderedDict<Tensor> d;
  for (DType t : kAllDTypes) d.insert(std::string(dtype_name(t)), (base * 3).eval().to(t));
  d.insert("transposed", base.t());
  d.insert("scalar", tensor({2.5}).reshape({}));
  d.insert("empty", zeros({0, 3}));
  auto p = temp_file("dtypes");
  save(d, p);
  auto back = load_dict(p);
  for (auto& [k, v] : d) {
    INFO(k);
    CHECK(back[k].dtype() == v.dtype());
    CHECK(back[k].shape() == v.shape());
    CHECK(back[k].to_vector<double>() == v.to_vector<double>());
  }
}

TEST_CASE("S6.3 a fresh lazy MLP loads the state dict and gives bit-identical outputs", "[io][S6.3]") {
  manual_seed(2);
  auto net = make_mlp();
  Tensor X = randn({2, 20});
  Tensor Y = net(X);
  auto p = temp_file("mlp.params");
  save(net->state_dict(), p);
  auto clone = make_mlp();
  clone->load_state_dict(load_dict(p));
  Tensor Y_clone = clone(X);
  CHECK(Y_clone.to_vector<float>() == Y.to_vector<float>());
  CHECK(clone->repr() == net->repr());
}

TEST_CASE("tied parameters are stored once and load as one tensor", "[io][S2.6]") {
  manual_seed(3);
  nn::LazyLinear shared(8);
  nn::Sequential net(nn::LazyLinear(8), nn::ReLU(), shared, nn::ReLU(), shared);
  net(rand({2, 4}));
  auto p = temp_file("tied");
  save(net->state_dict(), p);
  auto d = load_dict(p);
  CHECK(d.size() == 6);
  CHECK(d["4.weight"].is_same(d["2.weight"]));
  // The file holds 4 tensors (two of the six names are aliases).
  CHECK(fs::file_size(p) < 8 * (8 * 4 + 8 + 8 * 8 + 8) + 2000);
}

TEST_CASE("S6.5 missing, unexpected and mis-shaped keys are errors listing them", "[io][S6.5][error]") {
  auto net = make_mlp();
  net(rand({2, 20}));
  auto sd = net->state_dict();
  OrderedDict<Tensor> bad;
  bad.insert("0.weight", sd["0.weight"]);
  bad.insert("0.bias", zeros({5}));
  bad.insert("extra", zeros({1}));
  auto fresh = make_mlp();
  fresh(rand({2, 20}));
  try {
    fresh->load_state_dict(bad);
    FAIL("expected CheckpointError");
  } catch (const CheckpointError& e) {
    std::string m = e.what();
    CHECK_THAT(m, Catch::Contains("missing keys: 2.weight, 2.bias"));
    CHECK_THAT(m, Catch::Contains("unexpected keys: extra"));
    CHECK_THAT(m, Catch::Contains("0.bias: expected [256], got [5]"));
  }
  auto r = fresh->load_state_dict(bad, /*strict=*/false);
  CHECK(r.missing_keys == std::vector<std::string>{"2.weight", "2.bias"});
  CHECK(r.unexpected_keys == std::vector<std::string>{"extra"});
  CHECK(r.mismatched_keys.size() == 1);
}

TEST_CASE("saving an uninitialized lazy model is a clear error", "[io][error]") {
  auto net = make_mlp();
  CHECK_THROWS_WITH(save(net->state_dict(), temp_file("lazy")), Catch::Contains("uninitialized parameter") &&
                                                                    Catch::Contains("0.weight"));
}

TEST_CASE("a corrupt file is a CheckpointError, never a crash", "[io][error]") {
  auto p = temp_file("corrupt");
  save(arange(10), p);
  {
    std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(0);
    uint64_t huge = ~uint64_t{0};
    f.write(reinterpret_cast<const char*>(&huge), 8);
  }
  CHECK_THROWS_AS(load(p), CheckpointError);
  CHECK_THROWS_AS(load(temp_file("does-not-exist")), CheckpointError);
}

TEST_CASE("loading the wrong container kind says which kind it is", "[io][error]") {
  auto p = temp_file("kind");
  save(std::vector<Tensor>{arange(2)}, p);
  CHECK_THROWS_WITH(load_tensor(p), Catch::Contains("not one tensor"));
}
