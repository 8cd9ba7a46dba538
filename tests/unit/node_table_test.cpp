// ir::NodeTable: the per-walk table of graph walks (codegen/node_table.h).
#include "tests/support/tensor_testing.h"

#include <vector>

#include "codegen/node_table.h"

using namespace tessel;

TEST_CASE("NodeTable stores, updates and forgets node values across growth and clears", "[ir]") {
  std::vector<char> bytes(1000 * 64);  // the table keys by address only
  auto node = [&](size_t i) { return reinterpret_cast<const ir::Node*>(&bytes[i * 64]); };
  ir::NodeTable t;
  CHECK(t.find(node(0)) == nullptr);  // an empty table finds nothing
  for (int i = 0; i < 1000; ++i) t.put(node(static_cast<size_t>(i)), i);  // grows past its first 32 slots several times
  CHECK(t.size() == 1000);
  for (int i = 0; i < 1000; ++i) {
    const int* v = t.find(node(static_cast<size_t>(i)));
    REQUIRE(v != nullptr);
    CHECK(*v == i);
  }
  t.put(node(7), -1);  // update in place, no second entry
  CHECK(*t.find(node(7)) == -1);
  CHECK(t.size() == 1000);
  t.clear();
  CHECK(t.size() == 0);
  CHECK(t.find(node(7)) == nullptr);  // stale slots of the last walk are empty
  t.put(node(3), 5);
  CHECK(*t.find(node(3)) == 5);
  CHECK(t.find(node(4)) == nullptr);
}
