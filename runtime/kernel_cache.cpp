#include "runtime/kernel_cache.h"

#include "runtime/atomic_file.h"
#include "runtime/trace.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <condition_variable>
#include <deque>
#include <thread>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <system_error>

#include <fmt/format.h>

#include "tessel/config.h"

namespace tessel {

// ---- keys ----------------------------------------------------------------

std::string KernelKey::to_hex() const { return fmt::format("{:016x}{:016x}", hi, lo); }

std::optional<KernelKey> KernelKey::from_hex(std::string_view hex) {
  if (hex.size() != 32) return std::nullopt;
  auto parse = [](std::string_view s, std::uint64_t& out) {
    out = 0;
    for (char c : s) {
      int v;
      if (c >= '0' && c <= '9') v = c - '0';
      else if (c >= 'a' && c <= 'f') v = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') v = c - 'A' + 10;
      else return false;
      out = (out << 4) | static_cast<std::uint64_t>(v);
    }
    return true;
  };
  KernelKey k;
  if (!parse(hex.substr(0, 16), k.hi) || !parse(hex.substr(16), k.lo)) return std::nullopt;
  return k;
}

KernelKey make_key(std::string_view source, std::string_view options,
                   std::string_view compiler_version, std::string_view target) {
  XXH3_state_t* st = XXH3_createState();
  if (!st) throw std::bad_alloc();
  XXH3_128bits_reset(st);
  // Length prefixes keep field boundaries in the hash: ("ab","c") != ("a","bc").
  auto field = [st](std::string_view s) {
    std::uint64_t n = s.size();
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
    XXH3_128bits_update(st, len, sizeof len);
    XXH3_128bits_update(st, s.data(), s.size());
  };
  field("tessel-kernel-key/1");
  field(TESSEL_VERSION);
  field(compiler_version);
  field(target);
  field(options);
  field(source);
  XXH128_hash_t h = XXH3_128bits_digest(st);
  XXH3_freeState(st);
  return KernelKey{h.high64, h.low64};
}

// ---- file helpers --------------------------------------------------------

namespace {

void store_u32(char* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
void store_u64(char* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
std::uint32_t load_u32(const char* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}
std::uint64_t load_u64(const char* p) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

bool write_all(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

// Reads up to n bytes; returns how many were read, or -1 on error.
ssize_t read_all(int fd, char* p, std::size_t n) {
  std::size_t got = 0;
  while (got < n) {
    ssize_t r = ::read(fd, p + got, n - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
  }
  return static_cast<ssize_t>(got);
}

struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

}  // namespace

// ---- KernelCache ---------------------------------------------------------

KernelCache::KernelCache() : KernelCache(Options{}) {}

// One thread per cache publishes queued entries in order; it lives until the
// cache is destroyed, which first drains the queue.
struct KernelCache::Writer {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<KernelKey, BytesPtr>> queue;
  bool busy = false;
  bool stop = false;
  std::thread thread;

  void run(KernelCache* cache) {
    std::unique_lock lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return stop || !queue.empty(); });
      if (queue.empty()) return;  // stop requested and nothing left
      auto [key, payload] = std::move(queue.front());
      queue.pop_front();
      busy = true;
      lock.unlock();
      cache->write_disk(key, *payload);
      lock.lock();
      busy = false;
      cv.notify_all();
    }
  }

  void wait_idle() {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return queue.empty() && !busy; });
  }
};

KernelCache::KernelCache(Options options)
    : want_disk_(options.use_disk), async_writes_(options.async_writes) {
  if (want_disk_) dir_ = options.dir ? *options.dir : default_dir();
  if (dir_.empty()) want_disk_ = false;
}

KernelCache::~KernelCache() {
  std::lock_guard guard(writer_mu_);
  if (!writer_) return;
  {
    std::lock_guard lock(writer_->mu);
    writer_->stop = true;
  }
  writer_->cv.notify_all();
  writer_->thread.join();
}

void KernelCache::publish(const KernelKey& key, BytesPtr payload) {
  if (!disk_enabled()) return;
  if (!async_writes_) return write_disk(key, *payload);
  Writer* w;
  {
    std::lock_guard guard(writer_mu_);
    if (!writer_) {
      writer_ = std::make_unique<Writer>();
      writer_->thread = std::thread([w = writer_.get(), this] { w->run(this); });
    }
    w = writer_.get();
  }
  {
    std::lock_guard lock(w->mu);
    w->queue.emplace_back(key, std::move(payload));
  }
  w->cv.notify_all();
}

void KernelCache::flush() {
  Writer* w;
  {
    std::lock_guard guard(writer_mu_);
    w = writer_.get();
  }
  if (w) w->wait_idle();
}

KernelCache& KernelCache::global() {
  static KernelCache cache;
  return cache;
}

std::filesystem::path KernelCache::default_dir() {
  if (const char* d = std::getenv("TESSEL_CACHE_DIR"); d && *d) return d;
  if (const char* home = std::getenv("HOME"); home && *home)
    return std::filesystem::path(home) / ".cache" / "tessel";
  return {};
}

std::filesystem::path KernelCache::entry_path(const KernelKey& key) const {
  return dir_ / (key.to_hex() + std::string(kExtension));
}

void KernelCache::warn_disk_once(const std::string& message) {
  if (warned_.exchange(true)) return;
  std::string line = fmt::format("tessel: warning: {}\n", message);
  std::fwrite(line.data(), 1, line.size(), stderr);
}

bool KernelCache::disk_enabled() {
  if (!want_disk_) return false;
  std::call_once(disk_once_, [this] {
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    if (ec) {
      warn_disk_once(fmt::format(
          "kernel cache folder '{}' cannot be created ({}); compiled kernels are kept in memory "
          "only. Set TESSEL_CACHE_DIR to a writable folder to keep them across runs.",
          dir_.string(), ec.message()));
      return;
    }
    if (::access(dir_.c_str(), W_OK | X_OK) != 0) {
      warn_disk_once(fmt::format(
          "kernel cache folder '{}' is not writable ({}); compiled kernels are kept in memory "
          "only. Set TESSEL_CACHE_DIR to a writable folder to keep them across runs.",
          dir_.string(), std::strerror(errno)));
      return;
    }
    if (std::string why = untrusted_reason(dir_); !why.empty()) {
      // A checksum is not authentication: anyone who can write this folder
      // can make tessel run their code. Refuse it, as ssh refuses a key file
      // others can write, and keep this process's kernels in a private folder.
      char tmpl[] = "/tmp/tessel-private-cache-XXXXXX";
      const char* priv = ::mkdtemp(tmpl);
      warn_disk_once(fmt::format(
          "kernel cache folder '{}' is not trusted: {}. Kernels loaded from it run as your code, so it is not "
          "used; this process caches in {} instead. Fix: chmod go-w '{}' (it must be yours), or set "
          "TESSEL_CACHE_DIR to a folder only you can write.",
          dir_.string(), why, priv ? priv : "memory only", dir_.string()));
      if (!priv) return;
      dir_ = priv;
    }
    disk_ok_ = true;
    sweep_stale_temp_files(dir_);  // entries whose writers were killed mid-write
  });
  return disk_ok_;
}

std::string KernelCache::untrusted_reason(const std::filesystem::path& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return fmt::format("stat failed ({})", std::strerror(errno));
  const uid_t me = ::geteuid();
  if (st.st_uid != me && st.st_uid != 0)
    return fmt::format("it is owned by uid {}, not by you (uid {})", st.st_uid, me);
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return fmt::format("it is writable by {} (mode {:o})", (st.st_mode & S_IWOTH) ? "everyone" : "its group",
                       st.st_mode & 07777);
  return {};
}

KernelCache::BytesPtr KernelCache::read_disk(const KernelKey& key) {
  if (!disk_enabled()) return nullptr;
  const std::filesystem::path path = entry_path(key);
  Fd f(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (f.fd < 0) return nullptr;  // ENOENT: a plain miss

  struct stat st {};
  if (::fstat(f.fd, &st) != 0) return nullptr;

  // Every check failure lands here: the entry is removed (unless another
  // process has meanwhile published a new file under the name) and counted.
  auto drop = [&](const char* why) -> BytesPtr {
    struct stat now {};
    if (::stat(path.c_str(), &now) == 0 && now.st_ino == st.st_ino && now.st_dev == st.st_dev)
      ::unlink(path.c_str());
    corrupt_.fetch_add(1, std::memory_order_relaxed);
    if (detail::trace_enabled("jit"))
      detail::trace_line("jit", fmt::format("cache drop {} ({}): removed, will recompile",
                                            key.to_hex(), why));
    return nullptr;
  };

  if (!S_ISREG(st.st_mode)) return drop("not a regular file");
  if ((st.st_uid != ::geteuid() && st.st_uid != 0) || (st.st_mode & (S_IWGRP | S_IWOTH)))
    return drop("owned by another user or writable by others");  // written by someone else: never loaded
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size < kHeaderSize) return drop("truncated header");

  char header[kHeaderSize];
  if (read_all(f.fd, header, kHeaderSize) != static_cast<ssize_t>(kHeaderSize))
    return drop("short read");
  if (std::string_view(header, 4) != kMagic) return drop("wrong magic");
  if (load_u32(header + 4) != kFormatVersion) return drop("stale format version");
  if (load_u64(header + 8) != key.hi || load_u64(header + 16) != key.lo) return drop("wrong key");
  const std::uint64_t length = load_u64(header + 24);
  const std::uint64_t checksum = load_u64(header + 32);
  if (length != size - kHeaderSize) return drop("length does not match file size");

  auto payload = std::make_shared<Bytes>(static_cast<std::size_t>(length));
  if (read_all(f.fd, payload->data(), payload->size()) != static_cast<ssize_t>(length))
    return drop("short read");
  if (XXH3_64bits(payload->data(), payload->size()) != checksum) return drop("checksum mismatch");

  disk_hits_.fetch_add(1, std::memory_order_relaxed);
  if (detail::trace_enabled("jit"))
    detail::trace_line("jit", fmt::format("cache disk hit {} ({} bytes)", key.to_hex(), length));
  return payload;
}

void KernelCache::write_disk(const KernelKey& key, std::span<const char> payload) {
  if (!disk_enabled()) return;
  const std::filesystem::path final_path = entry_path(key);
  // .KEY.tmp.PID.XXXXXX: the pid lets a later process sweep what a killed writer left.
  std::string tmpl = (dir_ / fmt::format(".{}.tmp.{}.XXXXXX", key.to_hex(), ::getpid())).string();

  auto fail = [&](const char* what, int err) {
    disk_write_failures_.fetch_add(1, std::memory_order_relaxed);
    warn_disk_once(fmt::format("cannot write kernel cache entry in '{}' ({}: {}); continuing "
                               "without it",
                               dir_.string(), what, std::strerror(err)));
  };

  int fd = ::mkostemp(tmpl.data(), O_CLOEXEC);
  if (fd < 0) return fail("create temp file", errno);
  Fd f(fd);
  ::fchmod(fd, 0644);  // mkstemp makes 0600; a shared cache folder wants readable entries

  char header[kHeaderSize];
  std::memcpy(header, kMagic.data(), 4);
  store_u32(header + 4, kFormatVersion);
  store_u64(header + 8, key.hi);
  store_u64(header + 16, key.lo);
  store_u64(header + 24, payload.size());
  store_u64(header + 32, XXH3_64bits(payload.data(), payload.size()));

  if (!write_all(fd, header, kHeaderSize) || !write_all(fd, payload.data(), payload.size())) {
    int err = errno;
    ::unlink(tmpl.c_str());
    return fail("write", err);
  }
  if (::fsync(fd) != 0) {
    int err = errno;
    ::unlink(tmpl.c_str());
    return fail("fsync", err);
  }
  // The only moment the entry becomes visible: readers see nothing or all of it.
  if (::rename(tmpl.c_str(), final_path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmpl.c_str());
    return fail("rename", err);
  }
  // Make the rename itself durable; failure here only risks losing the entry.
  if (int dfd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  disk_writes_.fetch_add(1, std::memory_order_relaxed);
}

KernelCache::BytesPtr KernelCache::find(const KernelKey& key) {
  if (BytesPtr hit = memory_.find(key)) {
    note_memory_hit(key);
    return hit;
  }
  if (BytesPtr hit = read_disk(key)) {
    memory_.insert(key, hit);
    return hit;
  }
  note_miss(key);
  return nullptr;
}

std::optional<KernelCache::Bytes> KernelCache::get(const KernelKey& key) {
  if (BytesPtr p = find(key)) return *p;
  return std::nullopt;
}

void KernelCache::put(const KernelKey& key, std::span<const char> payload) {
  auto p = std::make_shared<const Bytes>(payload.begin(), payload.end());
  memory_.insert(key, p);
  write_disk(key, *p);
}

void KernelCache::note_memory_hit(const KernelKey& key) {
  memory_hits_.fetch_add(1, std::memory_order_relaxed);
  if (detail::trace_enabled("jit"))
    detail::trace_line("jit", fmt::format("cache memory hit {}", key.to_hex()));
}

void KernelCache::note_miss(const KernelKey& key) {
  misses_.fetch_add(1, std::memory_order_relaxed);
  if (detail::trace_enabled("jit"))
    detail::trace_line("jit", fmt::format("cache miss {}", key.to_hex()));
}

void KernelCache::note_compile(const KernelKey& key, double ms, std::size_t bytes) {
  // The backend that asked logs the compile (TESSEL_TRACE=jit: one line per kernel).
  (void)key, (void)ms, (void)bytes;
  compiles_.fetch_add(1, std::memory_order_relaxed);
}

KernelCacheStats KernelCache::stats() const {
  KernelCacheStats s;
  s.memory_hits = memory_hits_.load();
  s.disk_hits = disk_hits_.load();
  s.misses = misses_.load();
  s.compiles = compiles_.load();
  s.corrupt_dropped = corrupt_.load();
  s.disk_writes = disk_writes_.load();
  s.disk_write_failures = disk_write_failures_.load();
  return s;
}

void KernelCache::reset_stats() {
  for (auto* c : {&memory_hits_, &disk_hits_, &misses_, &compiles_, &corrupt_, &disk_writes_,
                  &disk_write_failures_})
    c->store(0);
}

void KernelCache::clear_memory() { memory_.clear(); }

void KernelCache::erase(const KernelKey& key) {
  memory_.erase(key);
  if (!disk_enabled()) return;
  std::error_code ec;
  std::filesystem::remove(entry_path(key), ec);  // gone already (another process) is fine
}

}  // namespace tessel
