// One rank of the collectives tests (collectives_test.cpp starts several).
//   collectives_worker SCENARIO INIT_METHOD
// Prints one line per checked result; exits 0 when every value matches its
// definition, 1 on a wrong value, 3 with "DistError: ..." on a DistError.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "dsl/dist/collectives.h"
#include "dsl/tessel.h"

using namespace tessel;

namespace {

int g_failures = 0;

template <class T>
void expect_values(const std::string& what, const Tensor& t, const std::vector<T>& want) {
  std::vector<T> got = t.to_vector<T>();
  if (got == want) {
    fmt::print("ok {} {}\n", what, got);
  } else {
    fmt::print("FAIL {}: got {} want {}\n", what, got, want);
    ++g_failures;
  }
}

// Rank r's contribution: element i is r * 100 + i.
template <class T>
Tensor contribution(int r, int64_t n, DType dt) {
  std::vector<T> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(static_cast<T>(r * 100 + i));
  return from_vector<T>(v, Shape{n}).to(dt);
}

template <class T>
void check_all_reduce(int rank, int size, DType dt) {
  const int64_t n = 5;
  std::vector<T> sum(n), mx(n);
  for (int64_t i = 0; i < n; ++i) {
    for (int r = 0; r < size; ++r) sum[i] += static_cast<T>(r * 100 + i);
    mx[i] = static_cast<T>((size - 1) * 100 + i);
  }
  Tensor s = contribution<T>(rank, n, dt);
  dist::all_reduce(s);
  expect_values(fmt::format("all_reduce sum {}", dtype_name(dt)), s, sum);
  Tensor m = contribution<T>(rank, n, dt);
  dist::all_reduce(m, dist::ReduceOp::max);
  expect_values(fmt::format("all_reduce max {}", dtype_name(dt)), m, mx);
  if (is_floating(dt)) {
    std::vector<T> avg(n);
    for (int64_t i = 0; i < n; ++i) avg[i] = sum[i] / static_cast<T>(size);
    Tensor a = contribution<T>(rank, n, dt);
    dist::all_reduce(a, dist::ReduceOp::avg);
    expect_values(fmt::format("all_reduce avg {}", dtype_name(dt)), a, avg);
  }
}

void collectives(int rank, int size) {
  check_all_reduce<double>(rank, size, DType::f64);
  check_all_reduce<float>(rank, size, DType::f32);
  check_all_reduce<int64_t>(rank, size, DType::i64);
  check_all_reduce<int32_t>(rank, size, DType::i32);

  // broadcast from the last rank: everyone ends with its values
  Tensor b = contribution<double>(rank, 4, DType::f64).reshape({2, 2});
  dist::broadcast(b, size - 1);
  std::vector<double> root;
  for (int i = 0; i < 4; ++i) root.push_back((size - 1) * 100 + i);
  expect_values("broadcast", b, root);

  // all_gather: tensor r of the result is rank r's contribution
  std::vector<Tensor> all = dist::all_gather(contribution<float>(rank, 3, DType::f32));
  if (static_cast<int>(all.size()) != size) {
    fmt::print("FAIL all_gather: {} tensors for {} ranks\n", all.size(), size);
    ++g_failures;
  }
  for (int r = 0; r < static_cast<int>(all.size()); ++r)
    expect_values(fmt::format("all_gather[{}]", r), all[static_cast<size_t>(r)],
                  std::vector<float>{r * 100.f, r * 100.f + 1, r * 100.f + 2});

  // reduce_scatter: rank r gets chunk r (2 elements) summed over ranks
  Tensor in = contribution<double>(rank, 2 * size, DType::f64);
  Tensor out = zeros({2}, DType::f64);
  dist::reduce_scatter(out, in);
  std::vector<double> chunk(2);
  for (int i = 0; i < 2; ++i)
    for (int r = 0; r < size; ++r) chunk[static_cast<size_t>(i)] += r * 100 + 2 * rank + i;
  expect_values("reduce_scatter", out, chunk);

  // async: two collectives in flight while this thread computes
  Tensor x = full({3}, rank + 1.0, DType::f64), y = full({2}, rank * 2.0, DType::f64);
  auto wx = dist::all_reduce_async(x);
  auto wy = dist::all_reduce_async(y, dist::ReduceOp::max);
  Tensor local = (ones({3}, DType::f64) * 7).sum();
  wx.wait();
  wy.wait();
  double tri = size * (size + 1) / 2.0;
  expect_values("async all_reduce sum", x, std::vector<double>(3, tri));
  expect_values("async all_reduce max", y, std::vector<double>(2, (size - 1) * 2.0));
  expect_values("local work meanwhile", local, std::vector<double>{21.0});

  // barrier: the last rank arrives 100 ms late, and nobody leaves before every
  // rank has arrived (steady_clock is one clock for all processes of a machine)
  auto now_ns = [] {
    return static_cast<double>(std::chrono::steady_clock::now().time_since_epoch() / std::chrono::nanoseconds(1));
  };
  if (rank == size - 1) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  Tensor arrived = full({1}, now_ns(), DType::f64);
  dist::barrier();
  double left = now_ns();
  dist::all_reduce(arrived, dist::ReduceOp::max);
  double last_arrival = arrived.item<double>();
  if (left >= last_arrival) {
    fmt::print("ok barrier waited for the late rank\n");
  } else {
    fmt::print("FAIL barrier: left {:.1f} ms before the last rank arrived\n", (last_arrival - left) / 1e6);
    ++g_failures;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    fmt::print(stderr, "usage: collectives_worker SCENARIO INIT_METHOD\n");
    return 2;
  }
  std::string scenario = argv[1];
  try {
    auto pg = dist::init_process_group({.backend = "gloo", .init_method = argv[2], .timeout = std::chrono::seconds(2)});
    int rank = pg->rank(), size = pg->size();
    if (scenario == "collectives") {
      collectives(rank, size);
    } else if (scenario == "mismatch_shape") {
      dist::all_reduce(ones({rank == 1 ? 4 : 3}));
    } else if (scenario == "mismatch_dtype") {
      dist::all_reduce(ones({3}, rank == 1 ? DType::f64 : DType::f32));
    } else if (scenario == "mismatch_call") {
      if (rank == 1) dist::broadcast(ones({3}), 0);
      else dist::all_reduce(ones({3}));
    } else if (scenario == "dead_rank") {
      dist::barrier();
      if (rank == 1) ::kill(::getpid(), SIGKILL);  // dies as kill -9 leaves it: no cleanup, no goodbye
      auto t0 = std::chrono::steady_clock::now();
      try {
        dist::all_reduce(ones({1000}));
      } catch (const DistError&) {
        fmt::print("failed after {:.2f} s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        throw;
      }
    } else if (scenario == "hung_rank") {
      dist::barrier();
      if (rank == 1) std::this_thread::sleep_for(std::chrono::seconds(120));  // hangs; the test kills it
      auto t0 = std::chrono::steady_clock::now();
      try {
        dist::all_reduce(ones({1000}));
      } catch (const DistError&) {
        fmt::print("failed after {:.2f} s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        throw;
      }
    } else if (scenario == "gated") {
      // all_reduce_after: submitted before its data exists; what moves is
      // what the buffer holds when the gate opens.
      Tensor t = zeros({4});
      t.eval();
      auto gate = std::make_shared<dist::ReadyGate>();
      dist::WorkPtr w = pg->all_reduce_after(dist::comm_buffer(t), dist::ReduceOp::sum, gate);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the agreement is done by now; the data is not
      for (int i = 0; i < 4; ++i) reinterpret_cast<float*>(t.buffer().bytes(DType::f32))[i] = static_cast<float>(rank + 1 + i);
      t.buffer().storage->bump_version();
      gate->open();
      w->wait();
      fmt::print("ok gated {}\n", t.to_vector<float>());
      // Rank 0 cancels the next one: it fails at once and stays failed; rank 1
      // waits for a partner that never sends and fails naming rank 0.
      auto next = std::make_shared<dist::ReadyGate>();
      dist::WorkPtr w2 = pg->all_reduce_after(dist::comm_buffer(t), dist::ReduceOp::sum, next);
      if (rank == 0) next->cancel();
      else next->open();
      auto t0 = std::chrono::steady_clock::now();
      try {
        w2->wait();
        fmt::print("FAIL the cancelled all_reduce returned\n");
      } catch (const DistError& e) {
        fmt::print("failed after {:.2f} s: {}\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                   e.what());
      }
      if (rank == 0) dist::all_reduce(t);  // out of step for good: a DistError
    } else if (scenario == "exit_rank1") {
      fmt::print("rank {} of {} joined\n", rank, size);
      std::fflush(stdout);
      if (rank == 1) std::_Exit(7);
      std::this_thread::sleep_for(std::chrono::seconds(60));  // ended by tessel-run when rank 1 fails
    } else if (scenario == "wait_for_signal") {
      fmt::print("ready\n");
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::seconds(60));  // ended by the signal tessel-run passes on
    } else {
      fmt::print(stderr, "unknown scenario {}\n", scenario);
      return 2;
    }
    dist::destroy_process_group();
  } catch (const DistError& e) {
    fmt::print("DistError: {}\n", e.what());
    std::fflush(stdout);
    std::_Exit(3);  // the group's peers may be gone: leave without tearing it down
  }
  return g_failures == 0 ? 0 : 1;
}
