#include "dsl/nn/parameter.h"

#include "codegen/builders.h"
#include "runtime/errors.h"

namespace tessel::nn {

Parameter::Parameter(const Tensor& value, bool requires_grad) {
  impl_ = std::make_shared<TensorImpl>();
  impl_->kind = TensorImpl::Kind::parameter;
  impl_->device = value.device();
  set_value(value);
  if (!requires_grad) requires_grad_(false);
}

Parameter Parameter::uninitialized() {
  Parameter p;
  p.impl_ = std::make_shared<TensorImpl>();
  p.impl_->kind = TensorImpl::Kind::uninitialized_parameter;
  return p;
}

void Parameter::materialize(const Shape& shape, DType dtype) { set_value(empty(shape, dtype, impl_->device)); }

void Parameter::move_uninitialized(Device d) {
  if (is_initialized()) throw InternalError("Parameter::move_uninitialized on an initialized parameter (Module::to)");
  check_device_exists(d);
  impl_->device = d;
}

void Parameter::set_value(const Tensor& value) {
  if (!impl_) throw ValueError("Parameter::set_value on an undefined parameter");
  const ir::BufferView& v = value.buffer();
  bool rg = impl_->node ? impl_->node->requires_grad : true;
  ++impl_->writes;
  impl_->node = ir::input(v, value.dtype(), value.shape(), rg, rg ? std::weak_ptr<void>(impl_) : std::weak_ptr<void>());
  impl_->device = value.device();
  impl_->kind = TensorImpl::Kind::parameter;
  impl_->is_leaf = true;
}

}  // namespace tessel::nn
