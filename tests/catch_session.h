// Runs Catch's test session (tests/catch_session.cpp); the mains call it.
#pragma once

namespace tessel::testing {

int run_catch_session(int argc, char** argv);

}  // namespace tessel::testing
