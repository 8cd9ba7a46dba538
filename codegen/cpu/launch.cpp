#include "codegen/cpu/launch.h"

#include <algorithm>

#include "runtime/thread_pool.h"

namespace tessel::cpujit {

namespace {
// pass launch: rows [r0, r1) of a kernel over `bufs`.
// Threads: a chunk of work should be worth a wake-up (tens of microseconds),
// so a kernel runs on the calling thread, with no synchronization at all,
// unless it has at least two chunks of kMinChunkElems domain elements.
// Every output element is computed by exactly one call with the same code,
// so results do not depend on the thread count.
constexpr int64_t kMinChunkElems = int64_t{1} << 16;
}  // namespace

// Launches `fn` over all rows, split across the thread pool when large.
// `args` is the kernel's launch-argument vector (kernel_ir.h); only a plain
// elementwise kernel (reduce_rank 0) with few rows is split along its last
// dim, which rewrites the dims and offsets of its store and load slots.
void launch_kernel(cpujit::KernelFn* fn, void** bufs, const int64_t* args, size_t nargs, const kir::Kernel& k,
                   int64_t rows) {
  if (rows <= 0) return;
  const size_t R = static_cast<size_t>(k.rank);
  int64_t domain = 1;
  for (size_t d = 0; d < R; ++d) domain *= args[d];
  if (domain < 2 * kMinChunkElems) {
    fn(bufs, args, 0, rows);
    return;
  }
  const int64_t per_row = domain / rows;
  const int64_t row_grain = std::max<int64_t>(1, (kMinChunkElems + per_row - 1) / per_row);
  if (k.reduce_rank > 0 || rows / row_grain >= 2 * num_threads()) {
    parallel_for(rows, row_grain, [&](int64_t b, int64_t e) { fn(bufs, args, b, e); });
    return;
  }
  // Few long rows (a 1-D tensor is one row): split the last dim into windows.
  const size_t slots = k.moving_slots();  // the store, loads and coordinates
  const int64_t cols = args[R - 1];
  const int64_t col_grain = std::max<int64_t>(1, kMinChunkElems / std::max<int64_t>(rows, 1));
  parallel_for(cols, col_grain, [&](int64_t b, int64_t e) {
    std::vector<int64_t> a(args, args + nargs);
    a[R - 1] = e - b;
    for (size_t sl = 0; sl < slots; ++sl) {
      size_t base = k.slot_base(static_cast<int>(sl));
      a[base] += b * a[base + R];  // offset += start * (stride of the last dim)
    }
    fn(bufs, a.data(), 0, rows);
  });
}

void run_lowered(const lower::Lowered& l, cpujit::KernelFn* fn) {
  BufPtrs bufs(l.buffers.size());
  for (size_t i = 0; i < l.buffers.size(); ++i) bufs.ptrs[i] = l.buffers[i].storage->data();
  launch_kernel(fn, bufs.ptrs, l.args.data(), l.args.size(), l.kernel, l.rows);
}

}  // namespace tessel::cpujit
