// Round trips through the safetensors layer, and files written by hand the
// way Python's writer lays them out.
#include <sys/stat.h>

#include "ckpt_test_util.h"
#include "runtime/atomic_file.h"

using namespace ckpt_test;
namespace st = tessel::safetensors;

namespace {

// Every dtype in every awkward shape: 0-d, empty, empty in the middle, plain.
std::vector<Owned> every_dtype(std::mt19937_64& rng) {
  std::vector<Owned> ts;
  const std::vector<std::vector<int64_t>> shapes = {{}, {0}, {3, 0, 2}, {5}, {2, 3, 4}};
  for (DType d : tessel::kAllDTypes)
    for (size_t s = 0; s < shapes.size(); ++s)
      ts.push_back(random_tensor(fmt::format("{}.{}", tessel::dtype_name(d), s), d, shapes[s], rng));
  return ts;
}

void check_same(const st::File& f, const std::vector<Owned>& expected) {
  REQUIRE(f.entries().size() == expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    const TensorView& got = f.entries()[i];  // data laid out in the given order
    INFO(expected[i].name);
    CHECK(got.name == expected[i].name);
    CHECK(got.dtype == expected[i].dtype);
    CHECK(got.shape == expected[i].shape);
    CHECK(same_bytes(got, expected[i].bytes));
    const TensorView* found = f.find(expected[i].name);
    REQUIRE(found != nullptr);
    CHECK(found->data == got.data);
  }
}

}  // namespace

TEST_CASE("every dtype, 0-d and empty tensors and metadata round-trip bit-exactly through a file") {
  std::mt19937_64 rng(1);
  TempDir dir;
  auto ts = every_dtype(rng);
  std::map<std::string, std::string> meta = {{"format", "pt"}, {"tessel.kind", "dict"}, {"note", "ünïcode \"q\"\n"}};
  auto path = dir.path / "all.safetensors";
  st::write_file(path, views(ts), meta);

  st::File f = st::open(path);
  check_same(f, ts);
  CHECK(f.metadata() == meta);
  CHECK_FALSE(f.mapped());
  CHECK(f.find("missing") == nullptr);
  CHECK((8 + f.header_bytes()) % 8 == 0);

  auto bytes = read_all(path);
  CHECK(bytes == st::serialize(views(ts), meta));
  check_same(st::parse(bytes), ts);
}

TEST_CASE("a file with no tensors and no metadata round-trips") {
  TempDir dir;
  st::write_file(dir.path / "empty.safetensors", {}, {});
  st::File f = st::open(dir.path / "empty.safetensors");
  CHECK(f.entries().empty());
  CHECK(f.metadata().empty());
  CHECK(f.data_bytes() == 0);
}

TEST_CASE("files of 1 MiB or more are memory-mapped and read back exactly") {
  std::mt19937_64 rng(2);
  TempDir dir;
  std::vector<Owned> ts = {random_tensor("big", DType::f32, {3, 100'000}, rng),
                           random_tensor("small", DType::bf16, {7}, rng)};
  st::write_file(dir.path / "big.safetensors", views(ts), {});
  st::File f = st::open(dir.path / "big.safetensors");
  CHECK(f.mapped());
  check_same(f, ts);

  st::File copy = f;  // copies share the mapping
  f = st::open(dir.path / "big.safetensors");
  check_same(copy, ts);
}

TEST_CASE("a hand-built file laid out like Python's writer loads") {
  // What safetensors.torch.save_file writes for {"weight": [[1, 2], [3, 4]], "bias": [0.5, -1]}
  // (float32), plus an int64 step and a bool mask: metadata first, compact
  // JSON, header padded with spaces to 8 bytes, keys not in data order.
  std::string header = padded(
      R"({"__metadata__":{"format":"pt"},)"
      R"("bias":{"dtype":"F32","shape":[2],"data_offsets":[16,24]},)"
      R"("mask":{"dtype":"BOOL","shape":[3],"data_offsets":[40,43]},)"
      R"("step":{"dtype":"I64","shape":[],"data_offsets":[24,32]},)"
      R"("halves":{"dtype":"BF16","shape":[2,2],"data_offsets":[32,40]},)"
      R"("weight":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})");
  REQUIRE(header.size() % 8 == 0);
  REQUIRE(header.back() == ' ');
  const unsigned char data[] = {
      0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x40, 0x40, 0x00, 0x00, 0x80, 0x40,  // 1 2 3 4
      0x00, 0x00, 0x00, 0x3f, 0x00, 0x00, 0x80, 0xbf,                                                  // 0.5 -1
      0x2a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,                                                  // 42
      0x80, 0x3f, 0x00, 0x40, 0x40, 0x40, 0x80, 0xc0,                                                  // bf16 1 2 3 -4
      0x01, 0x00, 0x01,                                                                                // mask
  };
  auto bytes = raw_file(header, std::as_bytes(std::span(data)));

  st::File f = st::parse(bytes, "python.safetensors");
  CHECK(f.metadata() == std::map<std::string, std::string>{{"format", "pt"}});
  REQUIRE(f.entries().size() == 5);
  std::vector<std::string> order;
  for (const auto& e : f.entries()) order.push_back(e.name);
  CHECK(order == std::vector<std::string>{"weight", "bias", "step", "halves", "mask"});

  const TensorView* w = f.find("weight");
  REQUIRE(w);
  CHECK(w->dtype == DType::f32);
  CHECK(w->shape == std::vector<int64_t>{2, 2});
  float wv[4];
  std::memcpy(wv, w->data, 16);
  CHECK(wv[0] == 1.0f);
  CHECK(wv[3] == 4.0f);
  float bv[2];
  std::memcpy(bv, f.find("bias")->data, 8);
  CHECK(bv[0] == 0.5f);
  CHECK(bv[1] == -1.0f);
  int64_t step;
  std::memcpy(&step, f.find("step")->data, 8);
  CHECK(step == 42);
  CHECK(f.find("step")->shape.empty());
  uint16_t hv[4];
  std::memcpy(hv, f.find("halves")->data, 8);
  CHECK(tessel::bf16_to_f32(hv[3]) == -4.0f);
  CHECK(f.find("mask")->dtype == DType::b8);
  CHECK(std::to_integer<int>(f.find("mask")->data[2]) == 1);

  // Other writers do not pad; that is valid too.
  std::string unpadded = R"({"x":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})";
  REQUIRE(unpadded.size() % 8 != 0);
  auto b2 = raw_file(unpadded, zeros(4));
  CHECK(st::parse(b2).entries().size() == 1);
}

TEST_CASE("our header is compact JSON with metadata first, padded with spaces") {
  Owned t{"0.weight", DType::f32, {2}, zeros(8)};
  auto tv = t.view();
  auto bytes = st::serialize({&tv, 1}, {{"format", "pt"}});
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | std::to_integer<uint64_t>(bytes[i]);
  std::string header(reinterpret_cast<const char*>(bytes.data() + 8), n);
  std::string expected = R"({"__metadata__":{"format":"pt"},"0.weight":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  CHECK(header.substr(0, expected.size()) == expected);
  CHECK(header.find_first_not_of(' ', expected.size()) == std::string::npos);
  CHECK((8 + n) % 8 == 0);
}

TEST_CASE("dtype codes map both ways") {
  for (DType d : tessel::kAllDTypes) CHECK(st::dtype_from_code(st::dtype_code(d)) == d);
  CHECK(st::dtype_code(DType::b8) == "BOOL");
  CHECK_FALSE(st::dtype_from_code("U8").has_value());
  CHECK_FALSE(st::dtype_from_code("f32").has_value());
}

TEST_CASE("saving refuses tensors the format cannot hold") {
  TempDir dir;
  auto path = dir.path / "bad.safetensors";
  auto rejects = [&](std::vector<TensorView> ts, std::string_view rule) {
    try {
      st::write_file(path, ts, {});
      FAIL("saved");
    } catch (const tessel::CheckpointError& e) {
      CHECK_THAT(e.what(), Catch::Contains(fmt::format("(rule: {})", rule)));
    }
    CHECK_FALSE(fs::exists(path));
  };
  std::vector<std::byte> eight = zeros(8);
  rejects({{"a", DType::f32, {3}, eight.data(), 8}}, "size");
  rejects({{"a", DType::f32, {2}, eight.data(), 8}, {"a", DType::f32, {2}, eight.data(), 8}}, "duplicate-key");
  rejects({{"__metadata__", DType::f32, {2}, eight.data(), 8}}, "name");
  rejects({{"a", DType::f32, {-2}, eight.data(), 8}}, "shape");
  rejects({{"a", DType::f32, std::vector<int64_t>(17, 1), eight.data(), 4}}, "shape");
  rejects({{"a", DType::f32, {int64_t{1} << 62, 8}, eight.data(), 8}}, "overflow");
  rejects({{"a", DType::f32, {2}, nullptr, 8}}, "data");
  rejects({{"bad\xff", DType::f32, {2}, eight.data(), 8}}, "utf8");
  CHECK(fs::is_empty(dir.path));  // no temp file left behind
}

TEST_CASE("atomic writes keep the old mode, default to 0644 and clean up on failure") {
  TempDir dir;
  auto target = dir.path / "m.bin";
  std::vector<std::byte> v1 = to_bytes("first"), v2 = to_bytes("second version");
  auto put = [&](const std::vector<std::byte>& v) {
    std::span<const std::byte> parts[] = {std::span(v).first(2), std::span(v).subspan(2)};
    tessel::write_file_atomically(target, parts);
  };

  mode_t old_mask = ::umask(022);
  put(v1);
  ::umask(old_mask);
  CHECK(read_all(target) == v1);
  CHECK((fs::status(target).permissions() & fs::perms::all) == static_cast<fs::perms>(0644));

  fs::permissions(target, static_cast<fs::perms>(0600));
  put(v2);
  CHECK(read_all(target) == v2);
  CHECK((fs::status(target).permissions() & fs::perms::all) == static_cast<fs::perms>(0600));

  // A writer that throws: the exception passes through, the old file stays.
  CHECK_THROWS_AS(tessel::write_file_atomically(target, [](std::FILE* f) {
                    std::fputs("partial", f);
                    throw std::runtime_error("disk on fire");
                  }),
                  std::runtime_error);
  CHECK(read_all(target) == v2);
  size_t files = 0;
  for ([[maybe_unused]] auto& e : fs::directory_iterator(dir.path)) ++files;
  CHECK(files == 1);

  // A folder that does not exist: the error names the path and errno text.
  try {
    tessel::write_file_atomically(dir.path / "nope" / "m.bin", [](std::FILE*) {});
    FAIL("wrote into a missing folder");
  } catch (const tessel::CheckpointError& e) {
    CHECK_THAT(e.what(), Catch::Contains("nope") && Catch::Contains("No such file or directory"));
  }
}
