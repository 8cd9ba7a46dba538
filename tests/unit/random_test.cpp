// manual_seed and the counter-based (Philox4x32-10) generator.
#include "tests/support/tensor_testing.h"

#include "runtime/philox.h"



using namespace tessel;
using namespace tessel::testing;

TEST_CASE("philox4x32-10 matches the Random123 known-answer vector", "[random]") {
  // Random123's kat_vectors: "philox4x32 10" with counter 0 and key 0.
  auto b = Philox4x32::block(0, 0);
  CHECK(b[0] == 0x6627e8d5u);
  CHECK(b[1] == 0xe169c58du);
  CHECK(b[2] == 0xbc57ac4cu);
  CHECK(b[3] == 0x9b00dbd8u);
}

TEST_CASE("philox is usable at compile time and is a pure function", "[random]") {
  static_assert(Philox4x32::block(0, 0)[0] == 0x6627e8d5u);
  static_assert(Philox4x32::word(7, 5) == Philox4x32::block(7, 1)[1]);
  CHECK(Philox4x32::block(1, 0) != Philox4x32::block(0, 0));
  CHECK(Philox4x32::block(0, 1) != Philox4x32::block(0, 0));
  CHECK(Philox4x32::block(0, uint64_t{1} << 32) != Philox4x32::block(0, 0));  // the high counter word counts
  CHECK(Philox4x32::uniform(0) == 0.0f);
  CHECK(Philox4x32::uniform(0xFFFFFFFFu) < 1.0f);
}

TEST_CASE("manual_seed makes rand reproducible", "[random]") {
  manual_seed(1234);
  auto a = vals(rand({3, 5}));
  auto b = vals(randn({7}));
  manual_seed(1234);
  CHECK(vals(rand({3, 5})) == a);
  CHECK(vals(randn({7})) == b);
}

TEST_CASE("consecutive draws differ", "[random]") {
  manual_seed(1);
  auto a = vals(rand({8}));
  auto b = vals(rand({8}));
  CHECK(a != b);
}

TEST_CASE("different seeds give different streams", "[random]") {
  manual_seed(1);
  auto a = vals(rand({8}));
  manual_seed(2);
  CHECK(vals(rand({8})) != a);
}

TEST_CASE("rand element i is word i of the Philox stream", "[random]") {
  manual_seed(42);
  auto v = rand({10}).to_vector<float>();
  for (uint64_t i = 0; i < 10; ++i) CHECK(v[i] == Philox4x32::uniform(Philox4x32::word(42, i)));
  // The next draw starts at the next whole block (10 words use 3 blocks).
  auto w = rand({2}).to_vector<float>();
  CHECK(w[0] == Philox4x32::uniform(Philox4x32::word(42, 12)));
}

TEST_CASE("rand in f64 draws the same numbers as f32", "[random]") {
  manual_seed(9);
  auto f = rand({6}).to_vector<float>();
  manual_seed(9);
  auto d = rand({6}, DType::f64).to_vector<double>();
  for (size_t i = 0; i < 6; ++i) CHECK(d[i] == static_cast<double>(f[i]));
}

TEST_CASE("first values under seed 0 are fixed", "[random]") {
  // Recorded once from this implementation (Philox4x32-10, 24-bit uniforms,
  // Box-Muller on word pairs); they pin the stream so a CUDA generator and
  // later changes reproduce it exactly.
  manual_seed(0);
  auto u = rand({4}).to_vector<float>();
  CHECK(u == std::vector<float>{0x6627e8p-24f, 0xe169c5p-24f, 0xbc57acp-24f, 0x9b00dbp-24f});
  manual_seed(0);
  auto n = randn({4}, DType::f64).to_vector<double>();
  // (the uniforms above are the Random123 known answer; the normals were
  // printed once with %.17g; a last-bit tolerance allows another libm)
  CHECK(n[0] == Approx(0.99113747514589712).epsilon(1e-14));
  CHECK(n[1] == Approx(-0.92466278035443317).epsilon(1e-14));
  CHECK(n[2] == Approx(-0.61760905498485441).epsilon(1e-14));
  CHECK(n[3] == Approx(-0.48206834726449632).epsilon(1e-14));
}

TEST_CASE("reserve_random hands out disjoint counter ranges", "[random]") {
  manual_seed(5);
  auto [s1, c1] = reserve_random(10);
  auto [s2, c2] = reserve_random(1);
  auto [s3, c3] = reserve_random(4);
  CHECK(s1 == 5);
  CHECK(s2 == 5);
  CHECK(c1 == 0);
  CHECK(c2 == 3);
  CHECK(c3 == 4);
  (void)s3;
}

TEST_CASE("uniform_ and normal_ follow the seed", "[random]") {
  manual_seed(77);
  Tensor a = zeros({5});
  a.uniform_(-1, 1);
  manual_seed(77);
  Tensor b = zeros({5});
  b.uniform_(-1, 1);
  CHECK(vals(a) == vals(b));
  manual_seed(78);
  Tensor c = zeros({5});
  c.normal_();
  manual_seed(78);
  CHECK(vals(c) == vals(randn({5})));
}
