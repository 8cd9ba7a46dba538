#include "runtime/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <limits>
#include <system_error>
#include <tuple>
#include <unordered_set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "runtime/atomic_file.h"
#include "runtime/errors.h"

// The data section is copied to and from memory as is, which is only right
// on a little-endian host (every platform tessel builds for).
static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

namespace tessel::safetensors {
namespace {

constexpr std::pair<DType, std::string_view> kCodes[] = {
    {DType::f32, "F32"},  {DType::f64, "F64"}, {DType::f16, "F16"}, {DType::bf16, "BF16"},
    {DType::i64, "I64"},  {DType::i32, "I32"}, {DType::b8, "BOOL"},
};

constexpr size_t kQuoteLimit = 80;  // bytes of a file-supplied string shown in a message

// A file-supplied string for a message: control characters escaped and long
// strings cut (at a character boundary), so a hostile header cannot make
// the message huge or garble a terminal.
std::string quote(std::string_view s) {
  std::string out = "'";
  size_t shown = 0;
  for (unsigned char c : s) {
    bool starts_char = (c & 0xC0) != 0x80;
    if (starts_char && shown >= kQuoteLimit) {
      out += "...";
      break;
    }
    ++shown;
    if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
    else out += static_cast<char>(c);
  }
  return out + "'";
}

std::string tensor_where(std::string_view name) { return "tensor " + quote(name); }

[[noreturn]] void raise(std::string_view source, std::string_view where, std::string_view detail,
                        std::string_view rule) {
  throw CheckpointError(
      fmt::format("checkpoint '{}': {}: {} (rule: {})", source, where, detail, rule));
}

// Strict UTF-8: no overlong forms, no surrogates, nothing past U+10FFFF.
// Returns the offset of the first bad byte, or npos.
size_t find_bad_utf8(std::string_view s) {
  size_t i = 0, n = s.size();
  while (i < n) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp, min;
    if ((c & 0xE0) == 0xC0) len = 2, cp = c & 0x1F, min = 0x80;
    else if ((c & 0xF0) == 0xE0) len = 3, cp = c & 0x0F, min = 0x800;
    else if ((c & 0xF8) == 0xF0) len = 4, cp = c & 0x07, min = 0x10000;
    else return i;
    if (n - i < len) return i;
    for (size_t k = 1; k < len; ++k) {
      auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::string_view::npos;
}

std::string shape_str(std::span<const int64_t> shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

// numel(shape) * itemsize, or nullopt when it does not fit in 64 bits.
// A zero dimension makes the tensor empty whatever the other dimensions are.
std::optional<uint64_t> byte_size(std::span<const int64_t> shape, DType dtype) {
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  uint64_t n = dtype_size(dtype);
  for (int64_t d : shape)
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return std::nullopt;
  return n;
}

// ---------------------------------------------------------------------------
// Header parsing: a SAX handler, so the header is checked while it streams
// by and nothing is built but the entries themselves (no DOM whose size an
// attacker controls, shapes capped at kMaxRank as they are read).

struct RawEntry {
  std::string name;
  DType dtype{};
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
  size_t order = 0;  // position in the header
};

class HeaderHandler final : public nlohmann::json_sax<nlohmann::json> {
 public:
  std::vector<RawEntry> entries;
  std::map<std::string, std::string> metadata;

  // The first broken rule, in document order. Parsing goes on after it so a
  // JSON syntax error anywhere wins: a file that is not JSON is reported as
  // such, not by whichever field happened to come first.
  std::optional<std::string> where, detail, rule;
  std::optional<std::string> json_error;

  bool null() override { return value("null"); }
  bool boolean(bool v) override { return value(v ? "true" : "false"); }
  bool number_integer(number_integer_t v) override {
    if (failed()) return true;
    // Only "-..." lexes as a signed integer; "-0" is still a valid zero.
    if (v == 0) return unsigned_value(0, "-0");
    return value(fmt::format("the negative number {}", v));
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (failed()) return true;
    return unsigned_value(v, fmt::to_string(v));
  }
  bool number_float(number_float_t, const string_t& text) override {
    return value("the non-integer number " + quote(text));
  }
  bool string(string_t& v) override {
    if (failed()) return true;
    if (at_ == At::meta) {
      metadata.emplace(std::move(meta_key_), std::move(v));
      return true;
    }
    if (at_ == At::entry && field_ == kDtype) {
      auto code = dtype_from_code(v);
      if (!code) {
        return fail(tensor_where(cur_.name), "unknown dtype " + quote(v) +
                    " (known: F32, F64, F16, BF16, I64, I32, BOOL)", "dtype");
      }
      cur_.dtype = *code;
      return true;
    }
    return value("a string");
  }
  bool binary(binary_t&) override { return value("binary data"); }

  bool start_object(std::size_t) override {
    if (failed()) return true;
    switch (at_) {
      case At::start: at_ = At::root; return true;
      case At::root:
        if (key_ == "__metadata__") {
          at_ = At::meta;
        } else {
          at_ = At::entry;
          cur_ = RawEntry{key_, {}, {}, 0, 0, entries.size()};
          seen_ = 0;
        }
        return true;
      default: return value("an object");
    }
  }
  bool key(string_t& k) override {
    if (failed()) return true;
    if (at_ == At::root) {
      if (!root_keys_.insert(k).second) {
        return fail(k == "__metadata__" ? "header" : tensor_where(k),
                    "key " + quote(k) + " appears twice in the header", "duplicate-key");
      }
      key_ = std::move(k);
    } else if (at_ == At::meta) {
      if (!meta_keys_.insert(k).second)
        return fail("metadata key " + quote(k), "key appears twice in __metadata__", "duplicate-key");
      meta_key_ = std::move(k);
    } else {  // At::entry
      field_ = k == "dtype" ? kDtype : k == "shape" ? kShape : k == "data_offsets" ? kOffsets : 0;
      if (!field_) {
        return fail(tensor_where(cur_.name), "unexpected field " + quote(k) +
                    " (allowed: dtype, shape, data_offsets)", "entry");
      }
      if (seen_ & field_)
        return fail(tensor_where(cur_.name), "field " + quote(k) + " appears twice", "duplicate-key");
      seen_ |= field_;
    }
    return true;
  }
  bool end_object() override {
    if (failed()) return true;
    if (at_ == At::meta) {
      at_ = At::root;
    } else if (at_ == At::entry) {
      for (auto [bit, name] : {std::pair{kDtype, "dtype"}, {kShape, "shape"}, {kOffsets, "data_offsets"}})
        if (!(seen_ & bit)) return fail(tensor_where(cur_.name), fmt::format("missing field '{}'", name), "entry");
      entries.push_back(std::move(cur_));
      at_ = At::root;
    } else {  // At::root
      at_ = At::done;
    }
    return true;
  }
  bool start_array(std::size_t) override {
    if (failed()) return true;
    if (at_ == At::entry && field_ == kShape) {
      at_ = At::shape;
      cur_.shape.clear();
      return true;
    }
    if (at_ == At::entry && field_ == kOffsets) {
      at_ = At::offsets;
      n_offsets_ = 0;
      return true;
    }
    return value("a list");
  }
  bool end_array() override {
    if (failed()) return true;
    if (at_ == At::offsets) {
      if (n_offsets_ != 2) {
        return fail(tensor_where(cur_.name),
                    fmt::format("data_offsets has {} values, not two", n_offsets_), "data-offsets");
      }
      if (cur_.begin > cur_.end) {
        return fail(tensor_where(cur_.name),
                    fmt::format("data_offsets [{}, {}] begins after it ends", cur_.begin, cur_.end),
                    "data-offsets");
      }
    }
    at_ = At::entry;  // only shape and offsets lists are ever entered
    return true;
  }
  bool parse_error(std::size_t pos, const std::string&, const nlohmann::detail::exception& ex) override {
    // nlohmann's message may quote raw input; keep only its description.
    std::string_view what = ex.what();
    if (auto colon = what.find(": "); colon != what.npos) what.remove_prefix(colon + 2);
    if (auto last = what.find("; last read"); last != what.npos) what = what.substr(0, last);
    json_error = fmt::format("not valid JSON near byte {}: {}", pos, quote(what));
    return false;
  }

 private:
  enum class At { start, root, meta, entry, shape, offsets, done };
  static constexpr unsigned kDtype = 1, kShape = 2, kOffsets = 4;

  bool failed() const { return rule.has_value(); }
  bool fail(std::string w, std::string d, std::string r) {
    if (!failed()) where = std::move(w), detail = std::move(d), rule = std::move(r);
    return true;  // keep parsing: a later syntax error takes precedence
  }

  // A value in a place that accepts no value of its kind.
  bool value(std::string kind) {
    if (failed()) return true;
    switch (at_) {
      case At::start: return fail("header", "the header is " + kind + ", not a JSON object", "header-object");
      case At::root:
        if (key_ == "__metadata__") return fail("header", "__metadata__ is " + kind + ", not an object", "metadata");
        return fail(tensor_where(key_), "entry is " + kind + ", not an object", "entry");
      case At::meta: return fail("metadata key " + quote(meta_key_), "value is " + kind + ", not a string", "metadata");
      case At::entry:
        if (field_ == kDtype) return fail(tensor_where(cur_.name), "dtype is " + kind + ", not a string", "dtype");
        if (field_ == kShape)
          return fail(tensor_where(cur_.name), "shape is " + kind + ", not a list of integers", "shape");
        return fail(tensor_where(cur_.name), "data_offsets is " + kind + ", not a list of two integers", "data-offsets");
      case At::shape:
        return fail(tensor_where(cur_.name), "shape holds " + kind + ", not a non-negative integer", "shape");
      case At::offsets:
        return fail(tensor_where(cur_.name), "data_offsets holds " + kind + ", not a non-negative integer",
                    "data-offsets");
      case At::done: break;
    }
    return fail("header", "unexpected " + kind, "json");
  }
  bool unsigned_value(uint64_t v, const std::string& text) {
    if (at_ == At::shape) {
      if (cur_.shape.size() == kMaxRank)
        return fail(tensor_where(cur_.name), fmt::format("shape has more than {} dimensions", kMaxRank), "shape");
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return fail(tensor_where(cur_.name), "shape dimension " + text + " is too large", "shape");
      cur_.shape.push_back(static_cast<int64_t>(v));
      return true;
    }
    if (at_ == At::offsets) {
      if (n_offsets_ == 2) return fail(tensor_where(cur_.name), "data_offsets has more than two values", "data-offsets");
      (n_offsets_++ == 0 ? cur_.begin : cur_.end) = v;
      return true;
    }
    return value("the number " + text);
  }

  At at_ = At::start;
  std::string key_;       // current root key
  std::string meta_key_;  // current metadata key
  unsigned field_ = 0;    // current entry field
  unsigned seen_ = 0;     // entry fields seen so far
  int n_offsets_ = 0;
  RawEntry cur_;
  std::unordered_set<std::string> root_keys_, meta_keys_;
};

uint64_t read_le64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | std::to_integer<uint64_t>(p[i]);
  return v;
}

// Checks every rule on `bytes`, then fills the outputs with views into them.
void validate(std::span<const std::byte> bytes, const std::string& src, std::vector<TensorView>& out,
              std::map<std::string, std::string>& metadata, uint64_t& header_bytes, uint64_t& data_bytes) {
  if (bytes.size() < 8)
    raise(src, "file", fmt::format("{} bytes long, shorter than the 8-byte header length", bytes.size()), "file-size");
  uint64_t n = read_le64(bytes.data());
  uint64_t room = bytes.size() - 8;
  if (n == 0) raise(src, "header", "header length is 0", "header-length");
  if (n > kMaxHeaderBytes)
    raise(src, "header", fmt::format("header length {} is over the limit of {}", n, kMaxHeaderBytes), "header-length");
  if (n > room)
    raise(src, "header", fmt::format("header length {} runs past the end of the file ({} bytes after the length)", n, room),
          "header-length");

  std::string_view text(reinterpret_cast<const char*>(bytes.data() + 8), n);
  if (size_t bad = find_bad_utf8(text); bad != text.npos)
    raise(src, "header", fmt::format("not valid UTF-8 at header byte {}", bad), "utf8");

  // nlohmann stops at a NUL as if the input ended, which would let bytes
  // after one slip by unread; JSON allows no raw NUL anywhere.
  if (size_t nul = text.find('\0'); nul != text.npos)
    raise(src, "header", fmt::format("not valid JSON: NUL byte at header byte {}", nul), "json");

  HeaderHandler h;
  nlohmann::json::sax_parse(text, &h);
  if (h.json_error) raise(src, "header", *h.json_error, "json");
  if (h.rule) raise(src, *h.where, *h.detail, *h.rule);

  uint64_t data_len = room - n;
  for (const RawEntry& e : h.entries) {
    auto need = byte_size(e.shape, e.dtype);
    if (!need) {
      raise(src, tensor_where(e.name),
            fmt::format("dtype {} shape {} needs more bytes than 64 bits can count", dtype_code(e.dtype),
                        shape_str(e.shape)),
            "overflow");
    }
    if (e.end - e.begin != *need) {
      raise(src, tensor_where(e.name),
            fmt::format("data_offsets [{}, {}] hold {} bytes but dtype {} shape {} needs {}", e.begin, e.end,
                        e.end - e.begin, dtype_code(e.dtype), shape_str(e.shape), *need),
            "size");
    }
  }

  std::vector<const RawEntry*> sorted;
  sorted.reserve(h.entries.size());
  for (const RawEntry& e : h.entries) sorted.push_back(&e);
  std::sort(sorted.begin(), sorted.end(), [](const RawEntry* a, const RawEntry* b) {
    return std::tie(a->begin, a->end, a->order) < std::tie(b->begin, b->end, b->order);
  });
  uint64_t cursor = 0;
  const RawEntry* prev = nullptr;
  for (const RawEntry* e : sorted) {
    if (e->begin != cursor) {
      std::string before = prev ? "tensor " + quote(prev->name) + " ends" : "the data section starts";
      raise(src, tensor_where(e->name),
            fmt::format("data begins at {} but {} at {} ({})", e->begin, before, cursor,
                        e->begin > cursor ? "a gap" : "an overlap"),
            "contiguous");
    }
    cursor = e->end;
    prev = e;
  }
  if (cursor != data_len) {
    raise(src, prev ? tensor_where(prev->name) : std::string("file"),
          fmt::format("tensor data ends at {} but the data section holds {} bytes", cursor, data_len), "file-end");
  }

  // All checks passed: offsets are now known to lie inside `bytes`.
  const std::byte* base = bytes.data() + 8 + n;
  out.clear();
  out.reserve(sorted.size());
  for (const RawEntry* e : sorted)
    out.push_back(TensorView{e->name, e->dtype, e->shape, base + e->begin, static_cast<size_t>(e->end - e->begin)});
  metadata = std::move(h.metadata);
  header_bytes = n;
  data_bytes = data_len;
}

// The header JSON for `tensors`, padded so the data starts 8-aligned.
std::string encode_header(std::string_view src, std::span<const TensorView> tensors,
                          const std::map<std::string, std::string>& metadata) {
  auto check_utf8 = [&](std::string_view where, std::string_view s) {
    if (find_bad_utf8(s) != s.npos) raise(src, where, "not valid UTF-8", "utf8");
  };
  std::string h = "{";
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      check_utf8("metadata key " + quote(k), k);
      check_utf8("metadata key " + quote(k), v);
      h += fmt::format("{}{}:{}", first ? "" : ",", nlohmann::json(k).dump(), nlohmann::json(v).dump());
      first = false;
    }
    h += "}";
  }
  std::unordered_set<std::string_view> names;
  uint64_t offset = 0;
  for (const TensorView& t : tensors) {
    std::string where = tensor_where(t.name);
    check_utf8(where, t.name);
    if (t.name == "__metadata__") raise(src, where, "the name is reserved for metadata", "name");
    if (!names.insert(t.name).second) raise(src, where, "two tensors have this name", "duplicate-key");
    if (dtype_code(t.dtype).empty()) raise(src, where, "unknown dtype", "dtype");
    if (t.shape.size() > kMaxRank)
      raise(src, where, fmt::format("shape has more than {} dimensions", kMaxRank), "shape");
    for (int64_t d : t.shape)
      if (d < 0) raise(src, where, fmt::format("shape {} has a negative dimension", shape_str(t.shape)), "shape");
    auto need = byte_size(t.shape, t.dtype);
    if (!need) raise(src, where, "byte size does not fit in 64 bits", "overflow");
    if (*need != t.nbytes) {
      raise(src, where,
            fmt::format("dtype {} shape {} needs {} bytes but {} were given", dtype_code(t.dtype),
                        shape_str(t.shape), *need, t.nbytes),
            "size");
    }
    if (t.nbytes > 0 && !t.data) raise(src, where, "data is null", "data");
    uint64_t end;
    if (__builtin_add_overflow(offset, t.nbytes, &end)) raise(src, where, "data section too large", "overflow");
    h += fmt::format("{}{}:{{\"dtype\":\"{}\",\"shape\":{},\"data_offsets\":[{},{}]}}", h.size() > 1 ? "," : "",
                     nlohmann::json(t.name).dump(), dtype_code(t.dtype), shape_str(t.shape), offset, end);
    offset = end;
  }
  h += "}";
  h.append((8 - h.size() % 8) % 8, ' ');  // Python's writer pads with spaces too
  if (h.size() > kMaxHeaderBytes)
    raise(src, "header", fmt::format("header of {} bytes is over the limit of {}", h.size(), kMaxHeaderBytes),
          "header-length");
  return h;
}

std::array<std::byte, 8> le64(uint64_t v) {
  std::array<std::byte, 8> out;
  for (auto& b : out) b = std::byte(v & 0xff), v >>= 8;
  return out;
}

}  // namespace

std::string_view dtype_code(DType t) {
  for (auto [d, code] : kCodes)
    if (d == t) return code;
  return {};
}

std::optional<DType> dtype_from_code(std::string_view code) {
  for (auto [d, c] : kCodes)
    if (c == code) return d;
  return std::nullopt;
}

std::vector<std::byte> serialize(std::span<const TensorView> tensors, const std::map<std::string, std::string>& metadata) {
  std::string header = encode_header("<memory>", tensors, metadata);
  size_t total = 8 + header.size();
  for (const TensorView& t : tensors) total += t.nbytes;
  std::vector<std::byte> out;
  out.reserve(total);
  auto len = le64(header.size());
  out.insert(out.end(), len.begin(), len.end());
  auto hb = std::as_bytes(std::span(header));
  out.insert(out.end(), hb.begin(), hb.end());
  for (const TensorView& t : tensors) out.insert(out.end(), t.data, t.data + t.nbytes);
  return out;
}

void write_file(const std::filesystem::path& path, std::span<const TensorView> tensors,
                const std::map<std::string, std::string>& metadata) {
  std::string header = encode_header(path.string(), tensors, metadata);
  auto len = le64(header.size());
  std::vector<std::span<const std::byte>> chunks;
  chunks.reserve(tensors.size() + 2);
  chunks.emplace_back(len);
  chunks.push_back(std::as_bytes(std::span(header)));
  for (const TensorView& t : tensors) chunks.emplace_back(t.data, t.nbytes);
  write_file_atomically(path, chunks);
}

const TensorView* File::find(std::string_view name) const {
  auto it = std::lower_bound(by_name_.begin(), by_name_.end(), name,
                             [&](size_t i, std::string_view n) { return entries_[i].name < n; });
  if (it == by_name_.end() || entries_[*it].name != name) return nullptr;
  return &entries_[*it];
}

File parse(std::span<const std::byte> bytes, std::string_view source) {
  File f;
  f.source_ = source;
  validate(bytes, f.source_, f.entries_, f.metadata_, f.header_bytes_, f.data_bytes_);
  f.by_name_.resize(f.entries_.size());
  for (size_t i = 0; i < f.by_name_.size(); ++i) f.by_name_[i] = i;
  std::sort(f.by_name_.begin(), f.by_name_.end(),
            [&](size_t a, size_t b) { return f.entries_[a].name < f.entries_[b].name; });
  return f;
}

File open(const std::filesystem::path& path) {
  std::string src = path.string();
  auto io_error = [&](std::string_view what, int err) {
    raise(src, "file", fmt::format("{}: {}", what, std::generic_category().message(err)), "io");
  };
  // O_NONBLOCK: opening a FIFO must not hang waiting for a writer; it is
  // then rejected as not a regular file. Regular files ignore the flag.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) io_error("cannot open", errno);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};

  struct stat st {};
  if (::fstat(fd, &st) != 0) io_error("cannot stat", errno);
  if (!S_ISREG(st.st_mode)) raise(src, "file", "not a regular file", "io");
  auto size = static_cast<uint64_t>(st.st_size);

  std::shared_ptr<const void> keep;
  std::span<const std::byte> bytes;
  bool mapped = size >= kMapThreshold;
  if (mapped) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) io_error("cannot map", errno);
    keep = std::shared_ptr<const void>(p, [size](const void* q) { ::munmap(const_cast<void*>(q), size); });
    bytes = {static_cast<const std::byte*>(p), size};
  } else {
    // Small (under kMapThreshold): reading it all costs less than a mapping.
    auto buf = std::make_shared<std::vector<std::byte>>(size);
    size_t got = 0;
    while (got < size) {
      ssize_t r = ::read(fd, buf->data() + got, size - got);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) io_error("cannot read", errno);
      if (r == 0) break;  // shrank since fstat: validate what is there
      got += static_cast<size_t>(r);
    }
    buf->resize(got);
    bytes = *buf;
    keep = std::move(buf);
  }
  File f = parse(bytes, src);
  f.keep_alive_ = std::move(keep);
  f.mapped_ = mapped;
  return f;
}

}  // namespace tessel::safetensors
