// The safetensors checkpoint format, at the level of bytes: names, dtypes,
// shapes and raw data. No Tensor is involved here; the tensor-level save and
// load build on this.
//
// Layout (the format PyTorch and Hugging Face tools read and write):
//   u64 little-endian N | N bytes of UTF-8 JSON header | data section
// The header maps each tensor name to {"dtype", "shape", "data_offsets"}
// (offsets relative to the data section), plus an optional "__metadata__"
// object of string values. Data is little-endian, row-major, with no gaps.
//
// Loading is defensive: every header field is checked before anything sized
// by it is allocated or touched, and each broken rule raises a
// CheckpointError ending in "(rule: <name>)", naming the offending key.
// Rules: io, file-size, header-length, utf8, json, header-object,
// duplicate-key, entry, dtype, shape, overflow, data-offsets, size,
// contiguous, file-end, metadata (and, when saving, name and data).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/dtype.h"

namespace tessel::safetensors {

/// Largest header accepted (the limit the reference implementation uses).
inline constexpr uint64_t kMaxHeaderBytes = 100'000'000;
/// Highest tensor rank accepted.
inline constexpr size_t kMaxRank = 16;
/// Files at least this large are memory-mapped instead of read into memory.
inline constexpr uint64_t kMapThreshold = uint64_t{1} << 20;

/// One tensor's name, type, shape and raw little-endian row-major bytes.
/// Does not own `data`.
struct TensorView {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const std::byte* data;
  size_t nbytes;
};

/// The format's dtype spelling: DType::f32 -> "F32", DType::b8 -> "BOOL".
///
///   dtype_code(DType::bf16) == "BF16"
std::string_view dtype_code(DType t);

/// The inverse of dtype_code; nullopt for codes tessel does not support.
///
///   dtype_from_code("I64") == DType::i64;  !dtype_from_code("U8")
std::optional<DType> dtype_from_code(std::string_view code);

/// The bytes of a safetensors file holding `tensors` (data in the given
/// order) and `metadata`; the header is space-padded so data starts at a
/// multiple of 8. Raises CheckpointError for a tensor the format cannot
/// hold (duplicate or reserved name, byte count not matching shape, ...).
///
///   std::vector<float> w = {1, 2, 3};
///   TensorView t{"w", DType::f32, {3}, reinterpret_cast<const std::byte*>(w.data()), 12};
///   std::vector<std::byte> bytes = serialize({&t, 1}, {{"format", "pt"}});
std::vector<std::byte> serialize(std::span<const TensorView> tensors,
                                 const std::map<std::string, std::string>& metadata = {});

/// Saves `tensors` and `metadata` as `path`, atomically: a crash leaves the
/// old file or the new one, never a mix (see write_file_atomically).
///
///   write_file("model.safetensors", views, {{"format", "pt"}});
void write_file(const std::filesystem::path& path, std::span<const TensorView> tensors,
                const std::map<std::string, std::string>& metadata = {});

/// A validated checkpoint. Entry data points into memory the File keeps
/// alive (a private mapping for large files, a buffer for small ones, or
/// the caller's bytes for parse()); copies share it.
class File {
 public:
  /// The tensors in data-offset order (file order breaks ties between
  /// empty tensors), each with `data` pointing at its bytes.
  const std::vector<TensorView>& entries() const { return entries_; }
  /// The "__metadata__" object (empty when the file has none).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  /// The tensor called `name`, or nullptr.
  ///
  ///   if (const TensorView* w = file.find("0.weight")) use(w->data, w->nbytes);
  const TensorView* find(std::string_view name) const;
  /// Length of the JSON header (N), and of the data section after it.
  uint64_t header_bytes() const { return header_bytes_; }
  uint64_t data_bytes() const { return data_bytes_; }
  /// Whether the data is memory-mapped from the file.
  bool mapped() const { return mapped_; }
  /// The path (or label) used in error messages.
  const std::string& source() const { return source_; }

 private:
  friend File open(const std::filesystem::path& path);
  friend File parse(std::span<const std::byte> bytes, std::string_view source);
  File() = default;

  std::shared_ptr<const void> keep_alive_;
  std::string source_;
  std::vector<TensorView> entries_;
  std::vector<size_t> by_name_;  // indices into entries_, sorted by name
  std::map<std::string, std::string> metadata_;
  uint64_t header_bytes_ = 0;
  uint64_t data_bytes_ = 0;
  bool mapped_ = false;
};

/// Opens and validates a checkpoint; files of kMapThreshold bytes or more
/// are memory-mapped (truncating a file while it is open is then fatal, as
/// for any mapping). Raises CheckpointError naming the path, key and rule.
///
///   safetensors::File f = safetensors::open("model.safetensors");
///   for (const TensorView& t : f.entries()) fmt::print("{} {}\n", t.name, t.nbytes);
File open(const std::filesystem::path& path);

/// Validates a checkpoint already in memory. The File points into `bytes`,
/// which must outlive it. `source` names the bytes in error messages.
///
///   safetensors::File f = safetensors::parse(bytes, "download");
File parse(std::span<const std::byte> bytes, std::string_view source = "<memory>");

}  // namespace tessel::safetensors
