// ddp_bench: one rank of the ddp_fashion_epoch figure. Run under tessel-run:
//   TESSEL_NUM_THREADS=1 tessel-run --nproc-per-node 2 build/bench/ddp_bench [--batches N] [--epochs E]
// Every rank trains the Fashion-MNIST MLP (784-256-10, SGD lr 0.1) wrapped in
// nn::DistributedDataParallel on its DistributedSampler share, global batch
// 256 (256 / world per rank). After a few warm-up batches (kernel compiles),
// each timed epoch runs between two barriers; rank 0 prints one line with the
// median epoch, and with more than one rank the median time of one all_reduce
// of all the gradients' elements and of one element, alone:
//   ddp_bench world=2 batches=235 samples=60160 seconds=S samples_per_s=X loss=L
//   ddp_bench all_reduce elements=203530 ms=A one_ms=B
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "dsl/data/distributed_sampler.h"
#include "dsl/data/fashion_mnist.h"
#include "dsl/dist/collectives.h"
#include "dsl/nn/distributed_data_parallel.h"
#include "dsl/tessel.h"
#include "dsl/train/optimizer.h"

using namespace tessel;

int main(int argc, char** argv) {
  int64_t max_batches = 0;  // 0: the whole epoch
  int epochs = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--batches") == 0) max_batches = std::stoll(argv[i + 1]);
    else if (std::strcmp(argv[i], "--epochs") == 0) epochs = std::stoi(argv[i + 1]);
  }
  try {
    auto pg = dist::init_process_group({.backend = "gloo"});
    const int world = pg->size(), rank = pg->rank();
    const int64_t global_batch = 256;
    if (global_batch % world != 0) throw ValueError("ddp_bench: the world size must divide 256");
    data::Dataset train = data::load_fashion_mnist(true);
    manual_seed(0);
    auto net = nn::Sequential(nn::Flatten(), nn::LazyLinear(256), nn::ReLU(), nn::LazyLinear(10));
    net->apply_init(train.X.narrow(0, 0, 2));
    nn::DistributedDataParallel ddp(net, {.bucket_cap_mb = 25});
    optim::SGD opt(ddp->parameters(), {.lr = 0.1});
    auto sampler = std::make_shared<data::DistributedSampler>(train.X.size(0), data::DistributedSamplerOptions{});
    data::DataLoader loader(train.X, train.y, {.batch_size = global_batch / world, .sampler = sampler});
    auto step = [&](const data::DataLoader::Batch& b) {
      Tensor loss = cross_entropy(ddp(b.first), b.second);
      opt.zero_grad();
      loss.backward();
      opt.step();
      return loss;
    };
    {
      sampler->set_epoch(1000);  // warm-up: compiles every kernel the timed epochs use
      auto batches = loader.epoch();
      for (size_t i = 0; i < 3; ++i) step(batches[i]).item<double>();
    }
    std::vector<double> seconds;
    int64_t batches_run = 0;
    double last_loss = 0;
    for (int e = 0; e < epochs; ++e) {
      sampler->set_epoch(static_cast<uint64_t>(e));
      auto batches = loader.epoch();
      const size_t count =
          max_batches > 0 ? std::min(batches.size(), static_cast<size_t>(max_batches)) : batches.size();
      dist::barrier();
      auto t0 = std::chrono::steady_clock::now();
      Tensor loss;
      auto it = batches.begin();
      for (size_t done = 0; done < count; ++done, ++it) loss = step(*it);
      last_loss = loss.item<double>();
      dist::barrier();
      seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      batches_run = static_cast<int64_t>(count);
    }
    std::sort(seconds.begin(), seconds.end());
    double med = seconds[seconds.size() / 2];
    int64_t samples = batches_run * global_batch;
    if (rank == 0)
      fmt::print("ddp_bench world={} batches={} samples={} seconds={:.4f} samples_per_s={:.1f} loss={:.4f}\n", world,
                 batches_run, samples, med, static_cast<double>(samples) / med, last_loss);
    if (world > 1) {
      // The engine's own limit: one all_reduce of every gradient (what DDP's
      // single bucket moves per step) and of one float (the latency), alone.
      int64_t numel = 0;
      for (auto& p : ddp->parameters()) numel += p.numel();
      auto median_ms = [&](const Tensor& t) {
        std::vector<double> ms;
        for (int i = 0; i < 110; ++i) {
          dist::barrier();
          auto a = std::chrono::steady_clock::now();
          dist::all_reduce(t);
          if (i >= 10) ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
        }
        std::sort(ms.begin(), ms.end());
        return ms[ms.size() / 2];
      };
      Tensor grads = zeros({numel}), one = zeros({1});
      realize({grads, one});
      const double all_ms = median_ms(grads), one_ms = median_ms(one);
      if (rank == 0) fmt::print("ddp_bench all_reduce elements={} ms={:.4f} one_ms={:.4f}\n", numel, all_ms, one_ms);
    }
    std::fflush(stdout);
    dist::destroy_process_group();
  } catch (const std::exception& e) {
    fmt::print(stderr, "ddp_bench: {}\n", e.what());
    return 1;
  }
  return 0;
}
