// The CUDA backend on a real device: random trees (non-contiguous leaves
// included) realized on gpu(0) match the ref backend; tensors move between
// host and device; the caching allocator reuses blocks and reports
// exhaustion; device mix-ups are clear errors. Each test skips with a
// warning where there is no GPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <unordered_map>

#include "codegen/backend.h"
#include "codegen/cuda/cuda_backend.h"
#include "dsl/tessel.h"
#include "random_trees.h"
#include "runtime/cuda/device_allocator.h"
#include "runtime/cuda/driver.h"
#include "runtime/errors.h"

using namespace tessel;
using cuda_codegen_test::Case;
using cuda_codegen_test::TreeGen;

#define SKIP_WITHOUT_GPU()         \
  do {                             \
    if (num_gpus() == 0) {         \
      WARN("no GPU: skipped");     \
      return;                      \
    }                              \
  } while (0)

namespace {

// The same tree over device copies of the leaves' whole storages (offsets and
// strides kept, so non-contiguous leaves stay non-contiguous).
ir::NodePtr on_device(const ir::NodePtr& n, std::unordered_map<ir::Node*, ir::NodePtr>& memo,
                      std::unordered_map<Storage*, std::shared_ptr<Storage>>& storages) {
  if (auto it = memo.find(n.get()); it != memo.end()) return it->second;
  auto c = std::make_shared<ir::Node>(*n);
  if (n->buffer) {
    Storage* s = n->buffer->storage.get();
    auto& d = storages[s];
    if (!d) {
      d = Storage::allocate(s->nbytes(), gpu(0));
      cuda::memcpy_htod(reinterpret_cast<cuda::CUdeviceptr>(d->data()), s->data(), s->nbytes());
    }
    c->buffer->storage = d;
  }
  for (auto& a : c->args) a = on_device(a, memo, storages);
  memo[n.get()] = c;
  return c;
}

std::vector<double> host_values(const ir::NodePtr& n, Device d) {
  ir::BufferView v = copy_between_devices(*n->buffer, n->dtype, n->shape, d, cpu());
  Tensor t = from_buffer(v, n->dtype, n->shape);
  return t.to(DType::f64).to_vector<double>();
}

void check_close(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  REQUIRE(got.size() == want.size());
  double scale = 1;
  for (double x : want)
    if (std::isfinite(x)) scale = std::max(scale, std::fabs(x));
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i]) && std::isnan(got[i])) continue;
    if (got[i] == want[i]) continue;
    INFO("element " << i);
    REQUIRE(std::fabs(got[i] - want[i]) <= tol * scale);
  }
}

}  // namespace

TEST_CASE("random trees realized on the GPU match the ref backend", "[gpu]") {
  SKIP_WITHOUT_GPU();
  int compared = 0;
  for (int i = 0; i < 120; ++i) {
    Case want = TreeGen(99, i).make(i % 3);  // no backward: it builds over host leaves
    INFO(want.what);
    std::unordered_map<ir::Node*, ir::NodePtr> memo;
    std::unordered_map<Storage*, std::shared_ptr<Storage>> storages;
    std::vector<ir::NodePtr> dev;
    for (auto& r : want.roots) dev.push_back(on_device(r, memo, storages));
    ref_backend().realize(want.roots, false);
    cuda_realize(0, dev, false);
    for (size_t r = 0; r < dev.size(); ++r) {
      double tol = dev[r]->dtype == DType::f64 ? 1e-9 : 1e-4;
      check_close(host_values(dev[r], gpu(0)), host_values(want.roots[r], cpu()), tol);
    }
    ++compared;
  }
  CHECK(cuda_stats().kernels_launched > 0);
  WARN("compared " << compared << " trees; " << cuda_stats().kernels_compiled << " kernels compiled, "
                   << cuda_stats().compile_ms / std::max<double>(1, cuda_stats().kernels_compiled) << " ms each");
}

TEST_CASE("tensors on the GPU compute like on the CPU, odd sizes and views included", "[gpu]") {
  SKIP_WITHOUT_GPU();
  for (int64_t n : {1, 31, 33, 1000003}) {
    Tensor x = randn({n}), y = randn({n});
    Tensor want = Tensor(Tensor(x * 2 + y).relu() - y.sigmoid()).sum();
    Tensor xg = x.cuda(), yg = y.to(gpu(0));
    Tensor got = Tensor(Tensor(xg * 2 + yg).relu() - yg.sigmoid()).sum();
    CHECK(got.device() == gpu(0));
    CHECK(got.item<double>() == Approx(want.item<double>()).epsilon(1e-4));
  }
  Tensor a = randn({33, 31}), w = randn({31, 7}), b = randn({7});
  Tensor want = Tensor(a.matmul(w) + b).relu().t().contiguous();
  Tensor got = Tensor(a.cuda().matmul(w.cuda()) + b.cuda()).relu().t().contiguous().cpu();
  check_close(got.to(DType::f64).to_vector<double>(), want.to(DType::f64).to_vector<double>(), 1e-4);
}

TEST_CASE("transfers round-trip every dtype and non-contiguous views", "[gpu]") {
  SKIP_WITHOUT_GPU();
  for (DType t : {DType::f32, DType::f64, DType::i32, DType::i64, DType::f16, DType::bf16}) {
    Tensor x = randn({5, 7}).to(t);
    Tensor xt = x.t();  // strided
    Tensor back = xt.cuda().cpu();
    CHECK(back.device() == cpu());
    CHECK(back.to(DType::f64).to_vector<double>() == xt.to(DType::f64).to_vector<double>());
  }
}

TEST_CASE("same-device to() is the same tensor; cross-device ops name both devices", "[gpu]") {
  SKIP_WITHOUT_GPU();
  Tensor g = ones({3}, gpu(0));
  Tensor same = g.to(gpu(0));
  CHECK(same.node() == g.node());
  Tensor c = ones({3});
  try {
    Tensor bad = c + g;
    FAIL("expected DeviceError");
  } catch (const DeviceError& e) {
    std::string m = e.what();
    CHECK(m.find("cpu") != std::string::npos);
    CHECK(m.find("cuda:0") != std::string::npos);
  }
  if (num_gpus() > 1) {
    Tensor h = g.to(gpu(1));
    CHECK(h.device() == gpu(1));
    CHECK(h.cpu().to_vector<float>() == std::vector<float>{1, 1, 1});
    try {
      Tensor bad = g + h;
      FAIL("expected DeviceError");
    } catch (const DeviceError& e) {
      std::string m = e.what();
      CHECK(m.find("cuda:0") != std::string::npos);
      CHECK(m.find("cuda:1") != std::string::npos);
    }
  }
}

TEST_CASE("device tensors reuse cached blocks and exhaustion is OutOfMemoryError", "[gpu]") {
  SKIP_WITHOUT_GPU();
  auto& alloc = cuda::device_allocator(0);
  { Tensor t = empty({1 << 20}, DType::f32, gpu(0)); }
  auto before = alloc.stats();
  { Tensor t = empty({1 << 20}, DType::f32, gpu(0)); }
  auto after = alloc.stats();
  CHECK(after.num_cache_hits == before.num_cache_hits + 1);
  CHECK(after.num_device_allocs == before.num_device_allocs);
  const int64_t huge = static_cast<int64_t>(cuda::total_memory(0)) * 2;
  try {
    Tensor t = empty({huge}, DType::f32, gpu(0));
    FAIL("expected OutOfMemoryError");
  } catch (const OutOfMemoryError& e) {
    std::string m = e.what();
    CHECK(m.find("cuda:0") != std::string::npos);
    CHECK(m.find("cached") != std::string::npos);
  }
  Tensor ok = ones({4}, gpu(0));  // the device still works after the failure
  CHECK(ok.sum().item<double>() == 4.0);
}
