// Whether the IR and kernel-IR verifiers run between passes: TESSEL_VERIFY=1
// turns them on (every test runs so), anything else or unset leaves them off.
// A verifier walks its IR once per pass it checks, so it costs little, but a
// release run has no use for it: a broken invariant is a bug in tessel.
#pragma once

namespace tessel {

/// TESSEL_VERIFY=1, read once (or what set_verify_enabled_for_testing set).
bool verify_enabled();

/// Overrides the environment for this process: tests of the off switch.
void set_verify_enabled_for_testing(bool on);

/// The rule verify_enabled() reads the environment with: only "1" is on.
bool verify_requested(const char* env_value);

}  // namespace tessel
