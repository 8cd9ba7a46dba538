// Catch's main for the test programs. The suites compare compiled kernels with
// the ref interpreter and count compiles and launches; with background
// compiles (TESSEL_JIT_ASYNC) a kernel in no cache yet would be interpreted
// instead, so they compile before each launch unless TESSEL_JIT_ASYNC is set
// (tests/jit/jit_async_test.cpp turns background compiles on where it tests them).
#include <cstdlib>

#include "tests/catch_session.h"

int main(int argc, char** argv) {
  setenv("TESSEL_JIT_ASYNC", "0", /*overwrite=*/0);
  return tessel::testing::run_catch_session(argc, argv);
}
