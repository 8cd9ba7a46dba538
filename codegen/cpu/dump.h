// TESSEL_DUMP=<folder>: the CPU backend writes there the kernel IR and LLVM IR
// of every kernel it compiles and every schedule it runs.
#pragma once

#include <string>

namespace tessel::cpujit {

/// TESSEL_DUMP as it is now; empty when unset.
std::string dump_dir();
/// Whether TESSEL_DUMP was set when first asked (cached realizations ask this).
bool dump_at_start();
/// Writes `text` to `name` in dump_dir(), creating the folder.
void dump_file(const std::string& name, const std::string& text);

}  // namespace tessel::cpujit
