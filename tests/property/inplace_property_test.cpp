// Random in-place programs (inplace_programs.h) on the CPU backends.
#include "inplace_programs.h"

using namespace tessel;
using namespace proptest;

TEST_CASE("property: random in-place programs match an eager run", "[property]") {
  run_programs("property in-place programs", 200, false);
}

TEST_CASE("property: random in-place programs on the default CPU backend", "[property]") {
  run_programs("property in-place programs, default backend", 25, true);
}
