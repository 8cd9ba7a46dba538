#include "codegen/cpu/jit_stats.h"

#include "codegen/cpu/jit_async.h"
#include "codegen/cpu/kernel_table.h"
#include "tessel/config.h"

namespace tessel {

namespace cpujit {
AtomicStats g_stats;
#if !TESSEL_HAS_LLVM
std::uint64_t jit_kernels_linked() { return 0; }  // no JIT, no kernels
void set_compile_hook_for_testing(std::function<void(std::string_view)>) {}
#endif
}  // namespace cpujit

#if !TESSEL_HAS_LLVM
// No JIT: nothing compiles, in the background or otherwise.
bool jit_async() { return false; }
void set_jit_async(bool) {}
void jit_wait_idle() {}
#endif

using cpujit::g_stats;
using cpujit::jit_kernels_linked;

CpuJitStats cpu_jit_stats() {
  constexpr auto r = std::memory_order_relaxed;
  CpuJitStats s;
  s.realizations = g_stats.realizations.load(r);
  s.kernels_launched = g_stats.kernels_launched.load(r);
  s.kernels_compiled = g_stats.kernels_compiled.load(r);
  s.kernels_from_disk = g_stats.kernels_from_disk.load(r);
  s.kernels_interpreted = g_stats.kernels_interpreted.load(r);
  s.matmuls = g_stats.matmuls.load(r);
  s.matmul_epilogues = g_stats.matmul_epilogues.load(r);
  s.convs = g_stats.convs.load(r);
  s.attentions = g_stats.attentions.load(r);
  s.fallbacks = g_stats.fallbacks.load(r);
  s.code_drops = g_stats.code_drops.load(r);
  s.kernels_linked = jit_kernels_linked();
  s.views = g_stats.views.load(r);
  s.plan_replays = g_stats.plan_replays.load(r);
  s.compile_ms = g_stats.compile_ms.load(r);
  return s;
}
void reset_cpu_jit_stats() {
  constexpr auto r = std::memory_order_relaxed;
  for (auto* c : {&g_stats.realizations, &g_stats.kernels_launched, &g_stats.kernels_compiled,
                  &g_stats.kernels_from_disk, &g_stats.kernels_interpreted, &g_stats.matmuls, &g_stats.matmul_epilogues, &g_stats.convs, &g_stats.attentions, &g_stats.fallbacks,
                  &g_stats.views, &g_stats.plan_replays, &g_stats.code_drops})
    c->store(0, r);
  g_stats.compile_ms.store(0, r);
}

}  // namespace tessel
