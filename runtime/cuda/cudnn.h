// cuDNN convolutions on a GPU, the library loaded at run time.
//
// libcudnn is opened with dlopen on first use, like the driver and cuBLASLt:
// tessel builds without it and runs without it (where it is missing, asking
// whether it is there never throws and a convolution raises
// tessel::DeviceError saying what was tried). The library comes from, in order:
//   - $TESSEL_CUDNN, a path (or soname) -- and nothing else when it is set;
//   - libcudnn.so.9, wherever the loader finds it;
//   - libcudnn.so.9 in the lib folder of the CUDA toolkit tessel was built with.
// Only cuDNN 9's legacy convolution API is used (handle, tensor / filter /
// convolution descriptors, the _v7 heuristics, workspace queries and the
// three convolution calls); its types are declared in cudnn.cpp, so no
// header users include needs the toolkit.
//
// Operands are dense: input [n, c, h, w] (NCHW), weight [o, c / groups, kh, kw]
// (OIHW), output [n, o, oh, ow]; f32 (FMA math, no TF32) or f64. cuDNN's 2-D
// descriptor pads both sides of a dim alike, so a ConvProblem has one padding
// per dim; a caller with more padding on one side ("same" with an even
// kernel) pads the input itself by the difference (codegen/cuda/cudnn_conv.h).
//
//   using namespace tessel::cuda;
//   ConvProblem p{.n = 8, .c = 3, .h = 32, .w = 32, .o = 16, .kh = 3, .kw = 3, .pad_h = 1, .pad_w = 1};
//   conv_forward(0, stream, DType::f32, p, x, w, y);           // y [8, 16, 32, 32]
//   conv_backward_data(0, stream, DType::f32, p, w, gy, gx);   // gx [8, 3, 32, 32]
//   conv_backward_filter(0, stream, DType::f32, p, x, gy, gw); // gw [16, 3, 3, 3]
//
// The algorithm is cuDNN's heuristic pick (deterministic ones first), chosen
// once per problem and kept; its workspace comes from the caching device
// allocator (stream-ordered, so reusing it on the same stream needs no
// synchronization).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/cuda/driver.h"
#include "runtime/dtype.h"

namespace tessel::cuda {

/// True when libcudnn loaded and has every entry point tessel uses (never throws).
bool cudnn_available() noexcept;
/// "" when available; else every library tried and why each failed, and how
/// to point tessel at one (TESSEL_CUDNN).
std::string cudnn_unavailable_reason();
/// The library that loaded, as it was named to dlopen ("" when none did).
std::string cudnn_library();
/// cudnnGetVersion(): major * 10000 + minor * 100 + patch (91900 for 9.19.0).
/// DeviceError when the library cannot be loaded.
std::size_t cudnn_version();

/// One 2-D convolution (cross-correlation, as PyTorch's) in cuDNN's terms.
struct ConvProblem {
  int64_t n = 1, c = 1, h = 1, w = 1;  // input
  int64_t o = 1, kh = 1, kw = 1;       // weight [o, c / groups, kh, kw]
  int64_t groups = 1;
  int64_t pad_h = 0, pad_w = 0;        // on both sides
  int64_t stride_h = 1, stride_w = 1;
  int64_t dilation_h = 1, dilation_w = 1;

  int64_t out_h() const { return (h + 2 * pad_h - dilation_h * (kh - 1) - 1) / stride_h + 1; }
  int64_t out_w() const { return (w + 2 * pad_w - dilation_w * (kw - 1) - 1) / stride_w + 1; }
  /// "input [2, 3, 8, 8], weight [4, 3, 3, 3], groups 1, stride (1, 1), padding (1, 1), dilation (1, 1)"
  std::string str() const;
  bool operator==(const ConvProblem&) const = default;
};

/// Which of the three computations of a convolution.
enum class ConvPass : uint8_t {
  forward,          // y from x and w
  backward_data,    // gx from gy and w
  backward_filter,  // gw from x and gy
};
std::string_view conv_pass_name(ConvPass p);

/// Whether cuDNN has an algorithm for this pass of `p` in dtype `t` on
/// `device` (false too when t is not f32 or f64, the problem is not valid,
/// or does not fit cuDNN's int sizes). Asks the heuristic once per problem.
/// DeviceError when cuDNN is unavailable or fails.
bool conv_supported(int device, DType t, ConvPass pass, const ConvProblem& p);

/// y [n, o, oh, ow] = conv(x [n, c, h, w], w [o, c / groups, kh, kw]) on
/// device `device`, queued on `stream` (nullptr: the legacy default stream).
/// Only f32 and f64 (DTypeError otherwise); the problem is checked
/// (ValueError) before anything needs the library. An empty output does
/// nothing; an empty sum writes zeros. DeviceError when cuDNN is unavailable,
/// has no algorithm for the problem, or fails.
void conv_forward(int device, CUstream stream, DType t, const ConvProblem& p, CUdeviceptr x, CUdeviceptr w,
                  CUdeviceptr y);
/// gx [n, c, h, w], the input's gradient, from gy [n, o, oh, ow] and w; as conv_forward.
void conv_backward_data(int device, CUstream stream, DType t, const ConvProblem& p, CUdeviceptr w, CUdeviceptr gy,
                        CUdeviceptr gx);
/// gw [o, c / groups, kh, kw], the weight's gradient, from x and gy; as conv_forward.
void conv_backward_filter(int device, CUstream stream, DType t, const ConvProblem& p, CUdeviceptr x, CUdeviceptr gy,
                          CUdeviceptr gw);

}  // namespace tessel::cuda
