#include "dsl/nn/conv.h"

#include <fmt/format.h>

#include <cmath>

#include "dsl/nn/init.h"

namespace tessel::nn {
namespace {

std::string pair_repr(Size2 s) { return fmt::format("({}, {})", s.h, s.w); }

// PyTorch's default for every convolution: kaiming_uniform(a = sqrt(5)) on
// the weight, which is U(+-1/sqrt(fan_in)), and the same bound for the bias.
void reset_conv(Parameter& weight, Parameter& bias) {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(init::fans(weight).first));
    init::uniform_(bias, -bound, bound);
  }
}

void check_channels(std::string_view type, int64_t in, int64_t out, int64_t groups) {
  if (in <= 0 || out <= 0 || groups <= 0)
    throw ValueError(fmt::format("{}({}, {}): in_channels, out_channels and groups must be positive (groups={})", type,
                                 in, out, groups));
  if (in % groups != 0 || out % groups != 0)
    throw ValueError(fmt::format("{}({}, {}): groups={} must divide both in_channels and out_channels", type, in, out,
                                 groups));
}

// The parts of PyTorch's _ConvNd.extra_repr after the channels.
std::string conv_repr_tail(const std::string& kernel, const std::string& stride, const std::string& padding,
                           bool zero_padding, const std::string& dilation, bool unit_dilation,
                           const std::string& output_padding, bool zero_output_padding, int64_t groups, bool bias) {
  std::string s = fmt::format(", kernel_size={}, stride={}", kernel, stride);
  if (!zero_padding) s += ", padding=" + padding;
  if (!unit_dilation) s += ", dilation=" + dilation;
  if (!zero_output_padding) s += ", output_padding=" + output_padding;
  if (groups != 1) s += fmt::format(", groups={}", groups);
  if (!bias) s += ", bias=False";
  return s;
}

// As torch.nn's constructors: a padding string that cannot work fails when
// the layer is made, not at its first forward.
void check_padding(std::string_view type, const ConvPadding& p, bool stride_one) {
  if (!p.mode.empty() && p.mode != "same" && p.mode != "valid")
    throw ValueError(fmt::format("{}: padding must be numbers, \"same\" or \"valid\", got \"{}\"", type, p.mode));
  if (p.mode == "same" && !stride_one)
    throw ValueError(fmt::format("{}: padding=\"same\" needs stride 1; give the padding as numbers instead", type));
}

std::string padding_repr(const ConvPadding& p, bool one_d) {
  if (!p.mode.empty()) return p.mode;
  return one_d ? fmt::format("({},)", p.size.w) : pair_repr(p.size);
}

bool zero_padding(const ConvPadding& p) { return p.mode.empty() && p.size == Size2(0); }

}  // namespace

Conv2dImpl::Conv2dImpl(int64_t in, int64_t out, Size2 k, Conv2dOptions o, bool bias)
    : Module("Conv2d"), in_channels(in), out_channels(out), kernel_size(k), options(std::move(o)), has_bias_(bias) {
  check_channels("Conv2d", in, out, options.groups);
  check_padding("Conv2d", options.padding, options.stride == Size2(1));
  if (k.h <= 0 || k.w <= 0)
    throw ValueError(fmt::format("Conv2d({}, {}): kernel_size must be positive, got {}", in, out, pair_repr(k)));
  weight = register_parameter("weight", Parameter(empty({out, in / options.groups, k.h, k.w})));
  if (bias) this->bias = register_parameter("bias", Parameter(empty({out})));
  reset_parameters();
}

Conv2dImpl::Conv2dImpl(LazyTag, int64_t out, Size2 k, Conv2dOptions o, bool bias)
    : Module("LazyConv2d"), out_channels(out), kernel_size(k), options(std::move(o)), has_bias_(bias) {
  if (out <= 0 || options.groups <= 0 || out % options.groups != 0)
    throw ValueError(fmt::format("LazyConv2d({}): out_channels must be positive and divisible by groups={}", out,
                                 options.groups));
  check_padding("LazyConv2d", options.padding, options.stride == Size2(1));
  weight = register_parameter("weight", Parameter::uninitialized());
  if (bias) this->bias = register_parameter("bias", Parameter::uninitialized());
}

LazyConv2dImpl::LazyConv2dImpl(int64_t out, Size2 k, Conv2dOptions o, bool bias)
    : Conv2dImpl(LazyTag{}, out, k, std::move(o), bias) {}

void Conv2dImpl::reset_parameters() { reset_conv(weight, bias); }

void Conv2dImpl::materialize(int64_t in) {
  check_channels("Conv2d", in, out_channels, options.groups);
  in_channels = in;
  weight.materialize({out_channels, in / options.groups, kernel_size.h, kernel_size.w});
  if (has_bias_) bias.materialize({out_channels});
  set_type_name("Conv2d");
  reset_parameters();
}

void Conv2dImpl::materialize_for_load(const std::string& name, const Tensor& value) {
  if (name == "weight" && value.dim() == 4) materialize(value.size(1) * options.groups);
}

Tensor Conv2dImpl::forward(const Tensor& x) {
  if (x.dim() != 3 && x.dim() != 4)
    throw ShapeError(fmt::format("{} ({}): expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, got shape {}", path(),
                                 type_name(), x.shape().str()));
  if (!weight.is_initialized()) materialize(x.size(-3));
  if (x.size(-3) != in_channels)
    throw ShapeError(fmt::format("{} ({}): expected {} input channels (dim -3), got shape {}", path(), type_name(),
                                 in_channels, x.shape().str()));
  return conv2d(x, weight, bias, options);
}

std::string Conv2dImpl::extra_repr() const {
  const std::string channels = in_channels ? fmt::format("{}, {}", in_channels, out_channels)
                                           : fmt::format("0, {}", out_channels);
  return channels + conv_repr_tail(pair_repr(kernel_size), pair_repr(options.stride),
                                   padding_repr(options.padding, false), zero_padding(options.padding),
                                   pair_repr(options.dilation), options.dilation == Size2(1), "", true, options.groups,
                                   has_bias_);
}

Conv1dImpl::Conv1dImpl(int64_t in, int64_t out, int64_t k, Conv1dOptions o, bool bias)
    : Module("Conv1d"), in_channels(in), out_channels(out), kernel_size(k), options(std::move(o)) {
  check_channels("Conv1d", in, out, options.groups);
  check_padding("Conv1d", options.padding, options.stride == 1);
  if (k <= 0) throw ValueError(fmt::format("Conv1d({}, {}): kernel_size must be positive, got {}", in, out, k));
  weight = register_parameter("weight", Parameter(empty({out, in / options.groups, k})));
  if (bias) this->bias = register_parameter("bias", Parameter(empty({out})));
  reset_parameters();
}

void Conv1dImpl::reset_parameters() { reset_conv(weight, bias); }

Tensor Conv1dImpl::forward(const Tensor& x) {
  if ((x.dim() != 2 && x.dim() != 3) || x.size(-2) != in_channels)
    throw ShapeError(fmt::format("{} ({}): expected an input [N, {}, L] or [{}, L], got shape {}", path(), type_name(),
                                 in_channels, in_channels, x.shape().str()));
  return conv1d(x, weight, bias, options);
}

std::string Conv1dImpl::extra_repr() const {
  auto one = [](int64_t v) { return fmt::format("({},)", v); };
  return fmt::format("{}, {}", in_channels, out_channels) +
         conv_repr_tail(one(kernel_size), one(options.stride), padding_repr(options.padding, true),
                        zero_padding(options.padding), one(options.dilation), options.dilation == 1, "", true,
                        options.groups, bias.defined());
}

ConvTranspose2dImpl::ConvTranspose2dImpl(int64_t in, int64_t out, Size2 k, ConvTranspose2dOptions o, bool bias)
    : Module("ConvTranspose2d"), in_channels(in), out_channels(out), kernel_size(k), options(std::move(o)) {
  check_channels("ConvTranspose2d", in, out, options.groups);
  if (k.h <= 0 || k.w <= 0)
    throw ValueError(fmt::format("ConvTranspose2d({}, {}): kernel_size must be positive, got {}", in, out,
                                 pair_repr(k)));
  weight = register_parameter("weight", Parameter(empty({in, out / options.groups, k.h, k.w})));
  if (bias) this->bias = register_parameter("bias", Parameter(empty({out})));
  reset_parameters();
}

void ConvTranspose2dImpl::reset_parameters() { reset_conv(weight, bias); }

Tensor ConvTranspose2dImpl::forward(const Tensor& x) {
  if ((x.dim() != 3 && x.dim() != 4) || x.size(-3) != in_channels)
    throw ShapeError(fmt::format("{} ({}): expected an input [N, {}, H, W] or [{}, H, W], got shape {}", path(),
                                 type_name(), in_channels, in_channels, x.shape().str()));
  return conv_transpose2d(x, weight, bias, options);
}

std::string ConvTranspose2dImpl::extra_repr() const {
  return fmt::format("{}, {}", in_channels, out_channels) +
         conv_repr_tail(pair_repr(kernel_size), pair_repr(options.stride), pair_repr(options.padding),
                        options.padding == Size2(0), pair_repr(options.dilation), options.dilation == Size2(1),
                        pair_repr(options.output_padding), options.output_padding == Size2(0), options.groups,
                        bias.defined());
}

}  // namespace tessel::nn
