#include "codegen/verify_mode.h"

#include <atomic>
#include <cstdlib>
#include <string_view>

namespace tessel {

namespace {
// Asked on every launch from any thread: one relaxed load once set.
std::atomic<int> g_verify{-1};  // -1: not read yet; 0: off; 1: on
}  // namespace

bool verify_enabled() {
  int v = g_verify.load(std::memory_order_relaxed);
  if (v < 0) {
    const int from_env = verify_requested(std::getenv("TESSEL_VERIFY")) ? 1 : 0;
    // An override set meanwhile wins over the environment (v then holds it).
    if (g_verify.compare_exchange_strong(v, from_env, std::memory_order_relaxed)) v = from_env;
  }
  return v == 1;
}

bool verify_requested(const char* env_value) { return env_value && std::string_view(env_value) == "1"; }

void set_verify_enabled_for_testing(bool on) { g_verify.store(on ? 1 : 0, std::memory_order_relaxed); }

}  // namespace tessel
