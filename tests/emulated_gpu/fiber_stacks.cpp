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

unsigned long long fiber_stacks_taken() { return g_taken.load(); }
unsigned long long fiber_stack_mappings() { return emu::detail::g_stack_mappings.load(); }

}  // namespace tessel_emu
