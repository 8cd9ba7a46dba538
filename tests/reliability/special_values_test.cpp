// NaN and Inf through the ops that select, reduce or normalize, as PyTorch
// gives them, on every CPU backend (the compiled one must not trade NaN
// propagation for a faster max).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <optional>

#include "codegen/backend.h"
#include "dsl/functional.h"
#include "dsl/tessel.h"

using namespace tessel;

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Equal element for element, NaN equal to NaN.
bool same(const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return false;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::isnan(want[i]) ? std::isnan(got[i]) : got[i] == want[i])) return false;
  return true;
}
std::vector<double> vals(const Tensor& t) { return t.to(DType::f64).to_vector<double>(); }
}  // namespace

TEST_CASE("NaN and Inf propagate through relu, max, min, sums, softmax and friends as in PyTorch", "[reliability]") {
  for (bool on_ref : {true, false}) {
    CAPTURE(on_ref);
    std::optional<BackendOverride> ref;
    if (on_ref) ref.emplace(ref_backend());
    for (DType dt : {DType::f32, DType::f64}) {
      CAPTURE(dtype_name(dt));
      Tensor x = tensor({kNaN, -kInf, kInf, -1.0, 2.0}, dt);
      CHECK(same(vals(x.relu()), {kNaN, 0, kInf, 0, 2}));
      CHECK(same(vals(maximum(x, tensor({1.0}, dt))), {kNaN, 1, kInf, 1, 2}));
      CHECK(same(vals(minimum(tensor({1.0}, dt), x)), {kNaN, -kInf, 1, -1, 1}));
      CHECK(std::isnan(x.max().item<double>()));
      CHECK(std::isnan(x.min().item<double>()));
      CHECK(std::isnan(x.sum().item<double>()));
      CHECK(std::isnan(x.mean().item<double>()));
      CHECK(same(vals(tensor({kInf, 1.0}, dt).sum()), {kInf}));
      CHECK(same(vals(tensor({-kInf, 1.0, 2.0}, dt).max()), {2}));
      CHECK(same(vals(tensor({{1.0, kNaN}, {3.0, 4.0}}, dt).max(1)), {kNaN, 4}));
      CHECK(same(vals(softmax(tensor({0.0, -kInf}, dt), 0)), {1, 0}));
      CHECK(same(vals(log_softmax(tensor({0.0, -kInf}, dt), 0)), {0, -kInf}));
      CHECK(same(vals(softmax(tensor({{-kInf, -kInf}, {0.0, 0.0}}, dt), 1)), {kNaN, kNaN, 0.5, 0.5}));
      CHECK(same(vals(tensor({-kInf, 0.0}, dt).exp()), {0, 1}));
      CHECK(same(vals(tensor({0.0, -1.0}, dt).log()), {-kInf, kNaN}));
      CHECK(same(vals(tensor({-1.0, kInf}, dt).sqrt()), {kNaN, kInf}));
    }
  }
}
