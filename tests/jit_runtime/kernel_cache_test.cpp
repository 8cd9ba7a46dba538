// Kernel cache: keys, memory + disk layers, every way a disk entry can be
// bad, and sharing one folder between threads and processes.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <latch>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "runtime/kernel_cache.h"
#include "tests/support/temp_dir.h"

using tessel::CacheOrigin;
using tessel::CompileOnce;
using tessel::KernelCache;
using tessel::KernelKey;
using tessel::make_key;
using tessel::testing::TempDir;

namespace {

std::vector<char> payload_of(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<char> v(n);
  for (char& c : v) c = static_cast<char>(rng());
  return v;
}

std::vector<char> read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(f), {});
}

void write_file(const std::filesystem::path& p, const std::vector<char>& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

KernelCache::Options in(const TempDir& d) { return KernelCache::Options{d.path, true}; }

const KernelKey kKey = make_key("kernel source", "O3", "compiler 1", "target");

// Writes a valid entry for kKey through one cache, returning its path.
std::filesystem::path publish(const TempDir& d, const std::vector<char>& payload) {
  KernelCache c(in(d));
  c.put(kKey, payload);
  REQUIRE(c.stats().disk_writes == 1);
  auto path = c.entry_path(kKey);
  REQUIRE(std::filesystem::exists(path));
  return path;
}

// A fresh cache (empty memory) must reject the entry at `path`: a miss, the
// file gone, one corrupt entry counted.
void expect_dropped(const TempDir& d, const std::filesystem::path& path) {
  KernelCache c(in(d));
  CHECK_FALSE(c.get(kKey).has_value());
  CHECK_FALSE(std::filesystem::exists(path));
  auto s = c.stats();
  CHECK(s.corrupt_dropped == 1);
  CHECK(s.misses == 1);
  CHECK(s.disk_hits == 0);
}

}  // namespace

TEST_CASE("kernel keys hash every field, with boundaries", "[jit][cache]") {
  KernelKey k = make_key("src", "opt", "llvm", "cpu");
  CHECK(k == make_key("src", "opt", "llvm", "cpu"));
  CHECK(k != make_key("src2", "opt", "llvm", "cpu"));
  CHECK(k != make_key("src", "opt2", "llvm", "cpu"));
  CHECK(k != make_key("src", "opt", "llvm2", "cpu"));
  CHECK(k != make_key("src", "opt", "llvm", "cpu2"));
  // Moving text across a field boundary is a different kernel.
  CHECK(make_key("ab", "c", "", "") != make_key("a", "bc", "", ""));
  CHECK(make_key("", "", "x", "") != make_key("", "", "", "x"));

  std::string hex = k.to_hex();
  CHECK(hex.size() == 32);
  CHECK(hex.find_first_not_of("0123456789abcdef") == std::string::npos);
  auto back = KernelKey::from_hex(hex);
  REQUIRE(back.has_value());
  CHECK(*back == k);
  CHECK_FALSE(KernelKey::from_hex("123").has_value());
  CHECK_FALSE(KernelKey::from_hex(std::string(31, '0') + "g").has_value());
}

TEST_CASE("put then get: memory in-process, disk across caches", "[jit][cache]") {
  TempDir d;
  auto payload = payload_of(10000, 1);
  {
    KernelCache a(in(d));
    CHECK_FALSE(a.get(kKey).has_value());
    a.put(kKey, payload);
    auto got = a.get(kKey);
    REQUIRE(got.has_value());
    CHECK(*got == payload);
    auto s = a.stats();
    CHECK(s.misses == 1);
    CHECK(s.memory_hits == 1);
    CHECK(s.disk_writes == 1);
  }
  // Only the entry itself is left: no temp files.
  auto files = d.files();
  REQUIRE(files.size() == 1);
  CHECK(files[0].filename() == kKey.to_hex() + ".tslk");
  auto raw = read_file(files[0]);
  REQUIRE(raw.size() == KernelCache::kHeaderSize + payload.size());
  CHECK(std::string(raw.data(), 4) == "TSLK");

  KernelCache b(in(d));
  auto got = b.get(kKey);
  REQUIRE(got.has_value());
  CHECK(*got == payload);
  CHECK(b.get(kKey).has_value());
  auto s = b.stats();
  CHECK(s.disk_hits == 1);
  CHECK(s.memory_hits == 1);
  CHECK(s.misses == 0);
  CHECK(s.compiles == 0);
}

TEST_CASE("get_or_compile compiles on a miss and reads the disk afterwards", "[jit][cache]") {
  TempDir d;
  auto payload = payload_of(5000, 2);
  int runs = 0;
  {
    KernelCache a(in(d));
    CacheOrigin o;
    auto p = a.get_or_compile(kKey, [&] { ++runs; return payload; }, &o);
    CHECK(*p == payload);
    CHECK(o == CacheOrigin::compiled);
    auto p2 = a.get_or_compile(kKey, [&] { ++runs; return payload; }, &o);
    CHECK(p2 == p);
    CHECK(o == CacheOrigin::memory);
    CHECK(a.stats().compiles == 1);
    CHECK(a.stats().memory_hits == 1);
  }
  KernelCache b(in(d));
  CacheOrigin o;
  auto p = b.get_or_compile(kKey, [&] { ++runs; return payload; }, &o);
  CHECK(*p == payload);
  CHECK(o == CacheOrigin::disk);
  CHECK(runs == 1);
  CHECK(b.stats().compiles == 0);  // what an ahead-of-time warmed cache must show
  CHECK(b.stats().disk_hits == 1);
}

TEST_CASE("new entries are published in the background unless asked not to", "[jit][cache]") {
  auto payload = payload_of(3000, 15);
  for (bool async : {true, false}) {
    INFO("async " << async);
    TempDir d;
    KernelCache c(KernelCache::Options{d.path, true, async});
    c.get_or_compile(kKey, [&] { return payload; });
    if (async) c.flush();
    CHECK(c.stats().disk_writes == 1);
    KernelCache other(in(d));
    auto got = other.get(kKey);
    REQUIRE(got.has_value());
    CHECK(*got == payload);
  }
  // The destructor drains the queue: nothing is lost at exit.
  TempDir d;
  {
    KernelCache c(in(d));
    for (int i = 0; i < 20; ++i)
      c.get_or_compile(make_key(std::to_string(i), "", "", ""), [&] { return payload; });
  }
  CHECK(d.files().size() == 20);
}

TEST_CASE("a flipped payload byte is detected, removed and recompiled", "[jit][cache]") {
  TempDir d;
  auto payload = payload_of(4096, 3);
  auto path = publish(d, payload);
  auto raw = read_file(path);
  raw[KernelCache::kHeaderSize + 1234] ^= 0x01;
  write_file(path, raw);

  KernelCache c(in(d));
  int runs = 0;
  CacheOrigin o;
  auto p = c.get_or_compile(kKey, [&] { ++runs; return payload; }, &o);
  CHECK(runs == 1);
  CHECK(o == CacheOrigin::compiled);
  CHECK(*p == payload);
  CHECK(c.stats().corrupt_dropped == 1);
  // The recompiled entry replaced the corrupt one and reads back clean.
  c.flush();
  KernelCache again(in(d));
  auto got = again.get(kKey);
  REQUIRE(got.has_value());
  CHECK(*got == payload);
  CHECK(again.stats().corrupt_dropped == 0);
}

TEST_CASE("a corrupt entry is dropped by get()", "[jit][cache]") {
  TempDir d;
  auto path = publish(d, payload_of(4096, 4));
  auto raw = read_file(path);
  raw.back() ^= 0x40;
  write_file(path, raw);
  expect_dropped(d, path);
}

TEST_CASE("truncated entries are dropped", "[jit][cache]") {
  auto payload = payload_of(4096, 5);
  for (std::size_t keep : {std::size_t{0}, std::size_t{3}, std::size_t{20},
                           KernelCache::kHeaderSize - 1, KernelCache::kHeaderSize,
                           KernelCache::kHeaderSize + 2048,
                           KernelCache::kHeaderSize + payload.size() - 1}) {
    INFO("kept " << keep << " bytes");
    TempDir d;
    auto path = publish(d, payload);
    std::filesystem::resize_file(path, keep);
    expect_dropped(d, path);
  }
}

TEST_CASE("trailing bytes after the payload are dropped", "[jit][cache]") {
  TempDir d;
  auto path = publish(d, payload_of(100, 6));
  auto raw = read_file(path);
  raw.push_back('x');
  write_file(path, raw);
  expect_dropped(d, path);
}

TEST_CASE("a stale format version is dropped", "[jit][cache]") {
  for (std::uint32_t version : {0u, KernelCache::kFormatVersion + 1, 0xFFFFFFFFu}) {
    INFO("version " << version);
    TempDir d;
    auto path = publish(d, payload_of(256, 7));
    auto raw = read_file(path);
    for (int i = 0; i < 4; ++i) raw[4 + i] = static_cast<char>(version >> (8 * i));
    write_file(path, raw);
    expect_dropped(d, path);
  }
}

TEST_CASE("a wrong magic is dropped", "[jit][cache]") {
  TempDir d;
  auto path = publish(d, payload_of(256, 8));
  auto raw = read_file(path);
  std::memcpy(raw.data(), "TSLX", 4);
  write_file(path, raw);
  expect_dropped(d, path);
}

TEST_CASE("an entry holding another key is dropped", "[jit][cache]") {
  TempDir d;
  KernelKey other = make_key("other kernel", "O3", "compiler 1", "target");
  auto payload = payload_of(512, 9);
  std::filesystem::path other_path;
  {
    KernelCache c(in(d));
    c.put(other, payload);
    other_path = c.entry_path(other);
  }
  // A valid entry (magic, version, checksum all fine) under the wrong name.
  KernelCache probe(in(d));
  std::filesystem::copy_file(other_path, probe.entry_path(kKey));
  expect_dropped(d, probe.entry_path(kKey));
  // The real entry of `other` is untouched.
  KernelCache c(in(d));
  auto got = c.get(other);
  REQUIRE(got.has_value());
  CHECK(*got == payload);
}

TEST_CASE("an unusable folder leaves a working memory-only cache", "[jit][cache]") {
  TempDir d;
  write_file(d.path / "not_a_dir", {'x'});
  KernelCache c(KernelCache::Options{d.path / "not_a_dir" / "cache", true});
  CHECK_FALSE(c.disk_enabled());
  auto payload = payload_of(64, 10);
  c.put(kKey, payload);
  c.put(make_key("b", "", "", ""), payload);  // warns only once (see stderr)
  auto got = c.get(kKey);
  REQUIRE(got.has_value());
  CHECK(*got == payload);
  CHECK(c.stats().disk_writes == 0);
}

TEST_CASE("memory-only caches never touch the disk", "[jit][cache]") {
  KernelCache c(KernelCache::Options{std::nullopt, false});
  CHECK(c.dir().empty());
  CHECK_FALSE(c.disk_enabled());
  c.put(kKey, payload_of(64, 11));
  CHECK(c.get(kKey).has_value());
}

TEST_CASE("the folder comes from TESSEL_CACHE_DIR, else HOME", "[jit][cache]") {
  TempDir d;
  std::string old_dir = std::getenv("TESSEL_CACHE_DIR") ? std::getenv("TESSEL_CACHE_DIR") : "";
  std::string old_home = std::getenv("HOME") ? std::getenv("HOME") : "";
  bool had_dir = std::getenv("TESSEL_CACHE_DIR") != nullptr;

  ::setenv("TESSEL_CACHE_DIR", (d.path / "explicit").c_str(), 1);
  CHECK(KernelCache::default_dir() == d.path / "explicit");
  ::unsetenv("TESSEL_CACHE_DIR");
  ::setenv("HOME", d.path.c_str(), 1);
  CHECK(KernelCache::default_dir() == d.path / ".cache" / "tessel");
  {
    KernelCache c;
    CHECK(c.dir() == d.path / ".cache" / "tessel");
    c.put(kKey, payload_of(16, 12));  // creates the folder on demand
    CHECK(std::filesystem::exists(d.path / ".cache" / "tessel" / (kKey.to_hex() + ".tslk")));
  }

  ::setenv("HOME", old_home.c_str(), 1);
  if (had_dir) ::setenv("TESSEL_CACHE_DIR", old_dir.c_str(), 1);
}

TEST_CASE("8 threads asking for one key compile it once", "[jit][cache]") {
  TempDir d;
  KernelCache c(in(d));
  auto payload = payload_of(1000, 13);
  std::atomic<int> runs{0};
  std::latch start(8);
  std::vector<KernelCache::BytesPtr> results(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      results[t] = c.get_or_compile(kKey, [&] {
        runs.fetch_add(1);
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        return payload;
      });
    });
  }
  for (auto& th : threads) th.join();
  c.flush();
  CHECK(runs == 1);
  for (auto& r : results) {
    REQUIRE(r);
    CHECK(r == results[0]);  // the very same bytes, not copies
  }
  auto s = c.stats();
  CHECK(s.compiles == 1);
  CHECK(s.misses == 1);
  CHECK(s.memory_hits == 7);
  CHECK(s.disk_writes == 1);
}

TEST_CASE("a failed compile reaches every waiter and is retried later", "[jit][cache]") {
  KernelCache c(KernelCache::Options{std::nullopt, false});
  std::atomic<int> runs{0};
  std::latch start(4);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      start.arrive_and_wait();
      try {
        c.get_or_compile(kKey, [&]() -> std::vector<char> {
          runs.fetch_add(1);
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          throw std::runtime_error("compiler crashed");
        });
      } catch (const std::runtime_error&) {
        failures.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(failures == 4);
  CHECK(runs >= 1);
  auto p = c.get_or_compile(kKey, [] { return std::vector<char>{'o', 'k'}; });
  CHECK(std::string(p->begin(), p->end()) == "ok");
}

TEST_CASE("CompileOnce memoizes any type", "[jit][cache]") {
  CompileOnce<std::string> once;
  std::atomic<int> runs{0};
  std::latch start(8);
  std::vector<std::shared_ptr<const std::string>> results(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      results[t] = once.get_or_compile(kKey, [&] {
        runs.fetch_add(1);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        return std::string("kernel");
      });
    });
  for (auto& th : threads) th.join();
  CHECK(runs == 1);
  for (auto& r : results) CHECK(r == results[0]);
  CHECK(*once.find(kKey) == "kernel");
  CHECK(once.find(make_key("x", "", "", "")) == nullptr);
}

TEST_CASE("4 processes sharing one folder never see a half-written entry", "[jit][cache]") {
  TempDir d;
  // Large enough that a torn write would be visible.
  const auto payload = payload_of(1 << 20, 14);
  const KernelKey keys[2] = {kKey, make_key("second", "", "", "")};
  std::vector<pid_t> children;
  for (int child = 0; child < 4; ++child) {
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int status = 0;
      try {
        KernelCache c(in(d));
        for (int i = 0; i < 50; ++i) {
          const KernelKey& key = keys[(i + child) % 2];
          c.clear_memory();  // force every read through the disk
          if (auto got = c.get(key); got && *got != payload) status = 1;
          c.put(key, payload);
          c.clear_memory();
          auto again = c.get(key);
          // Another child may be replacing it, but rename keeps it whole.
          if (!again || *again != payload) status = status ? status : 2;
        }
        auto s = c.stats();
        if (s.corrupt_dropped != 0) status = 3;
        if (s.disk_write_failures != 0) status = 4;
      } catch (...) {
        status = 5;
      }
      ::_exit(status);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int st = 0;
    REQUIRE(::waitpid(pid, &st, 0) == pid);
    REQUIRE(WIFEXITED(st));
    INFO("child exit code: 1 wrong bytes, 2 lost entry, 3 corrupt seen, 4 write failed, 5 threw");
    CHECK(WEXITSTATUS(st) == 0);
  }
  // Both entries whole, no temp file left behind.
  auto files = d.files();
  CHECK(files.size() == 2);
  KernelCache c(in(d));
  for (const KernelKey& key : keys) {
    auto got = c.get(key);
    REQUIRE(got.has_value());
    CHECK(*got == payload);
  }
}

TEST_CASE("a cache folder others can write is refused for a private one and such entries are never loaded", "[jit][cache]") {
  TempDir d;
  auto payload = payload_of(64, 11);
  const std::filesystem::path entry = publish(d, payload);
  // An entry someone else could have written (group/other-writable) is dropped, not loaded.
  std::filesystem::permissions(entry, std::filesystem::perms::group_write | std::filesystem::perms::others_write,
                               std::filesystem::perm_options::add);
  expect_dropped(d, entry);
  // A folder writable by everyone: the cache moves to a private temp folder and says why.
  std::filesystem::permissions(d.path, std::filesystem::perms::others_write, std::filesystem::perm_options::add);
  CHECK_THAT(KernelCache::untrusted_reason(d.path), Catch::StartsWith("it is writable by everyone (mode "));
  KernelCache c(in(d));
  REQUIRE(c.disk_enabled());
  CHECK(c.dir() != d.path);
  CHECK(c.dir().string().rfind("/tmp/tessel-private-cache-", 0) == 0);
  CHECK(KernelCache::untrusted_reason(c.dir()).empty());
  c.put(kKey, payload);
  CHECK(std::filesystem::exists(c.entry_path(kKey)));
  CHECK_FALSE(std::filesystem::exists(d.path / c.entry_path(kKey).filename()));
  std::filesystem::remove_all(c.dir());
  std::filesystem::permissions(d.path, std::filesystem::perms::others_write, std::filesystem::perm_options::remove);
  CHECK(KernelCache::untrusted_reason(d.path).empty());
}
