// Catch's implementation, compiled once for both test mains (catch_main.cpp,
// gpu_main.cpp): it is the largest compile of the test tree.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "tests/catch_session.h"

namespace tessel::testing {

int run_catch_session(int argc, char** argv) { return Catch::Session().run(argc, argv); }

}  // namespace tessel::testing
