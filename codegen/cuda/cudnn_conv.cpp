#include "codegen/cuda/cudnn_conv.h"

#include <fmt/format.h>

#include <algorithm>
#include <mutex>

#include "codegen/kernel_ir_verifier.h"
#include "codegen/lower.h"
#include "codegen/movement.h"
#include "runtime/cuda/driver.h"
#include "runtime/errors.h"
#include "runtime/trace.h"

namespace tessel::cudagen {

using ir::BufferView;
using ir::Node;
using ir::Op;

namespace {

cuda::CUdeviceptr dptr(const BufferView& v, DType t) { return reinterpret_cast<cuda::CUdeviceptr>(v.bytes(t)); }

// The value of `arg` as dense memory (itself when it already is).
BufferView dense(exec::StepExecutor& ex, const Node& arg, const BufferView& v) {
  if (ir::is_contiguous(arg.shape, v.strides)) return v;
  return exec::dense_copy(ex, arg.dtype, arg.shape, v);
}

// Where x [n, c, h, w] sits inside the padded input [n, c, h', w'] `padded`.
BufferView interior(const BufferView& padded, const CudnnProblem& cp) {
  BufferView v = padded;
  v.offset += cp.extra_t * cp.problem.w + cp.extra_l;
  return v;
}

// x (shape s, any strides) inside a zeroed buffer larger by the extra padding.
BufferView pad_input(exec::StepExecutor& ex, DType t, const Shape& s, const BufferView& x, const CudnnProblem& cp) {
  const cuda::ConvProblem& p = cp.problem;
  const Shape padded{p.n, p.c, p.h, p.w};
  BufferView out = ex.alloc(t, padded);
  if (padded.numel() == 0) return out;
  // Same (legacy default) stream as the copy kernel after it and cuDNN after that.
  cuda::memset_d8_async(dptr(out, t), 0, static_cast<size_t>(padded.numel()) * dtype_size(t), nullptr);
  if (s.numel() == 0) return out;
  lower::Lowered l = lower::lower_copy(t, s, x, interior(out, cp));
  kir::check_lowering(l);
  lower::coalesce(l);
  ex.launch(l, exec::Role::copy, nullptr);
  return out;
}

void trace_host(const std::string& why) {
  if (detail::trace_enabled("jit")) detail::trace_line("jit", "cuda convolution on the host: " + why);
}

}  // namespace

CudnnProblem cudnn_problem(const ir::ConvGeometry& g) {
  CudnnProblem cp;
  const int64_t ph = std::min(g.pad_t, g.pad_b), pw = std::min(g.pad_l, g.pad_r);
  cp.extra_t = g.pad_t - ph;
  cp.extra_b = g.pad_b - ph;
  cp.extra_l = g.pad_l - pw;
  cp.extra_r = g.pad_r - pw;
  cp.problem = cuda::ConvProblem{.n = g.n,
                                 .c = g.c,
                                 .h = g.h + cp.extra_t + cp.extra_b,
                                 .w = g.w + cp.extra_l + cp.extra_r,
                                 .o = g.o,
                                 .kh = g.kh,
                                 .kw = g.kw,
                                 .groups = g.groups,
                                 .pad_h = ph,
                                 .pad_w = pw,
                                 .stride_h = g.stride_h,
                                 .stride_w = g.stride_w,
                                 .dilation_h = g.dilation_h,
                                 .dilation_w = g.dilation_w};
  return cp;
}

cuda::ConvPass conv_pass(const Node& n) {
  switch (n.op) {
    case Op::Conv: return cuda::ConvPass::forward;
    case Op::ConvGradInput: return cuda::ConvPass::backward_data;
    case Op::ConvGradWeight: return cuda::ConvPass::backward_filter;
    case Op::MatMul: case Op::Attention: case Op::AttentionGrad:
    TESSEL_IR_CASES_NOT_CONTRACTION throw InternalError("cudnn_conv: a node that is no convolution");
  }
  throw InternalError("cudnn_conv: a node that is no convolution");
}

bool conv_on_cudnn(int ordinal, const Node& n) {
  if (n.dtype != DType::f32 && n.dtype != DType::f64) return false;
  if (!cuda::cudnn_available()) {
    static std::once_flag once;
    std::call_once(once, [] { trace_host(cuda::cudnn_unavailable_reason()); });
    return false;
  }
  const CudnnProblem cp = cudnn_problem(ir::conv_geometry(n));
  if (cuda::conv_supported(ordinal, n.dtype, conv_pass(n), cp.problem)) return true;
  trace_host(fmt::format("cuDNN ({}) has no algorithm for the {} {} ({})", cuda::cudnn_library(), dtype_name(n.dtype),
                         cuda::conv_pass_name(conv_pass(n)), cp.problem.str()));
  return false;
}

BufferView cudnn_conv(exec::StepExecutor& ex, int ordinal, const Node& n, const std::vector<BufferView>& args) {
  const DType t = n.dtype;
  const CudnnProblem cp = cudnn_problem(ir::conv_geometry(n));
  const cuda::ConvProblem& p = cp.problem;
  // The input as cuDNN reads it: padded by the extra, else dense.
  auto input = [&](size_t i) {
    return cp.padded() ? pad_input(ex, t, n.args[i]->shape, args[i], cp) : dense(ex, *n.args[i], args[i]);
  };
  switch (conv_pass(n)) {
    case cuda::ConvPass::forward: {  // args x, w
      const BufferView x = input(0), w = dense(ex, *n.args[1], args[1]);
      BufferView y = ex.alloc(t, n.shape);
      cuda::conv_forward(ordinal, nullptr, t, p, dptr(x, t), dptr(w, t), dptr(y, t));
      return y;
    }
    case cuda::ConvPass::backward_data: {  // args gy, w
      const BufferView gy = dense(ex, *n.args[0], args[0]), w = dense(ex, *n.args[1], args[1]);
      if (!cp.padded()) {
        BufferView gx = ex.alloc(t, n.shape);
        cuda::conv_backward_data(ordinal, nullptr, t, p, dptr(w, t), dptr(gy, t), dptr(gx, t));
        return gx;
      }
      // The gradient of the padded input; the padding's own part is dropped.
      BufferView gxp = ex.alloc(t, Shape{p.n, p.c, p.h, p.w});
      cuda::conv_backward_data(ordinal, nullptr, t, p, dptr(w, t), dptr(gy, t), dptr(gxp, t));
      return exec::dense_copy(ex, t, n.shape, interior(gxp, cp));
    }
    case cuda::ConvPass::backward_filter: {  // args x, gy
      const BufferView x = input(0), gy = dense(ex, *n.args[1], args[1]);
      BufferView gw = ex.alloc(t, n.shape);
      cuda::conv_backward_filter(ordinal, nullptr, t, p, dptr(x, t), dptr(gy, t), dptr(gw, t));
      return gw;
    }
  }
  throw InternalError("cudnn_conv: unknown pass");
}

}  // namespace tessel::cudagen
