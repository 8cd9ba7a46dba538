#include "device_memory.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <iterator>
#include <map>
#include <mutex>

namespace tessel_emu {
namespace {

constexpr CUresult kSuccess = 0, kInvalidValue = 1, kOutOfMemory = 2;
// Freed blocks at least this large give their pages back to the system.
constexpr std::size_t kReturnPagesAbove = std::size_t(1) << 20;

struct Arena {
  char* base = nullptr;
  std::mutex mu;
  std::map<std::size_t, std::size_t> free_blocks;  // offset -> size, coalesced
  std::map<std::size_t, std::size_t> live;         // offset -> rounded size
  std::size_t in_use = 0;
};

Arena g_arenas[kMaxDevices];
std::size_t g_bytes = 0;
std::once_flag g_init_once;
bool g_init_ok = false;

// Read by the signal handler: plain words written before it is installed.
char* volatile g_fault_base[kMaxDevices] = {};
volatile int g_fault_count = 0;
volatile std::size_t g_fault_size = 0;

std::mutex g_protect_mu;
int g_depth = 0;

void protect_all(int prot) {
  for (int d = 0; d < g_fault_count; ++d) mprotect(g_arenas[d].base, g_bytes, prot);
}

std::size_t round_up(std::size_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

void add_free_block(Arena& a, std::size_t off, std::size_t size) {
  auto next = a.free_blocks.lower_bound(off);
  if (next != a.free_blocks.end() && off + size == next->first) {
    size += next->second;
    next = a.free_blocks.erase(next);
  }
  if (next != a.free_blocks.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      prev->second += size;
      return;
    }
  }
  a.free_blocks.emplace(off, size);
}

// --- the fault handler (async-signal-safe: write(2) and _exit only) ---

struct sigaction g_previous_segv, g_previous_bus;
volatile sig_atomic_t g_chained = 0;

void write_str(const char* s) {
  std::size_t n = 0;
  while (s[n]) ++n;
  while (n > 0) {
    ssize_t w = write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<std::size_t>(w);
  }
}

void on_fault(int sig, siginfo_t* info, void* uctx) {
  // si_code > 0: the kernel raised it for this access (not kill/raise).
  if (info && info->si_code > 0) {
    const auto addr = reinterpret_cast<std::uintptr_t>(info->si_addr);
    for (int d = 0; d < g_fault_count; ++d) {
      const auto base = reinterpret_cast<std::uintptr_t>(g_fault_base[d]);
      if (addr < base || addr - base >= g_fault_size) continue;
      char hex[2 + 16 + 1] = "0x";
      int len = 2;
      for (int shift = 60; shift >= 0; shift -= 4) {
        unsigned digit = (addr >> shift) & 0xf;
        if (len == 2 && digit == 0 && shift > 0) continue;
        hex[len++] = "0123456789abcdef"[digit];
      }
      hex[len] = '\0';
      char dev[4] = {static_cast<char>('0' + d / 10), static_cast<char>('0' + d % 10), '\0', '\0'};
      const char* dev_str = d < 10 ? dev + 1 : dev;
      write_str("tessel emulated GPU: host access to device memory at ");
      write_str(hex);
      write_str(" (cuda:");
      write_str(dev_str);
      write_str(") outside a kernel or copy\n");
      _exit(kHostAccessExitCode);
    }
  }
  // Not ours: hand it to whoever was installed before, once; if it comes back
  // (a handler that returns, or one that restores us and re-raises), die of
  // the signal's default action rather than loop.
  const struct sigaction& prev = sig == SIGBUS ? g_previous_bus : g_previous_segv;
  if (!g_chained) {
    g_chained = 1;
    if (prev.sa_flags & SA_SIGINFO) {
      if (prev.sa_sigaction) {
        prev.sa_sigaction(sig, info, uctx);
        return;
      }
    } else if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
      prev.sa_handler(sig);
      return;
    }
  }
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, nullptr);
  if (!info || info->si_code <= 0) {
    // A raised signal is not raised again by returning: raise it now (it is
    // blocked in this handler, so it lands, with the default action, on return).
    raise(sig);
  }
}

std::mutex g_handler_mu;

void install_one(int sig, struct sigaction* previous) {
  struct sigaction cur;
  if (sigaction(sig, nullptr, &cur) != 0) return;
  if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == &on_fault) return;
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = &on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;  // a stack overflow still reaches a handler on an alternate stack
  sigemptyset(&sa.sa_mask);
  struct sigaction old;
  if (sigaction(sig, &sa, &old) == 0) {
    *previous = old;
    g_chained = 0;
  }
}

}  // namespace

bool init_devices(int count, std::size_t bytes) {
  std::call_once(g_init_once, [&] {
    if (count < 0) count = 0;
    if (count > kMaxDevices) count = kMaxDevices;
    bytes = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    g_bytes = bytes;
    g_fault_size = bytes;
    for (int d = 0; d < count; ++d) {
      void* m = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (m == MAP_FAILED) return;
      g_arenas[d].base = static_cast<char*>(m);
      g_arenas[d].free_blocks.emplace(0, bytes);
      g_fault_base[d] = g_arenas[d].base;
    }
    g_fault_count = count;
    g_init_ok = true;
  });
  if (g_init_ok) ensure_fault_handler();
  return g_init_ok;
}

int device_count() { return g_init_ok ? g_fault_count : 0; }
std::size_t device_bytes() { return g_bytes; }

CUresult allocate(int device, std::size_t bytes, std::uintptr_t* out) {
  if (device < 0 || device >= device_count() || bytes == 0) return kInvalidValue;
  ensure_fault_handler();
  Arena& a = g_arenas[device];
  const std::size_t size = round_up(bytes);
  if (size < bytes) return kOutOfMemory;  // overflowed
  std::lock_guard lock(a.mu);
  for (auto it = a.free_blocks.begin(); it != a.free_blocks.end(); ++it) {
    if (it->second < size) continue;
    const std::size_t off = it->first, rest = it->second - size;
    a.free_blocks.erase(it);
    if (rest) a.free_blocks.emplace(off + size, rest);
    a.live.emplace(off, size);
    a.in_use += size;
    *out = reinterpret_cast<std::uintptr_t>(a.base + off);
    return kSuccess;
  }
  return kOutOfMemory;
}

CUresult release(std::uintptr_t p) {
  const int d = arena_device(reinterpret_cast<const void*>(p));
  if (d < 0) return kInvalidValue;
  Arena& a = g_arenas[d];
  const std::size_t off = p - reinterpret_cast<std::uintptr_t>(a.base);
  std::lock_guard lock(a.mu);
  auto it = a.live.find(off);
  if (it == a.live.end()) return kInvalidValue;
  const std::size_t size = it->second;
  a.live.erase(it);
  a.in_use -= size;
  if (size >= kReturnPagesAbove) {
    // Later allocations see zeros there, which is as good as CUDA's garbage.
    const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    const std::size_t first = (off + page - 1) / page * page, last = (off + size) / page * page;
    if (last > first) madvise(a.base + first, last - first, MADV_DONTNEED);
  }
  add_free_block(a, off, size);
  return kSuccess;
}

std::size_t free_bytes(int device) {
  if (device < 0 || device >= device_count()) return 0;
  Arena& a = g_arenas[device];
  std::lock_guard lock(a.mu);
  return g_bytes - a.in_use;
}

int allocation_device(std::uintptr_t p, std::size_t bytes) {
  const int d = arena_device(reinterpret_cast<const void*>(p));
  if (d < 0) return -1;
  Arena& a = g_arenas[d];
  const std::size_t off = p - reinterpret_cast<std::uintptr_t>(a.base);
  std::lock_guard lock(a.mu);
  auto it = a.live.upper_bound(off);
  if (it == a.live.begin()) return -1;
  --it;
  const std::size_t end = it->first + it->second;
  if (off >= end || bytes > end - off) return -1;
  return d;
}

int arena_device(const void* p) {
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  for (int d = 0; d < device_count(); ++d) {
    const auto base = reinterpret_cast<std::uintptr_t>(g_arenas[d].base);
    if (addr >= base && addr - base < g_bytes) return d;
  }
  return -1;
}

void enter() {
  std::lock_guard lock(g_protect_mu);
  if (g_depth++ == 0) protect_all(PROT_READ | PROT_WRITE);
}

void leave() {
  std::lock_guard lock(g_protect_mu);
  if (--g_depth == 0) protect_all(PROT_NONE);
}

void ensure_fault_handler() {
  std::lock_guard lock(g_handler_mu);
  install_one(SIGSEGV, &g_previous_segv);
  install_one(SIGBUS, &g_previous_bus);
}

}  // namespace tessel_emu
