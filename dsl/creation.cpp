// Tensor factories and the global counter-based random generator.
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <mutex>
#include <numbers>
#include <type_traits>

#include "codegen/builders.h"
#include "dsl/tensor.h"
#include "runtime/philox.h"
#include "runtime/thread_pool.h"

namespace tessel {
namespace {

struct Generator {
  std::mutex mu;
  uint64_t seed = 0x2545F4914F6CDD1Dull;
  uint64_t counter = 0;  // next Philox block
};
Generator& generator() {
  static Generator g;
  return g;
}

// Fills a fresh host tensor of `dt` from doubles produced by f(i).
template <class F>
Tensor fill_host(const Shape& s, DType dt, Device d, F&& f) {
  if (!d.is_cpu()) {
    check_device_exists(d);
    Tensor host = fill_host(s, dt, cpu(), std::forward<F>(f));
    return host.to(d);
  }
  Tensor t = empty(s, dt, cpu());
  const ir::BufferView& v = t.buffer();
  int64_t n = s.numel();
  std::byte* p = v.bytes(dt);
  for (int64_t i = 0; i < n; ++i) {
    double x = f(i);
    std::byte* q = p + i * static_cast<int64_t>(dtype_size(dt));
    switch (dt) {
      case DType::f32: { float y = static_cast<float>(x); std::memcpy(q, &y, 4); break; }
      case DType::f64: std::memcpy(q, &x, 8); break;
      case DType::i64: { int64_t y = static_cast<int64_t>(x); std::memcpy(q, &y, 8); break; }
      case DType::i32: { int32_t y = static_cast<int32_t>(x); std::memcpy(q, &y, 4); break; }
      case DType::b8: { bool y = x != 0; std::memcpy(q, &y, 1); break; }
      case DType::f16: { uint16_t y = f32_to_f16(static_cast<float>(x)); std::memcpy(q, &y, 2); break; }
      case DType::bf16: { uint16_t y = f32_to_bf16(static_cast<float>(x)); std::memcpy(q, &y, 2); break; }
    }
  }
  return t;
}

void check_shape(const char* what, const Shape& s) { (void)checked_numel(what, s); }

}  // namespace

std::pair<uint64_t, uint64_t> reserve_random(uint64_t n) {
  Generator& g = generator();
  std::lock_guard lock(g.mu);
  uint64_t first = g.counter;
  g.counter += (n + 3) / 4;
  return {g.seed, first};
}

void manual_seed(uint64_t seed) {
  Generator& g = generator();
  std::lock_guard lock(g.mu);
  g.seed = seed;
  g.counter = 0;
}

Tensor empty(const Shape& s, DType t, Device d) {
  check_shape("empty", s);
  ir::BufferView v;
  v.storage = Storage::allocate(static_cast<size_t>(std::max<int64_t>(s.numel(), 1)) * dtype_size(t), d);
  v.strides = contiguous_strides(s);
  return from_buffer(std::move(v), t, s, d);
}

namespace {
// full() named after the factory the user called, so a bad shape says "zeros: ...".
Tensor full_as(const char* what, const Shape& s, const Scalar& v, DType t, Device d) {
  check_shape(what, s);
  if (v.v.is_int && is_integral(t)) {
    // Through a double, int64 values above 2^53 would lose their low bits.
    if (!d.is_cpu()) check_device_exists(d);
    Tensor out = empty(s, t, cpu());
    out.fill_(v);
    return d.is_cpu() ? out : out.to(d);
  }
  double x = v.v.as_double();
  return fill_host(s, t, d, [x](int64_t) { return x; });
}
}  // namespace

Tensor full(const Shape& s, const Scalar& v, DType t, Device d) { return full_as("full", s, v, t, d); }
Tensor zeros(const Shape& s, DType t, Device d) { return full_as("zeros", s, 0.0, t, d); }
Tensor ones(const Shape& s, DType t, Device d) { return full_as("ones", s, 1.0, t, d); }
Tensor zeros(const Shape& s, Device d) { return zeros(s, DType::f32, d); }
Tensor ones(const Shape& s, Device d) { return ones(s, DType::f32, d); }

// arange is an iota scaled and shifted inside the kernel that reads it: no
// host buffer, no copy to a device (start + i * step in i64 or f64, then
// converted, as the host loop computed it).
namespace {
Tensor iota_line(int64_t n, DType compute, const Scalar& start, const Scalar& step, DType t, Device d) {
  ir::NodePtr i = ir::cast(ir::iota(Shape{n}, 0), compute);
  ir::NodePtr v = ir::binary(ir::Op::Add, ir::binary(ir::Op::Mul, i, ir::constant(step.v, compute)),
                             ir::constant(start.v, compute));
  return Tensor::from_node(ir::cast(v, t), d);
}
}  // namespace

Tensor arange(int64_t end, DType t, Device d) {
  if (end < 0) throw ValueError(fmt::format("arange: end must be >= 0, got {}", end));
  return iota_line(end, DType::i64, int64_t{0}, int64_t{1}, t, d);
}

Tensor arange(double start, double end, double step, DType t, Device d) {
  if (step == 0 || (end - start) / step < 0)
    throw ValueError(fmt::format("arange: the range [{}, {}) with step {} is empty or infinite", start, end, step));
  auto n = static_cast<int64_t>(std::ceil((end - start) / step));
  return iota_line(n, DType::f64, start, step, t, d);
}

Tensor arange_int(int64_t start, int64_t end, int64_t step, DType t, Device d) {
  if (step == 0 || (end - start) / step < 0 || ((end - start) != 0 && (end - start > 0) != (step > 0)))
    throw ValueError(fmt::format("arange: the range [{}, {}) with step {} is empty or infinite", start, end, step));
  int64_t n = (end - start + step + (step > 0 ? -1 : 1)) / step;
  return iota_line(n, DType::i64, start, step, t, d);
}

// linspace in f64 inside the kernel, from both ends as torch computes it:
// start + i*step for the first half, end - (steps-1-i)*step for the rest, so
// the last value is `end` exactly.
Tensor linspace(double start, double end, int64_t steps, DType t, Device d) {
  if (steps < 0) throw ValueError(fmt::format("linspace: steps must be >= 0, got {}", steps));
  if (steps == 1) return full({1}, start, t, d);
  const double step = (end - start) / static_cast<double>(steps - 1);  // steps == 0: unused
  ir::NodePtr i = ir::cast(ir::iota(Shape{steps}, 0), DType::f64);
  auto c = [](double v) { return ir::constant(Scalar(v).v, DType::f64); };
  ir::NodePtr lo = ir::binary(ir::Op::Add, ir::binary(ir::Op::Mul, i, c(step)), c(start));
  ir::NodePtr back = ir::binary(ir::Op::Sub, c(static_cast<double>(steps - 1)), i);
  ir::NodePtr hi = ir::binary(ir::Op::Sub, c(end), ir::binary(ir::Op::Mul, back, c(step)));
  ir::NodePtr first_half = ir::binary(ir::Op::Lt, i, c(static_cast<double>(steps / 2)));
  return Tensor::from_node(ir::cast(ir::where(first_half, lo, hi), t), d);
}

Tensor rand(const Shape& s, DType t, Device d) {
  check_shape("rand", s);
  if (!is_floating(t)) throw DTypeError(fmt::format("rand: needs a floating dtype, got {}", dtype_name(t)));
  auto [seed, first] = reserve_random(static_cast<uint64_t>(s.numel()));
  if (d.is_cpu() && (t == DType::f32 || t == DType::f64)) {
    // Element i is word i % 4 of block first + i / 4: one Philox block per
    // four elements (not per element), blocks spread over the pool. Dropout
    // draws one of these per activation in every training step.
    Tensor out = empty(s, t, cpu());
    const int64_t n = s.numel(), blocks = (n + 3) / 4;
    auto fill = [&](auto* p) {
      parallel_for(blocks, 1 << 12, [&](int64_t b, int64_t e) {
        for (int64_t k = b; k < e; ++k) {
          const std::array<uint32_t, 4> w = Philox4x32::block(seed, first + static_cast<uint64_t>(k));
          for (int64_t j = 0; j < 4 && 4 * k + j < n; ++j)
            p[4 * k + j] = static_cast<std::remove_pointer_t<decltype(p)>>(Philox4x32::uniform(w[static_cast<size_t>(j)]));
        }
      });
    };
    if (t == DType::f32) fill(out.buffer().ptr<float>());
    else fill(out.buffer().ptr<double>());
    return out;
  }
  return fill_host(s, t, d, [seed = seed, first = first](int64_t i) {
    return static_cast<double>(Philox4x32::uniform(Philox4x32::word(seed, first * 4 + static_cast<uint64_t>(i))));
  });
}

Tensor randn(const Shape& s, DType t, Device d) {
  check_shape("randn", s);
  if (!is_floating(t)) throw DTypeError(fmt::format("randn: needs a floating dtype, got {}", dtype_name(t)));
  auto [seed, first] = reserve_random(static_cast<uint64_t>(s.numel()));
  // Box-Muller on word pairs of one block: element i uses block first + i/4,
  // words (2p, 2p+1) with p = (i%4)/2; even i takes cos, odd i takes sin.
  return fill_host(s, t, d, [seed = seed, first = first](int64_t i) {
    auto blk = Philox4x32::block(seed, first + static_cast<uint64_t>(i) / 4);
    size_t p = (static_cast<size_t>(i) % 4) / 2;
    double u1 = (static_cast<double>(blk[2 * p] >> 8) + 1.0) / 16777216.0;  // (0, 1]
    double u2 = static_cast<double>(blk[2 * p + 1] >> 8) / 16777216.0;
    double r = std::sqrt(-2.0 * std::log(u1));
    double th = 2.0 * std::numbers::pi * u2;
    return (i % 2 == 0) ? r * std::cos(th) : r * std::sin(th);
  });
}
Tensor rand(const Shape& s, Device d) { return rand(s, DType::f32, d); }
// randint: two 32-bit words per element make a 64-bit draw reduced modulo the
// range (the bias is below range / 2^64). Values pass through a double on the
// way into the tensor, so the range is capped at 2^53.
Tensor randint(int64_t low, int64_t high, const Shape& s, DType t, Device d) {
  check_shape("randint", s);
  if (is_floating(t) || t == DType::b8)
    throw DTypeError(fmt::format("randint: needs an integer dtype (i64 or i32), got {}", dtype_name(t)));
  if (high <= low) throw ValueError(fmt::format("randint: high ({}) must be greater than low ({})", high, low));
  const auto range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
  if (range > (uint64_t{1} << 53))
    throw ValueError(fmt::format("randint: the range [{}, {}) is wider than 2^53; split it", low, high));
  if (t == DType::i32 && (low < INT32_MIN || high - 1 > INT32_MAX))
    throw ValueError(fmt::format("randint: [{}, {}) does not fit in i32; use DType::i64", low, high));
  auto [seed, first] = reserve_random(2 * static_cast<uint64_t>(s.numel()));
  return fill_host(s, t, d, [seed = seed, first = first, low, range](int64_t i) {
    uint64_t w = first * 4 + 2 * static_cast<uint64_t>(i);
    uint64_t r = (uint64_t{Philox4x32::word(seed, w)} << 32) | Philox4x32::word(seed, w + 1);
    return static_cast<double>(low + static_cast<int64_t>(r % range));
  });
}

Tensor zeros_like(const Tensor& x, std::optional<DType> t) { return full_as("zeros_like", x.shape(), 0.0, t.value_or(x.dtype()), x.device()); }
Tensor ones_like(const Tensor& x, std::optional<DType> t) { return full_as("ones_like", x.shape(), 1.0, t.value_or(x.dtype()), x.device()); }
Tensor full_like(const Tensor& x, const Scalar& v, std::optional<DType> t) {
  return full_as("full_like", x.shape(), v, t.value_or(x.dtype()), x.device());
}
Tensor rand_like(const Tensor& x, std::optional<DType> t) { return rand(x.shape(), t.value_or(x.dtype()), x.device()); }
Tensor randn_like(const Tensor& x, std::optional<DType> t) { return randn(x.shape(), t.value_or(x.dtype()), x.device()); }
Tensor randn(const Shape& s, Device d) { return randn(s, DType::f32, d); }

Tensor tensor(const NestedList& values, DType t, Device d) {
  const auto& v = values.values;
  Shape s = values.shape;
  return fill_host(s, t, d, [&v](int64_t i) { return v[static_cast<size_t>(i)]; });
}
Tensor tensor(const NestedList& values, Device d) {
  return tensor(values, values.all_bool ? DType::b8 : values.all_int ? DType::i64 : DType::f32, d);
}

template <class T>
Tensor from_vector(const std::vector<T>& values, const Shape& s, Device d) {
  if (static_cast<int64_t>(values.size()) != s.numel())
    throw ShapeError(fmt::format("from_vector: {} values do not fill shape {} ({} elements)", values.size(), s.str(),
                                 s.numel()));
  DType t = dtype_of_v<T>;
  Tensor out = empty(s, t, cpu());
  if (!values.empty()) std::memcpy(out.buffer().storage->data(), values.data(), values.size() * sizeof(T));
  return d.is_cpu() ? out : out.to(d);
}
template Tensor from_vector<float>(const std::vector<float>&, const Shape&, Device);
template Tensor from_vector<double>(const std::vector<double>&, const Shape&, Device);
template Tensor from_vector<int64_t>(const std::vector<int64_t>&, const Shape&, Device);
template Tensor from_vector<int32_t>(const std::vector<int32_t>&, const Shape&, Device);

}  // namespace tessel
