// The expression-template `auto` trap: an expression object evaluated after
// one of its leaves was written in place is an error, never a silent read of
// the new values.
#include "error_testing.h"

using namespace tessel;
using namespace tessel::testing;

TEST_CASE("an auto expression evaluated after its leaf was written in place", "[error]") {
  Tensor x = ones({2});
  auto y = x * 2;
  x += 1;
  REQUIRE_ERROR(Tensor(y), ValueError, "written in place", "shape [2], f32, on cpu", "Tensor y = x * 2;");
  // Stored in a Tensor, the same expression is evaluated at that point.
  Tensor x2 = ones({2});
  Tensor z = x2 * 2;
  x2 += 1;
  CHECK(vals(z) == std::vector<double>{2, 2});
}

TEST_CASE("an auto expression over a pending leaf that was then filled", "[error]") {
  Tensor a = ones({3});
  Tensor p = a + 1;  // pending
  auto e = relu(p * 3);
  p.fill_(0.0);
  REQUIRE_ERROR(Tensor(e), ValueError, "written in place", "shape [3]");
  REQUIRE_ERROR(e.sum(), ValueError, "written in place");
}

TEST_CASE("an auto expression whose leaf's memory was written through a view", "[error]") {
  Tensor x = tensor({1.0, 2.0, 3.0});
  auto e = x * x + 1;
  Tensor row = x.slice(0, 0, 1);
  row *= 5;  // the same memory as x
  REQUIRE_ERROR(e.item<double>(), ValueError, "written in place");
}

TEST_CASE("auto expressions without a write in between evaluate, and again after each is rebuilt", "[error]") {
  Tensor x = tensor({1.0, 2.0});
  auto y = x * 2 + 1;
  CHECK(vals(Tensor(y)) == std::vector<double>{3, 5});
  CHECK(vals(Tensor(y)) == std::vector<double>{3, 5});  // evaluating twice is fine
  x += 1;
  auto y2 = x * 2 + 1;  // built after the write
  CHECK(vals(Tensor(y2)) == std::vector<double>{5, 7});
}
