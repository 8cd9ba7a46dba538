#include "dsl/dist/collectives.h"

#include <fmt/format.h>

namespace tessel::dist {

namespace {

ProcessGroup& group_or_default(ProcessGroup* g, std::shared_ptr<ProcessGroup>& keep) {
  if (g) return *g;
  keep = default_group();
  return *keep;
}

// A private contiguous copy the collective may write while the caller's
// tensor stays a normal lazy value; the result is copied back on wait().
Tensor staging_copy(const Tensor& t, const char* call) {
  if (!t.defined()) throw ValueError(fmt::format("{}: the tensor is undefined", call));
  NoGradGuard no_grad;
  Tensor s = empty(t.shape(), t.dtype(), t.device());
  s.copy_(t.detach());
  s.eval();
  return s;
}

void write_back(const Tensor& dst, const Tensor& staged) {
  staged.buffer().storage->bump_version();
  NoGradGuard no_grad;
  dst.detach().copy_(staged);
}

}  // namespace

CommBuffer comm_buffer(const Tensor& t) {
  t.eval();
  if (!t.is_contiguous())
    throw ValueError("comm_buffer: the tensor must be contiguous; call .contiguous() first");
  return {t.buffer().bytes(t.dtype()), t.dtype(), t.shape(), t.device()};
}

TensorWork::~TensorWork() {
  if (work_) {
    try {
      work_->wait();
    } catch (...) {
      // The error belongs to whoever waits; a dropped handle only keeps memory alive until the end.
    }
  }
}

void TensorWork::wait() {
  if (!work_) return;
  WorkPtr w = std::move(work_);
  auto finish = std::move(finish_);
  w->wait();
  if (finish) finish();
}

TensorWork all_reduce_async(const Tensor& t, ReduceOp op, ProcessGroup* group) {
  std::shared_ptr<ProcessGroup> keep;
  ProcessGroup& pg = group_or_default(group, keep);
  Tensor s = staging_copy(t, "all_reduce");
  WorkPtr w = pg.all_reduce(comm_buffer(s), op);
  return TensorWork(w, [t, s] { write_back(t, s); });
}

TensorWork broadcast_async(const Tensor& t, int root, ProcessGroup* group) {
  std::shared_ptr<ProcessGroup> keep;
  ProcessGroup& pg = group_or_default(group, keep);
  Tensor s = staging_copy(t, "broadcast");
  WorkPtr w = pg.broadcast(comm_buffer(s), root);
  return TensorWork(w, [t, s] { write_back(t, s); });
}

TensorWork all_gather_async(std::vector<Tensor>& out, const Tensor& t, ProcessGroup* group) {
  std::shared_ptr<ProcessGroup> keep;
  ProcessGroup& pg = group_or_default(group, keep);
  Tensor in = staging_copy(t, "all_gather");
  std::vector<int64_t> dims{pg.size()};
  for (int64_t d : t.shape().dims) dims.push_back(d);
  Tensor gathered = empty(Shape(dims), t.dtype(), t.device());
  gathered.eval();
  WorkPtr w = pg.all_gather(comm_buffer(gathered), comm_buffer(in));
  return TensorWork(w, [&out, gathered, in, n = pg.size()] {
    gathered.buffer().storage->bump_version();
    out.clear();
    for (int r = 0; r < n; ++r) out.push_back(gathered[r].contiguous());
  });
}

TensorWork reduce_scatter_async(const Tensor& output, const Tensor& input, ReduceOp op, ProcessGroup* group) {
  std::shared_ptr<ProcessGroup> keep;
  ProcessGroup& pg = group_or_default(group, keep);
  if (!output.defined()) throw ValueError("reduce_scatter: the output tensor is undefined");
  Tensor in = staging_copy(input, "reduce_scatter");
  Tensor out = empty(output.shape(), output.dtype(), output.device());
  out.eval();
  WorkPtr w = pg.reduce_scatter(comm_buffer(out), comm_buffer(in), op);
  return TensorWork(w, [output, out, in] { write_back(output, out); });
}

void all_reduce(const Tensor& t, ReduceOp op, ProcessGroup* group) { all_reduce_async(t, op, group).wait(); }
void broadcast(const Tensor& t, int root, ProcessGroup* group) { broadcast_async(t, root, group).wait(); }
std::vector<Tensor> all_gather(const Tensor& t, ProcessGroup* group) {
  std::vector<Tensor> out;
  all_gather_async(out, t, group).wait();
  return out;
}
void reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op, ProcessGroup* group) {
  reduce_scatter_async(output, input, op, group).wait();
}
void barrier(ProcessGroup* group) {
  std::shared_ptr<ProcessGroup> keep;
  group_or_default(group, keep).barrier()->wait();
}

}  // namespace tessel::dist
