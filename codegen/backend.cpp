#include "codegen/backend.h"

#include <cstdlib>
#include <string>

#include "runtime/errors.h"

namespace tessel {
namespace {
Backend* g_compiled_cpu = nullptr;
thread_local Backend* t_override = nullptr;
}  // namespace

void register_cpu_backend(Backend* b) { g_compiled_cpu = b; }

Backend& cpu_backend() {
  if (t_override) return *t_override;
  static const std::string choice = [] {
    const char* e = std::getenv("TESSEL_BACKEND");
    return std::string(e ? e : "");
  }();
  if (choice == "ref" || !g_compiled_cpu) return ref_backend();
  return *g_compiled_cpu;
}

BackendOverride::BackendOverride(Backend& b) : prev_(t_override) { t_override = &b; }
BackendOverride::~BackendOverride() { t_override = prev_; }

}  // namespace tessel
