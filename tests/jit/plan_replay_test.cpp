// The CPU backend's plan cache over whole training steps: a repeated step's
// realizations (forward and backward with their matmuls, epilogues, row
// programs and views; the optimizer's in-place update) are replayed, not
// scheduled, take no new memory, and give the interpreter's numbers bit for bit.
#include <catch2/catch.hpp>

#include <cstring>

#include "codegen/backend.h"
#include "codegen/cpu/cpu_backend.h"
#include "codegen/cpu/jit_stats.h"
#include "dsl/tessel.h"
#include "dsl/train/optimizer.h"
#include "runtime/host_allocator.h"

using namespace tessel;

namespace {

struct Run {
  nn::Sequential net;
  std::unique_ptr<optim::SGD> opt;
  std::vector<float> losses;

  Run() {
    manual_seed(7);
    net = nn::Sequential(nn::Linear(20, 16), nn::ReLU(), nn::Linear(16, 5));
    opt = std::make_unique<optim::SGD>(net->parameters(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  }
  // One step on batch `b` (each step a new batch: new leaf memory every time).
  void step(int b) {
    manual_seed(100 + b);
    Tensor x = rand({32, 20});
    x.eval();
    std::vector<int64_t> labels(32);
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>((i * 7 + b) % 5);
    Tensor y = from_vector<int64_t>(labels, Shape{32});
    Tensor loss = cross_entropy(net(x), y);
    opt->zero_grad();
    loss.backward();
    opt->step();
    losses.push_back(loss.item<float>());
  }
  std::vector<float> weights() const {
    std::vector<float> out;
    for (auto& p : net->parameters()) {
      auto v = p.data().contiguous().to_vector<float>();
      out.insert(out.end(), v.begin(), v.end());
    }
    return out;
  }
};

bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("plan replay: a repeated training step is replayed, takes no new memory, equals the interpreter",
          "[jit][plan]") {
  if (!cpu_jit_backend()) return;  // no compiled CPU backend in this build
  Run jit, ref;
  {
    BackendOverride o(*cpu_jit_backend());
    for (int b = 0; b < 3; ++b) jit.step(b);  // the first steps schedule (and compile)
    reset_cpu_jit_stats();
    const HostAllocatorStats before = host_allocator_stats();
    for (int b = 3; b < 8; ++b) jit.step(b);
    const CpuJitStats s = cpu_jit_stats();
    const HostAllocatorStats after = host_allocator_stats();
    // Per step: backward (forward values and gradients), the optimizer's
    // update, and the loss's item() -- every one replayed.
    CHECK(s.realizations > 0);
    CHECK(s.plan_replays == s.realizations);
    CHECK(s.matmuls == 5 * 5);  // 2 forward + 3 backward per step
    CHECK(s.kernels_compiled == 0);
    // Every buffer comes from the allocator's cache: no fresh memory.
    CHECK(after.allocations - before.allocations == after.reuses - before.reuses);
  }
  {
    BackendOverride o(ref_backend());
    for (int b = 0; b < 8; ++b) ref.step(b);
  }
  CHECK(bit_equal(jit.losses, ref.losses));
  CHECK(bit_equal(jit.weights(), ref.weights()));
}
