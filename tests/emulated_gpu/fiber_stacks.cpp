// One pool of fiber stacks for every kernel library the driver loads
// (cuda_emulation.h says why stacks are pooled): the driver's own copy of the
// header's pool, handed to each library as it is opened.
#include <dlfcn.h>

#include <atomic>

#include "cuda_emulation.h"
#include "host_kernels.h"

namespace tessel_emu {
namespace {

std::atomic<unsigned long long> g_taken{0};

char* take(std::size_t stack) {
  ++g_taken;
  return emu::detail::take_local_stacks(stack);
}

}  // namespace

void share_fiber_stacks(void* library) {
  using Share = void (*)(emu::detail::TakeStacks, emu::detail::GiveStacks);
  if (auto share = reinterpret_cast<Share>(dlsym(library, "tessel_emu_share_stack_pool")))
    share(&take, &emu::detail::give_local_stacks);
}

}  // namespace tessel_emu

#define EMU_API extern "C" __attribute__((visibility("default")))

// For tests: stacks the shared pool handed out, and mappings it had to make.
EMU_API unsigned long long tessel_emu_fiber_stacks_taken(void) { return tessel_emu::g_taken.load(); }
EMU_API unsigned long long tessel_emu_fiber_stack_mappings(void) { return emu::detail::g_stack_mappings.load(); }
