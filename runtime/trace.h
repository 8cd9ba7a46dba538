// Tracing: TESSEL_TRACE names the topics ("jit", or "all") whose events are
// written to stderr, one line each. Any layer may trace; it is not part of
// the kernel cache, which is only one of its users.
//
//   if (detail::trace_enabled("jit")) detail::trace_line("jit", "kernel k: compiled");
#pragma once

#include <string_view>

namespace tessel::detail {

/// Whether TESSEL_TRACE (a comma-separated list) names `topic`, e.g. "jit".
bool trace_enabled(std::string_view topic);
/// One line to stderr, prefixed "[tessel:<topic>] ".
void trace_line(std::string_view topic, std::string_view message);

}  // namespace tessel::detail
