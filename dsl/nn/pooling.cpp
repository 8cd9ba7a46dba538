#include "dsl/nn/pooling.h"

#include <fmt/format.h>

namespace tessel::nn {
namespace {

// As Python prints the argument: an int when both sizes agree, else a tuple.
std::string size_repr(Size2 s) { return s.h == s.w ? fmt::format("{}", s.h) : fmt::format("({}, {})", s.h, s.w); }

}  // namespace

MaxPool2dImpl::MaxPool2dImpl(Size2 k, MaxPool2dOptions o) : Module("MaxPool2d"), kernel_size(k), options(std::move(o)) {
  if (k.h <= 0 || k.w <= 0)
    throw ValueError(fmt::format("MaxPool2d: kernel_size must be positive, got {}", size_repr(k)));
}

Tensor MaxPool2dImpl::forward(const Tensor& x) { return max_pool2d(x, kernel_size, options); }

std::string MaxPool2dImpl::extra_repr() const {
  return fmt::format("kernel_size={}, stride={}, padding={}, dilation={}, ceil_mode={}", size_repr(kernel_size),
                     size_repr(options.stride.value_or(kernel_size)), size_repr(options.padding),
                     size_repr(options.dilation), options.ceil_mode ? "True" : "False");
}

AvgPool2dImpl::AvgPool2dImpl(Size2 k, AvgPool2dOptions o) : Module("AvgPool2d"), kernel_size(k), options(std::move(o)) {
  if (k.h <= 0 || k.w <= 0)
    throw ValueError(fmt::format("AvgPool2d: kernel_size must be positive, got {}", size_repr(k)));
}

Tensor AvgPool2dImpl::forward(const Tensor& x) { return avg_pool2d(x, kernel_size, options); }

std::string AvgPool2dImpl::extra_repr() const {
  return fmt::format("kernel_size={}, stride={}, padding={}", size_repr(kernel_size),
                     size_repr(options.stride.value_or(kernel_size)), size_repr(options.padding));
}

AdaptiveAvgPool2dImpl::AdaptiveAvgPool2dImpl(Size2 out) : Module("AdaptiveAvgPool2d"), output_size(out) {
  if (out.h <= 0 || out.w <= 0)
    throw ValueError(fmt::format("AdaptiveAvgPool2d: output_size must be positive, got {}", size_repr(out)));
}

Tensor AdaptiveAvgPool2dImpl::forward(const Tensor& x) { return adaptive_avg_pool2d(x, output_size); }

std::string AdaptiveAvgPool2dImpl::extra_repr() const { return "output_size=" + size_repr(output_size); }

}  // namespace tessel::nn
