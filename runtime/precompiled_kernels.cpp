#include "runtime/precompiled_kernels.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>
#include <mutex>

#include "runtime/errors.h"
#include "tessel/config.h"

namespace tessel::precompiled {

namespace {

struct Registry {
  std::mutex mu;
  std::map<KernelKey, Entry> entries;
  std::vector<std::string> errors;
  Stats stats;
};

// Function-local: generated static initializers may run before this file's.
Registry& reg() {
  static Registry r;
  return r;
}

}  // namespace

KernelKey text_key(std::string_view kernel_text) {
  return make_key(kernel_text, "kir", "tessel " TESSEL_VERSION, "");
}

void register_kernel(const Entry& e) {
  KernelKey k = text_key(e.text);
  Registry& r = reg();
  std::lock_guard l(r.mu);
  if (k.to_hex() != e.key_hex) {
    ++r.stats.rejected;
    r.errors.push_back(fmt::format("precompiled kernel set '{}': entry with key {} does not match its kernel text "
                                   "(hash {}): the generated source was edited or corrupted; regenerate it",
                                   e.set, e.key_hex, k.to_hex()));
    return;
  }
  if (r.entries.emplace(k, e).second) ++r.stats.registered;
}

const Entry* find(const KernelKey& key) {
  Registry& r = reg();
  std::lock_guard l(r.mu);
  auto it = r.entries.find(key);
  return it == r.entries.end() ? nullptr : &it->second;
}

const Entry* find(std::string_view kernel_text) {
  if (const char* v = std::getenv("TESSEL_PRECOMPILED"); v && std::string_view(v) == "off") return nullptr;
  {
    Registry& r = reg();
    std::lock_guard l(r.mu);
    if (r.entries.empty()) return nullptr;  // no hashing in programs without exports
  }
  return find(text_key(kernel_text));
}

const CudaImage* best_cuda_image(const Entry& e, int arch) {
  const CudaImage* best = nullptr;
  for (const CudaImage& img : e.cuda) {
    if (img.cubin && img.arch == arch) return &img;
    if (!img.cubin && img.arch <= arch && (!best || img.arch > best->arch)) best = &img;
  }
  return best;
}

std::size_t size() {
  std::lock_guard l(reg().mu);
  return reg().entries.size();
}

std::vector<std::string> errors() {
  std::lock_guard l(reg().mu);
  return reg().errors;
}

Stats stats() {
  std::lock_guard l(reg().mu);
  return reg().stats;
}

void note_hit(bool cuda) {
  std::lock_guard l(reg().mu);
  ++(cuda ? reg().stats.cuda_hits : reg().stats.cpu_hits);
}

void note_miss() {
  std::lock_guard l(reg().mu);
  ++reg().stats.misses;
}

void reset_stats() {
  std::lock_guard l(reg().mu);
  reg().stats.cpu_hits = reg().stats.cuda_hits = reg().stats.misses = 0;
}

bool jit_disabled() {
  const char* v = std::getenv("TESSEL_JIT");
  if (!v) return false;
  std::string s(v);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s == "off" || s == "0" || s == "false" || s == "no";
}

void throw_jit_disabled(std::string_view backend, std::string_view kernel_text) {
  throw CompileError(fmt::format(
      "{} backend: TESSEL_JIT=off forbids compiling, and this kernel (key {}) is not among the {} precompiled "
      "kernels linked into this program; export it with tessel::aot::export_kernels for these shapes, or unset "
      "TESSEL_JIT. Kernel:\n{}",
      backend, text_key(kernel_text).to_hex(), size(), kernel_text));
}

}  // namespace tessel::precompiled
