// The random in-place programs (inplace_programs.h) with every leaf on gpu(0):
// views, element writes, fills and copies land in device memory through the
// CUDA backend, and every variable ends equal to the eager run. Label gpu on a
// real device, emulated-gpu on the emulated one.
#include "inplace_programs.h"

using namespace tessel;
using namespace proptest;

TEST_CASE("property: random in-place programs on gpu(0)", "[property][gpu]") {
  const char* name = "property in-place programs, gpu(0)";
  run_programs(name, tessel::testing::trial_count(name, 25, 10), true, gpu(0));
}
