// Random composite trees (the property tests' generator, in f64, with leaves
// that require grad) against central finite differences.
#include "gradcheck.h"
#include "tests/property/tree_gen.h"

using namespace tessel;
using namespace proptest;

namespace {

struct Built {
  Pair p;
  std::vector<Tensor> leaves;
};

Built build(uint64_t seed, bool grad, std::optional<TreeGen::Nudge> nudge = std::nullopt) {
  TreeGen g(seed, Mode::f64);
  g.magnitude_limit = 1e4;  // keeps finite-difference rounding small
  g.smooth = true;
  Built b;
  if (grad) g.grad_leaves = &b.leaves;
  g.nudge = nudge;
  Dims target = g.random_shape(3, 3);
  b.p = g.gen(target, static_cast<int>(g.uni(1, 4)));
  return b;
}

double weighted(const Tensor& t, const std::vector<double>& w) {
  std::vector<double> v = t.to_vector<double>();
  double s = 0;
  for (size_t i = 0; i < v.size(); ++i) s += v[i] * w[i];
  return s;
}

}  // namespace

TEST_CASE("gradcheck: random composite trees", "[gradcheck]") {
  uint64_t seed = tessel::testing::test_seed("gradcheck trees");
  INFO("seed " << seed << " (TESSEL_TEST_SEED=" << seed << " replays)");
  BackendOverride ref(ref_backend());
  std::mt19937_64 pick(seed);
  const int trees = 320;
  int checked = 0;
  for (int i = 0; i < trees; ++i) {
    uint64_t s = pick();
    INFO("tree " << i);
    Built a = build(s, true);
    INFO("tree: " << a.p.desc);
    if (a.leaves.empty() || !a.p.t.requires_grad()) continue;  // e.g. only comparisons: no gradient
    std::vector<double> w(static_cast<size_t>(a.p.t.numel()));
    std::uniform_real_distribution<double> u(-1, 1);
    for (auto& x : w) x = u(pick);
    Tensor loss = (a.p.t * from_vector<double>(w, a.p.t.shape())).sum();
    loss.backward();
    // A handful of random leaf elements per tree keeps the run short.
    for (int k = 0; k < 6; ++k) {
      size_t leaf = static_cast<size_t>(pick() % a.leaves.size());
      size_t n = static_cast<size_t>(a.leaves[leaf].numel());
      size_t el = static_cast<size_t>(pick() % n);
      Tensor g = a.leaves[leaf].grad();
      double analytic = g.defined() ? g.to_vector<double>()[el] : 0.0;  // undefined: never reached
      const double h = 1e-6;
      double fp, fm;
      {
        NoGradGuard ng;
        fp = weighted(build(s, false, TreeGen::Nudge{leaf, el, h}).p.t, w);
        fm = weighted(build(s, false, TreeGen::Nudge{leaf, el, -h}).p.t, w);
      }
      double numeric = (fp - fm) / (2 * h);
      INFO("leaf " << leaf << " element " << el << ": analytic " << analytic << ", numeric " << numeric
                   << ", scale " << a.p.scale);
      CHECK(std::fabs(analytic - numeric) <= 1e-5 * (1 + std::fabs(numeric)) + 1e-9 * (1 + a.p.scale));
      ++checked;
    }
  }
  CHECK(checked > 1000);
}

TEST_CASE("gradcheck: random composite trees on the default CPU backend", "[gradcheck]") {
  uint64_t seed = tessel::testing::test_seed("gradcheck trees, default backend");
  INFO("seed " << seed);
  std::mt19937_64 pick(seed);
  for (int i = 0; i < 40; ++i) {
    uint64_t s = pick();
    INFO("tree " << i);
    Built a = build(s, true);
    INFO("tree: " << a.p.desc);
    if (a.leaves.empty() || !a.p.t.requires_grad()) continue;
    Tensor loss = a.p.t.sum();
    loss.backward();
    std::vector<double> w(static_cast<size_t>(a.p.t.numel()), 1.0);
    size_t leaf = static_cast<size_t>(pick() % a.leaves.size());
    size_t el = static_cast<size_t>(pick() % static_cast<size_t>(a.leaves[leaf].numel()));
    Tensor g = a.leaves[leaf].grad();
    double analytic = g.defined() ? g.to_vector<double>()[el] : 0.0;
    double fp, fm;
    {
      NoGradGuard ng;
      fp = weighted(build(s, false, TreeGen::Nudge{leaf, el, 1e-6}).p.t, w);
      fm = weighted(build(s, false, TreeGen::Nudge{leaf, el, -1e-6}).p.t, w);
    }
    double numeric = (fp - fm) / 2e-6;
    INFO("analytic " << analytic << ", numeric " << numeric);
    CHECK(std::fabs(analytic - numeric) <= 1e-5 * (1 + std::fabs(numeric)) + 1e-9 * (1 + a.p.scale));
  }
}
