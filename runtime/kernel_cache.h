// The kernel cache: compiled kernels (object files, CUBINs, ...) kept in
// memory and on disk, keyed by a hash of everything that decides the bytes.
//
// Disk entries are only ever published whole (temp file + fsync + one
// rename), and each carries a checksum, so several processes can share one
// cache folder; an entry that fails any check is removed and reported as a
// miss, which makes the caller recompile — it is never handed out.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tessel {

/// A 128-bit XXH3 hash naming one compiled kernel.
///
///   KernelKey k = make_key(src, "-O3", llvm_version(), host_target());
///   std::string name = k.to_hex();   // 32 lowercase hex digits
struct KernelKey {
  std::uint64_t hi = 0;
  std::uint64_t lo = 0;

  std::string to_hex() const;
  /// The inverse of to_hex(); nullopt unless `hex` is exactly 32 hex digits.
  static std::optional<KernelKey> from_hex(std::string_view hex);

  friend bool operator==(const KernelKey&, const KernelKey&) = default;
  friend auto operator<=>(const KernelKey&, const KernelKey&) = default;
};

struct KernelKeyHash {
  std::size_t operator()(const KernelKey& k) const noexcept {
    return static_cast<std::size_t>(k.lo ^ (k.hi * 0x9E3779B97F4A7C15ull));
  }
};

/// Hashes everything that decides a compiled kernel's bytes: the canonical
/// kernel source, the compile options, tessel's version (TESSEL_VERSION), the
/// compiler's version and the target (CPU name + features, or GPU arch).
/// Fields are length-prefixed, so moving text from one field to the next
/// changes the key.
///
///   auto key = make_key(llvm_ir_text, "O3;veclib=sleef", "LLVM 15.0.6",
///                       "x86_64-pc-linux-gnu;sapphirerapids;+avx2,+avx512f,...");
KernelKey make_key(std::string_view source, std::string_view options,
                   std::string_view compiler_version, std::string_view target);

/// Runs a computation at most once per key, even when many threads ask for the
/// same key at the same time: the first caller runs it, the others block on
/// its result (a std::shared_future in a mutex-guarded map). If it throws,
/// every waiter gets the exception and the key is forgotten, so a later call
/// retries. `compile` must not ask this object for the same key (deadlock).
///
///   CompileOnce<Kernel> kernels;
///   std::shared_ptr<const Kernel> k =
///       kernels.get_or_compile(key, [&] { return build_kernel(); });
template <class T>
class CompileOnce {
 public:
  using Ptr = std::shared_ptr<const T>;

  /// `compile` returns a T or a std::shared_ptr<const T> (null is not allowed).
  /// `ran`, when given, is set to whether this call ran `compile`.
  template <class F>
  Ptr get_or_compile(const KernelKey& key, F&& compile, bool* ran = nullptr) {
    std::promise<Ptr> promise;
    std::shared_future<Ptr> future;
    bool owner = false;
    {
      std::lock_guard lock(mu_);
      auto it = map_.find(key);
      if (it != map_.end()) {
        future = it->second;
      } else {
        future = promise.get_future().share();
        map_.emplace(key, future);
        owner = true;
      }
    }
    if (ran) *ran = owner;
    if (!owner) return future.get();
    try {
      Ptr value;
      if constexpr (std::is_convertible_v<std::invoke_result_t<F>, Ptr>) {
        value = std::invoke(std::forward<F>(compile));
      } else {
        value = std::make_shared<const T>(std::invoke(std::forward<F>(compile)));
      }
      if (!value) throw std::logic_error("CompileOnce: compile returned null");
      promise.set_value(value);
      return value;
    } catch (...) {
      {
        std::lock_guard lock(mu_);
        map_.erase(key);
      }
      promise.set_exception(std::current_exception());
      throw;
    }
  }

  /// The finished value for key, or null if there is none (yet); never blocks.
  Ptr find(const KernelKey& key) const {
    std::lock_guard lock(mu_);
    auto it = map_.find(key);
    if (it == map_.end()) return nullptr;
    if (it->second.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return nullptr;
    try {
      return it->second.get();
    } catch (...) {
      return nullptr;
    }
  }

  /// Stores a finished value, replacing a finished one; a computation in
  /// flight for the key is left alone (it will produce the same thing).
  void insert(const KernelKey& key, Ptr value) {
    std::promise<Ptr> p;
    p.set_value(std::move(value));
    std::lock_guard lock(mu_);
    auto it = map_.find(key);
    if (it == map_.end()) {
      map_.emplace(key, p.get_future().share());
    } else if (it->second.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
      it->second = p.get_future().share();
    }
  }

  /// Forgets key's finished value (one in flight is left to finish).
  void erase(const KernelKey& key) {
    std::lock_guard lock(mu_);
    auto it = map_.find(key);
    if (it != map_.end() && it->second.wait_for(std::chrono::seconds(0)) == std::future_status::ready) map_.erase(it);
  }

  /// Forgets finished values; computations in flight finish for their waiters.
  void clear() {
    std::lock_guard lock(mu_);
    for (auto it = map_.begin(); it != map_.end();) {
      if (it->second.wait_for(std::chrono::seconds(0)) == std::future_status::ready)
        it = map_.erase(it);
      else
        ++it;
    }
  }

  /// Removes the finished values and returns them; computations in flight
  /// stay (they finish for their waiters and are kept).
  std::vector<Ptr> take_finished() {
    std::vector<Ptr> out;
    std::lock_guard lock(mu_);
    for (auto it = map_.begin(); it != map_.end();) {
      if (it->second.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
        ++it;
        continue;
      }
      try {
        out.push_back(it->second.get());
      } catch (...) {  // a failed computation holds nothing
      }
      it = map_.erase(it);
    }
    return out;
  }

  std::size_t size() const {
    std::lock_guard lock(mu_);
    return map_.size();
  }

 private:
  mutable std::mutex mu_;
  std::unordered_map<KernelKey, std::shared_future<Ptr>, KernelKeyHash> map_;
};

/// Where a cached payload came from on one call.
enum class CacheOrigin {
  memory,    ///< already in this process
  disk,      ///< read from a valid disk entry
  compiled,  ///< compiled by this call
};

/// What the cache has done since it was made (or since reset_stats()).
struct KernelCacheStats {
  std::uint64_t memory_hits = 0;      ///< found in this process's memory
  std::uint64_t disk_hits = 0;        ///< read from a valid disk entry
  std::uint64_t misses = 0;           ///< found nowhere (get() or get_or_compile())
  std::uint64_t compiles = 0;         ///< get_or_compile() ran its compile function
  std::uint64_t corrupt_dropped = 0;  ///< disk entries that failed a check and were removed
  std::uint64_t disk_writes = 0;      ///< entries published on disk
  std::uint64_t disk_write_failures = 0;
};

/// Compiled kernels by key, in memory and in a folder shared between processes.
///
/// The folder is `TESSEL_CACHE_DIR`, else `$HOME/.cache/tessel`, created on
/// first use; if it cannot be created or written, the cache keeps working in
/// memory only and says so once on stderr. `TESSEL_TRACE=jit` logs hits,
/// misses and compile times to stderr (runtime/trace.h).
///
///   KernelCache cache;                       // or KernelCache::global()
///   auto obj = cache.get_or_compile(key, [&] { return compile_to_object(m); });
///   // obj: std::shared_ptr<const std::vector<char>>
///
/// Entry file `<dir>/<key hex>.tslk`, little-endian:
///   "TSLK" | u32 format version | u64 key.hi | u64 key.lo | u64 payload length
///   | u64 XXH3-64 of payload | payload bytes
/// Written to a unique temp file in the same folder, fsynced, then renamed
/// over the entry name (one atomic step); a reader checks every field and the
/// file size against the length before returning a payload.
class KernelCache {
 public:
  using Bytes = std::vector<char>;
  using BytesPtr = std::shared_ptr<const Bytes>;

  static constexpr std::uint32_t kFormatVersion = 1;
  static constexpr std::size_t kHeaderSize = 40;
  static constexpr std::string_view kMagic = "TSLK";
  static constexpr std::string_view kExtension = ".tslk";

  struct Options {
    /// Cache folder; nullopt: TESSEL_CACHE_DIR, else $HOME/.cache/tessel.
    std::optional<std::filesystem::path> dir;
    /// false: memory only, the folder is never touched.
    bool use_disk = true;
    /// get_or_compile() publishes new entries from a background thread, so a
    /// compile does not also wait for fsync; flush() and the destructor wait
    /// for them. put() always writes before it returns.
    bool async_writes = true;
  };

  KernelCache();
  explicit KernelCache(Options options);
  ~KernelCache();
  KernelCache(const KernelCache&) = delete;
  KernelCache& operator=(const KernelCache&) = delete;

  /// The process-wide cache (default options), made on first use.
  static KernelCache& global();
  /// TESSEL_CACHE_DIR, else $HOME/.cache/tessel; empty when neither is set.
  static std::filesystem::path default_dir();
  /// Why `dir` cannot be trusted with kernels (owned by another user, or
  /// writable by its group or everyone); empty when it can. Such a folder is
  /// not used: the cache moves to a private temp folder with a warning.
  static std::string untrusted_reason(const std::filesystem::path& dir);

  /// The payload for key from memory or disk; nullopt on a miss (including a
  /// disk entry that failed a check, which is removed).
  std::optional<Bytes> get(const KernelKey& key);
  /// Same without copying the payload; null on a miss.
  BytesPtr find(const KernelKey& key);
  /// Stores the payload in memory and publishes it on disk. Disk failures are
  /// counted and warned about once, never thrown: the cache is an optimization.
  void put(const KernelKey& key, std::span<const char> payload);

  /// The payload for key; on a miss runs `compile` (returning something a
  /// std::vector<char> can be made from) once, even when several threads ask
  /// at the same time, then stores the result in memory and on disk.
  /// Exceptions from `compile` propagate to every waiting caller.
  /// `origin`, when given, says where the payload came from.
  template <class F>
  BytesPtr get_or_compile(const KernelKey& key, F&& compile, CacheOrigin* origin = nullptr) {
    bool ran = false;
    CacheOrigin from = CacheOrigin::memory;
    BytesPtr result = memory_.get_or_compile(
        key,
        [&]() -> BytesPtr {
          if (BytesPtr hit = read_disk(key)) {
            from = CacheOrigin::disk;
            return hit;
          }
          note_miss(key);
          auto t0 = std::chrono::steady_clock::now();
          Bytes bytes(std::invoke(std::forward<F>(compile)));
          double ms = std::chrono::duration<double, std::milli>(
                          std::chrono::steady_clock::now() - t0).count();
          from = CacheOrigin::compiled;
          note_compile(key, ms, bytes.size());
          auto stored = std::make_shared<const Bytes>(std::move(bytes));
          publish(key, stored);
          return stored;
        },
        &ran);
    if (!ran) note_memory_hit(key);
    if (origin) *origin = ran ? from : CacheOrigin::memory;
    return result;
  }

  /// Waits until every entry get_or_compile() has queued is on disk.
  void flush();

  KernelCacheStats stats() const;
  void reset_stats();
  /// Forgets the in-memory payloads (the disk entries stay).
  void clear_memory();
  /// Forgets key's payload in memory and removes its disk entry: for an
  /// entry that passed its checks but proved unusable (an object that does
  /// not define the kernel's symbol), so the next get_or_compile compiles.
  void erase(const KernelKey& key);

  /// The folder (even when unusable); empty for a memory-only cache.
  const std::filesystem::path& dir() const { return dir_; }
  /// Whether entries go to disk; settles the folder on first call.
  bool disk_enabled();
  /// Where key's entry lives on disk.
  std::filesystem::path entry_path(const KernelKey& key) const;

 private:
  BytesPtr read_disk(const KernelKey& key);  // counts disk hit / corrupt, inserts nothing
  void write_disk(const KernelKey& key, std::span<const char> payload);
  void publish(const KernelKey& key, BytesPtr payload);  // async or not, per options
  void note_memory_hit(const KernelKey& key);
  void note_miss(const KernelKey& key);
  void note_compile(const KernelKey& key, double ms, std::size_t bytes);
  void warn_disk_once(const std::string& message);

  std::filesystem::path dir_;
  bool want_disk_ = true;
  std::once_flag disk_once_;
  bool disk_ok_ = false;
  std::atomic<bool> warned_{false};
  CompileOnce<Bytes> memory_;
  struct Writer;  // the background publisher, started on first use
  bool async_writes_ = true;
  std::mutex writer_mu_;
  std::unique_ptr<Writer> writer_;

  std::atomic<std::uint64_t> memory_hits_{0}, disk_hits_{0}, misses_{0}, compiles_{0},
      corrupt_{0}, disk_writes_{0}, disk_write_failures_{0};
};

}  // namespace tessel
