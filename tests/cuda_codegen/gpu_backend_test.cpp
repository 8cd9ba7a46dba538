// The CUDA backend on a real device: random trees (non-contiguous leaves
// included) realized on gpu(0) match the ref backend; long reductions split
// across blocks and aligned elementwise kernels vectorize; matmuls run on
// cuBLASLt (bias/ReLU epilogues fused); in-place writes and optimizer steps
// land in device memory; tensors move between host and device; the caching
// allocator reuses blocks and reports exhaustion; device mix-ups are clear
// errors. Each test skips with a warning where there is no GPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <unordered_map>

#include "codegen/backend.h"
#include "codegen/cuda/cuda_backend.h"
#include "dsl/functional.h"
#include "dsl/tessel.h"
#include "dsl/train/optimizer.h"
#include "random_trees.h"
#include "runtime/cuda/device_allocator.h"
#include "runtime/cuda/driver.h"
#include "runtime/errors.h"
#include "tests/support/tensor_testing.h"

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
  const uint64_t seed = tessel::testing::test_seed("random trees on the GPU");
  INFO("seed " << seed << " (TESSEL_TEST_SEED=" << seed << " replays)");
  // Emulated, each tree's kernels are compiled by the host compiler (~1.3 s a
  // module) and every run draws new trees: 50 a run keeps `make test` in its
  // time, and the runs together still cover what more per run would.
  const int trees = tessel::testing::trial_count("random trees on the GPU", 300, 50);
  for (int i = 0; i < trees; ++i) {
    Case want = TreeGen(seed, i).make(i % 3);  // no backward: it builds over host leaves
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

TEST_CASE("same-device to() is the same tensor and cross-device ops name both devices", "[gpu]") {
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

TEST_CASE("long reductions split across blocks and aligned elementwise kernels vectorize on the device", "[gpu]") {
  SKIP_WITHOUT_GPU();
  Tensor x = randn({1000003});
  CudaStats before = cuda_stats();
  double got = x.cuda().sum().item<double>();
  CudaStats after = cuda_stats();
  CHECK(after.split_launches == before.split_launches + 1);
  CHECK(got == Approx(x.sum().item<double>()).epsilon(1e-5));
  // Few long rows, read transposed: still split, one mean per row.
  Tensor r = randn({1000003, 3});
  before = cuda_stats();
  Tensor means = r.cuda().t().mean({1}).cpu();
  CHECK(cuda_stats().split_launches == before.split_launches + 1);
  check_close(means.to(DType::f64).to_vector<double>(), r.t().mean({1}).to(DType::f64).to_vector<double>(), 1e-5);
  // The same sum twice gives the same bits: no atomics.
  CHECK(x.cuda().sum().item<double>() == got);

  Tensor m = randn({1024, 1024}), n = randn({1024});
  before = cuda_stats();
  Tensor y = Tensor(m.cuda() * 2 + n.cuda()).relu().cpu();
  CHECK(cuda_stats().vector_launches == before.vector_launches + 1);
  check_close(y.to(DType::f64).to_vector<double>(), Tensor(m * 2 + n).relu().to(DType::f64).to_vector<double>(), 1e-6);
}

TEST_CASE("matmuls run on cuBLASLt, bias and ReLU fused into the product, never through the host", "[gpu]") {
  SKIP_WITHOUT_GPU();
  REQUIRE(cuda::cublaslt_available());
  struct Dims { int64_t M, K, N; };
  for (DType t : {DType::f32, DType::f64})
    for (Dims d : {Dims{1, 1, 1}, Dims{33, 31, 7}, Dims{257, 129, 65}}) {
      CAPTURE(dtype_name(t), d.M, d.K, d.N);
      Tensor x = randn({d.M, d.K}).to(t), w = randn({d.N, d.K}).to(t), b = randn({d.N}).to(t);
      Tensor want = Tensor(x.matmul(w.t()) + b).relu();
      CudaStats before = cuda_stats();
      Tensor got = Tensor(x.cuda().matmul(w.cuda().t()) + b.cuda()).relu();
      got.eval();
      CudaStats after = cuda_stats();
      CHECK(after.host_evals == before.host_evals);
      CHECK(after.blas_matmuls == before.blas_matmuls + 1);
      CHECK(after.blas_epilogues == before.blas_epilogues + 1);
      const double tol = (t == DType::f64 ? 1e-12 : 2e-6) * static_cast<double>(d.K);
      check_close(got.cpu().to(DType::f64).to_vector<double>(), want.to(DType::f64).to_vector<double>(), tol);
    }
  // An epilogue cuBLASLt has no form for runs as a kernel after the product.
  Tensor x = randn({33, 31}), w = randn({31, 7});
  CudaStats before = cuda_stats();
  Tensor s = x.cuda().matmul(w.cuda()).sigmoid().cpu();
  CHECK(cuda_stats().blas_epilogues == before.blas_epilogues);
  CHECK(cuda_stats().blas_matmuls == before.blas_matmuls + 1);
  CHECK(cuda_stats().host_evals == before.host_evals);
  check_close(s.to(DType::f64).to_vector<double>(), x.matmul(w).sigmoid().to(DType::f64).to_vector<double>(), 1e-5);
  // Batched, with a broadcast batch operand: one product per batch element.
  Tensor a = randn({3, 33, 31});
  before = cuda_stats();
  Tensor bm = a.cuda().matmul(w.cuda()).cpu();
  CHECK(cuda_stats().blas_matmuls == before.blas_matmuls + 3);
  check_close(bm.to(DType::f64).to_vector<double>(), a.matmul(w).to(DType::f64).to_vector<double>(), 1e-4);
  // Integer products stay on the host (cuBLASLt has none).
  Tensor i = arange(12).reshape({3, 4}), j = arange(8).reshape({4, 2});
  before = cuda_stats();
  Tensor ij = i.cuda().matmul(j.cuda()).cpu();
  CHECK(cuda_stats().host_evals == before.host_evals + 1);
  CHECK(ij.to_vector<int64_t>() == i.matmul(j).to_vector<int64_t>());
}

TEST_CASE("in-place writes to GPU tensors land in device memory like on the CPU", "[gpu]") {
  SKIP_WITHOUT_GPU();
  Tensor c = randn({33, 31});
  Tensor g = c.cuda();
  const uint64_t version = g.buffer().storage->version();
  c += 1;
  g += 1;
  CHECK(g.buffer().storage->version() == version + 1);
  Tensor cv = c.t(), gv = g.t();  // writes through a transposed view
  cv *= 2;
  gv *= 2;
  c[3][5] = 42.0;  // one element, through a view
  g[3][5] = 42.0;
  c.data()[0] -= c[1];  // a row, from another row of the same storage
  g.data()[0] -= g[1];
  CHECK(g.device() == gpu(0));
  check_close(g.cpu().to(DType::f64).to_vector<double>(), c.to(DType::f64).to_vector<double>(), 1e-6);
  // A square tensor overwritten by its own transpose.
  Tensor sq = randn({32, 32});
  Tensor want = sq.t().contiguous();
  Tensor gsq = sq.cuda();
  gsq.copy_(gsq.t());
  CHECK(gsq.cpu().to_vector<float>() == want.to_vector<float>());
  // Writing an expanded view is the same error as on the CPU.
  Tensor e = ones({3}, gpu(0)).reshape({1, 3}).expand({4, 3});
  CHECK_THROWS_AS(e += 1, ValueError);
}

TEST_CASE("an MLP trains on the GPU as on the CPU: cuBLASLt products, in-place SGD and Adam steps", "[gpu]") {
  SKIP_WITHOUT_GPU();
  for (int which = 0; which < 2; ++which) {
    CAPTURE(which);
    manual_seed(11);
    nn::Sequential on_cpu(nn::Linear(20, 33), nn::ReLU(), nn::Linear(33, 5));
    manual_seed(11);
    nn::Sequential on_gpu(nn::Linear(20, 33), nn::ReLU(), nn::Linear(33, 5));
    on_gpu->to(gpu(0));
    Tensor X = randn({64, 20}), Y = randn({64, 5});
    Tensor Xg = X.cuda(), Yg = Y.cuda();
    auto make = [&](nn::Sequential& net) -> std::unique_ptr<optim::Optimizer> {
      if (which == 0) return std::make_unique<optim::SGD>(net->parameters(), optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
      return std::make_unique<optim::Adam>(net->parameters(), optim::AdamOptions{.lr = 1e-2});
    };
    auto opt_cpu = make(on_cpu), opt_gpu = make(on_gpu);
    const CudaStats before = cuda_stats();
    double first = 0, last_cpu = 0, last_gpu = 0;
    for (int step = 0; step < 5; ++step) {
      Tensor lc = mse_loss(on_cpu(X), Y), lg = mse_loss(on_gpu(Xg), Yg);
      if (step == 0) first = lc.item<double>();
      last_cpu = lc.item<double>();
      last_gpu = lg.item<double>();
      for (auto [opt, loss] : {std::pair{opt_cpu.get(), lc}, std::pair{opt_gpu.get(), lg}}) {
        opt->zero_grad();
        loss.backward();
        opt->step();
      }
    }
    CHECK(cuda_stats().host_evals == before.host_evals);  // forward and backward products on the device
    CHECK(cuda_stats().blas_matmuls > before.blas_matmuls);
    CHECK(last_gpu == Approx(last_cpu).epsilon(1e-4));
    CHECK(last_cpu < first);
    auto pc = on_cpu->parameters(), pg = on_gpu->parameters();
    REQUIRE(pc.size() == pg.size());
    for (size_t i = 0; i < pc.size(); ++i) {
      CHECK(pg[i].device() == gpu(0));
      check_close(pg[i].data().cpu().to(DType::f64).to_vector<double>(), pc[i].data().to(DType::f64).to_vector<double>(),
                  1e-4);
    }
  }
}
