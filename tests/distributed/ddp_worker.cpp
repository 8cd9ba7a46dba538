// One rank of the data-parallel tests (ddp_test.cpp starts several).
//   ddp_worker SCENARIO INIT_METHOD [ARGS...]
// Prints "ok ..." per checked property and "FAIL ..." per broken one; exits 0
// when all held, 1 otherwise, 3 with "DistError: ..." on a DistError and 4
// with "ValueError: ..." on a ValueError.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <set>

#include "dsl/data/distributed_sampler.h"
#include "dsl/dist/collectives.h"
#include "dsl/nn/distributed_data_parallel.h"
#include "dsl/tessel.h"
#include "dsl/train/optimizer.h"
#include "dsl/train/trainer.h"
#include "dtype_linear.h"

using namespace tessel;

namespace {

int g_failures = 0;

void check(bool ok, const std::string& what) {
  fmt::print("{} {}\n", ok ? "ok" : "FAIL", what);
  if (!ok) ++g_failures;
}

using tessel::testing::DLinear;

// Act: ReLU, or Tanh for comparisons in f32, where ReLU's kink turns a
// last-bit difference of one pre-activation (BLAS blocks a 256-row product
// unlike a 128-row one) into a step of its gradient.
template <class Act = nn::ReLU>
nn::Sequential mlp(DType dt, uint64_t seed, int64_t hidden = 256) {
  manual_seed(seed);
  return nn::Sequential(DLinear(784, hidden, dt), Act(), DLinear(hidden, 10, dt));
}

// The deterministic global batch: 256 samples of 784 features, 10 classes.
std::pair<Tensor, Tensor> global_batch(DType dt, int64_t n = 256) {
  manual_seed(12345);
  Tensor X = randn({n, 784}, dt);
  Tensor y = randint(0, 10, {n});
  X.eval();
  y.eval();
  return {X, y};
}

double max_diff(const std::vector<nn::Parameter>& a, const std::vector<nn::Parameter>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    auto x = a[i].to_vector<double>(), y = b[i].to_vector<double>();
    for (size_t j = 0; j < x.size(); ++j) m = std::max(m, std::abs(x[j] - y[j]));
  }
  return m;
}

double max_grad_diff(const std::vector<nn::Parameter>& a, const std::vector<nn::Parameter>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    auto x = a[i].grad().to_vector<double>(), y = b[i].grad().to_vector<double>();
    for (size_t j = 0; j < x.size(); ++j) m = std::max(m, std::abs(x[j] - y[j]));
  }
  return m;
}

// 20 SGD steps on the global batch in this process alone, then the same with
// DDP on this rank's shard (other ranks start from other weights: the
// broadcast makes them rank 0's); parameters and global losses must agree.
void equals_single(int rank, int world, DType dt) {
  const double tol = dt == DType::f64 ? 1e-12 : 1e-5;
  auto [X, y] = global_batch(dt);
  const int64_t n = X.size(0), shard = n / world;
  const int steps = 20;
  auto ref = mlp<nn::Tanh>(dt, 7);
  optim::SGD ref_opt(ref->parameters(), {.lr = 0.1, .momentum = 0.9});
  std::vector<double> ref_losses;
  for (int s = 0; s < steps; ++s) {
    Tensor loss = cross_entropy(ref(X), y);
    ref_opt.zero_grad();
    loss.backward();
    ref_opt.step();
    ref_losses.push_back(loss.item<double>());
  }
  auto model = mlp<nn::Tanh>(dt, rank == 0 ? 7 : 100 + static_cast<uint64_t>(rank));
  nn::DistributedDataParallel ddp(model, {.bucket_cap_mb = 0.01});  // two buckets
  optim::SGD opt(ddp->parameters(), {.lr = 0.1, .momentum = 0.9});
  Tensor Xs = X.narrow(0, rank * shard, shard).contiguous(), ys = y.narrow(0, rank * shard, shard).contiguous();
  double loss_diff = 0;
  for (int s = 0; s < steps; ++s) {
    Tensor loss = cross_entropy(ddp(Xs), ys);
    opt.zero_grad();
    loss.backward();
    opt.step();
    Tensor global = full({1}, loss.item<double>(), DType::f64);
    dist::all_reduce(global, dist::ReduceOp::avg);
    loss_diff = std::max(loss_diff, std::abs(global.item<double>() - ref_losses[static_cast<size_t>(s)]));
  }
  double d = max_diff(model->parameters(), ref->parameters());
  check(d <= tol && loss_diff <= tol,
        fmt::format("equals_single {} world={} buckets={} max_param_diff={:.3g} max_loss_diff={:.3g} (tolerance {:g})",
                    dtype_name(dt), world, ddp->buckets().size(), d, loss_diff, tol));
}

// Two buckets: {2.bias, 2.weight, 0.bias} and {0.weight}. Backward produces
// 0.weight's gradient last; bucket 0's all-reduce must start before it.
void overlap(int rank, int world) {
  auto [X, y] = global_batch(DType::f64);
  const int64_t shard = X.size(0) / world;
  auto model = mlp(DType::f64, 7);
  nn::DistributedDataParallel ddp(model, {.bucket_cap_mb = 0.02});
  auto buckets = ddp->buckets();
  check(buckets.size() == 2 && buckets[0].names == std::vector<std::string>{"2.bias", "2.weight", "0.bias"} &&
            buckets[1].names == std::vector<std::string>{"0.weight"},
        fmt::format("overlap buckets in reverse parameter order: {} then {}", buckets.at(0).names,
                    buckets.at(1).names));
  for (int step = 0; step < 3; ++step) {
    Tensor loss = cross_entropy(ddp(X.narrow(0, rank * shard, shard)), y.narrow(0, rank * shard, shard));
    model->zero_grad();
    loss.backward();
    const auto& log = ddp->sync_log();
    auto at = [&](const std::string& e) {
      return static_cast<long>(std::find(log.begin(), log.end(), e) - log.begin());
    };
    long launch0 = at("launch 0"), last_ready = at("ready 0.weight"), launch1 = at("launch 1");
    long n = static_cast<long>(log.size());
    check(launch0 < last_ready && last_ready < launch1 && launch1 < n && at("done 0") < n && at("done 1") < n &&
              at("ready 2.bias") < launch0 && at("ready 2.weight") < launch0 && at("ready 0.bias") < launch0,
          fmt::format("overlap step {}: {}", step, log));
  }
}

// A layer used twice: its parameters are one bucket entry each and reduced once.
void tied(int rank, int world) {
  auto run = [&](bool distributed) {
    manual_seed(distributed ? 50 + static_cast<uint64_t>(rank) : 50);
    DLinear shared(16, 16, DType::f64);
    auto model = nn::Sequential(shared, nn::Tanh(), shared, DLinear(16, 4, DType::f64));
    manual_seed(9);
    Tensor X = randn({64, 16}, DType::f64), y = randint(0, 4, {64});
    std::optional<nn::DistributedDataParallel> ddp;
    if (distributed) {
      ddp.emplace(model, nn::DistributedDataParallelOptions{});
      int64_t numel = 0;
      std::vector<std::string> names;
      for (auto& b : (*ddp)->buckets()) {
        numel += b.numel;
        names.insert(names.end(), b.names.begin(), b.names.end());
      }
      check(numel == 16 * 16 + 16 + 16 * 4 + 4 && names.size() == 4,
            fmt::format("tied: {} parameters, {} elements in the buckets: {}", names.size(), numel, names));
      X = X.narrow(0, rank * (64 / world), 64 / world).contiguous();
      y = y.narrow(0, rank * (64 / world), 64 / world).contiguous();
    }
    optim::SGD opt(model->parameters(), {.lr = 0.5});
    for (int s = 0; s < 5; ++s) {
      Tensor loss = cross_entropy(distributed ? (*ddp)(X) : model(X), y);
      opt.zero_grad();
      loss.backward();
      opt.step();
    }
    return model;
  };
  auto ref = run(false);
  auto got = run(true);
  double d = max_diff(got->parameters(), ref->parameters());
  check(d <= 1e-12, fmt::format("tied: parameters equal single-process training, max diff {:.3g}", d));
}

// Gradient accumulation: micro-batch 0 under no_sync (no collective, local
// gradients differ across ranks), micro-batch 1 synchronizes the sum.
void no_sync(int rank, int world) {
  auto [X, y] = global_batch(DType::f64);
  auto ref = mlp(DType::f64, 7, 32);
  for (int mb = 0; mb < 2; ++mb) cross_entropy(ref(X.narrow(0, mb * 128, 128)), y.narrow(0, mb * 128, 128)).backward();
  auto model = mlp(DType::f64, 7, 32);
  nn::DistributedDataParallel ddp(model, {});
  const int64_t per = 128 / world;
  auto part = [&](int mb) { return std::make_pair(X.narrow(0, mb * 128 + rank * per, per), y.narrow(0, mb * 128 + rank * per, per)); };
  {
    auto guard = ddp->no_sync();
    auto [xb, yb] = part(0);
    cross_entropy(ddp(xb), yb).backward();
  }
  check(ddp->sync_log().empty(), "no_sync: backward under no_sync starts no collective");
  Tensor g = model->parameters()[0].grad().sum();
  std::vector<Tensor> all = dist::all_gather(full({1}, g.item<double>(), DType::f64));
  check(all[0].item<double>() != all[1].item<double>(), "no_sync: gradients stay local (they differ across ranks)");
  auto [xb, yb] = part(1);
  cross_entropy(ddp(xb), yb).backward();
  check(!ddp->sync_log().empty(), "no_sync: the next backward synchronizes");
  double d = max_grad_diff(model->parameters(), ref->parameters());
  check(d <= 1e-12, fmt::format("no_sync: accumulated then synchronized gradients equal single-process ones, max diff {:.3g}", d));
}

// Rank `odd` builds a different hidden width.
void mismatch(int rank, int odd) {
  auto model = mlp(DType::f32, 7, rank == odd ? 128 : 256);
  nn::DistributedDataParallel ddp(model, {});
  check(false, "mismatch: DDP accepted models that differ");
}

// Rank 1 dies with SIGKILL at step 3; the others' next all-reduce fails naming it.
void dead_rank(int rank) {
  auto [X, y] = global_batch(DType::f32);
  auto model = mlp(DType::f32, 7, 64);
  nn::DistributedDataParallel ddp(model, {});
  optim::SGD opt(ddp->parameters(), {.lr = 0.1});
  for (int s = 0; s < 20; ++s) {
    if (s == 3 && rank == 1) ::kill(::getpid(), SIGKILL);
    Tensor loss = cross_entropy(ddp(X.narrow(0, rank * 32, 32)), y.narrow(0, rank * 32, 32));
    opt.zero_grad();
    auto t0 = std::chrono::steady_clock::now();
    try {
      loss.backward();
    } catch (const DistError&) {
      fmt::print("failed after {:.2f} s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      throw;
    }
    opt.step();
  }
  check(false, "dead_rank: training went on without rank 1");
}

// Each rank's shard for two epochs; gathered, they must form one padded permutation.
void sampler(int rank, int world) {
  for (int64_t n : {10, 12, 1001}) {
    data::DistributedSampler s(n, {.seed = 3});
    std::vector<std::vector<int64_t>> orders;
    for (uint64_t e = 0; e < 2; ++e) {
      s.set_epoch(e);
      std::vector<int64_t> mine = s.indices();
      std::vector<Tensor> all = dist::all_gather(from_vector<int64_t>(mine, Shape{static_cast<int64_t>(mine.size())}));
      std::vector<int64_t> global(static_cast<size_t>(s.total_size()));
      for (int r = 0; r < world; ++r) {
        auto v = all[static_cast<size_t>(r)].to_vector<int64_t>();
        for (size_t i = 0; i < v.size(); ++i) global[i * static_cast<size_t>(world) + static_cast<size_t>(r)] = v[i];
      }
      std::set<int64_t> first(global.begin(), global.begin() + n);
      bool padded = true;
      for (size_t i = static_cast<size_t>(n); i < global.size(); ++i) padded = padded && global[i] == global[i - static_cast<size_t>(n)];
      check(static_cast<int64_t>(mine.size()) == (n + world - 1) / world && static_cast<int64_t>(first.size()) == n &&
                *first.begin() == 0 && *first.rbegin() == n - 1 && padded,
            fmt::format("sampler n={} epoch {}: {} each, disjoint cover of {} plus {} repeated", n, e, mine.size(), n,
                        s.total_size() - n));
      orders.push_back(global);
    }
    check(orders[0] != orders[1], fmt::format("sampler n={}: epoch 1 reshuffles", n));
  }
}

// Trainer over DDP and a DistributedSampler; rank 0 prints the epochs' losses
// exactly ("loss E V") and writes the checkpoint.
void trainer(int rank, int world, int epochs, const std::string& save, const std::string& resume) {
  manual_seed(4);
  Tensor X = randn({512, 784}), y = randint(0, 10, {512});
  auto model = mlp(DType::f32, 7, 64);
  nn::DistributedDataParallel ddp(model, {});
  optim::SGD opt(ddp->parameters(), {.lr = 0.05, .momentum = 0.9});
  auto smp = std::make_shared<data::DistributedSampler>(512, data::DistributedSamplerOptions{.seed = 1});
  data::DataLoader loader(X, y, {.batch_size = 128 / world, .sampler = smp});
  train::Trainer t({.max_epochs = epochs, .progress = false, .process_group = dist::default_group(),
                    .checkpoint_path = save, .resume_from = resume});
  auto history = t.fit(*ddp, opt, loader);
  if (rank == 0)
    for (auto& m : history) fmt::print("loss {} {:.17g}\n", m.epoch, m.train_loss);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    fmt::print(stderr, "usage: ddp_worker SCENARIO INIT_METHOD [ARGS]\n");
    return 2;
  }
  std::string scenario = argv[1];
  auto arg = [&](int i) { return argc > i ? std::string(argv[i]) : std::string(); };
  try {
    auto pg = dist::init_process_group({.backend = "gloo", .init_method = argv[2], .timeout = std::chrono::seconds(scenario == "dead_rank" ? 2 : 30)});
    int rank = pg->rank(), world = pg->size();
    if (scenario == "equals_single") equals_single(rank, world, arg(3) == "f32" ? DType::f32 : DType::f64);
    else if (scenario == "overlap") overlap(rank, world);
    else if (scenario == "tied") tied(rank, world);
    else if (scenario == "no_sync") no_sync(rank, world);
    else if (scenario == "mismatch") mismatch(rank, std::stoi(arg(3)));
    else if (scenario == "dead_rank") dead_rank(rank);
    else if (scenario == "sampler") sampler(rank, world);
    else if (scenario == "trainer") trainer(rank, world, std::stoi(arg(3)), arg(4), arg(5));
    else {
      fmt::print(stderr, "unknown scenario {}\n", scenario);
      return 2;
    }
    dist::destroy_process_group();
  } catch (const DistError& e) {
    fmt::print("DistError: {}\n", e.what());
    std::fflush(stdout);
    std::_Exit(3);
  } catch (const ValueError& e) {
    fmt::print("ValueError: {}\n", e.what());
    std::fflush(stdout);
    std::_Exit(4);
  }
  return g_failures == 0 ? 0 : 1;
}
