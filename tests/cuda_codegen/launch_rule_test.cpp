// The CUDA launch rule (cudagen::launch_shape) as the pure function it is:
// which elementwise launches take the vectorized variant, and when a reduction
// is split across blocks, into how many, with what second pass.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "codegen/cuda/cuda_emitter.h"
#include "codegen/kernel_ir.h"

using tessel::DType;
using namespace tessel::cudagen;
namespace kir = tessel::kir;

namespace {

// out = -in over a rank-2 domain (params: out, in of dtype t).
kir::Kernel negate(DType t) {
  kir::Kernel k;
  k.params = {{t, true}, {t, false}};
  k.load_params = {1};
  k.rank = 2;
  k.body = {{kir::StmtKind::Load, tessel::ir::Op::Input, t, {}, 0}, {kir::StmtKind::Op, tessel::ir::Op::Neg, t, {0}, 0}};
  k.value = 1;
  return k;
}

// args of `negate`: dims | store: offset, strides | load: offset, strides.
std::vector<int64_t> ew_args(int64_t rows, int64_t cols, int64_t load_off = 0, int64_t load_row = -1, int64_t load_col = 1) {
  return {rows, cols, 0, cols, 1, load_off, load_row < 0 ? cols : load_row, load_col};
}

// Sum of a [rows, count] f32 input into rows outputs.
kir::Kernel row_sum() {
  kir::Kernel k;
  k.params = {{DType::f32, true}, {DType::f32, false}};
  k.load_params = {1};
  k.rank = 2;
  k.reduce_rank = 1;
  k.reduce = kir::ReduceKind::Sum;
  k.acc_dtype = DType::f64;
  k.body = {{kir::StmtKind::Load, tessel::ir::Op::Input, DType::f32, {}, 0}};
  k.value = 0;
  k.epilogue = {{kir::StmtKind::Acc, tessel::ir::Op::Input, DType::f64, {}, 0},
                {kir::StmtKind::Op, tessel::ir::Op::Cast, DType::f32, {0}, 0}};
  k.result = 1;
  return k;
}
std::vector<int64_t> red_args(int64_t rows, int64_t count) { return {rows, count, 0, 1, 0, 0, count, 1}; }

const void* at(uintptr_t a) { return reinterpret_cast<const void*>(a); }
const std::vector<const void*> kAligned{at(0x10000), at(0x20000)};

}  // namespace

TEST_CASE("vector width is 16 bytes of the widest dtype, at most 4 elements, 1 for reductions", "[unit]") {
  CHECK(vector_width(negate(DType::f32)) == 4);
  CHECK(vector_width(negate(DType::f64)) == 2);
  CHECK(vector_width(negate(DType::i64)) == 2);
  CHECK(vector_width(negate(DType::f16)) == 4);
  CHECK(vector_width(negate(DType::b8)) == 4);
  kir::Kernel mixed = negate(DType::f32);
  mixed.params[1].dtype = DType::f64;
  CHECK(vector_width(mixed) == 2);
  CHECK(vector_width(row_sum()) == 1);
}

TEST_CASE("elementwise launches take the vectorized variant only when every slot is aligned and contiguous",
          "[unit]") {
  const kir::Kernel k = negate(DType::f32);
  const LaunchLimits lim{.max_blocks = 1 << 20};
  LaunchShape s = launch_shape(k, ew_args(8, 1024), kAligned, lim);
  CHECK(s.vector == 4);
  CHECK(s.grid == 8 * 1024 / 4 / 256);
  CHECK(s.block_x == 256);
  CHECK(s.splits == 1);

  // Plain variant: one thread per element.
  auto plain = [&](const std::vector<int64_t>& args, const std::vector<const void*>& bufs) {
    LaunchShape p = launch_shape(k, args, bufs, lim);
    return p.vector == 1 && p.grid == (args[0] * args[1] + 255) / 256;
  };
  CHECK(plain(ew_args(8, 1022), kAligned));                             // inner extent not a multiple of 4
  CHECK(plain(ew_args(8, 1024, 1), kAligned));                          // load offset 1 element: 4 bytes past 16
  CHECK(plain(ew_args(8, 1024), {at(0x10000), at(0x20008)}));           // load base 8 bytes past 16
  CHECK(plain(ew_args(8, 1024), {at(0x10004), at(0x20000)}));           // store base misaligned
  CHECK(plain(ew_args(8, 1024, 0, 1026), kAligned));                    // rows 1026 apart: row 1 starts misaligned
  CHECK(plain(ew_args(8, 1024, 0, 1024, 2), kAligned));                 // a stepped load
  CHECK(plain(ew_args(8, 1024), {}));                                   // addresses unknown
  CHECK(launch_shape(k, ew_args(8, 1024), 1 << 20).vector == 1);        // the overload without addresses
  LaunchLimits off = lim;
  off.vectorize = false;
  CHECK(launch_shape(k, ew_args(8, 1024), kAligned, off).vector == 1);

  // Vectorized still: an aligned offset, rows a multiple of 4 apart, a load
  // broadcast along the innermost dim (stride 0), a single row whose stride is irrelevant.
  CHECK(launch_shape(k, ew_args(8, 1024, 4), kAligned, lim).vector == 4);
  CHECK(launch_shape(k, ew_args(8, 1024, 0, 2048), kAligned, lim).vector == 4);
  CHECK(launch_shape(k, ew_args(8, 1024, 3, 1, 0), kAligned, lim).vector == 4);
  CHECK(launch_shape(k, ew_args(1, 1024, 0, 7), kAligned, lim).vector == 4);
  // ... but the store never broadcasts.
  std::vector<int64_t> store0 = ew_args(8, 1024);
  store0[4] = 0;
  CHECK(launch_shape(k, store0, kAligned, lim).vector == 1);

  // f64: two elements, 16-byte alignment.
  const kir::Kernel d = negate(DType::f64);
  CHECK(launch_shape(d, ew_args(3, 6), kAligned, lim).vector == 2);
  CHECK(launch_shape(d, ew_args(3, 6, 1), kAligned, lim).vector == 1);
  CHECK(launch_shape(d, ew_args(3, 6), {at(0x10008), at(0x20000)}, lim).vector == 1);

  // The grid is capped; an empty domain launches nothing.
  CHECK(launch_shape(k, ew_args(1024, 1024), kAligned, {.max_blocks = 100}).grid == 100);
  CHECK(launch_shape(k, ew_args(0, 1024), kAligned, lim).empty);
}

TEST_CASE("reductions split across blocks when outputs are few and reduced extents long", "[unit]") {
  const kir::Kernel k = row_sum();
  // A full sum of 1000003 on a 132-SM device (32 blocks per SM): 4096 elements per block.
  LaunchShape s = launch_shape(k, red_args(1, 1000003), {}, {.max_blocks = 132 * 32});
  CHECK(s.splits == 245);
  CHECK(s.grid == 245);
  CHECK(s.block_x == 256);
  CHECK(s.block_y == 1);
  CHECK(s.partials == 245);
  CHECK(s.finish_grid == 1);
  CHECK(s.finish_block == 256);
  CHECK(s.vector == 1);

  // The plain kernel alone never splits.
  s = launch_shape(k, red_args(1, 1000003), 132 * 32);
  CHECK(s.splits == 1);
  CHECK(s.grid == 1);
  CHECK(s.block_x == 256);
  // Capped by the second pass's one block per output ...
  CHECK(launch_shape(k, red_args(1, int64_t(1) << 30), {}, {.max_blocks = 1 << 20}).splits == kMaxSplits);
  // ... and by the grid shared among the outputs.
  s = launch_shape(k, red_args(3, 1000003), {}, {.max_blocks = 64});
  CHECK(s.splits == 21);
  CHECK(s.grid == 63);
  CHECK(s.partials == 63);
  CHECK(s.finish_grid == 3);
  CHECK(s.finish_block == 32);
  // Two blocks' worth of elements is the least that splits.
  CHECK(launch_shape(k, red_args(1, 8192), {}, {.max_blocks = 64}).splits == 2);
  CHECK(launch_shape(k, red_args(1, 4097), {}, {.max_blocks = 64}).splits == 2);
  CHECK(launch_shape(k, red_args(1, 4096), {}, {.max_blocks = 64}).splits == 1);
  // Enough outputs to fill the grid: one pass, a block row per output.
  s = launch_shape(k, red_args(64, 1000000), {}, {.max_blocks = 64});
  CHECK(s.splits == 1);
  CHECK(s.block_x == 256);
  CHECK(s.block_y == 1);
  CHECK(s.grid == 64);
  CHECK(s.partials == 0);
  // Short rows share a block: 32 threads per row, 8 rows per block.
  s = launch_shape(k, red_args(100, 20), {}, {.max_blocks = 64});
  CHECK(s.splits == 1);
  CHECK(s.block_x == 32);
  CHECK(s.block_y == 8);
  CHECK(s.grid == 13);
  // A lower threshold splits small reductions, but never a single element or an empty one.
  const LaunchLimits tiny{.max_blocks = 64, .split_min_elements = 1};
  CHECK(launch_shape(k, red_args(1, 31), {}, tiny).splits == 31);
  CHECK(launch_shape(k, red_args(2, 33), {}, tiny).splits == 32);
  CHECK(launch_shape(k, red_args(1, 1), {}, tiny).splits == 1);
  CHECK(launch_shape(k, red_args(1, 0), {}, tiny).splits == 1);
  CHECK(launch_shape(k, red_args(33, 31), {}, tiny).splits == 1);  // 64 / 33 blocks per output < 2
  CHECK(launch_shape(k, red_args(0, 31), {}, tiny).empty);
}
