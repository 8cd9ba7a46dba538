// run_benchmarks: every figure of bench/README.md, measured side by side in
// one run, written to results.json (next to this executable unless --out)
// and printed as a table.
//
//   build-bench/bench/run_benchmarks                 # everything
//   build-bench/bench/run_benchmarks --quick         # fewer repetitions
//   build-bench/bench/run_benchmarks --only=fused_chain_16M,compile_latency
//   build-bench/bench/run_benchmarks --only=lenet_epoch --lenet-images=60000   # LeNet on every image
//   build-bench/bench/run_benchmarks --only=bandwidth_limit   # the copy/triad bandwidth alone (also run with fused_chain_16M)
//
// Steady-state figures run under Google Benchmark with every repetition of
// every contestant randomly interleaved (so a slow spell on a shared machine
// hits all contestants alike), and report medians. The one-shot figures
// (compile latency, a training epoch) are timed here, alternating the
// contestants, also as medians.
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <fmt/format.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#if defined(__has_builtin)
#if __has_builtin(__builtin_nontemporal_store)
#define BENCH_HAS_NONTEMPORAL_BUILTIN 1
#endif
#endif

#include <cmath>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <sstream>

#include "bench/compile_pass.h"
#include "bench/hand.h"
#include "bench/harness.h"
#include "bench/torch_peer.h"
#include "codegen/backend.h"
#include "codegen/cpu/cpu_backend.h"
#include "codegen/cpu/jit_stats.h"
#include "codegen/cpu/onednn_conv.h"
#include "dsl/data/dataloader.h"
#include "dsl/data/fashion_mnist.h"
#include "dsl/tessel.h"
#include "dsl/train/optimizer.h"
#include "samples/gpt/gpt_data.h"
#include "samples/gpt/gpt_model.h"
#include "runtime/kernel_cache.h"
#include "runtime/thread_pool.h"
#include "samples/lenet/lenet_model.h"

using namespace tessel;

namespace {

struct Config {
  bool quick = false;
  std::set<std::string> only;  // empty: all figures
  std::filesystem::path out;
  int64_t lenet_images = 15360;  // lenet_epoch: the first N training images (60 batches of 256); <= 0: all
  int reps() const { return quick ? 5 : 11; }
  double min_time() const { return quick ? 0.05 : 0.1; }
  bool wants(const std::string& fig) const { return only.empty() || only.count(fig); }
};

bench::Results results;

// The tessel rows: the compiled CPU backend when built ("cpu"), and the ref
// interpreter ("ref"), selected per call so both run in the same process.
Backend* jit_backend() { return cpu_jit_backend(); }
const char* main_backend_name() { return jit_backend() ? "cpu" : "ref"; }
Backend& main_backend() { return jit_backend() ? *jit_backend() : ref_backend(); }

// Contestant names in Google Benchmark are "<figure>/<who>".
struct Collector : benchmark::ConsoleReporter {
  Collector() : ConsoleReporter(OO_Tabular) {}
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& r : runs) {
      if (r.run_type != Run::RT_Aggregate || r.aggregate_name != "median") continue;
      const std::string& name = r.run_name.function_name;
      auto slash = name.find('/');
      double ms = r.GetAdjustedRealTime() * benchmark::GetTimeUnitMultiplier(benchmark::kMillisecond) /
                  benchmark::GetTimeUnitMultiplier(r.time_unit);
      results.set(name.substr(0, slash), name.substr(slash + 1) + "_ms", ms);
      // CPU time of the timing thread: less sensitive to other work on a shared machine.
      double cpu_ms = r.GetAdjustedCPUTime() * benchmark::GetTimeUnitMultiplier(benchmark::kMillisecond) /
                      benchmark::GetTimeUnitMultiplier(r.time_unit);
      results.set(name.substr(0, slash), name.substr(slash + 1) + "_cpu_ms", cpu_ms);
    }
    ConsoleReporter::ReportRuns(runs);
  }
};

void add(const Config& cfg, const std::string& fig, const std::string& who, std::function<void()> call) {
  call();  // warm-up: compiles, allocator pools, first touch of every buffer
  call();
  benchmark::RegisterBenchmark((fig + "/" + who).c_str(),
                               [call](benchmark::State& st) {
                                 for (auto _ : st) call();
                               })
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime()
      ->Repetitions(cfg.reps())
      ->ReportAggregatesOnly(true)
      ->MinTime(cfg.min_time());
}

// Runs f with `b` as the CPU backend.
template <class F>
std::function<void()> on(Backend& b, F f) {
  return [&b, f] {
    BackendOverride o(b);
    f();
  };
}

void add_tessel(const Config& cfg, const std::string& fig, std::function<void()> call) {
  add(cfg, fig, "tessel", on(main_backend(), call));
  if (jit_backend()) add(cfg, fig, "tessel_ref", on(ref_backend(), call));
  results.note(fig, "tessel_backend", main_backend_name());
}

Tensor realized_rand(const Shape& s) {
  Tensor t = rand(s);
  t.eval();
  return t;
}
const float* fptr(const Tensor& t) { return t.buffer().ptr<float>(); }

double max_abs_diff(const float* x, const float* y, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, static_cast<double>(std::fabs(x[i] - y[i])));
  return m;
}

// ---------------------------------------------------------------- figures

// Inputs shared by every contestant of a figure (kept alive for the whole run).
struct ChainInputs {
  Tensor a, b, c, d;
  std::vector<float> out;
};
std::vector<std::unique_ptr<ChainInputs>> keep_chain;

void fused_chain(const Config& cfg, const std::string& fig, int64_t rows, int64_t cols, bool with_hand,
                 bool with_prealloc) {
  auto in = std::make_unique<ChainInputs>();
  Shape s = rows == 1 ? Shape{cols} : Shape{rows, cols};
  in->a = realized_rand(s);
  in->b = realized_rand(s);
  in->c = realized_rand(s) - 0.5;
  in->c.eval();
  in->d = realized_rand(s);
  int64_t n = rows * cols;
  in->out.assign(static_cast<size_t>(n), 0.0f);
  Tensor a = in->a, b = in->b, c = in->c, d = in->d;
  auto tessel_call = [a, b, c, d] {
    Tensor y = relu(a * b + c) * d;
    y.eval();
  };
  {  // the compiled result must be the hand loop's
    BackendOverride o(main_backend());
    Tensor y = relu(a * b + c) * d;
    bench::hand::chain(fptr(a), fptr(b), fptr(c), fptr(d), in->out.data(), n);
    double diff = max_abs_diff(fptr(y.contiguous()), in->out.data(), n);
    results.set(fig, "check_max_abs_diff", diff);
  }
  add_tessel(cfg, fig, tessel_call);
  if (with_hand) {
    float* out = in->out.data();
    const float *pa = fptr(a), *pb = fptr(b), *pc = fptr(c), *pd = fptr(d);
    add(cfg, fig, "hand", [=] {
      bench::hand::chain(pa, pb, pc, pd, out, n);
      benchmark::ClobberMemory();
    });
  }
  if (with_prealloc) add(cfg, fig, "libtorch_prealloc", bench::torch_peer::chain_prealloc(fptr(a), fptr(b), fptr(c), fptr(d), n));
  add(cfg, fig, "libtorch_eager", bench::torch_peer::chain_eager_2d(fptr(a), fptr(b), fptr(c), fptr(d), rows, cols));
  keep_chain.push_back(std::move(in));
}

// ------------------------------------------------------- bandwidth limit

// bandwidth_limit: what one thread of this machine streams, measured in the
// same run as the memory-bound figures it bounds (interleaved with them by
// Google Benchmark, so a slow spell hits both). nt_copy: 16M floats copied
// with non-temporal stores (64 MiB read + 64 MiB written; the destination's
// lines are not read first, as with the JIT's large elementwise outputs).
// triad: STREAM's a[i] = b[i] + s*c[i] on 16M floats with ordinary stores
// (128 MiB read + 64 MiB written; the write-allocate reads of `a` are not
// counted, as STREAM does not). GB/s with GB = 1e9 bytes. The vector width
// is picked at run time from the CPU's features, so the binary runs anywhere.
constexpr int64_t kStreamFloats = int64_t{16} << 20;  // a multiple of 16: no loop tails

struct StreamKernels {
  const char* how;
  void (*copy)(const float* __restrict src, float* __restrict dst, int64_t n);
  void (*triad)(float* __restrict a, const float* __restrict b, const float* __restrict c, float s, int64_t n);
};

#if defined(__x86_64__)
__attribute__((target("avx512f"))) void nt_copy_avx512(const float* __restrict src, float* __restrict dst, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) _mm512_stream_ps(dst + i, _mm512_load_ps(src + i));
  _mm_sfence();
}
__attribute__((target("avx512f"))) void triad_avx512(float* __restrict a, const float* __restrict b,
                                                     const float* __restrict c, float s, int64_t n) {
  const __m512 vs = _mm512_set1_ps(s);
  for (int64_t i = 0; i < n; i += 16)
    _mm512_store_ps(a + i, _mm512_add_ps(_mm512_load_ps(b + i), _mm512_mul_ps(vs, _mm512_load_ps(c + i))));
}
__attribute__((target("avx"))) void nt_copy_avx(const float* __restrict src, float* __restrict dst, int64_t n) {
  for (int64_t i = 0; i < n; i += 8) _mm256_stream_ps(dst + i, _mm256_load_ps(src + i));
  _mm_sfence();
}
__attribute__((target("avx"))) void triad_avx(float* __restrict a, const float* __restrict b, const float* __restrict c,
                                              float s, int64_t n) {
  const __m256 vs = _mm256_set1_ps(s);
  for (int64_t i = 0; i < n; i += 8)
    _mm256_store_ps(a + i, _mm256_add_ps(_mm256_load_ps(b + i), _mm256_mul_ps(vs, _mm256_load_ps(c + i))));
}
#endif
// The baseline every target has: SSE on x86-64 (part of the ABI), elsewhere
// Clang's portable non-temporal store where the compiler has it, else plain stores.
void nt_copy_base(const float* __restrict src, float* __restrict dst, int64_t n) {
#if defined(__x86_64__)
  for (int64_t i = 0; i < n; i += 4) _mm_stream_ps(dst + i, _mm_load_ps(src + i));
  _mm_sfence();
#elif defined(BENCH_HAS_NONTEMPORAL_BUILTIN)
  for (int64_t i = 0; i < n; ++i) __builtin_nontemporal_store(src[i], dst + i);
#else
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
#endif
}
void triad_base(float* __restrict a, const float* __restrict b, const float* __restrict c, float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
}

StreamKernels stream_kernels() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return {"AVX-512 (_mm512_stream_ps; triad _mm512_store_ps)", nt_copy_avx512, triad_avx512};
  if (__builtin_cpu_supports("avx")) return {"AVX (_mm256_stream_ps; triad _mm256_store_ps)", nt_copy_avx, triad_avx};
  return {"SSE (_mm_stream_ps; triad scalar loop)", nt_copy_base, triad_base};
#elif defined(BENCH_HAS_NONTEMPORAL_BUILTIN)
  return {"__builtin_nontemporal_store loop; triad scalar loop", nt_copy_base, triad_base};
#else
  return {"plain stores (no non-temporal store on this target); triad scalar loop", nt_copy_base, triad_base};
#endif
}

struct StreamBuffers {
  float *a = nullptr, *b = nullptr, *c = nullptr;
  ~StreamBuffers() {
    std::free(a), std::free(b), std::free(c);
  }
};
std::vector<std::unique_ptr<StreamBuffers>> keep_stream;

void bandwidth_limit(const Config& cfg) {
  const std::string fig = "bandwidth_limit";
  const int64_t n = kStreamFloats;
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  auto buf = std::make_unique<StreamBuffers>();
  for (float** p : {&buf->a, &buf->b, &buf->c}) {
    *p = static_cast<float*>(std::aligned_alloc(64, bytes));
    if (!*p) throw std::bad_alloc();
  }
  for (int64_t i = 0; i < n; ++i) buf->a[i] = 0, buf->b[i] = 1.0f + static_cast<float>(i % 7), buf->c[i] = 0.5f;
  const StreamKernels k = stream_kernels();
  float *a = buf->a, *b = buf->b, *c = buf->c;
  add(cfg, fig, "nt_copy", [k, b, a, n] {
    k.copy(b, a, n);
    benchmark::DoNotOptimize(a);
    benchmark::ClobberMemory();
  });
  add(cfg, fig, "triad", [k, a, b, c, n] {
    k.triad(a, b, c, 3.0f, n);
    benchmark::DoNotOptimize(a);
    benchmark::ClobberMemory();
  });
  results.note(fig, "how", k.how);
  results.set(fig, "nt_copy_bytes", 2.0 * static_cast<double>(bytes));
  results.set(fig, "triad_bytes", 3.0 * static_cast<double>(bytes));
  keep_stream.push_back(std::move(buf));
}

// After the run: bandwidth_limit's GB/s, and for each memory-bound figure
// measured in the same run, each contestant's achieved GB/s (the bytes the
// figure must move at least, over its median time) and its fraction of the
// non-temporal copy's bandwidth. vs_bandwidth_limit = the figure's time /
// the time its bytes take at that bandwidth (1 / fraction_of_bandwidth), so
// the table prints it like any peer.
void bandwidth_fractions() {
  if (!results.numbers.count("bandwidth_limit")) return;
  auto& bw = results.numbers["bandwidth_limit"];
  if (!bw.count("nt_copy_ms") || !bw.count("triad_ms")) return;
  auto gbs = [](double bytes, double ms) { return bytes / (ms * 1e6); };
  const double copy_gbs = gbs(bw["nt_copy_bytes"], bw["nt_copy_ms"]);
  const double copy_cpu_gbs = gbs(bw["nt_copy_bytes"], bw["nt_copy_cpu_ms"]);
  bw["nt_copy_gbs"] = copy_gbs;
  bw["nt_copy_cpu_gbs"] = copy_cpu_gbs;
  bw["triad_gbs"] = gbs(bw["triad_bytes"], bw["triad_ms"]);
  bw["triad_cpu_gbs"] = gbs(bw["triad_bytes"], bw["triad_cpu_ms"]);
  const double f32 = static_cast<double>(sizeof(float));
  // fused_chain_16M: relu(a*b+c)*d reads 4 arrays and writes 1.
  const std::vector<std::pair<std::string, double>> memory_bound = {
      {"fused_chain_16M", 5 * f32 * static_cast<double>(kStreamFloats)}};
  for (auto& [fig, bytes] : memory_bound) {
    if (!results.numbers.count(fig)) continue;
    auto& kv = results.numbers[fig];
    if (!kv.count("tessel_ms")) continue;
    kv["bytes"] = bytes;
    kv["bandwidth_limit_ms"] = bytes / (copy_gbs * 1e6);
    kv["bandwidth_limit_cpu_ms"] = bytes / (copy_cpu_gbs * 1e6);
    for (const std::string who : {"tessel", "tessel_ref", "hand", "libtorch_prealloc", "libtorch_eager"}) {
      if (!kv.count(who + "_ms")) continue;
      kv[who + "_gbs"] = gbs(bytes, kv[who + "_ms"]);
      kv[who == "tessel" ? std::string("fraction_of_bandwidth") : who + "_fraction_of_bandwidth"] =
          kv[who + "_gbs"] / copy_gbs;
    }
    kv["vs_bandwidth_limit"] = kv["tessel_ms"] / kv["bandwidth_limit_ms"];
    if (kv.count("tessel_ref_ms")) kv["ref_vs_bandwidth_limit"] = kv["tessel_ref_ms"] / kv["bandwidth_limit_ms"];
    if (kv.count("tessel_cpu_ms")) kv["cpu_vs_bandwidth_limit"] = kv["tessel_cpu_ms"] / kv["bandwidth_limit_cpu_ms"];
  }
}

nn::Sequential make_mlp(int64_t in, int64_t hidden, int64_t out) {
  return nn::Sequential(nn::Linear(in, hidden), nn::ReLU(), nn::Linear(hidden, out));
}
bench::torch_peer::Mlp weights_of(const nn::Sequential& net) {
  auto p = net->parameters();  // 0.weight, 0.bias, 2.weight, 2.bias
  for (auto& t : p) t.eval();
  return {fptr(p[0]), fptr(p[1]), fptr(p[2]), fptr(p[3]), p[0].size(1), p[0].size(0), p[2].size(0)};
}

struct MlpState {
  nn::Sequential net = make_mlp(784, 256, 10);
  Tensor x, y;
  std::unique_ptr<bench::hand::Mlp> hand;
  std::unique_ptr<optim::SGD> opt;
  std::vector<int64_t> labels;
};
std::vector<std::unique_ptr<MlpState>> keep_mlp;

void mlp_forward(const Config& cfg) {
  const std::string fig = "mlp_forward_b1024";
  const int64_t B = 1024;
  auto st = std::make_unique<MlpState>();
  st->net->eval();
  st->x = realized_rand({B, 784});
  auto w = weights_of(st->net);
  st->hand = std::make_unique<bench::hand::Mlp>(B, w.w1, w.b1, w.w2, w.b2);
  nn::Sequential net = st->net;
  Tensor x = st->x;
  auto tessel_call = [net, x] {
    NoGradGuard g;
    Tensor y = net(x);
    y.eval();
  };
  {
    BackendOverride o(main_backend());
    NoGradGuard g;
    Tensor y = net(x).contiguous();
    st->hand->forward(fptr(x));
    results.set(fig, "check_max_abs_diff", max_abs_diff(fptr(y), st->hand->z.data(), B * 10));
  }
  add_tessel(cfg, fig, tessel_call);
  auto* h = st->hand.get();
  const float* px = fptr(x);
  add(cfg, fig, "hand", [h, px] { h->forward(px); });
  add(cfg, fig, "libtorch", bench::torch_peer::mlp_forward(w, px, B));
  keep_mlp.push_back(std::move(st));
}

void train_step(const Config& cfg) {
  const std::string fig = "train_step_b256";
  const int64_t B = 256;
  const double lr = 0.1;
  std::mt19937 rng(0);
  auto make = [&](Backend& backend) {
    auto st = std::make_unique<MlpState>();
    manual_seed(0);  // every copy starts from the same weights
    st->net = make_mlp(784, 256, 10);
    manual_seed(1);
    st->x = realized_rand({B, 784});
    st->labels.resize(B);
    std::mt19937 r(0);
    for (auto& l : st->labels) l = static_cast<int64_t>(r() % 10);
    st->y = from_vector<int64_t>(st->labels, Shape{B});
    st->opt = std::make_unique<optim::SGD>(st->net->parameters(), optim::SGDOptions{.lr = lr});
    nn::Sequential net = st->net;
    Tensor x = st->x, y = st->y;
    optim::SGD* opt = st->opt.get();
    auto params = net->parameters();
    auto call = [net, x, y, opt, params, &backend] {
      BackendOverride o(backend);
      Tensor loss = cross_entropy(net(x), y);
      opt->zero_grad();
      loss.backward();
      opt->step();
      std::vector<Tensor> outs{loss};
      for (auto& p : params) outs.push_back(p);
      realize(outs);  // the step is done only when the new weights exist
    };
    return std::make_pair(std::move(st), call);
  };
  auto [st, call] = make(main_backend());
  auto w = weights_of(st->net);
  st->hand = std::make_unique<bench::hand::Mlp>(B, w.w1, w.b1, w.w2, w.b2);
  {  // first-step losses must agree (same weights, same batch)
    BackendOverride o(main_backend());
    NoGradGuard g;
    double lt = cross_entropy(st->net(st->x), st->y).item<double>();
    float lh = bench::hand::Mlp(B, w.w1, w.b1, w.w2, w.b2).sgd_step(fptr(st->x), st->labels.data(), lr);
    results.set(fig, "check_loss_diff", std::fabs(lt - lh));
  }
  add(cfg, fig, "libtorch", bench::torch_peer::train_step(w, fptr(st->x), st->labels.data(), B, lr));
  auto* h = st->hand.get();
  const float* px = fptr(st->x);
  const int64_t* py = st->labels.data();
  add(cfg, fig, "hand", [h, px, py, lr] { h->sgd_step(px, py, static_cast<float>(lr)); });
  add(cfg, fig, "tessel", call);
  results.note(fig, "tessel_backend", main_backend_name());
  keep_mlp.push_back(std::move(st));
  if (jit_backend()) {
    auto [st2, call2] = make(ref_backend());
    add(cfg, fig, "tessel_ref", call2);
    keep_mlp.push_back(std::move(st2));
  }
}

// ----------------------------------------------------------- convolution

// conv2d_fwd and conv2d_fwd_bwd: N=64, 32 -> 64 channels, 28x28, 3x3, padding 1,
// stride 1, f32, with bias.
struct ConvState {
  Tensor x, w, b, gy;        // plain tensors (forward figure, LibTorch's views)
  Tensor xg, wg, bg;         // the same memory as leaves that require grad
};
std::vector<std::unique_ptr<ConvState>> keep_conv;

Tensor realized_uniform(const Shape& s, double lo, double hi) {
  Tensor t = realized_rand(s) * (hi - lo) + lo;
  t.eval();
  return t;
}

void conv2d_figures(const Config& cfg) {
  const int64_t N = 64, C = 32, O = 64, H = 28, W = 28, K = 3, P = 1;
  auto st = std::make_unique<ConvState>();
  manual_seed(2);
  const double bound = 1 / std::sqrt(static_cast<double>(C * K * K));  // nn.Conv2d's default range
  st->x = realized_uniform({N, C, H, W}, -1, 1);
  st->w = realized_uniform({O, C, K, K}, -bound, bound);
  st->b = realized_uniform({O}, -bound, bound);
  st->gy = realized_uniform({N, O, H, W}, -1, 1);  // the fixed upstream gradient
  Tensor x = st->x, w = st->w, b = st->b, gy = st->gy;
  const bench::torch_peer::Conv2d p{fptr(x), fptr(w), fptr(b), N, C, H, W, O, K, P};
  const int64_t ny = N * O * p.oh() * p.ow();
  // The engine's own limit: the oneDNN binding tessel's CPU backend calls,
  // called directly on buffers allocated once (no IR, no allocation).
  const onednn::ConvGeometry geo{.n = N, .c = C, .h = H, .w = W, .o = O, .kh = K, .kw = K, .pad_t = P, .pad_l = P,
                                 .pad_b = P, .pad_r = P, .oh = p.oh(), .ow = p.ow()};
  auto direct = std::make_shared<std::vector<std::vector<float>>>(std::vector<std::vector<float>>{
      std::vector<float>(static_cast<size_t>(ny)), std::vector<float>(static_cast<size_t>(N * C * H * W)),
      std::vector<float>(static_cast<size_t>(O * C * K * K)), std::vector<float>(static_cast<size_t>(O))});

  if (cfg.wants("conv2d_fwd")) {
    const std::string fig = "conv2d_fwd";
    std::vector<float> ref(static_cast<size_t>(ny));
    bench::torch_peer::conv2d_forward_into(p, ref.data());
    auto check = [&](Backend& backend, const std::string& key) {
      BackendOverride o(backend);
      NoGradGuard g;
      Tensor y = conv2d(x, w, b, {.padding = P}).contiguous();
      results.set(fig, key, max_abs_diff(fptr(y), ref.data(), ny));
    };
    check(main_backend(), "check_max_abs_diff");
    if (jit_backend()) check(ref_backend(), "check_ref_max_abs_diff");
    add_tessel(cfg, fig, [x, w, b] {
      NoGradGuard g;
      Tensor y = conv2d(x, w, b, {.padding = 1});
      y.eval();
    });
    add(cfg, fig, "libtorch", bench::torch_peer::conv2d_forward(p));
    results.note(fig, "libtorch_conv_backend", bench::torch_peer::conv2d_backend(p, false));
    if (onednn::available())
      add(cfg, fig, "onednn_direct", [geo, direct, x, w, b] {
        onednn::conv_forward(geo, fptr(x), fptr(w), fptr(b), (*direct)[0].data());
      });
  }

  if (cfg.wants("conv2d_fwd_bwd")) {
    const std::string fig = "conv2d_fwd_bwd";
    st->xg = x.detach();
    st->xg.requires_grad_();
    st->wg = w.detach();
    st->wg.requires_grad_();
    st->bg = b.detach();
    st->bg.requires_grad_();
    Tensor xg = st->xg, wg = st->wg, bg = st->bg;
    // Forward, backward with the fixed upstream gradient, and the three
    // gradients realized; each call starts from undefined gradients.
    auto step = [xg, wg, bg, gy] {
      for (const Tensor& t : {xg, wg, bg}) t.set_grad(Tensor());
      Tensor y = conv2d(xg, wg, bg, {.padding = 1});
      y.backward(gy);
      realize({xg.grad(), wg.grad(), bg.grad()});
    };
    std::vector<float> gx(static_cast<size_t>(N * C * H * W)), gw(static_cast<size_t>(O * C * K * K)),
        gb(static_cast<size_t>(O));
    bench::torch_peer::conv2d_grads_into(p, fptr(gy), gx.data(), gw.data(), gb.data());
    auto check = [&](Backend& backend, const std::string& prefix) {
      BackendOverride o(backend);
      step();
      results.set(fig, prefix + "dx_max_abs_diff", max_abs_diff(fptr(xg.grad().contiguous()), gx.data(), N * C * H * W));
      results.set(fig, prefix + "dw_max_abs_diff", max_abs_diff(fptr(wg.grad().contiguous()), gw.data(), O * C * K * K));
      results.set(fig, prefix + "db_max_abs_diff", max_abs_diff(fptr(bg.grad().contiguous()), gb.data(), O));
    };
    check(main_backend(), "check_");
    if (jit_backend()) check(ref_backend(), "check_ref_");
    // Scale of the values compared: max |gradient| from LibTorch.
    auto max_abs = [](const std::vector<float>& v) {
      double m = 0;
      for (float f : v) m = std::max(m, static_cast<double>(std::fabs(f)));
      return m;
    };
    results.set(fig, "check_dx_max_abs", max_abs(gx));
    results.set(fig, "check_dw_max_abs", max_abs(gw));
    results.set(fig, "check_db_max_abs", max_abs(gb));
    add_tessel(cfg, fig, step);
    add(cfg, fig, "libtorch", bench::torch_peer::conv2d_forward_backward(p, fptr(gy)));
    results.note(fig, "libtorch_conv_backend", bench::torch_peer::conv2d_backend(p, true));
    if (onednn::available())
      add(cfg, fig, "onednn_direct", [geo, direct, x, w, b, gy] {
        auto& d = *direct;
        onednn::conv_forward(geo, fptr(x), fptr(w), fptr(b), d[0].data());
        onednn::conv_backward_data(geo, fptr(gy), fptr(w), d[1].data());
        onednn::conv_backward_weights(geo, fptr(x), fptr(gy), d[2].data(), d[3].data());
      });
  }
  keep_conv.push_back(std::move(st));
}

// ------------------------------------------------------------- embedding

// embedding_b4096: V=50000, D=256, 4096 ids, f32: forward and backward of
// sum(embedding(ids, W) * R) to W for a fixed random R, the loss and W's
// gradient realized; LibTorch's torch::embedding with its dense gradient.
// The one-hot ablation, the lookup as a matmul (one_hot(ids, V) % W, a
// [4096, 50000] operand), is a second tessel row.
struct EmbeddingState {
  Tensor ids, w, r, wg;
};
std::vector<std::unique_ptr<EmbeddingState>> keep_embedding;

void embedding_figure(const Config& cfg) {
  const std::string fig = "embedding_b4096";
  const int64_t V = 50000, D = 256, N = 4096;
  auto st = std::make_unique<EmbeddingState>();
  manual_seed(3);
  st->ids = randint(0, V, {N});
  st->w = randn({V, D});  // nn.Embedding's N(0, 1)
  st->r = randn({N, D});
  realize({st->ids, st->w, st->r});
  st->wg = st->w.detach();
  st->wg.requires_grad_();
  Tensor ids = st->ids, w = st->w, r = st->r, wg = st->wg;
  const bench::torch_peer::Embedding p{fptr(w), ids.buffer().ptr<int64_t>(), fptr(r), V, D, N};
  auto lookup = [ids, V](const Tensor& weight, bool one_hot_matmul) {
    return one_hot_matmul ? Tensor(one_hot(ids, V).to(DType::f32) % weight) : embedding(ids, weight);
  };
  // Each call starts from an undefined gradient.
  auto step = [wg, r, lookup](bool one_hot_matmul) {
    return [wg, r, lookup, one_hot_matmul] {
      wg.set_grad(Tensor());
      Tensor loss = Tensor(lookup(wg, one_hot_matmul) * r).sum();
      loss.backward();
      realize({loss, wg.grad()});
    };
  };

  std::vector<float> e_ref(static_cast<size_t>(N * D)), gw_ref(static_cast<size_t>(V * D));
  bench::torch_peer::embedding_into(p, e_ref.data(), gw_ref.data());
  auto check = [&](Backend& backend, const std::string& prefix, bool one_hot_matmul) {
    BackendOverride o(backend);
    Tensor e;
    {
      NoGradGuard g;
      e = lookup(w, one_hot_matmul).contiguous();
    }
    results.set(fig, prefix + "fwd_max_abs_diff", max_abs_diff(fptr(e), e_ref.data(), N * D));
    step(one_hot_matmul)();
    results.set(fig, prefix + "dw_max_abs_diff", max_abs_diff(fptr(wg.grad().contiguous()), gw_ref.data(), V * D));
  };
  check(main_backend(), "check_", false);
  if (jit_backend()) check(ref_backend(), "check_ref_", false);
  check(main_backend(), "check_one_hot_", true);
  add_tessel(cfg, fig, step(false));
  add(cfg, fig, "tessel_one_hot", on(main_backend(), step(true)));
  add(cfg, fig, "libtorch", bench::torch_peer::embedding_forward_backward(p));
  keep_embedding.push_back(std::move(st));
}

// ------------------------------------------------------------- attention

// attention_fwd_bwd: causal self-attention, B=8, H=4, T=256, D=32, f32:
// sum(attention(q, k, v) * R) backward to q, k, v, output and gradients
// realized. tessel's fused op against LibTorch 1.13's composite (it has no
// fused attention) and against tessel's own composite (the ablation row
// tessel_composite: matmul, masked softmax, matmul, scores stored).
struct AttentionState {
  Tensor q, k, v, r;
};
std::vector<std::unique_ptr<AttentionState>> keep_attention;

void attention_figure(const Config& cfg) {
  const std::string fig = "attention_fwd_bwd";
  const int64_t B = 8, H = 4, T = 256, D = 32;
  auto st = std::make_unique<AttentionState>();
  manual_seed(5);
  st->q = randn({B, H, T, D});
  st->k = randn({B, H, T, D});
  st->v = randn({B, H, T, D});
  st->r = randn({B, H, T, D});
  realize({st->q, st->k, st->v, st->r});
  for (Tensor* t : {&st->q, &st->k, &st->v}) t->requires_grad_();
  Tensor q = st->q, k = st->k, v = st->v, r = st->r;
  auto step = [q, k, v, r](bool fused) {
    return [q, k, v, r, fused] {
      for (const Tensor* t : {&q, &k, &v}) t->set_grad(Tensor());
      Tensor y = fused ? scaled_dot_product_attention(q, k, v, {.causal = true})
                       : scaled_dot_product_attention_math(q, k, v, {.causal = true});
      Tensor loss = Tensor(y * r).sum();
      loss.backward();
      realize({loss, q.grad(), k.grad(), v.grad()});
    };
  };
  const bench::torch_peer::Attention p{fptr(q), fptr(k), fptr(v), fptr(r), B, H, T, D};
  const int64_t n = B * H * T * D;
  std::vector<float> y_ref(static_cast<size_t>(n)), gq(static_cast<size_t>(n)), gk(static_cast<size_t>(n)),
      gv(static_cast<size_t>(n));
  bench::torch_peer::attention_into(p, y_ref.data(), gq.data(), gk.data(), gv.data());
  {
    Tensor y;
    {
      NoGradGuard g;
      y = scaled_dot_product_attention(q, k, v, {.causal = true}).contiguous();
    }
    results.set(fig, "check_fwd_max_abs_diff", max_abs_diff(fptr(y), y_ref.data(), n));
    step(true)();
    results.set(fig, "check_dq_max_abs_diff", max_abs_diff(fptr(q.grad().contiguous()), gq.data(), n));
    results.set(fig, "check_dk_max_abs_diff", max_abs_diff(fptr(k.grad().contiguous()), gk.data(), n));
    results.set(fig, "check_dv_max_abs_diff", max_abs_diff(fptr(v.grad().contiguous()), gv.data(), n));
  }
  add_tessel(cfg, fig, step(true));
  add(cfg, fig, "tessel_composite", on(main_backend(), step(false)));
  add(cfg, fig, "libtorch", bench::torch_peer::attention_forward_backward(p));
  keep_attention.push_back(std::move(st));
}

// gpt_train_step: the GPT sample's training step (samples/gpt: 4 layers, 4
// heads, d=128, context 128, the fortunes corpus's vocabulary, dropout 0.1),
// batch 16 of random tokens: forward in training mode, cross entropy,
// zero_grad, backward, clip_grad_norm_(1.0), AdamW (lr 1e-3, betas (0.9,
// 0.99), weight decay 0.1 on the Linear weights), the loss read back. The
// LibTorch peer starts from tessel's weights. Before timing, both with
// dropout 0 take one step from the same weights: check_first_loss_diff.
struct GptBenchState {
  std::optional<gpt::GPT> model;
  std::unique_ptr<optim::Adam> opt;
  Tensor x, y;
  std::vector<int64_t> xs, ys;
};
std::vector<std::unique_ptr<GptBenchState>> keep_gpt;

int64_t gpt_bench_vocab() {
  try {
    return gpt::load_corpus().vocab_size();
  } catch (const std::exception&) {
    return 100;  // without the corpus: the PyPI peers' fallback too
  }
}

void gpt_figure(const Config& cfg) {
  const std::string fig = "gpt_train_step";
  const int64_t V = gpt_bench_vocab(), B = 16, T = 128;
  results.set(fig, "vocab", static_cast<double>(V));
  auto make = [&](double dropout) {
    auto st = std::make_unique<GptBenchState>();
    manual_seed(1337);
    st->model.emplace(gpt::Config{.vocab_size = V, .block_size = T, .n_layer = 4, .n_head = 4, .n_embd = 128,
                                     .dropout = dropout});
    st->opt = std::make_unique<optim::Adam>(optim::AdamW(
        gpt::param_groups(*st->model, 0.1), {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.99, .weight_decay = 0.1}));
    manual_seed(7);
    st->x = randint(0, V, {B, T});
    st->y = randint(0, V, {B, T});
    realize({st->x, st->y});
    st->xs = st->x.to_vector<int64_t>();
    st->ys = st->y.to_vector<int64_t>();
    return st;
  };
  auto step_of = [V, B, T](GptBenchState* st) {
    return [st, V, B, T] {
      (*st->model)->train();
      Tensor loss = cross_entropy((*st->model)(st->x).reshape({B * T, V}), st->y.reshape({B * T}));
      st->opt->zero_grad();
      loss.backward();
      optim::clip_grad_norm_(st->opt->params(), 1.0);
      st->opt->step();
      return loss.item<double>();
    };
  };
  auto peer_of = [&](GptBenchState* st, double dropout) {
    bench::torch_peer::Gpt p{V, T, 4, 4, 128, dropout, {}};
    for (auto& [name, t] : (*st->model)->named_parameters())
      if (name != "lm_head.weight") p.params.push_back({name, fptr(t), t.numel()});
    return bench::torch_peer::gpt_train_step(p, st->xs.data(), st->ys.data(), B, T, 1e-3);
  };
  {
    auto st = make(0.0);
    auto peer = peer_of(st.get(), 0.0);  // copies the weights before tessel's step changes them
    const double lt = step_of(st.get())(), lp = peer();
    results.set(fig, "check_first_loss_diff", std::abs(lt - lp));
    results.set(fig, "check_first_loss", lt);
  }
  auto st = make(0.1);
  auto peer = peer_of(st.get(), 0.1);
  auto step = step_of(st.get());
  add_tessel(cfg, fig, [step] { (void)step(); });
  add(cfg, fig, "libtorch", [peer] { (void)peer(); });
  keep_gpt.push_back(std::move(st));
}

// attention_memory: the peak resident memory an attention forward adds
// (B=1, H=4, D=32, causal), fused and composite, at T = 512 .. 4096, each in
// a fresh process (peak RSS only grows): the fused op's grows linearly in T,
// the composite's with T^2 (its [T, T] scores).
double peak_rss_mb() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return -1;
}

int attention_memory_child(int64_t T, bool fused) {
  NoGradGuard g;
  Tensor q = randn({1, 4, T, 32}), k = randn({1, 4, T, 32}), v = randn({1, 4, T, 32});
  realize({q, k, v});
  const double before = peak_rss_mb();
  Tensor y = fused ? scaled_dot_product_attention(q, k, v, {.causal = true})
                   : scaled_dot_product_attention_math(q, k, v, {.causal = true});
  y.eval();
  std::printf("attention_memory_child added_mb=%.3f\n", peak_rss_mb() - before);
  return 0;
}

void attention_memory() {
  const std::string fig = "attention_memory";
  const std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
  for (bool fused : {true, false})
    for (int64_t T : {512, 1024, 2048, 4096}) {
      FILE* p = popen(fmt::format("'{}' --attention-memory-child {} {}", exe, T, fused ? 1 : 0).c_str(), "r");
      char line[256] = {0};
      double mb = -1;
      while (p && std::fgets(line, sizeof line, p)) std::sscanf(line, "attention_memory_child added_mb=%lf", &mb);
      if (p) pclose(p);
      results.set(fig, fmt::format("{}_T{}_added_mb", fused ? "fused" : "composite", T), mb);
    }
  results.note(fig, "what", "peak RSS added by one causal attention forward, B=1 H=4 D=32, fresh process per size");
}

// ------------------------------------------------------- compile latency

using bench::compile_pass;

// The disk hit needs a process whose memory cache is empty: this program again.
int compile_child() {
  auto run = compile_pass();
  std::printf("compile_child hit_median_ms=%.6f hits=%llu compiled=%llu startup_ms=%.6f\n",
              bench::median(run.per_kernel_ms), static_cast<unsigned long long>(run.from_disk),
              static_cast<unsigned long long>(run.compiled), run.startup_ms);
  return 0;
}

void compile_latency() {
  const std::string fig = "compile_latency";
  if (!jit_backend()) {
    results.note(fig, "skipped", "built without LLVM: no compiled backend");
    return;
  }
  auto run = compile_pass();
  results.set(fig, "median_ms", bench::median(run.per_kernel_ms));
  results.set(fig, "llvm_median_ms", bench::median(run.llvm_ms));
  results.set(fig, "kernels", static_cast<double>(run.compiled));
  results.set(fig, "jit_startup_ms", run.startup_ms);
  results.note(fig, "tessel_backend", "cpu");
  KernelCache::global().flush();  // every entry on disk before the child looks
  std::string cmd = fmt::format("'{}' --compile-child", std::filesystem::read_symlink("/proc/self/exe").string());
  std::vector<double> hits;
  for (int i = 0; i < 3; ++i) {  // a few processes: the child's figure is itself a median over kernels
    FILE* p = popen(cmd.c_str(), "r");
    char line[512] = {0};
    double hit = -1, startup = 0;
    unsigned long long nhits = 0, ncompiled = 0;
    while (p && std::fgets(line, sizeof line, p))
      std::sscanf(line, "compile_child hit_median_ms=%lf hits=%llu compiled=%llu startup_ms=%lf", &hit, &nhits,
                  &ncompiled, &startup);
    if (p) pclose(p);
    if (hit >= 0) hits.push_back(hit);
    results.set(fig, "hit_kernels", static_cast<double>(nhits));
    results.set(fig, "hit_recompiled", static_cast<double>(ncompiled));
  }
  if (!hits.empty()) results.set(fig, "hit_median_ms", bench::median(hits));
}

// ------------------------------------------------------- first training step

// first_step_ms: the first training step of the train_step_b256 MLP (batch
// 256, cross_entropy, zero_grad, backward, SGD lr 0.1, realize of the loss and
// the new weights) in a fresh process whose kernel cache is an empty temporary
// folder (TESSEL_CACHE_DIR) with no ahead-of-time kernels (TESSEL_PRECOMPILED=off),
// so every kernel of the step is JIT-compiled, against a steady step of the same
// process (median of steps 10..30). With background compiles (TESSEL_JIT_ASYNC,
// the default) step 1 runs its kernels on the interpreter while they compile;
// the child waits for those compiles after timing step 1, so the compile counts
// are the step's and the steady steps run compiled kernels. The model and the
// batch are made first, as a program would, on the same backend: that starts
// the JIT and compiles the init's kernels (init_kernels_compiled; in the
// background, some may finish during step 1 and count there) before step 1.
// Median of 3 processes (1 with --quick); one more process with TESSEL_TRACE=jit
// gives each compiled kernel's LLVM time (the trace's own output would disturb
// the timed processes).
int first_step_child() {
  if (!jit_backend()) return 1;
  BackendOverride o(*jit_backend());
  const int64_t B = 256;
  manual_seed(0);
  nn::Sequential net = make_mlp(784, 256, 10);
  manual_seed(1);
  Tensor x = realized_rand({B, 784});
  std::vector<int64_t> labels(B);
  std::mt19937 r(0);
  for (auto& l : labels) l = static_cast<int64_t>(r() % 10);
  Tensor y = from_vector<int64_t>(labels, Shape{B});
  auto params = net->parameters();
  for (auto& p : params) p.eval();
  optim::SGD opt(params, optim::SGDOptions{.lr = 0.1});
  auto step = [&] {
    Tensor loss = cross_entropy(net(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    std::vector<Tensor> outs{loss};
    for (auto& p : params) outs.push_back(p);
    realize(outs);
  };
  const CpuJitStats s0 = cpu_jit_stats();
  std::fprintf(stderr, "first_step_child: step 1 begins\n");
  double t0 = bench::now_ms(), c0 = bench::thread_cpu_ms();
  step();
  const double first = bench::now_ms() - t0, first_cpu = bench::thread_cpu_ms() - c0;
  // Step 1's kernels compile in the background (TESSEL_JIT_ASYNC): counted
  // with it, and the steady steps run them all.
  jit_wait_idle();
  std::fprintf(stderr, "first_step_child: step 1 ends\n");
  const CpuJitStats s1 = cpu_jit_stats();
  std::vector<double> steady, steady_cpu;
  for (int i = 2; i <= 30; ++i) {
    double t = bench::now_ms(), c = bench::thread_cpu_ms();
    step();
    if (i >= 10) steady.push_back(bench::now_ms() - t), steady_cpu.push_back(bench::thread_cpu_ms() - c);
  }
  std::printf("first_step_child first_ms=%.6f first_cpu_ms=%.6f steady_ms=%.6f steady_cpu_ms=%.6f compiled=%llu "
              "from_disk=%llu llvm_ms=%.6f init_compiled=%llu\n",
              first, first_cpu, bench::median(steady), bench::median(steady_cpu),
              static_cast<unsigned long long>(s1.kernels_compiled - s0.kernels_compiled),
              static_cast<unsigned long long>(s1.kernels_from_disk - s0.kernels_from_disk), s1.compile_ms - s0.compile_ms,
              static_cast<unsigned long long>(s0.kernels_compiled));
  std::fflush(stdout);
  return 0;
}

void first_step_figure(const Config& cfg) {
  const std::string fig = "first_step_ms";
  if (!jit_backend()) {
    results.note(fig, "skipped", "built without LLVM: no compiled backend");
    return;
  }
  const std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
  // One child in a fresh, empty cache folder, removed afterwards; returns its output.
  auto run_child = [&](const std::string& extra_env) {
    char tmpl[] = "/tmp/tessel-first-step-XXXXXX";
    if (!mkdtemp(tmpl)) return std::string();
    const std::string cmd = fmt::format("TESSEL_CACHE_DIR='{}' TESSEL_PRECOMPILED=off {} '{}' --first-step-child 2>&1",
                                        tmpl, extra_env, exe);
    std::string out;
    if (FILE* p = popen(cmd.c_str(), "r")) {
      char buf[4096];
      for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
      pclose(p);
    }
    std::filesystem::remove_all(tmpl);
    return out;
  };
  std::vector<double> first, first_cpu, steady, steady_cpu, compiled, llvm;
  double from_disk = 0, init_compiled = 0;
  for (int i = 0; i < (cfg.quick ? 1 : 3); ++i) {
    const std::string out = run_child("");
    const size_t at = out.find("first_step_child first_ms=");
    double f = -1, fc = 0, st = 0, stc = 0, ms = 0;
    unsigned long long nc = 0, nd = 0, ni = 0;
    if (at == std::string::npos ||
        std::sscanf(out.c_str() + at,
                    "first_step_child first_ms=%lf first_cpu_ms=%lf steady_ms=%lf steady_cpu_ms=%lf compiled=%llu "
                    "from_disk=%llu llvm_ms=%lf init_compiled=%llu",
                    &f, &fc, &st, &stc, &nc, &nd, &ms, &ni) != 8) {
      results.note(fig, "error", "the child process printed no result: " + out.substr(0, 400));
      return;
    }
    first.push_back(f), first_cpu.push_back(fc), steady.push_back(st), steady_cpu.push_back(stc);
    compiled.push_back(static_cast<double>(nc)), llvm.push_back(ms);
    from_disk = std::max(from_disk, static_cast<double>(nd));  // must stay 0: the cache was empty
    init_compiled = static_cast<double>(ni);
  }
  results.set(fig, "first_step_ms", bench::median(first));
  results.set(fig, "first_step_cpu_ms", bench::median(first_cpu));
  results.set(fig, "steady_step_ms", bench::median(steady));
  results.set(fig, "steady_step_cpu_ms", bench::median(steady_cpu));
  results.set(fig, "first_vs_steady", bench::median(first) / bench::median(steady));
  results.set(fig, "cpu_first_vs_steady", bench::median(first_cpu) / bench::median(steady_cpu));
  results.set(fig, "kernels_compiled", bench::median(compiled));
  results.set(fig, "kernels_from_disk", from_disk);
  results.set(fig, "init_kernels_compiled", init_compiled);
  results.set(fig, "llvm_compile_ms", bench::median(llvm));  // LLVM's time in step 1, all its kernels
  results.set(fig, "processes", static_cast<double>(first.size()));
  results.note(fig, "tessel_backend", "cpu");
  // Per kernel: the "compiled (compile X ms" trace lines between the child's step-1 markers.
  const std::string traced = run_child("TESSEL_TRACE=jit");
  const size_t b = traced.find("first_step_child: step 1 begins"), e = traced.find("first_step_child: step 1 ends");
  std::vector<double> per_kernel;
  if (b != std::string::npos && e != std::string::npos) {
    std::istringstream lines(traced.substr(b, e - b));
    for (std::string line; std::getline(lines, line);) {
      const size_t k = line.find(": compiled (compile ");
      if (line.rfind("[tessel:jit] kernel ", 0) == 0 && k != std::string::npos)
        per_kernel.push_back(std::atof(line.c_str() + k + std::strlen(": compiled (compile ")));
    }
  }
  if (!per_kernel.empty()) {
    results.set(fig, "llvm_compile_median_ms", bench::median(per_kernel));
    results.set(fig, "traced_kernels", static_cast<double>(per_kernel.size()));
  } else {
    results.note(fig, "llvm_compile_median_note", "no per-kernel compile lines in the TESSEL_TRACE=jit child's output");
  }
}

// ----------------------------------------------------------- training epochs

// The epoch figures' timing: the first epoch of each (warm-up; its loss kept),
// then `rounds` epochs each, alternating which goes first, medians of wall and
// process CPU time (other work on a shared machine inflates wall time); the
// interpreter: one epoch after a warm one, on a model of its own. An empty
// tessel_epoch (tessel failed its check) times the peer alone.
void time_epochs(const Config& cfg, const std::string& fig, const std::function<double()>& tessel_epoch,
                 const std::function<double()>& torch_epoch, const std::function<std::function<double()>()>& make_ref) {
  std::vector<double> tc, pc;
  auto timed = [](const std::function<double()>& f, double* loss, std::vector<double>* cpu = nullptr) {
    auto cpu_ms = [] {
      timespec ts{};
      clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
      return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
    };
    double c0 = cpu_ms(), t0 = bench::now_ms();
    *loss = f();
    double ms = bench::now_ms() - t0;
    if (cpu) cpu->push_back(cpu_ms() - c0);
    return ms;
  };
  double loss = 0;
  bool with_tessel = static_cast<bool>(tessel_epoch);
  if (with_tessel) {
    try {
      results.set(fig, "tessel_first_epoch_ms", timed(tessel_epoch, &loss));
      results.set(fig, "tessel_epoch1_loss", loss);
    } catch (const std::exception& e) {  // the peer is still timed
      with_tessel = false;
      results.note(fig, "tessel_error", e.what());
      fmt::print("{}: tessel ({}) failed in its first epoch: {}\n", fig, main_backend_name(), e.what());
    }
  }
  results.set(fig, "libtorch_first_epoch_ms", timed(torch_epoch, &loss));
  results.set(fig, "libtorch_epoch1_loss", loss);
  std::vector<double> tt, pt;
  int rounds = cfg.quick ? 2 : 4;
  for (int r = 0; r < rounds; ++r) {  // alternate, so both see the same machine
    if (r % 2) {
      pt.push_back(timed(torch_epoch, &loss, &pc));
      if (with_tessel) tt.push_back(timed(tessel_epoch, &loss, &tc));
    } else {
      if (with_tessel) tt.push_back(timed(tessel_epoch, &loss, &tc));
      pt.push_back(timed(torch_epoch, &loss, &pc));
    }
  }
  if (with_tessel) {
    results.set(fig, "tessel_cpu_ms", bench::median(tc));
    results.set(fig, "tessel_ms", bench::median(tt));
  }
  results.set(fig, "libtorch_cpu_ms", bench::median(pc));
  results.set(fig, "libtorch_ms", bench::median(pt));
  results.set(fig, "epochs_timed", rounds);
  results.note(fig, "tessel_backend", main_backend_name());
  if (jit_backend()) {  // the interpreter: one epoch after a warm one
    try {
      auto ref_epoch = make_ref();
      timed(ref_epoch, &loss);
      results.set(fig, "tessel_ref_ms", timed(ref_epoch, &loss));
    } catch (const std::exception& e) {
      results.note(fig, "tessel_ref_error", e.what());
    }
  }
}

// One epoch of the per-batch work of train::Trainer::fit (forward, loss,
// zero_grad, backward, SGD step, loss.item(), argmax accuracy) on `backend`,
// without the terminal output: the tessel side of fashion_epoch and
// lenet_epoch. Returns the mean training loss.
std::function<double()> trainer_epoch(nn::Sequential net, const Tensor& X, const Tensor& Y, int64_t batch, double lr,
                                      Backend& backend) {
  const int64_t n = X.size(0);
  auto opt = std::make_shared<optim::SGD>(net->parameters(), optim::SGDOptions{.lr = lr});
  auto loader = std::make_shared<data::DataLoader>(X, Y, data::DataLoaderOptions{.batch_size = batch, .shuffle = true, .seed = 0});
  return [net, opt, loader, n, &backend]() -> double {
    BackendOverride o(backend);
    net->train();
    double total = 0, correct = 0;
    for (auto& [xb, yb] : loader->epoch()) {
      Tensor logits = net(xb);
      Tensor l = cross_entropy(logits, yb);
      opt->zero_grad();
      l.backward();
      opt->step();
      total += l.item<double>() * static_cast<double>(yb.size(0));
      NoGradGuard g;
      correct += binary_op(ir::Op::Eq, logits.argmax(1), yb).to(DType::f32).sum().item<double>();
    }
    return total / static_cast<double>(n);
  };
}

// ----------------------------------------------------------- fashion epoch

void fashion_epoch(const Config& cfg) {
  const std::string fig = "fashion_epoch";
  data::Dataset train;
  try {
    train = data::load_fashion_mnist(true);
  } catch (const std::exception& e) {
    results.note(fig, "skipped", e.what());
    return;
  }
  const int64_t n = train.X.size(0), batch = 256;
  const double lr = 0.1;
  Tensor X = train.X.contiguous();
  X.eval();
  std::vector<int64_t> labels = train.y.to_vector<int64_t>();

  auto make_tessel = [&](Backend& backend) {
    manual_seed(0);
    auto net = nn::Sequential(nn::Flatten(), nn::LazyLinear(256), nn::ReLU(), nn::LazyLinear(10));
    net->apply_init(train.X.narrow(0, 0, 2));
    auto epoch = trainer_epoch(net, train.X, train.y, batch, lr, backend);
    return std::make_pair(net, std::function<double()>(epoch));
  };
  auto [net, tessel_epoch] = make_tessel(main_backend());
  auto w = weights_of(net);
  // Same initial weights, same data; the peer flattens [n,1,28,28] as [n,784].
  auto torch_epoch = bench::torch_peer::fashion_epoch(w, fptr(X), labels.data(), n, batch, lr, 0);

  time_epochs(cfg, fig, tessel_epoch, torch_epoch, [&] { return make_tessel(ref_backend()).second; });
}

// ----------------------------------------------------------- LeNet epoch

// The model's parameters by state-dict name, realized, for the LibTorch peer to copy.
std::vector<bench::torch_peer::NamedArray> named_arrays(const nn::Sequential& net) {
  std::vector<bench::torch_peer::NamedArray> out;
  for (auto& [name, p] : net->named_parameters()) {
    p.eval();
    out.push_back({name, fptr(p), p.numel()});
  }
  return out;
}

void lenet_epoch(const Config& cfg) {
  const std::string fig = "lenet_epoch";
  data::Dataset train;
  try {
    train = data::load_fashion_mnist(true);
  } catch (const std::exception& e) {
    results.note(fig, "skipped", e.what());
    return;
  }
  const int64_t all = train.X.size(0), batch = 256;
  const int64_t n = cfg.lenet_images > 0 ? std::min(cfg.lenet_images, all) : all;
  const double lr = 0.1;
  Tensor X = train.X.narrow(0, 0, n).contiguous();
  Tensor Y = train.y.narrow(0, 0, n).contiguous();
  realize({X, Y});
  std::vector<int64_t> labels = Y.to_vector<int64_t>();
  results.set(fig, "images", static_cast<double>(n));
  results.set(fig, "batches", static_cast<double>((n + batch - 1) / batch));

  // D2L's init: Xavier-uniform conv and linear weights, PyTorch's default biases.
  auto make_net = [] {
    manual_seed(0);
    auto net = lenet::make_lenet(lenet::Variant::relu_bn);
    net->apply(lenet::init_xavier);
    return net;
  };
  // One training-mode step on the first batch: loss, logits and every
  // gradient against LibTorch's, on each tessel backend. If the main one
  // fails here, the figure records the error and times LibTorch (and the
  // interpreter, when it works) alone.
  const int64_t b = std::min(batch, n);
  auto ref = [&] {
    auto net = make_net();
    return bench::torch_peer::lenet_first_step(named_arrays(net), fptr(X), labels.data(), b);
  }();
  auto check = [&](Backend& backend, const std::string& prefix) -> std::string {
    try {
      auto net = make_net();
      BackendOverride o(backend);
      net->train();
      Tensor logits = net(X.narrow(0, 0, b));
      Tensor loss = cross_entropy(logits, Y.narrow(0, 0, b));
      loss.backward();
      results.set(fig, prefix + "loss_diff", std::fabs(loss.item<double>() - ref.loss));
      results.set(fig, prefix + "logits_max_abs_diff",
                  max_abs_diff(fptr(logits.detach().contiguous()), ref.logits.data(), b * 10));
      // Per parameter: max |difference|, and the same relative to the
      // parameter's max |gradient| (LibTorch's) where that is above 1e-3 (the
      // convolutions' and hidden linears' biases feed a BatchNorm, so their
      // exact gradient is 0 and both sides hold rounding noise).
      double worst = 0, worst_rel = 0;
      std::string worst_name, worst_rel_name;
      auto params = net->named_parameters();
      for (auto& [name, g] : ref.grads) {
        Tensor tg = params.at(name).grad().contiguous();
        double d = max_abs_diff(fptr(tg), g.data(), static_cast<int64_t>(g.size()));
        double scale = 0;
        for (float v : g) scale = std::max(scale, static_cast<double>(std::fabs(v)));
        if (d > worst) worst = d, worst_name = name;
        if (scale > 1e-3 && d / scale > worst_rel) worst_rel = d / scale, worst_rel_name = name;
      }
      results.set(fig, prefix + "grad_max_abs_diff", worst);
      results.note(fig, prefix + "grad_max_abs_diff_param", worst_name);
      results.set(fig, prefix + "grad_max_rel_diff", worst_rel);
      results.note(fig, prefix + "grad_max_rel_diff_param", worst_rel_name);
      return "";
    } catch (const std::exception& e) {
      return e.what();
    }
  };
  const std::string tessel_error = check(main_backend(), "check_");
  if (!tessel_error.empty()) {
    results.note(fig, "tessel_error", tessel_error);
    fmt::print("lenet_epoch: tessel ({}) failed its check step: {}\n", main_backend_name(), tessel_error);
  }
  if (jit_backend())
    if (std::string e = check(ref_backend(), "check_ref_"); !e.empty()) results.note(fig, "tessel_ref_error", e);

  auto make_tessel = [&](Backend& backend) {
    auto net = make_net();
    auto epoch = trainer_epoch(net, X, Y, batch, lr, backend);
    return std::make_pair(net, std::function<double()>(epoch));
  };
  auto [net, tessel_epoch] = make_tessel(main_backend());
  // Same initial weights (copied by name), same images.
  auto torch_epoch = bench::torch_peer::lenet_epoch(named_arrays(net), fptr(X), labels.data(), n, batch, lr, 0);
  if (!tessel_error.empty()) tessel_epoch = nullptr;
  time_epochs(cfg, fig, tessel_epoch, torch_epoch, [&] { return make_tessel(ref_backend()).second; });
}

// ------------------------------------------------ PyPI peers (python_peers/)

// PyTorch 2.x eager (torch2_eager) and torch.compile (torch_compile), JAX
// (jax), tinygrad (tinygrad) and PyTorch DDP over gloo (torch2_ddp, for
// ddp_fashion_epoch), from PyPI: bench/python_peers/peers.py, run
// once after tessel's own rows with the bench venv's interpreter
// ($TESSEL_BENCH_PYENV, default ~/.cache/tessel-bench-pyenv; made by
// scripts/setup-deps.sh --bench). Its numbers (<peer>_ms, <peer>_cpu_ms:
// process CPU time of the Python process) and notes are merged into
// `results`; python_peer_ratios adds vs_<peer> etc., so the table prints
// tessel against each of them. A peer that is not installed or fails is
// noted (<peer>_missing, <peer>_error) and printed under the table, never
// timed. TESSEL_BENCH_PYTHON_PEERS=0 skips the whole step.
const std::vector<std::string> kPythonPeers = {"torch2_eager", "torch_compile", "jax", "tinygrad", "torch2_ddp"};
const std::vector<std::pair<std::string, std::vector<std::string>>> kPythonPeerFigures = {
    {"attention_fwd_bwd", {"torch2_eager", "torch_compile", "jax", "tinygrad"}},
    {"train_step_b256", {"torch2_eager", "torch_compile", "jax"}},
    {"fashion_epoch", {"torch2_eager", "torch_compile", "jax"}},
    {"lenet_epoch", {"torch2_eager", "torch_compile"}},
    {"gpt_train_step", {"torch2_eager", "torch_compile"}},
    // torch2_ddp: samples/s of 1 plain and 2 DDP processes (ddp_peer_ratios compares them).
    {"ddp_fashion_epoch", {"torch2_ddp"}},
};
const char* const kPythonPeerMissing = "missing (not installed: run scripts/setup-deps.sh --bench)";
std::string python_peers_versions;  // "torch 2.x, jax ..., tinygrad ..." from peers.py's _meta

std::filesystem::path bench_pyenv_python() {
  const char* env = std::getenv("TESSEL_BENCH_PYENV");
  const char* home = std::getenv("HOME");
  std::filesystem::path dir = env && *env ? std::filesystem::path(env)
                                          : std::filesystem::path(home ? home : "/root") / ".cache/tessel-bench-pyenv";
  return dir / "bin" / "python";
}

void python_peers(const Config& cfg) {
  if (const char* off = std::getenv("TESSEL_BENCH_PYTHON_PEERS"); off && std::string(off) == "0") return;
  std::vector<std::string> figs;
  for (auto& [fig, peers] : kPythonPeerFigures)
    if (cfg.wants(fig)) figs.push_back(fig);
  if (figs.empty()) return;
  auto note_all = [&](const std::string& suffix, const std::string& why) {
    for (auto& [fig, peers] : kPythonPeerFigures)
      if (cfg.wants(fig))
        for (auto& p : peers) results.note(fig, p + suffix, why);
  };
  const std::filesystem::path python = bench_pyenv_python();
  // The script next to this source file (an absolute path in CMake builds).
  const std::filesystem::path script = std::filesystem::path(__FILE__).parent_path() / "python_peers" / "peers.py";
  if (!std::filesystem::exists(python)) {
    note_all("_missing", fmt::format("{} ({} not found)", kPythonPeerMissing, python.string()));
    return;
  }
  if (!std::filesystem::exists(script)) {
    note_all("_error", fmt::format("{} not found", script.string()));
    return;
  }
  std::string only;
  for (auto& f : figs) only += (only.empty() ? "" : ",") + f;
  const std::string cmd = fmt::format("'{}' '{}' --only={} --lenet-images={}{}", python.string(), script.string(), only,
                                      cfg.lenet_images, cfg.quick ? " --quick" : "");
  fmt::print("\npython peers: {}\n", cmd);
  std::fflush(stdout);
  std::string out;
  int status = -1;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    status = pclose(p);
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(out.substr(0, out.find_last_of('}') + 1));
  } catch (const std::exception& e) {
    note_all("_error", fmt::format("peers.py (exit status {}) printed no JSON: {}", status, e.what()));
    return;
  }
  if (j.contains("_meta")) {
    for (const char* lib : {"torch", "jax", "tinygrad"})
      if (j["_meta"].contains(lib))
        python_peers_versions += fmt::format("{}{} {}", python_peers_versions.empty() ? "" : ", ", lib,
                                             j["_meta"][lib].get<std::string>());
  }
  for (auto& [fig, kv] : j.items()) {
    if (fig == "_meta" || !kv.is_object()) continue;
    for (auto& [k, v] : kv.items()) {
      if (v.is_number()) results.set(fig, k, v.get<double>());
      else if (v.is_string()) results.note(fig, k, v.get<std::string>());
    }
    if (!python_peers_versions.empty()) results.note(fig, "pypi_versions", python_peers_versions);
  }
}

// vs_<peer>, ref_vs_<peer>, composite_vs_<peer> and cpu_vs_<peer> for the PyPI peers, on every figure.
void python_peer_ratios() {
  std::vector<std::string> figs;
  for (auto& [fig, kv] : results.numbers) figs.push_back(fig);
  for (auto& fig : figs) {
    results.ratios(fig, "tessel_ms", "", kPythonPeers);
    results.ratios(fig, "tessel_ref_ms", "ref_", kPythonPeers);
    results.ratios(fig, "tessel_composite_ms", "composite_", kPythonPeers);
    auto& kv = results.numbers[fig];
    if (kv.count("tessel_cpu_ms"))
      for (auto& p : kPythonPeers)
        if (kv.count(p + "_cpu_ms") && kv[p + "_cpu_ms"] > 0) kv["cpu_vs_" + p] = kv["tessel_cpu_ms"] / kv[p + "_cpu_ms"];
  }
}

// Under the table: missing or failed PyPI peers, and peer times of figures with no tessel time.
void print_python_peer_notes(const Config& cfg) {
  bool header = false;
  auto line = [&](const std::string& s) {
    if (!header)
      fmt::print("\nPyPI peers (bench/python_peers/peers.py{}):\n",
                 python_peers_versions.empty() ? "" : "; " + python_peers_versions);
    header = true;
    fmt::print("  {}\n", s);
  };
  for (auto& [fig, peers] : kPythonPeerFigures) {
    if (!cfg.wants(fig)) continue;
    auto& notes = results.notes[fig];
    auto& kv = results.numbers[fig];
    for (auto& p : peers) {
      if (notes.count(p + "_missing")) line(fmt::format("{}: {}: {}", fig, p, notes[p + "_missing"]));
      else if (notes.count(p + "_error")) line(fmt::format("{}: {}: failed: {}", fig, p, notes[p + "_error"]));
      else if (kv.count(p + "_ms") && !kv.count("tessel_ms"))
        line(fmt::format("{}: {}: {:.4g} ms (no tessel time for this figure)", fig, p, kv[p + "_ms"]));
    }
    if (notes.count("pypi_error")) line(fmt::format("{}: failed: {}", fig, notes["pypi_error"]));
  }
}

// ----------------------------------------------------------- output

struct Goal {
  std::string fig, key;
  double limit;
  std::string text;
};
const std::vector<Goal> kGoals = {
    {"fused_chain_16M", "vs_hand", 1.10, "<= 1.10x hand loop"},
    {"fused_chain_16M", "vs_libtorch_prealloc", 0.5, ">= 2x faster than LibTorch prealloc"},
    {"fused_chain_16M", "vs_libtorch_eager", 0.02, ">= 50x faster than LibTorch eager"},
    // vs_bandwidth_limit = 1 / fraction_of_bandwidth: >= 0.9 of the non-temporal copy's GB/s.
    {"fused_chain_16M", "vs_bandwidth_limit", 1 / 0.9, ">= 0.9 of the bandwidth limit"},
    {"tiny_chain_dispatch", "vs_libtorch_eager", 0.2, "<= 0.2x LibTorch eager"},
    {"mlp_forward_b1024", "vs_hand", 1.05, "<= 1.05x sgemm + fused loop"},
    {"compile_latency", "median_ms", 10, "<= 10 ms per kernel"},
    {"compile_latency", "hit_median_ms", 1, "<= 1 ms per disk hit"},
    {"first_step_ms", "first_vs_steady", 3.0, "first step <= 3x a steady step"},
    {"train_step_b256", "vs_hand", 1.05, "<= 1.05x hand OpenBLAS step"},
    {"train_step_b256", "vs_libtorch", 1 / 1.15, ">= 1.15x faster than LibTorch"},
    {"train_step_b256", "vs_jax", 1.0, "faster than JAX"},
    {"fashion_epoch", "vs_libtorch", 1 / 1.2, ">= 1.2x faster than LibTorch"},
    {"fashion_epoch", "vs_jax", 1.0, "faster than JAX"},
    {"lenet_epoch", "vs_libtorch", 1 / 1.2, ">= 1.2x faster than LibTorch"},
    {"embedding_b4096", "vs_libtorch", 1.0, "faster than LibTorch"},
    {"attention_fwd_bwd", "vs_libtorch", 1.0, "faster than LibTorch"},
    {"attention_fwd_bwd", "vs_torch_compile", 1.0, "no slower than torch.compile"},
    {"gpt_train_step", "vs_libtorch", 1.0, "faster than LibTorch"},
    {"gpt_train_step", "vs_torch_compile", 1.0, "no slower than torch.compile"},
    {"ddp_fashion_epoch", "vs_torch2_ddp", 1.0, ">= PyTorch DDP's 2-process samples/s"},
};

// Under the table: the quantities of the bandwidth, first-step and DDP rows
// that are not times.
void print_figure_notes() {
  auto& N = results.numbers;
  auto num = [&](const std::string& fig, const std::string& k) {
    return N.count(fig) && N[fig].count(k) ? std::optional<double>(N[fig][k]) : std::nullopt;
  };
  if (auto copy = num("bandwidth_limit", "nt_copy_gbs")) {
    fmt::print("\nbandwidth_limit (1 thread, same run): non-temporal copy {:.2f} GB/s, STREAM triad {:.2f} GB/s ({})\n",
               *copy, num("bandwidth_limit", "triad_gbs").value_or(0), results.notes["bandwidth_limit"]["how"]);
    for (const std::string fig : {"fused_chain_16M"}) {
      if (!num(fig, "fraction_of_bandwidth")) continue;
      std::string line = fmt::format("  {} ({:.0f} MiB per call): tessel {:.2f} GB/s = {:.3f} of the copy bandwidth", fig,
                                     *num(fig, "bytes") / (1 << 20), *num(fig, "tessel_gbs"),
                                     *num(fig, "fraction_of_bandwidth"));
      for (const std::string who : {"hand", "libtorch_prealloc", "libtorch_eager", "tessel_ref"})
        if (auto f = num(fig, who + "_fraction_of_bandwidth"))
          line += fmt::format("; {} {:.2f} GB/s ({:.3f})", who, *num(fig, who + "_gbs"), *f);
      fmt::print("{}\n", line);
    }
  }
  if (auto first = num("first_step_ms", "first_step_ms")) {
    fmt::print("\nfirst_step_ms (fresh process, empty kernel cache, median of {:.0f}): first step {:.1f} ms, steady step "
               "{:.2f} ms ({:.1f}x); {:.0f} kernels compiled in step 1 ({:.0f} from disk), LLVM {:.1f} ms in all",
               num("first_step_ms", "processes").value_or(0), *first, *num("first_step_ms", "steady_step_ms"),
               *num("first_step_ms", "first_vs_steady"), *num("first_step_ms", "kernels_compiled"),
               *num("first_step_ms", "kernels_from_disk"), *num("first_step_ms", "llvm_compile_ms"));
    if (auto med = num("first_step_ms", "llvm_compile_median_ms")) fmt::print(", median {:.2f} ms per kernel", *med);
    fmt::print("; the model's init compiled {:.0f} before\n", num("first_step_ms", "init_kernels_compiled").value_or(0));
  }
  if (results.notes.count("first_step_ms") && results.notes["first_step_ms"].count("error"))
    fmt::print("\nfirst_step_ms: failed: {}\n", results.notes["first_step_ms"]["error"]);
  if (N.count("ddp_fashion_epoch")) {
    auto sps = [&](const std::string& prefix) {
      auto one = num("ddp_fashion_epoch", prefix + "samples_per_s_1proc");
      auto two = num("ddp_fashion_epoch", prefix + "samples_per_s_2proc");
      auto eff = num("ddp_fashion_epoch", prefix + "scaling_efficiency");
      auto f = [](std::optional<double> v, int digits) {
        return v ? fmt::format("{:.{}f}", *v, digits) : std::string("-");
      };
      return fmt::format("1 process {} samples/s, 2 processes {} samples/s, scaling efficiency {}", f(one, 0),
                         f(two, 0), f(eff, 3));
    };
    fmt::print("\nddp_fashion_epoch: tessel {}\n", sps(""));
    if (auto a = num("ddp_fashion_epoch", "gloo_all_reduce_ms"))
      fmt::print("ddp_fashion_epoch: gloo alone, 2 processes: all_reduce of the {:.0f} gradient elements {:.3f} ms, of "
                 "one element {:.3f} ms; efficiency that allows without overlap {:.3f}\n",
                 num("ddp_fashion_epoch", "gloo_all_reduce_elements").value_or(0), *a,
                 num("ddp_fashion_epoch", "gloo_all_reduce_one_ms").value_or(0),
                 num("ddp_fashion_epoch", "efficiency_bound_gloo").value_or(0));
    if (num("ddp_fashion_epoch", "torch2_ddp_samples_per_s_1proc"))
      fmt::print("ddp_fashion_epoch: torch2_ddp {} (1 process: the plain model)\n", sps("torch2_ddp_"));
  }
}

// ddp_fashion_epoch against torch2_ddp: tessel time / torch time for the same
// samples, i.e. torch's samples/s over tessel's (below 1: tessel faster).
void ddp_peer_ratios() {
  if (!results.numbers.count("ddp_fashion_epoch")) return;
  auto& kv = results.numbers["ddp_fashion_epoch"];
  for (int world : {1, 2}) {
    const std::string t = fmt::format("samples_per_s_{}proc", world), p = "torch2_ddp_" + t;
    if (kv.count(t) && kv.count(p) && kv[t] > 0) kv[world == 2 ? "vs_torch2_ddp" : "vs_torch2_ddp_1proc"] = kv[p] / kv[t];
  }
}

void write_outputs(const Config& cfg) {
  const std::vector<std::string> order = {"bandwidth_limit",  "fused_chain_16M",   "tiny_chain_dispatch",
                                          "mlp_forward_b1024", "compile_latency",   "first_step_ms",
                                          "train_step_b256",  "fashion_epoch",     "conv2d_fwd",
                                          "conv2d_fwd_bwd",   "lenet_epoch",       "embedding_b4096",
                                          "attention_fwd_bwd", "attention_memory", "gpt_train_step",
                                          "ddp_fashion_epoch"};
  nlohmann::json j = nlohmann::json::object();
  for (auto& [fig, kv] : results.numbers)
    for (auto& [k, v] : kv) j[fig][k] = v;
  for (auto& [fig, kv] : results.notes)
    for (auto& [k, v] : kv) j[fig][k] = v;
  std::filesystem::create_directories(cfg.out.parent_path());
  std::ofstream(cfg.out) << j.dump(2) << "\n";

  fmt::print("\n{:<26} {:<18} {:>11} {:>11} {:>10} {:>10} {:>10}  {}\n", "figure", "peer", "tessel ms", "peer ms",
             "ratio", "cpu ratio", "ref ratio", "goal (on the tessel row)");
  fmt::print("{}\n", std::string(135, '-'));
  for (auto& fig : order) {
    if (!results.numbers.count(fig)) continue;
    auto& kv = results.numbers[fig];
    std::string backend = results.notes[fig].count("tessel_backend") ? results.notes[fig]["tessel_backend"] : "";
    auto get = [&](const std::string& k) { return kv.count(k) ? fmt::format("{:.4g}", kv[k]) : std::string("-"); };
    auto goal_for = [&](const std::string& key) -> std::string {
      for (auto& g : kGoals)
        if (g.fig == fig && g.key == key)
          return kv.count(key) ? fmt::format("{} [{}]", g.text, kv[key] <= g.limit ? "met" : "NOT met") : g.text;
      return "";
    };
    if (fig == "bandwidth_limit") {  // the machine's limit: GB/s in the goal column
      for (const std::string who : {"nt_copy", "triad"})
        if (kv.count(who + "_ms"))
          fmt::print("{:<26} {:<18} {:>11} {:>11} {:>10} {:>10} {:>10}  {}\n", fig, who, "-", get(who + "_ms"), "-",
                     "-", "-", fmt::format("{:.1f} GB/s ({:.0f} MiB moved)", kv[who + "_gbs"],
                                           kv[who + "_bytes"] / (1 << 20)));
      continue;
    }
    if (fig == "first_step_ms") {  // first step against a steady step of the same fresh process
      if (kv.count("first_step_ms"))
        fmt::print("{:<26} {:<18} {:>11} {:>11} {:>10} {:>10} {:>10}  {}\n", fig + " (cpu)", "steady step",
                   get("first_step_ms"), get("steady_step_ms"), get("first_vs_steady"), get("cpu_first_vs_steady"), "-",
                   goal_for("first_vs_steady"));
      continue;
    }
    if (fig == "ddp_fashion_epoch") {  // epoch ms of 1 and 2 processes; the ratio from samples/s
      for (int world : {1, 2}) {
        const std::string w = fmt::format("{}proc", world);
        auto epoch_ms = [&](const std::string& k) {
          return kv.count(k) ? fmt::format("{:.4g}", kv[k] * 1e3) : std::string("-");
        };
        const std::string key = world == 2 ? "vs_torch2_ddp" : "vs_torch2_ddp_1proc";
        fmt::print("{:<26} {:<18} {:>11} {:>11} {:>10} {:>10} {:>10}  {}\n", fig, fmt::format("torch2_ddp {} proc", world),
                   epoch_ms("epoch_seconds_" + w), epoch_ms("torch2_ddp_epoch_seconds_" + w), get(key), "-", "-",
                   world == 2 ? goal_for(key) : "1 process: no DDP on the PyTorch side");
      }
      continue;
    }
    if (fig == "compile_latency") {
      fmt::print("{:<26} {:<18} {:>11} {:>11} {:>10} {:>10} {:>10}  {}\n", fig, "compile (median)", get("median_ms"),
                 "-", "-", "-", "-", goal_for("median_ms"));
      fmt::print("{:<26} {:<18} {:>11} {:>11} {:>10} {:>10} {:>10}  {}\n", "", "disk hit (median)",
                 get("hit_median_ms"), "-", "-", "-", "-", goal_for("hit_median_ms"));
      continue;
    }
    if (results.notes[fig].count("tessel_error")) {  // no tessel time: the peers' alone
      for (auto& [k, v] : kv) {
        if (k.size() < 4 || k.compare(k.size() - 3, 3, "_ms") != 0 || k.rfind("tessel", 0) == 0 ||
            k.find("_cpu_ms") != std::string::npos || k.find("first_epoch") != std::string::npos)
          continue;
        std::string peer = k.substr(0, k.size() - 3);
        fmt::print("{:<26} {:<18} {:>11} {:>11} {:>10} {:>10} {:>10}  {}\n",
                   fig + (backend.empty() ? "" : " (" + backend + ")"), peer, "-", get(k), "-", "-",
                   get("ref_vs_" + peer), "tessel failed (results.json: tessel_error)");
      }
      continue;
    }
    for (auto& [k, v] : kv) {
      if (k.rfind("vs_", 0) != 0) continue;
      std::string peer = k.substr(3);
      fmt::print("{:<26} {:<18} {:>11} {:>11} {:>10} {:>10} {:>10}  {}\n",
                 fig + (backend.empty() ? "" : " (" + backend + ")"), peer, get("tessel_ms"), get(peer + "_ms"), get(k),
                 get("cpu_vs_" + peer), get("ref_vs_" + peer), goal_for(k));
    }
    // An ablation's second tessel row (tessel_one_hot_ms), against the same peers.
    for (auto& [k, v] : kv) {
      if (k.rfind("one_hot_vs_", 0) != 0) continue;
      std::string peer = k.substr(11);
      fmt::print("{:<26} {:<18} {:>11} {:>11} {:>10} {:>10} {:>10}  {}\n", fig + " one-hot", peer,
                 get("tessel_one_hot_ms"), get(peer + "_ms"), get(k), "-", "-", "ablation: one_hot(ids, V) % W");
    }
  }
  fmt::print("\nratio = tessel wall time / peer wall time (below 1: tessel faster); cpu ratio: the same from CPU time;\n"
             "ref ratio: wall-time ratio of the ref interpreter. Goals are judged on the wall-time ratio.\n");
  print_figure_notes();
  fmt::print("results: {}\n", cfg.out.string());
}

}  // namespace

void bench::Results::ratios(const std::string& fig, const std::string& tessel_key, const std::string& prefix,
                            const std::vector<std::string>& peers) {
  auto& kv = numbers[fig];
  if (!kv.count(tessel_key)) return;
  for (auto& p : peers)
    if (kv.count(p + "_ms") && kv[p + "_ms"] > 0) kv[prefix + "vs_" + p] = kv[tessel_key] / kv[p + "_ms"];
}

// >>> ddp_fashion_epoch: data-parallel scaling, measured by bench/ddp_bench in
// fresh processes started through tools/tessel-run (1 and 2 ranks, 1 thread each).
void ddp_fashion_epoch() {
  const std::string fig = "ddp_fashion_epoch";
  auto here = std::filesystem::read_symlink("/proc/self/exe").parent_path();
  auto bench = here / "ddp_bench", run = here.parent_path() / "tools" / "tessel-run";
  if (!std::filesystem::exists(bench) || !std::filesystem::exists(run)) {
    results.note(fig, "skipped", "ddp_bench or tools/tessel-run not built");
    return;
  }
  double per_s[3] = {0, 0, 0};
  for (int world : {1, 2}) {
    std::string cmd = fmt::format("TESSEL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 '{}' --nproc-per-node {} '{}' 2>&1",
                                  run.string(), world, bench.string());
    FILE* p = popen(cmd.c_str(), "r");
    char line[512] = {0};
    double seconds = 0, sps = 0;
    long long batches = 0, samples = 0;
    int w = 0;
    long long elements = 0;
    double all_reduce_ms = 0, one_ms = 0;
    while (p && std::fgets(line, sizeof line, p)) {
      std::sscanf(line, "ddp_bench world=%d batches=%lld samples=%lld seconds=%lf samples_per_s=%lf", &w, &batches,
                  &samples, &seconds, &sps);
      std::sscanf(line, "ddp_bench all_reduce elements=%lld ms=%lf one_ms=%lf", &elements, &all_reduce_ms, &one_ms);
    }
    if (all_reduce_ms > 0) {
      results.set(fig, "gloo_all_reduce_ms", all_reduce_ms);
      results.set(fig, "gloo_all_reduce_one_ms", one_ms);
      results.set(fig, "gloo_all_reduce_elements", static_cast<double>(elements));
    }
    if (p) pclose(p);
    if (sps <= 0) {
      results.note(fig, fmt::format("error_{}proc", world), "ddp_bench printed no result");
      continue;
    }
    per_s[world] = sps;
    results.set(fig, fmt::format("samples_per_s_{}proc", world), sps);
    results.set(fig, fmt::format("epoch_seconds_{}proc", world), seconds);
    results.set(fig, "samples", static_cast<double>(samples));
  }
  if (per_s[1] > 0 && per_s[2] > 0) results.set(fig, "scaling_efficiency", per_s[2] / (2 * per_s[1]));
  // What the engine allows: each rank computes half a global batch in half
  // the 1-process time, then moves every gradient once (the one bucket's
  // all_reduce, which nothing is left to overlap); efficiency T1 / (T1 + 2A).
  if (auto a = results.numbers[fig].find("gloo_all_reduce_ms"); per_s[1] > 0 && a != results.numbers[fig].end()) {
    const double t1_ms = 256.0 / per_s[1] * 1000;
    results.set(fig, "efficiency_bound_gloo", t1_ms / (t1_ms + 2 * a->second));
  }
  results.note(fig, "setup", "Fashion-MNIST MLP 784-256-10, SGD lr 0.1, global batch 256, DDP + DistributedSampler, "
                             "gloo on loopback, 1 thread per process; median of 3 epochs");
}
// <<< ddp_fashion_epoch

int main(int argc, char** argv) {
  // Every figure is single-threaded: tessel's pool, OpenBLAS and LibTorch alike.
  tessel::set_num_threads(1);
  openblas_set_num_threads(1);
  setenv("OPENBLAS_NUM_THREADS", "1", 1);
  bench::torch_peer::use_one_thread();
  if (argc > 1 && std::string(argv[1]) == "--compile-child") return compile_child();
  if (argc > 1 && std::string(argv[1]) == "--first-step-child") return first_step_child();
  if (argc > 3 && std::string(argv[1]) == "--attention-memory-child")
    return attention_memory_child(std::stoll(argv[2]), std::string(argv[3]) == "1");

  // A fresh kernel cache, so compile figures see real compiles and no user cache is touched.
  char tmpl[] = "/tmp/tessel-bench-cache-XXXXXX";
  if (!mkdtemp(tmpl)) return 1;
  setenv("TESSEL_CACHE_DIR", tmpl, 1);

  Config cfg;
  cfg.out = std::filesystem::read_symlink("/proc/self/exe").parent_path() / "results.json";
  std::vector<char*> gb_args{argv[0]};
  std::string interleave = "--benchmark_enable_random_interleaving=true";
  std::string no_color = "--benchmark_color=false";
  gb_args.push_back(interleave.data());
  gb_args.push_back(no_color.data());
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick") cfg.quick = true;
    else if (a.rfind("--only=", 0) == 0) {
      std::stringstream ss(a.substr(7));
      for (std::string f; std::getline(ss, f, ',');) cfg.only.insert(f);
    } else if (a.rfind("--out=", 0) == 0) cfg.out = a.substr(6);
    else if (a.rfind("--lenet-images=", 0) == 0) cfg.lenet_images = std::stoll(a.substr(15));
    else gb_args.push_back(argv[i]);
  }
  int gb_argc = static_cast<int>(gb_args.size());
  benchmark::Initialize(&gb_argc, gb_args.data());

  fmt::print("tessel bench: tessel rows on backend '{}' (ref interpreter as tessel_ref), LibTorch {} with {} thread(s), "
             "OpenBLAS 1 thread, tessel pool {} thread(s), kernel cache {}\n",
             main_backend_name(), bench::torch_peer::version(), bench::torch_peer::num_threads(), tessel::num_threads(),
             tmpl);
  std::fflush(stdout);

  // One-shot figures first: compile latency wants a JIT that has compiled nothing yet.
  if (cfg.wants("compile_latency")) compile_latency();
  if (cfg.wants("first_step_ms")) first_step_figure(cfg);  // fresh processes, empty caches
  if (cfg.wants("fused_chain_16M")) fused_chain(cfg, "fused_chain_16M", 1, int64_t{16} << 20, true, true);
  // The machine's streaming limit, in the same run as the figures it bounds.
  if (cfg.wants("fused_chain_16M") || cfg.wants("bandwidth_limit")) bandwidth_limit(cfg);
  if (cfg.wants("tiny_chain_dispatch")) fused_chain(cfg, "tiny_chain_dispatch", 2, 20, false, false);
  if (cfg.wants("mlp_forward_b1024")) mlp_forward(cfg);
  if (cfg.wants("train_step_b256")) train_step(cfg);
  if (cfg.wants("conv2d_fwd") || cfg.wants("conv2d_fwd_bwd")) conv2d_figures(cfg);
  if (cfg.wants("embedding_b4096")) embedding_figure(cfg);
  if (cfg.wants("attention_fwd_bwd")) attention_figure(cfg);
  if (cfg.wants("attention_memory")) attention_memory();
  if (cfg.wants("gpt_train_step")) gpt_figure(cfg);
  Collector collector;
  if (cfg.wants("fused_chain_16M") || cfg.wants("bandwidth_limit") || cfg.wants("tiny_chain_dispatch") ||
      cfg.wants("mlp_forward_b1024") ||
      cfg.wants("train_step_b256") || cfg.wants("conv2d_fwd") || cfg.wants("conv2d_fwd_bwd") ||
      cfg.wants("embedding_b4096") || cfg.wants("attention_fwd_bwd") || cfg.wants("gpt_train_step"))
    benchmark::RunSpecifiedBenchmarks(&collector);
  if (cfg.wants("fashion_epoch")) fashion_epoch(cfg);
  if (cfg.wants("lenet_epoch")) lenet_epoch(cfg);
  if (cfg.wants("ddp_fashion_epoch")) ddp_fashion_epoch();  // fresh processes through tessel-run
  python_peers(cfg);  // PyPI peers (bench/python_peers/peers.py), after tessel's own rows

  for (auto& fig : {"fused_chain_16M", "tiny_chain_dispatch", "mlp_forward_b1024", "train_step_b256", "fashion_epoch",
                    "conv2d_fwd", "conv2d_fwd_bwd", "lenet_epoch", "embedding_b4096", "attention_fwd_bwd",
                    "gpt_train_step"}) {
    const std::vector<std::string> peers = {"hand", "libtorch", "libtorch_prealloc", "libtorch_eager", "onednn_direct"};
    results.ratios(fig, "tessel_ms", "", peers);
    results.ratios(fig, "tessel_ref_ms", "ref_", peers);
    results.ratios(fig, "tessel_one_hot_ms", "one_hot_", peers);
    results.ratios(fig, "tessel_composite_ms", "composite_", peers);
    // The same from CPU time of the timing thread (cpu_vs_<peer>).
    auto& kv = results.numbers[fig];
    if (kv.count("tessel_cpu_ms"))
      for (auto& p : peers)
        if (kv.count(p + "_cpu_ms") && kv[p + "_cpu_ms"] > 0) kv["cpu_vs_" + p] = kv["tessel_cpu_ms"] / kv[p + "_cpu_ms"];
  }
  python_peer_ratios();
  ddp_peer_ratios();
  bandwidth_fractions();
  write_outputs(cfg);
  print_python_peer_notes(cfg);
  std::filesystem::remove_all(tmpl);
  return 0;
}
