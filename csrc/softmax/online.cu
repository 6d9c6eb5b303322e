// online: single-sweep (max, sum) per Milakov & Gimelshein, "Online normalizer calculation for
// softmax" (2018).
//
// Algorithm: one block per row. Sweep 1: each thread folds its elements into an online state
// (m, d) (lab/online.cuh; one rescale per 16-byte pack), then the states are merged across the
// block with the two-level all-reduce of warp_shuffle. Sweep 2: y = exp(x - m) / d.
// HBM sweeps per row: 2 reads of x, 1 write of y (one read fewer than warp_shuffle).
// Launch: grid = rows (blocks stride over rows past 2^31 - 1), threads = one 16-byte pack per
// thread rounded up to a power of two in [32, 512].
// Limits: any rows, 1 <= cols <= 2^31 - 1, any row strides; 64-bit row offsets.
// Where it is slow (H200, fixed sweep): medium rows, e.g. N = 1024 at 68-73% of its 2R+1W ceiling.
// A 1024-element row gives each of its threads one or two 16-byte loads before a block-wide merge,
// so few bytes are in flight per SM (inferred from the launch shape, not profiled). Long rows, where
// each thread streams many packs, reach 93-97% (N >= 65536). Measured before the merge had one barrier
// (BlockAllReduce): notebook/online-tuning/.
#include <cstdint>

#include "lab/check.cuh"
#include "lab/dispatch.cuh"
#include "lab/exp.cuh"
#include "lab/launch.h"
#include "lab/online.cuh"
#include "lab/reduce.cuh"
#include "lab/vec.cuh"

namespace lab {
namespace {

constexpr int kOnlineUnroll = 2;  // as in three_sweep.cuh: 2 x 16 bytes in flight per thread

template <typename T, int THREADS>
__global__ void __launch_bounds__(THREADS, kMinResidentBlocks<THREADS>)
    online_softmax_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int cols, int64_t x_stride,
                          int64_t y_stride) {
  using Reduce = BlockAllReduce<MaxSum, THREADS>;
  __shared__ typename Reduce::Storage storage;
  Reduce reduce(storage);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * x_stride;
    T* yr = y + row * y_stride;

    MaxSum s = MaxSumMerge::identity();
    row_for_each<THREADS, kOnlineUnroll>(xr, cols, [&](const auto& v) { s = absorb(s, v); });
    s = reduce(s, MaxSumMerge{});

    const float m = s.m;
    const float inv_d = 1.0f / s.d;
    row_transform<THREADS, kOnlineUnroll>(xr, yr, cols, [&](float e) { return fast_exp(e - m) * inv_d; });
  }
}

}  // namespace

cudaError_t softmax_online(const RowsArgs& a, cudaStream_t stream) {
  const int threads = block_threads_for_row(a.cols, elem_bytes(a.dtype));
  return dispatch_dtype(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return dispatch_threads(threads, [&](auto th) {
      constexpr int kThreads = decltype(th)::value;
      online_softmax_kernel<T, kThreads><<<row_grid(a.rows), kThreads, 0, stream>>>(
          static_cast<const T*>(a.x), static_cast<T*>(a.y), a.rows, static_cast<int>(a.cols), a.x_row_stride,
          a.y_row_stride);
      LAB_LAUNCH_CHECK();
      return cudaSuccess;
    });
  });
}

}  // namespace lab
