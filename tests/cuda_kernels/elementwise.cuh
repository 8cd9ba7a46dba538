// Elementwise kernels in the shape the emitter produces: a 64-bit grid-stride
// loop, restrict pointers, prelude math.

// out[i] = relu(a * x[i] + y[i]) + 0.5 * sigmoid(x[i])
extern "C" __global__ void ew_axpy_relu_sigmoid(const float* __restrict__ x, const float* __restrict__ y,
                                                float* __restrict__ out, float a, int64_t n) {
  for (int64_t i = ts::thread_index(); i < n; i += ts::grid_stride()) {
    const float xi = __ldg(x + i);
    out[i] = ts::relu(a * xi + __ldg(y + i)) + 0.5f * ts::sigmoid(xi);
  }
}

// Storage conversions: f32 -> f16 and bf16 bits, and back to f32.
extern "C" __global__ void ew_half_bf16_roundtrip(const float* __restrict__ x, uint16_t* __restrict__ h,
                                                  uint16_t* __restrict__ b, float* __restrict__ back_h,
                                                  float* __restrict__ back_b, int64_t n) {
  for (int64_t i = ts::thread_index(); i < n; i += ts::grid_stride()) {
    h[i] = ts::float_to_half(x[i]);
    b[i] = ts::float_to_bf16(x[i]);
    back_h[i] = ts::half_to_float(h[i]);
    back_b[i] = ts::bf16_to_float(b[i]);
  }
}
