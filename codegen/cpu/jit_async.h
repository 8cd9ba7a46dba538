// Background compiles of the CPU backend (TESSEL_JIT_ASYNC). A launch whose
// kernel is in no cache yet starts its compile on a compile thread and is
// computed meanwhile by the ref interpreter, whose results equal the compiled
// kernel's bit for bit; the compiled kernel takes over once it is linked. A
// realization that used the interpreter makes no plan (plan_cache.h): its
// launches are not all compiled ones.
//
//   tessel::jit_wait_idle();   // every kernel asked for so far is compiled (or its error thrown)
//
// The functions exist in every build; without LLVM they do nothing.
#pragma once

#include <functional>
#include <string_view>

namespace tessel {

/// Whether kernels that are not compiled yet compile in the background:
/// set_jit_async()'s last value, else TESSEL_JIT_ASYNC (`0`/`off`: no;
/// default on). ValueError for any other value of the variable.
bool jit_async();
/// Overrides TESSEL_JIT_ASYNC for the whole process from now on (compiles
/// already started finish in the background).
void set_jit_async(bool on);

/// Blocks until no background compile is queued or running, then rethrows
/// the first background compile error that no launch has reported yet (the
/// error the synchronous compile gives).
void jit_wait_idle();

namespace cpujit {
/// Called with the kernel's text before each real compile (a miss in every
/// cache), on whichever thread compiles; what it throws is the compile's
/// error. Empty: none. For tests of compile failures.
void set_compile_hook_for_testing(std::function<void(std::string_view kernel_text)> hook);
}  // namespace cpujit

}  // namespace tessel
