// Single-block reductions: shared-memory tree down to one warp, then warp shuffles.

// out[0] = sum(x[0:n]); launch with one block whose size is a power of two in [64, 1024].
extern "C" __global__ void reduce_sum_block(const float* __restrict__ x, float* __restrict__ out, int64_t n) {
  __shared__ float partial[1024];
  float acc = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += x[i];
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride >= 32; stride >>= 1) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x < 32) {
    const float total = ts::warp_sum(partial[threadIdx.x]);
    if (threadIdx.x == 0) out[0] = total;
  }
}

// out[r] = max(x[r, 0:cols]); one block per row, blockDim.x a multiple of 32.
// Butterfly (__shfl_xor_sync) per warp, then warp 0 combines the warps' maxima
// and broadcasts with __shfl_sync.
extern "C" __global__ void reduce_max_rows(const float* __restrict__ x, float* __restrict__ out, int64_t cols) {
  __shared__ float warp_max[32];
  const float* row = x + (int64_t)blockIdx.x * cols;
  float m = -ts::inf_f32();
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) m = ts::max(m, row[c]);
  m = ts::warp_max(m);
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_max[warp] = m;
  __syncthreads();
  if (warp == 0) {
    float v = lane < blockDim.x / 32 ? warp_max[lane] : -ts::inf_f32();
    v = ts::warp_max(v);
    v = __shfl_sync(0xffffffffu, v, 0);
    if (lane == 0) out[blockIdx.x] = v;
  }
}
