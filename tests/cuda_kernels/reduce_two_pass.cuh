// Multi-block sum in two passes: every block writes a partial, one block adds them.

// Block-wide sum for blockDim.x a multiple of 32; the result is valid in thread 0.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float warp_sums[32];
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = ts::warp_sum(v);
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < blockDim.x / 32 ? warp_sums[lane] : 0.0f;
    v = ts::warp_sum(v);
  }
  __syncthreads();  // warp_sums may be reused by a later call
  return v;
}

// partials[blockIdx.x] = sum of this block's grid-stride share of x.
extern "C" __global__ void reduce_sum_partials(const float* __restrict__ x, float* __restrict__ partials,
                                               int64_t n) {
  float acc = 0.0f;
  for (int64_t i = ts::thread_index(); i < n; i += ts::grid_stride()) acc += x[i];
  acc = block_sum(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// out[0] = sum(partials[0:m]); one block.
extern "C" __global__ void reduce_sum_finalize(const float* __restrict__ partials, float* __restrict__ out,
                                               int64_t m) {
  float acc = 0.0f;
  for (int64_t i = threadIdx.x; i < m; i += blockDim.x) acc += partials[i];
  acc = block_sum(acc);
  if (threadIdx.x == 0) out[0] = acc;
}
