// Parameter: a tensor a module owns and trains. Its own type, so code can
// tell parameters from plain tensors; `data()` is a detached view of the same
// memory, `grad()` is undefined until a backward pass reaches it.
//
//   nn::Parameter w(randn({4, 8}));
//   w.data()[0][0] = 42;          // writes the parameter's memory
//   Parameter lazy = nn::Parameter::uninitialized();  // shape known after first forward
#pragma once

#include "dsl/tensor.h"

namespace tessel::nn {

class Parameter : public Tensor {
 public:
  Parameter() = default;
  /// A parameter over `value`'s memory (shared, as torch.nn.Parameter does).
  explicit Parameter(const Tensor& value, bool requires_grad = true);
  /// A parameter whose shape is not known yet (a lazy layer's).
  static Parameter uninitialized();

  bool is_initialized() const { return defined() && impl()->kind == TensorImpl::Kind::parameter; }
  /// Gives an uninitialized parameter its shape and (uninitialized) memory on
  /// the device it was moved to (the CPU unless `module.to(d)` came first);
  /// every handle to it -- tied uses included -- sees the change.
  void materialize(const Shape& shape, DType dtype = DType::f32);
  /// Where an uninitialized parameter will materialize, as PyTorch's
  /// UninitializedParameter.to(device): `LazyLinear(8)` then `net->to(gpu(0))`.
  void move_uninitialized(Device d);
  /// Replaces the value (same identity): used by load_state_dict and to(device).
  void set_value(const Tensor& value);
};

}  // namespace tessel::nn
