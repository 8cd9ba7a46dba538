// One test per validation rule: each broken rule raises CheckpointError
// naming the rule and the offending key.
#include <sys/stat.h>

#include "ckpt_test_util.h"

using namespace ckpt_test;
namespace st = tessel::safetensors;

namespace {

// A header with one entry `name` whose fields are given as raw JSON text.
std::vector<std::byte> one_entry(std::string_view fields, size_t data_bytes, std::string_view name = "0.weight") {
  return raw_file(fmt::format(R"({{"{}":{{{}}}}})", name, fields), zeros(data_bytes));
}

std::vector<std::byte> with_length(uint64_t n, std::string_view rest) {
  std::vector<std::byte> out;
  put_le64(out, n);
  auto r = to_bytes(rest);
  out.insert(out.end(), r.begin(), r.end());
  return out;
}

}  // namespace

TEST_CASE("rule io: a missing file, a folder or a FIFO is reported, not crashed or hung on") {
  TempDir dir;
  REQUIRE(::mkfifo((dir.path / "fifo").c_str(), 0600) == 0);
  for (auto p : {dir.path / "missing.safetensors", dir.path, dir.path / "fifo"}) {
    try {
      st::open(p);
      FAIL("opened " << p);
    } catch (const tessel::CheckpointError& e) {
      CHECK_THAT(e.what(), Catch::Contains("(rule: io)") && Catch::Contains(p.string()));
    }
  }
}

TEST_CASE("rule file-size: a file shorter than the 8-byte length") {
  for (size_t n = 0; n < 8; ++n) CHECK_RULE(zeros(n), "file-size", "file");
}

TEST_CASE("rule header-length: zero, over 100 MB, or past the end of the file") {
  CHECK_RULE(with_length(0, "{}"), "header-length", "header length is 0");
  CHECK_RULE(with_length(100'000'001, "{}"), "header-length", "100000001");
  CHECK_RULE(with_length(~uint64_t{0}, "{}"), "header-length", "18446744073709551615");
  CHECK_RULE(with_length(3, "{}"), "header-length", "runs past the end");
}

TEST_CASE("rule utf8: the header must be valid UTF-8") {
  CHECK_RULE(raw_file("{\"a\xff\":1}"), "utf8", "byte 3");
  CHECK_RULE(raw_file("{\"\xc0\xaf\":1}"), "utf8", "header");          // overlong '/'
  CHECK_RULE(raw_file("{\"\xed\xa0\x80\":1}"), "utf8", "header");      // surrogate
  CHECK_RULE(raw_file("{\"\xf4\x90\x80\x80\":1}"), "utf8", "header");  // past U+10FFFF
  CHECK_RULE(raw_file("{\"\xe2\x82"), "utf8", "header");                // cut short
  // Valid multi-byte names are fine.
  auto ok = one_entry(R"("dtype":"F32","shape":[],"data_offsets":[0,4])", 4, "gewicht-ä-€-𝄞");
  CHECK(st::parse(ok).find("gewicht-ä-€-𝄞") != nullptr);
}

TEST_CASE("rule json: the header must be JSON") {
  CHECK_RULE(raw_file(R"({"a":)"), "json", "header");
  CHECK_RULE(raw_file(R"({"a":{}} x)"), "json", "not valid JSON");
  CHECK_RULE(raw_file(std::string("{}\0\0", 4)), "json", "NUL byte at header byte 2");  // not whitespace
  CHECK_RULE(raw_file(std::string("{}\0{\"x\":", 7)), "json", "header");
  CHECK_RULE(raw_file(R"({'a':1})"), "json", "header");
  // A syntax error wins over an earlier broken field.
  CHECK_RULE(raw_file(R"({"a":{"dtype":"F99"}, oops})"), "json", "header");
}

TEST_CASE("rule header-object: the header must be a JSON object") {
  CHECK_RULE(raw_file("[1, 2]"), "header-object", "a list");
  CHECK_RULE(raw_file(R"("text")"), "header-object", "a string");
  CHECK_RULE(raw_file("42"), "header-object", "header");
  CHECK_RULE(raw_file("null"), "header-object", "header");
}

TEST_CASE("rule duplicate-key: no key twice, at any level") {
  const char* entry = R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
  CHECK_RULE(raw_file(fmt::format(R"({{"w":{},"w":{}}})", entry, entry), zeros(4)), "duplicate-key", "'w'");
  CHECK_RULE(one_entry(R"("dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4])", 4), "duplicate-key",
             "tensor '0.weight': field 'dtype'");
  CHECK_RULE(raw_file(R"({"__metadata__":{"k":"a","k":"b"}})"), "duplicate-key", "metadata key 'k'");
  CHECK_RULE(raw_file(R"({"__metadata__":{},"__metadata__":{}})"), "duplicate-key", "__metadata__");
}

TEST_CASE("rule entry: each tensor is an object with exactly dtype, shape, data_offsets") {
  CHECK_RULE(raw_file(R"({"0.weight":[1,2]})"), "entry", "tensor '0.weight': entry is a list");
  CHECK_RULE(raw_file(R"({"0.weight":7})"), "entry", "tensor '0.weight'");
  CHECK_RULE(one_entry(R"("dtype":"F32","data_offsets":[0,4])", 4), "entry", "tensor '0.weight': missing field 'shape'");
  CHECK_RULE(one_entry(R"("shape":[1],"data_offsets":[0,4])", 4), "entry", "missing field 'dtype'");
  CHECK_RULE(one_entry(R"("dtype":"F32","shape":[1])", 4), "entry", "missing field 'data_offsets'");
  CHECK_RULE(one_entry(R"("dtype":"F32","shape":[1],"data_offsets":[0,4],"stride":[1])", 4), "entry",
             "tensor '0.weight': unexpected field 'stride'");
}

TEST_CASE("rule dtype: only F32 F64 F16 BF16 I64 I32 BOOL") {
  CHECK_RULE(one_entry(R"("dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1])", 1), "dtype",
             "tensor '0.weight': unknown dtype 'F8_E4M3'");
  CHECK_RULE(one_entry(R"("dtype":"f32","shape":[1],"data_offsets":[0,4])", 4), "dtype", "'f32'");
  CHECK_RULE(one_entry(R"("dtype":4,"shape":[1],"data_offsets":[0,4])", 4), "dtype", "not a string");
}

TEST_CASE("rule shape: a list of at most 16 non-negative integers") {
  CHECK_RULE(one_entry(R"("dtype":"F32","shape":3,"data_offsets":[0,12])", 12), "shape", "tensor '0.weight'");
  CHECK_RULE(one_entry(R"("dtype":"F32","shape":[-3],"data_offsets":[0,12])", 12), "shape", "negative number -3");
  CHECK_RULE(one_entry(R"("dtype":"F32","shape":[1.5],"data_offsets":[0,12])", 12), "shape", "'1.5'");
  CHECK_RULE(one_entry(R"("dtype":"F32","shape":[3e0],"data_offsets":[0,12])", 12), "shape", "0.weight");
  CHECK_RULE(one_entry(R"("dtype":"F32","shape":["3"],"data_offsets":[0,12])", 12), "shape", "a string");
  CHECK_RULE(one_entry(R"("dtype":"F32","shape":[[3]],"data_offsets":[0,12])", 12), "shape", "a list");
  CHECK_RULE(one_entry(R"("dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,0])", 0), "shape",
             "too large");
  CHECK_RULE(one_entry(R"("dtype":"F32","shape":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],"data_offsets":[0,4])", 4),
             "shape", "more than 16");
  // Rank 16 exactly, and -0, are fine.
  CHECK_NOTHROW(st::parse(one_entry(R"("dtype":"F32","shape":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,-0],"data_offsets":[0,0])", 0)));
}

TEST_CASE("rule overflow: product(shape) x dtype size must fit in 64 bits") {
  CHECK_RULE(one_entry(R"("dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0])", 0), "overflow",
             "tensor '0.weight'");
  CHECK_RULE(one_entry(R"("dtype":"BOOL","shape":[4294967296,4294967296],"data_offsets":[0,0])", 0), "overflow",
             "0.weight");
  // A zero dimension makes any shape empty: no overflow, zero bytes.
  auto f = st::parse(one_entry(R"("dtype":"F64","shape":[9223372036854775807,0,9223372036854775807],"data_offsets":[0,0])", 0));
  CHECK(f.entries().at(0).nbytes == 0);
}

TEST_CASE("rule data-offsets: two non-negative integers, begin <= end") {
  CHECK_RULE(one_entry(R"("dtype":"F32","shape":[1],"data_offsets":[4])", 4), "data-offsets", "1 values, not two");
  CHECK_RULE(one_entry(R"("dtype":"F32","shape":[1],"data_offsets":[0,4,8])", 4), "data-offsets", "more than two");
  CHECK_RULE(one_entry(R"("dtype":"F32","shape":[0],"data_offsets":[4,0])", 4), "data-offsets",
             "tensor '0.weight': data_offsets [4, 0] begins after it ends");
  CHECK_RULE(one_entry(R"("dtype":"F32","shape":[1],"data_offsets":[-4,0])", 4), "data-offsets", "negative");
  CHECK_RULE(one_entry(R"("dtype":"F32","shape":[1],"data_offsets":[0,4.0])", 4), "data-offsets", "0.weight");
  CHECK_RULE(one_entry(R"("dtype":"F32","shape":[1],"data_offsets":"0-4")", 4), "data-offsets", "0.weight");
  CHECK_RULE(one_entry(R"("dtype":"F32","shape":[1],"data_offsets":[0,18446744073709551616])", 4), "data-offsets",
             "0.weight");
}

TEST_CASE("rule size: data_offsets must hold exactly product(shape) x dtype size bytes") {
  auto bytes = one_entry(R"("dtype":"F32","shape":[2,3],"data_offsets":[0,12])", 12);
  CHECK(parse_error(bytes, "x.safetensors") ==
        "checkpoint 'x.safetensors': tensor '0.weight': data_offsets [0, 12] hold 12 bytes but dtype F32 shape "
        "[2, 3] needs 24 (rule: size)");
  CHECK_RULE(one_entry(R"("dtype":"BF16","shape":[],"data_offsets":[0,4])", 4), "size", "0.weight");
}

TEST_CASE("rule contiguous: data sorted by offset from 0 without gaps or overlaps") {
  const char* a = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  CHECK_RULE(raw_file(fmt::format(R"({{{},"b":{{"dtype":"F32","shape":[2],"data_offsets":[16,24]}}}})", a), zeros(24)),
             "contiguous", "tensor 'b': data begins at 16 but tensor 'a' ends at 8 (a gap)");
  CHECK_RULE(raw_file(fmt::format(R"({{{},"b":{{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}}})", a), zeros(12)),
             "contiguous", "an overlap");
  CHECK_RULE(one_entry(R"("dtype":"F32","shape":[1],"data_offsets":[4,8])", 8), "contiguous",
             "tensor '0.weight': data begins at 4 but the data section starts at 0");
  CHECK_RULE(raw_file(fmt::format(R"({{{},"b":{{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}}})", a), zeros(16)),
             "contiguous", "tensor 'b'");
}

TEST_CASE("rule file-end: the data ends exactly at the end of the file") {
  CHECK_RULE(one_entry(R"("dtype":"F32","shape":[2],"data_offsets":[0,8])", 9), "file-end",
             "tensor '0.weight': tensor data ends at 8 but the data section holds 9 bytes");
  CHECK_RULE(one_entry(R"("dtype":"F32","shape":[2],"data_offsets":[0,8])", 7), "file-end", "0.weight");
  CHECK_RULE(raw_file("{}", zeros(1)), "file-end", "file");
  CHECK_RULE(one_entry(R"("dtype":"F32","shape":[2305843009213693952],"data_offsets":[0,9223372036854775808])", 16),
             "file-end", "0.weight");
}

TEST_CASE("rule metadata: __metadata__ is an object of strings") {
  CHECK_RULE(raw_file(R"({"__metadata__":["a"]})"), "metadata", "__metadata__ is a list");
  CHECK_RULE(raw_file(R"({"__metadata__":{"epoch":3}})"), "metadata", "metadata key 'epoch': value is the number 3");
  CHECK_RULE(raw_file(R"({"__metadata__":{"nested":{"a":"b"}}})"), "metadata", "metadata key 'nested'");
  CHECK_RULE(raw_file(R"({"__metadata__":{"n":null}})"), "metadata", "'n'");
  CHECK(st::parse(raw_file(R"({"__metadata__":{}})")).metadata().empty());
}

TEST_CASE("names in messages are escaped and cut short") {
  std::string name(5000, 'n');
  auto msg = parse_error(one_entry(R"("dtype":"F32","shape":[1],"data_offsets":[0,8])", 8, name + "\\u0001"));
  CHECK(msg.size() < 400);
  CHECK_THAT(msg, Catch::Contains("nnn...'"));
  auto msg2 = parse_error(one_entry(R"("dtype":"F32","shape":[1],"data_offsets":[0,8])", 8, "a\\nb"));
  CHECK_THAT(msg2, Catch::Contains("tensor 'a\\x0ab'"));
}
