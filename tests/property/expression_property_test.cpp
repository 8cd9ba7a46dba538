// Random expression trees (depth <= 5; elementwise ops, reductions, matmul,
// movement) on random broadcastable shapes: tessel's lazy result must match
// the eager naive evaluator. Seed printed; TESSEL_TEST_SEED replays.
#include <optional>

#include "tree_gen.h"

using namespace tessel;
using namespace proptest;

namespace {

// Runs on the ref backend unless `on_default_backend` (the one users get,
// which may be the compiled CPU backend).
void run_trees(const char* name, Mode mode, int count, uint64_t salt, bool on_default_backend = false) {
  uint64_t seed = tessel::testing::test_seed(name);
  INFO("seed " << seed << " (TESSEL_TEST_SEED=" << seed << " replays)");
  std::optional<BackendOverride> ref;
  if (!on_default_backend) ref.emplace(ref_backend());
  INFO("backend " << cpu_backend().name());
  TreeGen g(seed ^ salt, mode);
  for (int i = 0; i < count; ++i) {
    INFO("case " << i);
    Dims target = g.random_shape(4, 4);
    Pair p = g.gen(target, static_cast<int>(g.uni(1, 5)));
    check_pair(p, mode);
  }
}

}  // namespace

TEST_CASE("property: random f64 trees match the naive evaluator", "[property]") {
  run_trees("property f64 trees", Mode::f64, 400, 0x1111);
}

TEST_CASE("property: random f32 trees match the naive evaluator within f32 rounding", "[property]") {
  run_trees("property f32 trees", Mode::f32, 200, 0x2222);
}

TEST_CASE("property: random int64 trees match the naive evaluator exactly", "[property]") {
  run_trees("property i64 trees", Mode::i64, 200, 0x3333);
}

TEST_CASE("property: random f64 trees on the default CPU backend", "[property]") {
  run_trees("property f64 trees, default backend", Mode::f64, 100, 0x6666, true);
}

TEST_CASE("property: random int64 trees on the default CPU backend", "[property]") {
  run_trees("property i64 trees, default backend", Mode::i64, 50, 0x7777, true);
}

namespace {

void run_batches(const char* name, int count, bool on_default_backend) {
  uint64_t seed = tessel::testing::test_seed(name);
  INFO("seed " << seed);
  std::optional<BackendOverride> ref;
  if (!on_default_backend) ref.emplace(ref_backend());
  INFO("backend " << cpu_backend().name());
  TreeGen g(seed ^ 0x4444, Mode::f64);
  for (int batch = 0; batch < count; ++batch) {
    INFO("batch " << batch);
    std::vector<Pair> ps;
    Dims target = g.random_shape(3, 4);
    Pair shared = g.gen(target, 2);
    for (int j = 0; j < 4; ++j) {
      Pair p = g.gen(target, 3);
      // Half of them reuse a common subtree, which one realization computes once.
      if (j % 2 == 0) {
        p.t = p.t + shared.t;
        p.n = naive::zip(p.n, shared.n, [](double x, double y) { return x + y; });
        p.scale = std::max({p.scale, shared.scale, max_abs(p.n)});
        p.desc = "(" + p.desc + " + " + shared.desc + ")";
      }
      ps.push_back(p);
    }
    std::vector<Tensor> ts;
    for (auto& p : ps) ts.push_back(p.t);
    realize(ts);
    for (auto& p : ps) {
      CHECK(p.t.is_realized());
      check_pair(p, Mode::f64);
    }
  }
}

}  // namespace

TEST_CASE("property: trees realized together in one batch", "[property]") {
  run_batches("property batches", 60, false);
}

TEST_CASE("property: trees realized together in one batch on the default CPU backend", "[property]") {
  run_batches("property batches, default backend", 15, true);
}

TEST_CASE("property: equal random trees over different data have equal IR hashes", "[property]") {
  uint64_t seed = tessel::testing::test_seed("property hashes");
  INFO("seed " << seed);
  BackendOverride ref(ref_backend());
  std::mt19937_64 pick(seed);
  for (int i = 0; i < 60; ++i) {
    uint64_t s = pick();
    // The same generator seed gives the same tree and the same leaf values;
    // a second tree over fresh tensors with the same structure must hash equally.
    TreeGen g1(s, Mode::f64), g2(s, Mode::f64);
    Dims t1 = g1.random_shape(3, 3), t2 = g2.random_shape(3, 3);
    Pair a = g1.gen(t1, 4), b = g2.gen(t2, 4);
    REQUIRE(a.desc == b.desc);
    INFO("tree: " << a.desc);
    CHECK(ir::to_string(a.t.node()) == ir::to_string(b.t.node()));
    CHECK(ir::structural_hash({a.t.node()}) == ir::structural_hash({b.t.node()}));
    CHECK(a.t.to_vector<double>() == b.t.to_vector<double>());
  }
}
