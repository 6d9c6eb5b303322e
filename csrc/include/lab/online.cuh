// The online softmax state (Milakov & Gimelshein, 2018): the running maximum m of the elements
// seen so far and d = sum(exp(x_i - m)). States over disjoint parts of a row merge into the state
// of their union, so the row needs a single sweep to find both m and d.
#pragma once

#include <cuda_runtime.h>
#include <math_constants.h>

#include "lab/reduce.cuh"

namespace lab {

struct MaxSum {
  float m;
  float d;
};

struct MaxSumMerge {
  __device__ __forceinline__ static MaxSum identity() { return {-CUDART_INF_F, 0.0f}; }

  __device__ __forceinline__ MaxSum operator()(MaxSum a, MaxSum b) const {
    const float m = fmaxf(a.m, b.m);
    // If the larger max is -inf, both parts hold only -inf (d = 0) or a NaN (d = NaN, see absorb):
    // (-inf) - (-inf) would turn a 0 into NaN, so add the sums as they are.
    if (m == -CUDART_INF_F) return {m, a.d + b.d};
    return {m, a.d * __expf(a.m - m) + b.d * __expf(b.m - m)};
  }
};

__device__ __forceinline__ MaxSum shfl_xor(MaxSum s, int lane_mask) {
  return {shfl_xor(s.m, lane_mask), shfl_xor(s.d, lane_mask)};
}

// Fold K new elements into a state: one rescale of d per chunk, not per element, so the cost is
// K + 1 exponentials for K elements.
template <int K>
__device__ __forceinline__ MaxSum absorb(MaxSum s, const float (&v)[K]) {
  float m = s.m;
#pragma unroll
  for (int i = 0; i < K; ++i) m = fmaxf(m, v[i]);
  if (m == -CUDART_INF_F) {
    // fmaxf skipped any NaN, so the new elements are -inf (adding 0) or NaN, which must poison d
    // as torch poisons a row holding a NaN; exp(-inf - -inf) would poison it for -inf too.
    float d = s.d;
#pragma unroll
    for (int i = 0; i < K; ++i) d = isnan(v[i]) ? v[i] : d;
    return {s.m, d};
  }
  float d = s.d * __expf(s.m - m);
#pragma unroll
  for (int i = 0; i < K; ++i) d += fast_exp(v[i] - m);
  return {m, d};
}

// The warp's state from its threads' states, taking the max first so that each thread's sum is
// rescaled by a single exponential. A state whose max is -inf holds only -inf (d = 0) or a NaN
// (d = NaN): its d is added as it is, since exp(-inf - -inf) would turn a 0 into NaN.
__device__ __forceinline__ MaxSum warp_state(MaxSum s) {
  const float m = warp_allreduce(s.m, MaxOp{});
  const float term = s.m == -CUDART_INF_F ? s.d : s.d * __expf(s.m - m);
  return {m, warp_allreduce(term, SumOp{})};
}

}  // namespace lab
