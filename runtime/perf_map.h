// TESSEL_PERF_MAP=1: every JIT-compiled kernel is named in /tmp/perf-<pid>.map,
// the file `perf report` reads to put names on addresses of generated code, so
// a profile of a model shows which fused kernel its time went to:
//
//   TESSEL_PERF_MAP=1 perf record -g ./train && perf report --sort sym
//
// The names are the kernel cache keys (the files TESSEL_DUMP writes carry the
// same key, so a hot kernel's IR is one grep away).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tessel::detail {

/// Whether TESSEL_PERF_MAP was set when first asked.
bool perf_map_enabled();
/// Appends one "<start> <size> <name>" line to /tmp/perf-<pid>.map (one write,
/// so lines of concurrent compiles do not interleave).
void perf_map_add(std::uintptr_t start, std::size_t size, std::string_view name);

}  // namespace tessel::detail
