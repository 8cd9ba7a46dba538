// When JIT code may be freed. The CPU backend keeps raw pointers into JIT
// code in several places (the kernel tables, plans, expression replays) and
// calls them without a lock. To bound the JIT's code memory, all of them are
// dropped together -- a new code generation -- and the old code is freed
// once every thread that could still hold an old pointer has finished what
// it was doing:
//
//   CodeInUse in_use;                        // around anything that calls JIT code
//   uint64_t gen = code_generation();        // read after entering
//   ... fn = table lookup or compile ...
//   insert_if_current(gen, [&] { table.emplace(k, fn); });   // never caches a stale pointer
//
//   new_code_generation([&](Garbage& g) {    // under the exclusive side: no insertion runs
//     g.push_back(jit.unlink_all());        //   the code, freed later
//     table.clear();
//   });
//
// A pointer obtained in generation g may be used by the thread that obtained
// it until its outermost CodeInUse ends; only caches tagged with the current
// generation may hand it out again.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace tessel::cpujit {

/// This thread may call or hold pointers into JIT code until the outermost
/// CodeInUse of the thread ends (nesting is free).
class CodeInUse {
 public:
  CodeInUse();
  ~CodeInUse();
  CodeInUse(const CodeInUse&) = delete;
  CodeInUse& operator=(const CodeInUse&) = delete;
};

/// Changes each time the JIT code of the CPU backend is dropped.
std::uint64_t code_generation();

/// What a new generation keeps alive until no thread of the old one remains.
using Garbage = std::vector<std::shared_ptr<void>>;

/// Runs `drop` with no insert_if_current running, then starts a new
/// generation; what `drop` put in the garbage is destroyed when every
/// CodeInUse that began before this call has ended.
void new_code_generation(const std::function<void(Garbage&)>& drop);

/// Keeps `garbage` alive until every CodeInUse that began before this call
/// has ended (for a replaced array of pointers that another thread may read).
void free_when_unused(std::shared_ptr<void> garbage);

/// Runs `insert` (which caches pointers from generation `gen`) only while
/// `gen` is still the current generation; returns whether it ran.
bool insert_if_current(std::uint64_t gen, const std::function<void()>& insert);

}  // namespace tessel::cpujit
