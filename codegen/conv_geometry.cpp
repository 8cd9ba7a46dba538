#include "codegen/conv_geometry.h"

#include "codegen/ir.h"
#include "runtime/errors.h"

namespace tessel::ir {

ConvGeometry conv_geometry(const Node& n) {
  // Which shape is the input, the weight and the output depends on the direction.
  const Shape* x = nullptr;
  const Shape* w = nullptr;
  const Shape* y = nullptr;
  if (n.op == Op::Conv) x = &n.args[0]->shape, w = &n.args[1]->shape, y = &n.shape;
  else if (n.op == Op::ConvGradInput) x = &n.shape, w = &n.args[1]->shape, y = &n.args[0]->shape;
  else if (n.op == Op::ConvGradWeight) x = &n.args[0]->shape, w = &n.shape, y = &n.args[1]->shape;
  else throw InternalError("conv_geometry: not a convolution node");
  const ConvAttrs& a = n.conv();
  ConvGeometry g;
  g.n = x->dims[0], g.c = x->dims[1], g.h = x->dims[2], g.w = x->dims[3];
  g.o = w->dims[0], g.kh = w->dims[2], g.kw = w->dims[3], g.groups = a.groups;
  g.stride_h = a.stride[0], g.stride_w = a.stride[1];
  g.pad_t = a.pad_before[0], g.pad_l = a.pad_before[1], g.pad_b = a.pad_after[0], g.pad_r = a.pad_after[1];
  g.dilation_h = a.dilation[0], g.dilation_w = a.dilation[1];
  g.oh = y->dims[2], g.ow = y->dims[3];
  return g;
}

}  // namespace tessel::ir
