// The IR verifier: checks the invariants codegen/ir.h states (arities, args'
// shapes and dtypes, typed attributes, sorted axes, index ranges) over the
// graph below some roots, and the schedule's (every materialized node has
// one step, producers before consumers). Run between the lowering's passes
// when verify_enabled() (TESSEL_VERIFY=1, set for every test); a broken
// invariant is an InternalError naming the pass after which it was found.
//
//   ir::verify_ir(roots, "autodiff");   // throws: "IR verifier after autodiff: %3 = add ..."
#pragma once

#include <string_view>
#include <vector>

#include "codegen/ir.h"
#include "codegen/schedule.h"

namespace tessel::ir {

/// Every node below `roots` (the walk stops at realized nodes), checked.
void verify_ir(const std::vector<NodePtr>& roots, std::string_view after_pass);

/// The schedule of `roots`: steps producers-first, one per materialized node.
void verify_schedule(const sched::Schedule& s, std::string_view after_pass);

}  // namespace tessel::ir
