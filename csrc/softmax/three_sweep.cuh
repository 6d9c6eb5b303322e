// The three-sweep block-per-row softmax shared by `three_pass` and `warp_shuffle`. The two differ
// in one idea only, the block reduction, which is the template argument `BlockReduce`.
//
//   sweep 1: m = max_j x_j                  (read x)
//   sweep 2: d = sum_j exp(x_j - m)         (read x)
//   sweep 3: y_j = exp(x_j - m) / d         (read x, write y)
// HBM traffic model: 3 reads of x + 1 write of y (the re-reads hit L1/L2 when the rows in flight
// fit there, so medium rows can beat the model).
// Where it is slow, and why: short rows (N <= 256) give each block one warp and a few hundred
// bytes, so the SM's 32-block limit leaves it half empty and three block-wide reductions per row
// dominate; long rows (N >= 65536) do not fit in L2 with a row per block in flight, so every
// sweep goes to HBM and the model's 50% of copy bandwidth is the ceiling.
#pragma once

#include <cstdint>

#include "lab/check.cuh"
#include "lab/dispatch.cuh"
#include "lab/exp.cuh"
#include "lab/launch.h"
#include "lab/reduce.cuh"
#include "lab/vec.cuh"

namespace lab {

// Packs in flight per thread in each sweep. Bytes in flight needed = bandwidth x latency, about
// 3 MB over 132 SMs (23 KB per SM); 2 x 16 B x 1536 resident threads is 48 KB per SM, and a
// deeper unroll no longer fits the 42 registers that 75% occupancy allows without spilling.
constexpr int kThreeSweepUnroll = 2;

template <typename T, int THREADS, template <typename, int> class BlockReduce>
__global__ void __launch_bounds__(THREADS, kMinResidentBlocks<THREADS>)
    three_sweep_softmax_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int cols,
                               int64_t x_stride, int64_t y_stride) {
  using Reduce = BlockReduce<float, THREADS>;
  __shared__ typename Reduce::Storage storage;
  Reduce reduce(storage);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * x_stride;
    T* yr = y + row * y_stride;

    float m = MaxOp::identity();
    row_for_each<THREADS, kThreeSweepUnroll>(xr, cols, [&](const auto& v) {
#pragma unroll
      for (float e : v) m = fmaxf(m, e);
    });
    m = reduce(m, MaxOp{});

    float d = 0.0f;
    row_for_each<THREADS, kThreeSweepUnroll>(xr, cols, [&](const auto& v) {
#pragma unroll
      for (float e : v) d += fast_exp(e - m);
    });
    d = reduce(d, SumOp{});

    const float inv_d = 1.0f / d;
    row_transform<THREADS, kThreeSweepUnroll>(xr, yr, cols, [&](float e) { return fast_exp(e - m) * inv_d; });
  }
}

template <template <typename, int> class BlockReduce>
cudaError_t launch_three_sweep(const RowsArgs& a, cudaStream_t stream) {
  const int threads = block_threads_for_row(a.cols, elem_bytes(a.dtype));
  return dispatch_dtype(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return dispatch_threads(threads, [&](auto th) {
      constexpr int kThreads = decltype(th)::value;
      three_sweep_softmax_kernel<T, kThreads, BlockReduce><<<row_grid(a.rows), kThreads, 0, stream>>>(
          static_cast<const T*>(a.x), static_cast<T*>(a.y), a.rows, static_cast<int>(a.cols), a.x_row_stride,
          a.y_row_stride);
      LAB_LAUNCH_CHECK();
      return cudaSuccess;
    });
  });
}

}  // namespace lab
