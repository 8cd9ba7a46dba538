// The nccl backend in one process: each rank is a thread with its own GPU
// and process group, the ranks meet on a file store. On the emulated device
// (label emulated-gpu: two devices, the NCCL stand-in) the world is 2 ranks
// on cuda:0 and cuda:1. On a real machine (label gpu) it is as many ranks as
// there are GPUs, at most 2: NCCL cannot put two ranks on one GPU, so a
// 1-GPU machine runs a world of 1 (NCCL itself, its streams and the ordering
// after computation are still exercised) and skips, saying so, what needs two.
// Every value is checked against the collective's definition; Catch's
// assertions run on the main thread only, from what the ranks recorded.
#include <catch2/catch.hpp>
#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "dsl/dist/collectives.h"
#include "dsl/nn/distributed_data_parallel.h"
#include "dsl/tessel.h"
#include "dsl/train/optimizer.h"
#include "dtype_linear.h"
#include "rank_processes.h"
#include "runtime/cuda/nccl.h"
#include "runtime/dist/file_store.h"
#include "runtime/dist/nccl_process_group.h"
#include "runtime/errors.h"

using namespace tessel;
using namespace std::chrono_literals;

namespace {

int world() { return std::min(2, num_gpus()); }

// What one rank's thread ended with: "" or the exception's type and message.
struct RankEnd {
  std::string error;
  bool ok() const { return error.empty(); }
};

std::string describe(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const DistError& x) {
    return std::string("DistError: ") + x.what();
  } catch (const DeviceError& x) {
    return std::string("DeviceError: ") + x.what();
  } catch (const std::exception& x) {
    return std::string("exception: ") + x.what();
  }
}

// Runs fn(rank, group) on `n` threads, rank r on gpu(r) (also for a barrier
// before any tensor), each with its own nccl group on a fresh file store;
// returns how each ended.
std::vector<RankEnd> on_ranks(int n, const std::function<void(int, dist::ProcessGroup&)>& fn,
                              std::chrono::milliseconds timeout = 60s) {
  const std::string dir = test::fresh_temp_dir("nccl");
  std::vector<RankEnd> ends(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        auto pg = dist::make_nccl_process_group(std::make_shared<dist::FileStore>(dir), r, n, timeout, r);
        fn(r, *pg);
      } catch (...) {
        ends[static_cast<size_t>(r)].error = describe(std::current_exception());
      }
    });
  for (auto& t : threads) t.join();
  std::filesystem::remove_all(dir);
  return ends;
}

void require_all_ok(const std::vector<RankEnd>& ends) {
  for (size_t r = 0; r < ends.size(); ++r) {
    INFO("rank " << r << ": " << ends[r].error);
    REQUIRE(ends[r].ok());
  }
}

std::vector<double> host(const Tensor& t) { return t.cpu().to(DType::f64).to_vector<double>(); }

std::vector<double> iota_plus(int n, double base, double step = 1) {
  std::vector<double> v;
  for (int i = 0; i < n; ++i) v.push_back(base + step * i);
  return v;
}

}  // namespace

TEST_CASE("nccl: every collective on GPU tensors equals its definition", "[gpu][distributed][nccl]") {
  const int W = world();
  const double ranks_sum = 100.0 * W * (W - 1) / 2;  // sum over r of r * 100
  struct Seen {
    std::vector<std::vector<double>> sums;  // f32, f64, i32, i64
    std::vector<double> avg32, avg64, max32, maxmix, bcast, scatter, async_sum;
    std::vector<std::vector<double>> gathered;
    std::vector<Device> devices;
  };
  std::vector<Seen> seen(static_cast<size_t>(W));
  require_all_ok(on_ranks(W, [&](int r, dist::ProcessGroup& pg) {
    Seen& s = seen[static_cast<size_t>(r)];
    const Device d = gpu(r);
    auto values = [&](DType t) { return (arange(5, DType::f64, d) + 100.0 * r).to(t); };  // r*100 + i, computed on d
    for (DType t : {DType::f32, DType::f64, DType::i32, DType::i64}) {
      Tensor x = values(t);
      dist::all_reduce(x, dist::ReduceOp::sum, &pg);
      s.sums.push_back(host(x));
      s.devices.push_back(x.device());
    }
    for (DType t : {DType::f32, DType::f64}) {
      Tensor x = values(t);
      dist::all_reduce(x, dist::ReduceOp::avg, &pg);
      (t == DType::f32 ? s.avg32 : s.avg64) = host(x);
    }
    Tensor m = values(DType::f32);
    dist::all_reduce(m, dist::ReduceOp::max, &pg);
    s.max32 = host(m);
    // Even positions grow with the rank, odd ones shrink: the max is no single rank's tensor.
    Tensor sign = from_vector<double>({1, -1, 1, -1, 1, -1}, Shape{6}, d);
    Tensor mix = (sign * (10.0 * r) + arange(6, DType::f64, d)).to(DType::i64);
    dist::all_reduce(mix, dist::ReduceOp::max, &pg);
    s.maxmix = host(mix);
    Tensor b = arange(4, DType::f64, d) * 0.5 + r;
    dist::broadcast(b, W - 1, &pg);
    s.bcast = host(b);
    Tensor g = (arange(6, DType::f32, d) + 10.0 * r).reshape({2, 3});
    for (const Tensor& part : dist::all_gather(g, &pg)) s.gathered.push_back(host(part));
    Tensor in = arange(2 * W, DType::f64, d) + 100.0 * r, out = zeros({2}, DType::f64, d);
    dist::reduce_scatter(out, in, dist::ReduceOp::sum, &pg);
    s.scatter = host(out);
    Tensor a = values(DType::f64);
    auto work = dist::all_reduce_async(a, dist::ReduceOp::sum, &pg);
    work.wait();
    s.async_sum = host(a);
  }));
  for (int r = 0; r < W; ++r) {
    INFO("rank " << r << " of " << W);
    const Seen& s = seen[static_cast<size_t>(r)];
    REQUIRE(s.sums.size() == 4);
    for (const auto& v : s.sums) CHECK(v == iota_plus(5, ranks_sum, W));  // sum_r (r*100 + i)
    for (const Device& dev : s.devices) CHECK(dev == gpu(r));
    CHECK(s.avg32 == iota_plus(5, ranks_sum / W));
    CHECK(s.avg64 == iota_plus(5, ranks_sum / W));
    CHECK(s.max32 == iota_plus(5, 100.0 * (W - 1)));
    std::vector<double> mix_want;
    for (int i = 0; i < 6; ++i) mix_want.push_back(i + (i % 2 == 0 ? 10.0 * (W - 1) : 0.0));
    CHECK(s.maxmix == mix_want);
    CHECK(s.bcast == iota_plus(4, W - 1.0, 0.5));
    REQUIRE(s.gathered.size() == static_cast<size_t>(W));
    for (int k = 0; k < W; ++k) CHECK(s.gathered[static_cast<size_t>(k)] == iota_plus(6, 10.0 * k));
    // Chunk r of the inputs (elements 2r, 2r+1), summed: sum_k (k*100 + 2r + j).
    CHECK(s.scatter == iota_plus(2, ranks_sum + W * 2.0 * r, W));
    CHECK(s.async_sum == iota_plus(5, ranks_sum, W));
  }
}

TEST_CASE("nccl: a barrier returns on no rank before every rank reached it", "[gpu][distributed][nccl]") {
  const int W = world();
  std::atomic<int> arrived{0};
  std::vector<int> seen_after(static_cast<size_t>(W), -1);
  require_all_ok(on_ranks(W, [&](int r, dist::ProcessGroup& pg) {
    Tensor x = ones({3}, DType::f32, gpu(r));
    dist::all_reduce(x, dist::ReduceOp::sum, &pg);  // the group's GPU, and its communicator
    if (r == W - 1) std::this_thread::sleep_for(300ms);  // the last rank comes late
    ++arrived;
    dist::barrier(&pg);
    seen_after[static_cast<size_t>(r)] = arrived.load();
  }));
  for (int r = 0; r < W; ++r) CHECK(seen_after[static_cast<size_t>(r)] == W);
}

TEST_CASE("nccl: tensors of different shapes or dtypes across ranks are a DistError, and the group goes on",
          "[gpu][distributed][nccl]") {
  const int W = world();
  if (W < 2) {
    WARN("skipped: ranks that disagree need 2 GPUs and this machine has " << num_gpus());
    return;
  }
  std::vector<std::string> shape_error(2), dtype_error(2);
  std::vector<std::vector<double>> untouched(2), after(2);
  require_all_ok(on_ranks(2, [&](int r, dist::ProcessGroup& pg) {
    Tensor x = full({r == 0 ? 3 : 4}, 1.0, DType::f32, gpu(r));
    try {
      dist::all_reduce(x, dist::ReduceOp::sum, &pg);
    } catch (const DistError& e) {
      shape_error[static_cast<size_t>(r)] = e.what();
    }
    untouched[static_cast<size_t>(r)] = host(x);
    Tensor y = full({3}, 2.0, r == 0 ? DType::f32 : DType::f64, gpu(r));
    try {
      dist::all_reduce(y, dist::ReduceOp::sum, &pg);
    } catch (const DistError& e) {
      dtype_error[static_cast<size_t>(r)] = e.what();
    }
    Tensor z = full({2}, r + 1.0, DType::f32, gpu(r));
    dist::all_reduce(z, dist::ReduceOp::sum, &pg);
    after[static_cast<size_t>(r)] = host(z);
  }));
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    CHECK(shape_error[static_cast<size_t>(r)] ==
          "collective #1: rank 1 called all_reduce(sum) of f32 [4] but rank 0 called all_reduce(sum) of f32 [3]; "
          "every rank must make the same collective calls in the same order, with tensors of the same shape and "
          "dtype");
    CHECK_THAT(dtype_error[static_cast<size_t>(r)],
               Catch::StartsWith("collective #2: rank 1 called all_reduce(sum) of f64 [3] but rank 0 called "
                                 "all_reduce(sum) of f32 [3]"));
    CHECK(untouched[static_cast<size_t>(r)] == std::vector<double>(r == 0 ? 3 : 4, 1.0));
    CHECK(after[static_cast<size_t>(r)] == std::vector<double>{3.0, 3.0});
  }
}

TEST_CASE("nccl: a rank that stops calling makes the others' collective a DistError naming it, within the timeout",
          "[gpu][distributed][nccl]") {
  const int W = world();
  if (W < 2) {
    WARN("skipped: a missing peer needs 2 GPUs and this machine has " << num_gpus());
    return;
  }
  // The emulated NCCL gives up on a missing peer after its own timeout (a
  // real one waits on the device until the group aborts it); shorter than the group's.
  REQUIRE(cuda::nccl_available());
  using SetTimeout = long (*)(long);
  SetTimeout set_timeout = nullptr;
  if (const char* lib = std::getenv("TESSEL_NCCL"))
    if (void* h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD))
      set_timeout = reinterpret_cast<SetTimeout>(dlsym(h, "tessel_emu_nccl_set_timeout_ms"));
  const long before = set_timeout ? set_timeout(300) : 0;
  std::string error, later_error;
  double seconds = 0;
  auto ends = on_ranks(
      2,
      [&](int r, dist::ProcessGroup& pg) {
        dist::barrier(&pg);  // the communicator, made while both ranks are there
        if (r == 1) {
          std::this_thread::sleep_for(2500ms);  // hangs past rank 0's timeout, then leaves
          return;
        }
        Tensor x = ones({4}, DType::f32, gpu(0));
        x.eval();
        auto start = std::chrono::steady_clock::now();
        try {
          dist::all_reduce(x, dist::ReduceOp::sum, &pg);
        } catch (const DistError& e) {
          error = e.what();
        }
        seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        try {
          dist::all_reduce(x, dist::ReduceOp::sum, &pg);
        } catch (const DistError& e) {
          later_error = e.what();
        }
      },
      1500ms);
  if (set_timeout) set_timeout(before);
  require_all_ok(ends);
  CHECK_THAT(error, Catch::StartsWith("all_reduce (collective #2) failed on rank 0: rank 1 did not reach it or died"));
  CHECK(seconds >= 1.0);
  CHECK(seconds < 2.4);  // the group's timeout (1.5 s), not the hung rank's return
  CHECK_THAT(later_error, Catch::StartsWith("all_reduce (collective #3): this process group failed earlier and "
                                            "cannot be used: all_reduce (collective #2) failed on rank 0"));
}

TEST_CASE("nccl: CPU tensors, a second GPU on one rank and unreducible dtypes are clear errors",
          "[gpu][distributed][nccl]") {
  std::string cpu_error, second_gpu_error, dtype_error, avg_error, ddp_error;
  std::vector<double> fine;
  require_all_ok(on_ranks(1, [&](int, dist::ProcessGroup& pg) {
    try {
      dist::all_reduce(ones({2}), dist::ReduceOp::sum, &pg);
    } catch (const DeviceError& e) {
      cpu_error = e.what();
    }
    Tensor x = ones({2}, DType::f32, gpu(0));
    dist::all_reduce(x, dist::ReduceOp::sum, &pg);
    fine = host(x);
    if (num_gpus() > 1) {
      try {
        dist::all_reduce(ones({2}, DType::f32, gpu(1)), dist::ReduceOp::sum, &pg);
      } catch (const DeviceError& e) {
        second_gpu_error = e.what();
      }
    }
    try {
      dist::all_reduce(ones({2}, DType::f16, gpu(0)), dist::ReduceOp::sum, &pg);
    } catch (const DTypeError& e) {
      dtype_error = e.what();
    }
    try {
      dist::all_reduce(ones({2}, DType::i32, gpu(0)), dist::ReduceOp::avg, &pg);
    } catch (const DTypeError& e) {
      avg_error = e.what();
    }
    try {
      std::shared_ptr<dist::ProcessGroup> group(&pg, [](dist::ProcessGroup*) {});
      nn::DistributedDataParallel ddp(nn::Linear(2, 2), {.group = group});
    } catch (const DeviceError& e) {
      ddp_error = e.what();
    }
  }));
  CHECK(fine == std::vector<double>{1.0, 1.0});
  CHECK(cpu_error ==
        "all_reduce: the nccl backend works on GPU tensors, this one is on cpu; move it with .cuda(i) (one GPU per "
        "rank), or use the gloo backend for CPU tensors");
  if (num_gpus() > 1)
    CHECK(second_gpu_error ==
          "all_reduce: rank 0's nccl group works on cuda:0 (the GPU of its first collective) but this tensor is on "
          "cuda:1; NCCL runs one GPU per rank, so keep every tensor this rank communicates on cuda:0");
  CHECK(dtype_error ==
        "all_reduce: the nccl backend reduces f32, f64, i32 and i64 tensors, not f16; convert first with "
        ".to(DType::f32)");
  CHECK_THAT(avg_error, Catch::StartsWith("all_reduce(avg): an average of i32 tensors would truncate"));
  CHECK(ddp_error ==
        "DistributedDataParallel: parameter 'weight' is on cpu; the nccl backend reduces GPU tensors only; move the "
        "model to this rank's GPU with .to(gpu(i))");
}

namespace {

using tessel::testing::DLinear;

nn::Sequential mlp(DType dt, uint64_t seed) {
  manual_seed(seed);
  return nn::Sequential(DLinear(6, 12, dt), nn::ReLU(), DLinear(12, 3, dt));
}

struct Trained {
  std::vector<std::vector<double>> params;
  std::vector<double> losses;
  size_t buckets = 0;
  bool grads_on_device = true;
};

std::vector<std::vector<double>> host_params(nn::Module& m) {
  std::vector<std::vector<double>> out;
  for (auto& p : m.parameters()) out.push_back(host(p));
  return out;
}

// DDP on `world` GPUs (rank r on gpu(r), its share of the batch, different
// initial weights except rank 0's) against one GPU on the whole batch.
void ddp_equals_single_device(DType dt, double tol) {
  const int W = world();
  const int steps = 3;
  const int64_t n = 8, shard = n / W;
  manual_seed(11);
  Tensor X = randn({n, 6}, dt), y = randint(0, 3, {n});
  X.eval();
  y.eval();

  auto ref = mlp(dt, 7);
  ref->to(gpu(0));
  optim::SGD ref_opt(ref->parameters(), {.lr = 0.1, .momentum = 0.9});
  std::vector<double> ref_losses;
  const Tensor Xg = X.to(gpu(0)), yg = y.to(gpu(0));
  for (int s = 0; s < steps; ++s) {
    Tensor loss = cross_entropy(ref(Xg), yg);
    ref_opt.zero_grad();
    loss.backward();
    ref_opt.step();
    ref_losses.push_back(loss.item<double>());
  }
  const auto want = host_params(*ref);

  std::vector<nn::Sequential> models;
  for (int r = 0; r < W; ++r) models.push_back(mlp(dt, r == 0 ? 7 : 100 + static_cast<uint64_t>(r)));
  std::vector<Trained> got(static_cast<size_t>(W));
  require_all_ok(on_ranks(W, [&](int r, dist::ProcessGroup& pg) {
    Trained& t = got[static_cast<size_t>(r)];
    auto model = models[static_cast<size_t>(r)];
    model->to(gpu(r));
    std::shared_ptr<dist::ProcessGroup> group(&pg, [](dist::ProcessGroup*) {});
    nn::DistributedDataParallel ddp(model, {.bucket_cap_mb = 0.00015, .group = group});  // 2 buckets
    t.buckets = ddp->buckets().size();
    optim::SGD opt(ddp->parameters(), {.lr = 0.1, .momentum = 0.9});
    Tensor Xs = X.narrow(0, r * shard, shard).to(gpu(r)), ys = y.narrow(0, r * shard, shard).to(gpu(r));
    for (int s = 0; s < steps; ++s) {
      Tensor loss = cross_entropy(ddp(Xs), ys);
      opt.zero_grad();
      loss.backward();
      for (auto& p : model->parameters()) t.grads_on_device = t.grads_on_device && p.grad().device() == gpu(r);
      opt.step();
      t.losses.push_back(loss.item<double>());
    }
    t.params = host_params(*model);
  }));
  for (int r = 0; r < W; ++r) {
    INFO("rank " << r << " of " << W << ", " << dtype_name(dt));
    const Trained& t = got[static_cast<size_t>(r)];
    CHECK(t.buckets == 2);
    CHECK(t.grads_on_device);
    REQUIRE(t.params.size() == want.size());
    double d = 0;
    for (size_t i = 0; i < want.size(); ++i)
      for (size_t j = 0; j < want[i].size(); ++j) d = std::max(d, std::abs(t.params[i][j] - want[i][j]));
    INFO("max parameter difference " << d);
    CHECK(d <= tol);
  }
  // Equal shards: the mean of the ranks' losses is the whole batch's.
  for (int s = 0; s < steps; ++s) {
    double mean = 0;
    for (const Trained& t : got) mean += t.losses[static_cast<size_t>(s)] / W;
    INFO("step " << s);
    CHECK(std::abs(mean - ref_losses[static_cast<size_t>(s)]) <= tol);
  }
}

}  // namespace

TEST_CASE("nccl: DDP of an MLP on one GPU per rank equals one GPU on the whole batch (f32 1e-5)",
          "[gpu][distributed][nccl]") {
  ddp_equals_single_device(DType::f32, 1e-5);
}

TEST_CASE("nccl: DDP of an MLP on one GPU per rank equals one GPU on the whole batch (f64 1e-12)",
          "[gpu][distributed][nccl]") {
  ddp_equals_single_device(DType::f64, 1e-12);
}
