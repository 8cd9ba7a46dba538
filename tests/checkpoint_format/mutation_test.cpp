// Thousands of damaged files: every one either loads and gives exactly the
// file's (and, where the damage spared them, the original) bytes for every
// tensor, or raises CheckpointError. Nothing crashes, nothing else escapes.
//
// The seed is printed; set TESSEL_MUTATION_SEED to replay a run.
#include <cstdio>
#include <cstdlib>
#include <set>

#include <nlohmann/json.hpp>

#include "ckpt_test_util.h"

using namespace ckpt_test;
namespace st = tessel::safetensors;
using ordered_json = nlohmann::ordered_json;

namespace {

uint64_t seed_for_run() {
  if (const char* s = std::getenv("TESSEL_MUTATION_SEED")) return std::strtoull(s, nullptr, 10);
  return std::random_device{}();
}

struct Original {
  std::vector<Owned> tensors;
  std::map<std::string, std::string> metadata;
  std::vector<std::byte> bytes;
  uint64_t header_len = 0;
  std::map<std::string, size_t> begin;  // each tensor's data offset

  std::string header() const { return {reinterpret_cast<const char*>(bytes.data() + 8), header_len}; }
  std::span<const std::byte> data() const { return std::span(bytes).subspan(8 + header_len); }
};

Original make_original() {
  std::mt19937_64 rng(7);
  Original o;
  o.tensors = {random_tensor("0.weight", DType::f32, {2, 3}, rng), random_tensor("0.bias", DType::f32, {3}, rng),
               random_tensor("empty", DType::f16, {0, 4}, rng),    random_tensor("h", DType::bf16, {2, 2}, rng),
               random_tensor("step", DType::i64, {}, rng),          random_tensor("idx", DType::i32, {2}, rng),
               random_tensor("mask", DType::b8, {3}, rng),          random_tensor("d", DType::f64, {1, 1}, rng)};
  o.metadata = {{"format", "pt"}, {"tessel.aliases", R"({"2.weight":"0.weight"})"}};
  o.bytes = st::serialize(views(o.tensors), o.metadata);
  for (int i = 7; i >= 0; --i) o.header_len = (o.header_len << 8) | std::to_integer<uint64_t>(o.bytes[i]);
  size_t at = 0;
  for (const Owned& t : o.tensors) o.begin[t.name] = at, at += t.bytes.size();
  return o;
}

enum class Expect { error_or_consistent, must_parse_with_original_layout };

struct Stats {
  size_t files = 0, parsed = 0, rejected = 0;
};

// Parses `m` and checks the outcome. On success: the entries tile the data
// section, each view points at its own bytes inside `m`, and a tensor that
// kept its name, dtype, shape and offset from the original has its original
// bytes unless the damage hit one of its bytes (`data_flips`: indices into
// the data section).
void check_mutant(std::span<const std::byte> m, const Original& o, Stats& stats,
                  Expect expect = Expect::error_or_consistent, const std::set<size_t>& data_flips = {}) {
  ++stats.files;
  std::optional<st::File> f;
  try {
    f.emplace(st::parse(m, "mutant"));
  } catch (const tessel::CheckpointError& e) {
    ++stats.rejected;
    std::string msg = e.what();
    INFO(msg);
    REQUIRE(expect == Expect::error_or_consistent);
    REQUIRE_THAT(msg, Catch::StartsWith("checkpoint 'mutant': ") && Catch::Contains("(rule: "));
    return;
  }
  ++stats.parsed;
  const std::byte* data = m.data() + 8 + f->header_bytes();
  REQUIRE(8 + f->header_bytes() + f->data_bytes() == m.size());
  uint64_t cursor = 0;
  for (const TensorView& t : f->entries()) {
    INFO(t.name);
    REQUIRE(t.data == data + cursor);
    cursor += t.nbytes;
    REQUIRE(f->find(t.name) == &t);
    for (const Owned& orig : o.tensors) {
      size_t at = static_cast<size_t>(t.data - data);
      if (orig.name != t.name || orig.dtype != t.dtype || orig.shape != t.shape || o.begin.at(orig.name) != at)
        continue;
      bool hit = data_flips.lower_bound(at) != data_flips.lower_bound(at + t.nbytes);
      if (!hit) REQUIRE(same_bytes(t, orig.bytes));
    }
  }
  REQUIRE(cursor == f->data_bytes());
  if (expect == Expect::must_parse_with_original_layout) {
    REQUIRE(f->entries().size() == o.tensors.size());
    REQUIRE(f->metadata() == o.metadata);
  }
}

std::vector<std::byte> with_header(const std::string& header, std::span<const std::byte> data) {
  return raw_file(header, data);
}

// One random edit of the parsed header: offsets, shapes, dtypes, fields,
// entries or metadata set to values chosen to sit on or near the limits.
std::string edit_header(const Original& o, std::mt19937_64& rng) {
  ordered_json h = ordered_json::parse(o.header());
  std::vector<std::string> names;
  for (auto& [k, v] : h.items())
    if (k != "__metadata__") names.push_back(k);
  auto pick = [&](auto& v) -> decltype(auto) { return v[rng() % v.size()]; };
  std::string name = pick(names);
  ordered_json& e = h[name];
  uint64_t data_len = o.data().size();
  uint64_t cur = e["data_offsets"][rng() % 2].get<uint64_t>();
  std::vector<ordered_json> numbers = {0, 1, cur - 1, cur + 1, cur + 2, cur + 4, cur + 8, cur - 8, data_len,
                                       data_len + 1, int64_t{-1}, uint64_t{1} << 63, ~uint64_t{0},
                                       (uint64_t{1} << 63) - 1, uint64_t{1} << 32, rng() % 256, rng()};
  switch (rng() % 10) {
    case 0:
    case 1: e["data_offsets"][rng() % 2] = pick(numbers); break;
    case 2: {
      auto& shape = e["shape"];
      if (shape.empty() || rng() % 3 == 0) shape.push_back(pick(numbers));
      else shape[rng() % shape.size()] = pick(numbers);
      break;
    }
    case 3: {
      std::vector<ordered_json> odd = {ordered_json::array(), -3, 1.5, "3", nullptr, ordered_json::array({2, 3}),
                                       ordered_json::array({3, 2}), ordered_json::array({6}),
                                       ordered_json::array({1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1})};
      e["shape"] = pick(odd);
      break;
    }
    case 4: {
      std::vector<ordered_json> codes = {"F32", "F64", "F16", "BF16", "I64", "I32", "BOOL", "F8_E5M2", "U8",
                                         "I8",  "",    "f32", 3,     nullptr};
      e["dtype"] = pick(codes);
      break;
    }
    case 5: {
      std::vector<std::string> fields = {"dtype", "shape", "data_offsets"};
      e.erase(pick(fields));
      break;
    }
    case 6: e[rng() % 2 ? "extra" : "strides"] = ordered_json::array({1}); break;
    case 7: h.erase(name); break;
    case 8: {  // swap two entries' offsets
      std::string other = pick(names);
      std::swap(e["data_offsets"], h[other]["data_offsets"]);
      break;
    }
    case 9: {
      std::vector<ordered_json> meta = {7, "x", ordered_json::array(), ordered_json::object({{"k", 1}}),
                                        ordered_json::object({{"k", ordered_json::object()}}),
                                        ordered_json::object()};
      h["__metadata__"] = pick(meta);
      break;
    }
  }
  std::string text = h.dump();
  if (rng() % 2) text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

}  // namespace

TEST_CASE("2000+ mutated files load bit-identically or raise CheckpointError, never crash") {
  const uint64_t seed = seed_for_run();
  std::fprintf(stderr, "mutation test seed: %llu (TESSEL_MUTATION_SEED=%llu replays it)\n",
               static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed));
  INFO("TESSEL_MUTATION_SEED=" << seed);
  std::mt19937_64 rng(seed);
  const Original o = make_original();
  Stats stats;

  // The original itself, as a baseline.
  check_mutant(o.bytes, o, stats, Expect::must_parse_with_original_layout);

  // Truncation at every byte: always an error.
  for (size_t n = 0; n < o.bytes.size(); ++n) {
    INFO("truncated to " << n);
    CHECK_THROWS_AS(st::parse(std::span(o.bytes).first(n)), tessel::CheckpointError);
    ++stats.files;
  }

  // Single bit flips anywhere; in the data section they must load, with
  // only the flipped tensor changed.
  const size_t data_start = 8 + o.header_len;
  for (int i = 0; i < 1200; ++i) {
    std::vector<std::byte> m = o.bytes;
    size_t pos = rng() % m.size();
    m[pos] ^= std::byte(1u << (rng() % 8));
    INFO("bit flip at byte " << pos);
    if (pos >= data_start) check_mutant(m, o, stats, Expect::must_parse_with_original_layout, {pos - data_start});
    else check_mutant(m, o, stats);
  }

  // Bursts of 2-8 flips, header only and anywhere.
  for (int i = 0; i < 300; ++i) {
    std::vector<std::byte> m = o.bytes;
    size_t limit = i % 2 ? data_start : m.size();
    std::set<size_t> data_flips;
    for (int k = 2 + static_cast<int>(rng() % 7); k > 0; --k) {
      size_t pos = rng() % limit;
      m[pos] ^= std::byte(1u << (rng() % 8));
      if (pos >= data_start) data_flips.insert(pos - data_start);
    }
    check_mutant(m, o, stats, Expect::error_or_consistent, data_flips);
  }

  // Edited JSON (offsets, shapes, dtypes, fields, entries, metadata), with
  // the length field fixed up, or left stale a third of the time.
  for (int i = 0; i < 700; ++i) {
    std::string header = edit_header(o, rng);
    INFO("edited header: " << header);
    std::vector<std::byte> m = with_header(header, o.data());
    if (i % 3 == 0) {
      for (int b = 0; b < 8; ++b) m[b] = o.bytes[b];
    }
    check_mutant(m, o, stats);
  }

  // Edited length field.
  const uint64_t n = o.header_len;
  std::vector<uint64_t> lengths = {0, 1, 7, 8, n - 8, n - 1, n + 1, n + 8, o.bytes.size() - 8, o.bytes.size() - 7,
                                   100'000'000, 100'000'001, uint64_t{1} << 32, uint64_t{1} << 63, ~uint64_t{0}};
  while (lengths.size() < 120) lengths.push_back(rng() % (2 * o.bytes.size()));
  for (uint64_t len : lengths) {
    std::vector<std::byte> m = o.bytes;
    for (int b = 0; b < 8; ++b) m[b] = std::byte((len >> (8 * b)) & 0xff);
    INFO("header length " << len);
    check_mutant(m, o, stats);
  }

  std::fprintf(stderr, "mutation test: %zu files, %zu loaded, %zu rejected\n", stats.files, stats.parsed,
               stats.rejected);
  CHECK(stats.files >= 2000);
  CHECK(stats.parsed > 0);
  CHECK(stats.rejected > 0);
}
