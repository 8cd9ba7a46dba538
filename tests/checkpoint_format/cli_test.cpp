// tessel-ckpt run as a user would: ls, verify and diff on real files.
#include <sys/wait.h>

#include <cstdio>

#include "ckpt_test_util.h"

using namespace ckpt_test;
namespace st = tessel::safetensors;

namespace {

struct Run {
  int code;
  std::string out;  // stdout and stderr together
};

Run tool(const std::string& args) {
  std::string cmd = fmt::format("'{}' {} 2>&1", TESSEL_CKPT_TOOL, args);
  std::FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p);
  Run r{0, {}};
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) r.out.append(buf, n);
  int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

std::string q(const fs::path& p) { return "'" + p.string() + "'"; }

template <class T>
std::vector<std::byte> as_bytes_of(std::initializer_list<T> values) {
  std::vector<std::byte> out(values.size() * sizeof(T));
  std::memcpy(out.data(), std::data(values), out.size());
  return out;
}

}  // namespace

TEST_CASE("tessel-ckpt ls shows names, dtypes, shapes, sizes, aliases and metadata") {
  TempDir dir;
  std::vector<Owned> ts = {{"0.weight", DType::f32, {2, 3}, zeros(24)}, {"0.bias", DType::bf16, {3}, zeros(6)}};
  st::write_file(dir.path / "m.safetensors", views(ts),
                 {{"format", "pt"}, {"tessel.aliases", R"({"2.weight":"0.weight"})"}});
  Run r = tool("ls " + q(dir.path / "m.safetensors"));
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("0.weight  F32    [2, 3]  24"));
  CHECK_THAT(r.out, Catch::Contains("0.bias    BF16   [3]     6"));
  CHECK_THAT(r.out, Catch::Contains("2 tensors, 30 bytes"));
  CHECK_THAT(r.out, Catch::Contains("aliases:\n  2.weight -> 0.weight"));
  CHECK_THAT(r.out, Catch::Contains("metadata:\n  format = pt"));
}

TEST_CASE("tessel-ckpt verify: exit 0 with a summary, exit 1 with the broken rule") {
  TempDir dir;
  std::vector<Owned> ts = {{"a", DType::i64, {2}, zeros(16)}, {"b", DType::b8, {}, zeros(1)}};
  auto good = dir.path / "good.safetensors";
  st::write_file(good, views(ts), {});
  Run ok = tool("verify " + q(good));
  CHECK(ok.code == 0);
  CHECK(ok.out == "ok: 2 tensors, 17 bytes\n");

  auto bad = dir.path / "bad.safetensors";
  write_all(bad, raw_file(R"({"0.weight":{"dtype":"F32","shape":[2,3],"data_offsets":[0,12]}})", zeros(12)));
  Run r = tool("verify " + q(bad));
  CHECK(r.code == 1);
  CHECK_THAT(r.out, Catch::Contains("tensor '0.weight'") && Catch::Contains("(rule: size)"));

  Run missing = tool("verify " + q(dir.path / "nope.safetensors"));
  CHECK(missing.code == 1);
  CHECK_THAT(missing.out, Catch::Contains("(rule: io)"));

  // Truncated copies of a valid file, and aliases pointing nowhere.
  auto bytes = read_all(good);
  for (size_t n : {size_t{0}, size_t{5}, size_t{12}, bytes.size() - 1}) {
    write_all(bad, std::span(bytes).first(n));
    Run t = tool("verify " + q(bad));
    CHECK(t.code == 1);
    CHECK_THAT(t.out, Catch::Contains("(rule: "));
  }
  st::write_file(bad, views(ts), {{"tessel.aliases", R"({"c":"zzz"})"}});
  Run al = tool("verify " + q(bad));
  CHECK(al.code == 1);
  CHECK_THAT(al.out, Catch::Contains("(rule: aliases)") && Catch::Contains("'zzz'"));
}

TEST_CASE("tessel-ckpt diff reports per-tensor max abs difference, in double, for every dtype") {
  TempDir dir;
  std::vector<Owned> a = {
      {"f32", DType::f32, {3}, as_bytes_of<float>({1.0f, 2.0f, 3.0f})},
      {"f16", DType::f16, {2}, as_bytes_of<uint16_t>({tessel::f32_to_f16(1.0f), tessel::f32_to_f16(0.5f)})},
      {"bf16", DType::bf16, {1}, as_bytes_of<uint16_t>({tessel::f32_to_bf16(2.0f)})},
      {"i64", DType::i64, {2}, as_bytes_of<int64_t>({INT64_MIN, 0})},
      {"mask", DType::b8, {2}, as_bytes_of<uint8_t>({1, 0})},
      {"same", DType::i32, {2}, as_bytes_of<int32_t>({7, -7})},
      {"shape", DType::f32, {2}, zeros(8)},
      {"cast", DType::f32, {1}, as_bytes_of<float>({1.5f})},
      {"only_a", DType::f64, {}, zeros(8)},
  };
  std::vector<Owned> b = {
      {"f32", DType::f32, {3}, as_bytes_of<float>({1.0f, 2.5f, 3.0f})},
      {"f16", DType::f16, {2}, as_bytes_of<uint16_t>({tessel::f32_to_f16(1.0f), tessel::f32_to_f16(-0.25f)})},
      {"bf16", DType::bf16, {1}, as_bytes_of<uint16_t>({tessel::f32_to_bf16(-6.0f)})},
      {"i64", DType::i64, {2}, as_bytes_of<int64_t>({INT64_MAX, 0})},
      {"mask", DType::b8, {2}, as_bytes_of<uint8_t>({1, 1})},
      {"same", DType::i32, {2}, as_bytes_of<int32_t>({7, -7})},
      {"shape", DType::f32, {1, 2}, zeros(8)},
      {"cast", DType::f16, {1}, as_bytes_of<uint16_t>({tessel::f32_to_f16(1.0f)})},
      {"only_b", DType::i32, {}, zeros(4)},
  };
  st::write_file(dir.path / "a.safetensors", views(a), {});
  st::write_file(dir.path / "b.safetensors", views(b), {});

  Run r = tool("diff " + q(dir.path / "a.safetensors") + " " + q(dir.path / "b.safetensors"));
  INFO(r.out);
  CHECK(r.code == 1);
  CHECK_THAT(r.out, Catch::Contains("f32: max abs diff 0.5\n"));
  CHECK_THAT(r.out, Catch::Contains("f16: max abs diff 0.75\n"));
  CHECK_THAT(r.out, Catch::Contains("bf16: max abs diff 8\n"));
  CHECK_THAT(r.out, Catch::Contains("i64: max abs diff 1.8446744073709552e+19\n"));
  CHECK_THAT(r.out, Catch::Contains("mask: max abs diff 1\n"));
  CHECK_THAT(r.out, Catch::Contains("same: max abs diff 0\n"));
  CHECK_THAT(r.out, Catch::Contains("shape: shape differs: [2] vs [1, 2]\n"));
  CHECK_THAT(r.out, Catch::Contains("cast: dtype differs: F32 vs F16, max abs diff 0.5\n"));
  CHECK_THAT(r.out, Catch::Contains("only_a: only in A\n"));
  CHECK_THAT(r.out, Catch::Contains("only_b: only in B\n"));
  CHECK_THAT(r.out, Catch::Contains("8 tensors in both compared, 7 differ; 1 only in A, 1 only in B; metadata equal"));

  Run same = tool("diff " + q(dir.path / "a.safetensors") + " " + q(dir.path / "a.safetensors"));
  CHECK(same.code == 0);
  CHECK_THAT(same.out, Catch::Contains("9 tensors in both compared, 0 differ; 0 only in A, 0 only in B; metadata equal"));

  // No common keys: nothing was compared, and the counts say so.
  std::vector<Owned> c = {{"x", DType::f32, {1}, zeros(4)}, {"y", DType::f32, {1}, zeros(4)}};
  st::write_file(dir.path / "c.safetensors", views(c), {});
  Run disjoint = tool("diff " + q(dir.path / "a.safetensors") + " " + q(dir.path / "c.safetensors"));
  CHECK(disjoint.code == 1);
  CHECK_THAT(disjoint.out, Catch::Contains("0 tensors in both compared, 0 differ; 9 only in A, 2 only in B; metadata equal"));

  write_all(dir.path / "bad.safetensors", zeros(3));
  Run bad = tool("diff " + q(dir.path / "a.safetensors") + " " + q(dir.path / "bad.safetensors"));
  CHECK(bad.code == 2);
  CHECK_THAT(bad.out, Catch::Contains("(rule: file-size)"));
}

TEST_CASE("tessel-ckpt without a subcommand prints usage and fails") {
  Run r = tool("");
  CHECK(r.code != 0);
  CHECK_THAT(r.out, Catch::Contains("ls") && Catch::Contains("verify") && Catch::Contains("diff"));
}
