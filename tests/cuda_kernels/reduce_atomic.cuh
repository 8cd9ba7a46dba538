// Multi-block reductions that combine the blocks' results with atomics.

// *out += sum(x); *out must start at 0. Block reduction by warp shuffles and
// shared memory, then one atomicAdd per block.
extern "C" __global__ void reduce_sum_atomic(const float* __restrict__ x, float* __restrict__ out, int64_t n) {
  __shared__ float warp_sums[32];
  float acc = 0.0f;
  for (int64_t i = ts::thread_index(); i < n; i += ts::grid_stride()) acc += x[i];
  acc = ts::warp_sum(acc);
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_sums[warp] = acc;
  __syncthreads();
  if (warp == 0) {
    acc = ts::warp_sum(lane < blockDim.x / 32 ? warp_sums[lane] : 0.0f);
    if (lane == 0) atomicAdd(out, acc);
  }
}

// *count += number of x[i] > 0 (integer atomics: exact); *sum += sum of x in double.
extern "C" __global__ void count_and_sum_f64(const float* __restrict__ x, unsigned long long* __restrict__ count,
                                             double* __restrict__ sum, int* __restrict__ max_index, int64_t n) {
  unsigned long long c = 0;
  double s = 0.0;
  for (int64_t i = ts::thread_index(); i < n; i += ts::grid_stride()) {
    c += x[i] > 0.0f;
    s += (double)x[i];
    if (x[i] > 0.0f) atomicMax(max_index, (int)i);
  }
  c = ts::warp_sum(c);
  s = ts::warp_sum(s);
  if (threadIdx.x % 32 == 0) {
    atomicAdd(count, c);
    atomicAdd(sum, s);
  }
}
