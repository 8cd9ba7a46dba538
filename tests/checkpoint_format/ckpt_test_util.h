// Shared helpers for the checkpoint-format tests: owned tensors, files built
// byte by byte, scratch folders and error-message checks.
#pragma once

#include <unistd.h>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "runtime/errors.h"
#include "runtime/safetensors.h"

namespace ckpt_test {

namespace fs = std::filesystem;
using tessel::DType;
using tessel::safetensors::TensorView;

/// A tensor that owns its bytes, for building and checking checkpoints.
struct Owned {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<std::byte> bytes;

  TensorView view() const { return {name, dtype, shape, bytes.data(), bytes.size()}; }
};

inline size_t numel(const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

/// Random contents (any bit pattern for numbers, NaN payloads included;
/// 0/1 for bool) so round trips prove bit-exactness.
inline Owned random_tensor(std::string name, DType dtype, std::vector<int64_t> shape, std::mt19937_64& rng) {
  Owned t{std::move(name), dtype, std::move(shape), {}};
  t.bytes.resize(numel(t.shape) * tessel::dtype_size(dtype));
  for (auto& b : t.bytes) b = std::byte(dtype == DType::b8 ? rng() & 1 : rng() & 0xff);
  return t;
}

inline std::vector<TensorView> views(const std::vector<Owned>& ts) {
  std::vector<TensorView> v;
  for (const Owned& t : ts) v.push_back(t.view());
  return v;
}

inline std::vector<std::byte> to_bytes(std::string_view s) {
  auto b = std::as_bytes(std::span(s.data(), s.size()));
  return {b.begin(), b.end()};
}

inline void put_le64(std::vector<std::byte>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(std::byte((v >> (8 * i)) & 0xff));
}

/// A file built by hand: 8-byte little-endian length, header, data.
inline std::vector<std::byte> raw_file(std::string_view header, std::span<const std::byte> data = {}) {
  std::vector<std::byte> out;
  put_le64(out, header.size());
  auto h = to_bytes(header);
  out.insert(out.end(), h.begin(), h.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

/// `header` padded with spaces to a multiple of 8 bytes, as Python's writer does.
inline std::string padded(std::string header) {
  header.append((8 - header.size() % 8) % 8, ' ');
  return header;
}

inline std::vector<std::byte> zeros(size_t n) { return std::vector<std::byte>(n); }

inline std::vector<std::byte> read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto b = std::as_bytes(std::span(c));
  return {b.begin(), b.end()};
}

inline void write_all(const fs::path& p, std::span<const std::byte> bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

inline bool same_bytes(const TensorView& t, std::span<const std::byte> expected) {
  return t.nbytes == expected.size() && (t.nbytes == 0 || std::memcmp(t.data, expected.data(), t.nbytes) == 0);
}

/// A fresh folder under the temp directory, removed with its contents.
struct TempDir {
  fs::path path;
  TempDir() {
    static std::atomic<int> counter{0};
    path = fs::temp_directory_path() /
           ("tessel-ckpt-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

/// The CheckpointError message `parse(bytes)` raises; fails the test if it
/// parses or throws anything else.
inline std::string parse_error(std::span<const std::byte> bytes, std::string_view source = "t.safetensors") {
  try {
    tessel::safetensors::parse(bytes, source);
  } catch (const tessel::CheckpointError& e) {
    return e.what();
  }
  FAIL("parsed without a CheckpointError");
  return {};
}

}  // namespace ckpt_test

/// Asserts that `bytes` are rejected under `rule`, with `key` named.
#define CHECK_RULE(bytes, rule, key)                                    \
  do {                                                                  \
    std::string msg_ = ckpt_test::parse_error(bytes);                   \
    INFO(msg_);                                                         \
    CHECK_THAT(msg_, Catch::Contains("(rule: " rule ")"));              \
    CHECK_THAT(msg_, Catch::Contains(key));                             \
    CHECK_THAT(msg_, Catch::StartsWith("checkpoint 't.safetensors': ")); \
  } while (0)
