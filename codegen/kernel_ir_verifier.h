// verify_kernel: checks the invariants kernel_ir.h states of a kir::Kernel
// (and that the emitters rely on) right after the pass that made it, so a
// broken kernel fails there with the pass and the statement named, instead
// of as miscompiled code or a crash inside an emitter. Runs when
// verify_enabled() (codegen/verify_mode.h); one walk over the statements.
#pragma once

#include <string_view>

#include "codegen/kernel_ir.h"
#include "codegen/lower.h"

namespace tessel::kir {

/// Throws InternalError "kernel IR verifier after <after_pass>: <what broke>"
/// at the first broken invariant.
void verify_kernel(const Kernel& k, std::string_view after_pass);

/// verify_kernel, and the launch that goes with it: one buffer per param and
/// the launch-argument layout's count of arguments.
void verify_lowered(const lower::Lowered& l, std::string_view after_pass);

/// What every launch path calls right after lowering: verify_lowered(l,
/// "lower_to_kernel_ir") when the verifiers are on, nothing otherwise.
void check_lowering(const lower::Lowered& l);

}  // namespace tessel::kir
