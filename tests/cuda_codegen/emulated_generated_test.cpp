// The exact CUDA source the backend generates, executed on the host: the
// kernels of a few hundred random trees go into one file with
// cuda_emulation.h, the host compiler builds it once (-O1, a shared object),
// and every tree is realized through the CUDA backend's step loop with those
// kernels -- on odd sizes (1, 31, 33, 1000003), broadcasts and
// non-contiguous views -- and compared with the ref backend. Each run goes
// through the launch rule the device uses, so both elementwise variants
// (plain, vectorized) and both reduction paths (one pass, split across
// blocks) run; a second pass forces splits down to two-element reductions.
// The copy kernels of in-place writes (cudagen::copy_into) run into strided,
// offset and overlapping destinations.
#include <catch2/catch.hpp>
#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "host_executors.h"
#include "random_trees.h"

using namespace cuda_codegen_test;

namespace {

uint64_t test_seed() {
  const char* e = std::getenv("TESSEL_TEST_SEED");
  return e ? std::strtoull(e, nullptr, 10) : 20240607u;
}

constexpr int kTrees = 240;
const int64_t kSizes[] = {1, 31, 33, 1000003};
// Inner extents the vectorized variant takes (multiples of 4) and one it must not.
const int64_t kVectorSizes[] = {4, 1024, 1000004, 4098};
// [rows, n] reductions along dim 1 (few long rows) and dim 0.
const int64_t kRowShapes[][2] = {{1, 31}, {3, 33}, {2, 1000003}, {5, 4099}, {33, 2}};

// Every case of the run: random trees, fixed 1-D sizes, vector-friendly sizes,
// few-row reductions over non-contiguous views.
Case make_case(uint64_t seed, int i) {
  if (i < kTrees) return TreeGen(seed, i).make(i % 4);
  int j = i - kTrees;
  if (j < 8) return TreeGen(seed, 5000 + j).make_sized(kSizes[j / 2], j % 2 == 1);
  j -= 8;
  if (j < 8) return TreeGen(seed, 6000 + j).make_sized(kVectorSizes[j / 2], false);
  j -= 8;
  if (j < 10) return TreeGen(seed, 7000 + j).make_rows(kRowShapes[j / 2][0], kRowShapes[j / 2][1], j % 2 == 0 ? 1 : 0);
  if (j == 10) return TreeGen(seed, 8000).make_every_unary_op();
  return TreeGen(seed, 8001).make_every_reduction();
}
constexpr int kCases = kTrees + 8 + 8 + 10 + 2;

std::vector<double> values(const NodePtr& n) {
  const BufferView& v = *n->buffer;
  std::vector<double> out;
  const Shape& s = n->shape;
  std::vector<int64_t> idx(s.dims.size(), 0);
  const size_t es = tessel::dtype_size(n->dtype);
  for (int64_t k = 0; k < s.numel(); ++k) {
    int64_t off = 0;
    for (size_t i = 0; i < idx.size(); ++i) off += idx[i] * v.strides[i];
    const std::byte* p = v.bytes(n->dtype) + off * static_cast<int64_t>(es);
    double x = 0;
    switch (n->dtype) {
      case DType::f32: { float f; std::memcpy(&f, p, 4); x = f; break; }
      case DType::f64: std::memcpy(&x, p, 8); break;
      case DType::i64: { int64_t f; std::memcpy(&f, p, 8); x = static_cast<double>(f); break; }
      case DType::i32: { int32_t f; std::memcpy(&f, p, 4); x = f; break; }
      case DType::b8: { uint8_t f; std::memcpy(&f, p, 1); x = f; break; }
      case DType::f16: { uint16_t f; std::memcpy(&f, p, 2); x = tessel::f16_to_f32(f); break; }
      case DType::bf16: { uint16_t f; std::memcpy(&f, p, 2); x = tessel::bf16_to_f32(f); break; }
    }
    out.push_back(x);
    for (size_t i = idx.size(); i-- > 0;) {
      if (++idx[i] < s.dims[i]) break;
      idx[i] = 0;
    }
  }
  return out;
}

// "" when equal: exact for integers and bool; floats within a tolerance
// relative to the tensor's largest magnitude (reductions sum in another order).
std::string compare(const NodePtr& got, const NodePtr& want) {
  std::vector<double> g = values(got), w = values(want);
  if (g.size() != w.size()) return "sizes differ";
  double scale = 1;
  for (double x : w)
    if (std::isfinite(x)) scale = std::max(scale, std::fabs(x));
  const double tol = got->dtype == DType::f64 ? 1e-9 : got->dtype == DType::f32 ? 2e-5 : got->dtype == DType::f16 || got->dtype == DType::bf16 ? 1e-2 : 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(w[i]) && std::isnan(g[i])) continue;
    if (g[i] == w[i]) continue;
    if (std::isfinite(w[i]) && std::fabs(g[i] - w[i]) <= tol * scale) continue;
    return fmt::format("element {} of {}: got {} want {} ({})", i, g.size(), g[i], w[i], tessel::dtype_name(got->dtype));
  }
  return "";
}

// The kernels in a shared object built from the emulation source by the host
// compiler; the source is removed again, the library stays loaded.
void* compile_emulated(const std::map<std::string, tessel::kir::Kernel>& kernels, const std::string& tag) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / fmt::format("tessel_emu_{}_{}", getpid(), tag);
  fs::create_directories(dir);
  std::ofstream(dir / "kernels.cpp") << emulation_source(kernels);
  std::string cmd = fmt::format("{} -std=c++20 -O1 -shared -fPIC -I{} -o {} {} 2> {}", TESSEL_HOST_CXX, TESSEL_EMU_INCLUDE,
                                (dir / "kernels.so").string(), (dir / "kernels.cpp").string(), (dir / "log.txt").string());
  if (std::system(cmd.c_str()) != 0) {
    std::ifstream log(dir / "log.txt");
    std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    FAIL("host compile of the generated kernels failed (" << (dir / "kernels.cpp").string() << "):\n" << text.substr(0, 6000));
  }
  void* so = dlopen((dir / "kernels.so").c_str(), RTLD_NOW | RTLD_LOCAL);
  REQUIRE(so != nullptr);
  fs::remove_all(dir);
  return so;
}

}  // namespace

TEST_CASE("generated CUDA kernels of random trees run in the host emulation and match the ref backend",
          "[emulated-cuda]") {
  const uint64_t seed = test_seed();
  std::printf("emulated generated kernels: seed %llu (TESSEL_TEST_SEED overrides)\n", static_cast<unsigned long long>(seed));
  auto t0 = std::chrono::steady_clock::now();

  // 1. The kernels every case launches.
  CollectExecutor collect;
  for (int i = 0; i < kCases; ++i) {
    Case c = make_case(seed, i);
    INFO(c.what);
    tessel::cudagen::realize_steps(collect, c.roots, false);
  }
  REQUIRE(collect.kernels.size() >= 100);

  // 2. One host compile of all of them.
  void* so = compile_emulated(collect.kernels, fmt::format("trees_{}", seed));
  auto t1 = std::chrono::steady_clock::now();

  // 3. Every case through the emulated kernels, against ref: with the
  // device's split threshold, then splitting every reduction that can be.
  auto run_all = [&](EmulatedExecutor& emu) {
    emu.lookup = [&](const std::string& name) { return dlsym(so, ("emu_" + name).c_str()); };
    int compared = 0;
    for (int i = 0; i < kCases; ++i) {
      Case want = make_case(seed, i), got = make_case(seed, i);
      INFO("case " << i << ": " << got.what);
      tessel::ref_backend().realize(want.roots, false);
      tessel::cudagen::realize_steps(emu, got.roots, false);
      REQUIRE(want.roots.size() == got.roots.size());
      for (size_t r = 0; r < got.roots.size(); ++r) {
        std::string diff = compare(got.roots[r], want.roots[r]);
        if (!diff.empty()) FAIL_CHECK("root " << r << ": " << diff);
      }
      ++compared;
    }
    return compared;
  };
  EmulatedExecutor emu;
  int compared = run_all(emu);
  const int default_launches = emu.launches, default_vector = emu.vector_launches, default_split = emu.split_launches;
  EmulatedExecutor forced;
  forced.limits.split_min_elements = 1;
  int compared_forced = run_all(forced);
  // Deterministic: a split reduction gives the same bits on every run,
  // whichever emulation worker runs which block first.
  for (int i : {kTrees + 7, kTrees + 16 + 4}) {
    Case a = make_case(seed, i), b = make_case(seed, i);
    INFO("case " << i << ": " << a.what);
    int before = emu.split_launches;
    tessel::cudagen::realize_steps(emu, a.roots, false);
    tessel::cudagen::realize_steps(emu, b.roots, false);
    CHECK(emu.split_launches == before + 2);
    std::vector<double> va = values(a.roots[0]), vb = values(b.roots[0]);
    REQUIRE(va.size() == vb.size());
    CHECK(std::memcmp(va.data(), vb.data(), va.size() * sizeof(double)) == 0);
  }
  auto t2 = std::chrono::steady_clock::now();
  std::printf("emulated generated kernels: %d cases, %zu kernels; %d launches (%d vectorized, %d split), forced splits: "
              "%d launches (%d split); host compile %.1f s, run %.1f s\n",
              compared, collect.kernels.size(), default_launches, default_vector, default_split, forced.launches,
              forced.split_launches, std::chrono::duration<double>(t1 - t0).count(),
              std::chrono::duration<double>(t2 - t1).count());
  CHECK(compared == kCases);
  CHECK(compared_forced == kCases);
  // Both variants of each kind ran (the 1000003 sums split even at the device threshold).
  CHECK(default_vector >= 8);
  CHECK(default_launches - default_vector - default_split >= 100);
  CHECK(default_split >= 3);
  CHECK(forced.split_launches >= 40);
  dlclose(so);
}

namespace {

// A view over its own storage of `elems` elements, each holding its index + 0.5 (as t).
BufferView numbered(DType t, int64_t elems, int64_t offset, tessel::Strides strides, double base) {
  BufferView v = host_alloc(t, Shape({elems}));
  for (int64_t i = 0; i < elems; ++i) {
    std::byte* p = static_cast<std::byte*>(v.storage->data()) + i * static_cast<int64_t>(tessel::dtype_size(t));
    const double x = base + static_cast<double>(i) + 0.5;
    if (t == DType::f32) { float f = static_cast<float>(x); std::memcpy(p, &f, 4); }
    else if (t == DType::f64) std::memcpy(p, &x, 8);
    else { int64_t k = static_cast<int64_t>(x); std::memcpy(p, &k, 8); }
  }
  v.offset = offset;
  v.strides = std::move(strides);
  return v;
}

double element(const BufferView& storage_view, DType t, int64_t at) {
  const std::byte* p = static_cast<const std::byte*>(storage_view.storage->data()) + at * static_cast<int64_t>(tessel::dtype_size(t));
  if (t == DType::f32) { float f; std::memcpy(&f, p, 4); return f; }
  if (t == DType::f64) { double d; std::memcpy(&d, p, 8); return d; }
  int64_t k; std::memcpy(&k, p, 8); return static_cast<double>(k);
}

struct CopyCase {
  std::string what;
  DType t;
  Shape s;
  BufferView dst, src;
  int64_t dst_elems;
};

// Destinations: dense, transposed, a stepped window at an offset, 0-d, a long
// dense vector (the vectorized copy); sources dense, transposed, broadcast,
// and the destination's own storage read transposed (overlap).
std::vector<CopyCase> copy_cases() {
  std::vector<CopyCase> c;
  for (DType t : {DType::f32, DType::f64, DType::i64}) {
    const std::string tn(tessel::dtype_name(t));
    c.push_back({tn + " dense <- transposed", t, Shape({33, 31}), numbered(t, 33 * 31, 0, {31, 1}, 1000),
                 numbered(t, 31 * 33, 0, {1, 33}, 0), 33 * 31});
    c.push_back({tn + " transposed <- dense", t, Shape({33, 31}), numbered(t, 31 * 33, 0, {1, 33}, 1000),
                 numbered(t, 33 * 31, 0, {31, 1}, 0), 33 * 31});
    // Every other element of every other row of a [67, 63] buffer, from (1, 1).
    c.push_back({tn + " stepped window <- broadcast row", t, Shape({33, 31}), numbered(t, 67 * 63, 63 + 1, {2 * 63, 2}, 1000),
                 numbered(t, 31, 0, {0, 1}, 0), 67 * 63});
    c.push_back({tn + " 0-d", t, Shape(std::vector<int64_t>{}), numbered(t, 3, 2, {}, 1000), numbered(t, 1, 0, {}, 0), 3});
    c.push_back({tn + " 1000004 dense", t, Shape({1000004}), numbered(t, 1000004, 0, {1}, 1000), numbered(t, 1000004, 0, {1}, 0),
                 1000004});
    BufferView square = numbered(t, 32 * 32, 0, {32, 1}, 0);
    BufferView square_t = square;
    square_t.strides = {1, 32};
    c.push_back({tn + " x.copy_(x.t())", t, Shape({32, 32}), square, square_t, 32 * 32});
  }
  return c;
}

}  // namespace

TEST_CASE("in-place writes into views: the generated copy kernels run in the host emulation", "[emulated-cuda]") {
  CollectExecutor collect;
  for (const CopyCase& c : copy_cases()) tessel::cudagen::copy_into(collect, c.dst, c.src, c.t, c.s);
  REQUIRE(collect.kernels.size() >= 3);  // a copy kernel per dtype at least (coalescing merges ranks)
  void* so = compile_emulated(collect.kernels, "copies");
  EmulatedExecutor emu;
  emu.lookup = [&](const std::string& name) { return dlsym(so, ("emu_" + name).c_str()); };
  for (const CopyCase& c : copy_cases()) {
    INFO(c.what);
    // Expected storage: the destination's elements replaced by the source's
    // values as they were before the write, every other element untouched.
    std::vector<double> want(static_cast<size_t>(c.dst_elems));
    for (int64_t i = 0; i < c.dst_elems; ++i) want[static_cast<size_t>(i)] = element(c.dst, c.t, i);
    const size_t R = c.s.dims.size();
    std::vector<int64_t> idx(R, 0);
    for (int64_t k = 0; k < c.s.numel(); ++k) {
      int64_t od = c.dst.offset, os = c.src.offset;
      for (size_t d = 0; d < R; ++d) {
        od += idx[d] * c.dst.strides[d];
        os += idx[d] * c.src.strides[d];
      }
      want[static_cast<size_t>(od)] = element(c.src, c.t, os);
      for (size_t d = R; d-- > 0;) {
        if (++idx[d] < c.s.dims[d]) break;
        idx[d] = 0;
      }
    }
    const int before = emu.launches;
    tessel::cudagen::copy_into(emu, c.dst, c.src, c.t, c.s);
    CHECK(emu.launches == before + (c.dst.storage == c.src.storage ? 2 : 1));  // overlap: copied aside first
    for (int64_t i = 0; i < c.dst_elems; ++i)
      if (element(c.dst, c.t, i) != want[static_cast<size_t>(i)])
        FAIL("storage element " << i << ": " << element(c.dst, c.t, i) << ", want " << want[static_cast<size_t>(i)]);
  }
  CHECK(emu.vector_launches >= 4);  // the long dense copies and the dense <- overlap copies
  // Writing a view onto itself is no work.
  for (const CopyCase& c : copy_cases()) {
    const int before = emu.launches;
    tessel::cudagen::copy_into(emu, c.dst, c.dst, c.t, c.s);
    CHECK(emu.launches == before);
  }
  dlclose(so);
}
