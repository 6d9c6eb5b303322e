// register_cached: each row read from HBM once and written once, held in registers in between.
//
// Algorithm: a group of THREADS_PER_ROW threads owns a row: 4 to 32 lanes of a warp for short
// rows (several rows per warp, so no lane idles), a whole block of 64 to 1024 threads for medium
// rows. Each thread loads its 8, 16 or 32 elements of the row as 16-byte packs, all loads in flight
// before the first use, and keeps them as float32 registers. The row max and the sum of exp are
// then reduced from those registers, with xor shuffles inside the group
// (warp_allreduce<THREADS_PER_ROW>) or, for block groups, the two-level BlockAllReduce of
// warp_shuffle. Last, the normalized row is written.
// HBM sweeps per row: 1 read of x, 1 write of y: the bytes of a copy.
// Launch: (threads per row, elements per thread) from kRowShapes32 or kRowShapes16 by the row's
// length. Warp groups run in 256-thread blocks of 256 / THREADS_PER_ROW rows; a block group is
// one row per block. Blocks stride over rows past the grid's limit.
// Limits: N <= 16384 (kMaxCols): the row must fit in the group's registers (16 floats per thread
// of a 1024-thread block in float32, 32 per thread of 512 in 16-bit types); past that the launcher
// refuses with cudaErrorInvalidValue.
// Any rows (64-bit offsets), any N >= 1, any row strides: a row whose start is not 16-byte aligned
// is read and written with scalar accesses.
// Where it falls short of its 1R+1W ceiling, and why (H200, fixed sweep): 96-98% of a copy in
// float32 and 88-93% in bfloat16 up to N = 512. The longest rows are one row per block with one or
// two blocks per SM, so at most one or two rows per SM are in flight, and no row's load overlaps
// another's reductions and writes: N = 16384 reaches 82% (float32) and 62% (bfloat16); bfloat16
// N = 1024 to 4096 reaches 79-80%. The cure is more bytes in flight per SM: a block that loads its
// next row while it reduces this one, or a row split over a thread-block cluster.
// Next rung: rows too long for one block's registers need a thread-block cluster.
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <math_constants.h>

#include "lab/check.cuh"
#include "lab/dispatch.cuh"
#include "lab/launch.h"
#include "lab/reduce.cuh"
#include "lab/vec.cuh"

namespace lab {
namespace {

// The launch heuristic as data: the first entry whose max_cols covers the row. Each thread keeps
// 8 to 32 elements as floats (at most 32 registers of row data; 16-bit types are converted as they
// load). Short rows share a warp among 8 to 1 rows; medium rows grow the group to a whole block.
// Elements per thread are a multiple of 8: whole 16-byte packs in every dtype.
struct RowShape {
  int max_cols;
  int threads_per_row;
  int elems_per_thread;
};
constexpr RowShape kRowShapes32[] = {  // float32
    {32, 4, 8},     {64, 8, 8},       {128, 16, 8},     {256, 32, 8},     {512, 32, 16},
    {1024, 32, 32}, {2048, 128, 16},  {4096, 256, 16},  {8192, 512, 16},  {16384, 1024, 16},
};
// float16 and bfloat16: the same, except that block groups hold twice the elements per thread in
// half the threads. 16 elements were only 32 bytes in flight per thread, and the 1024-thread block
// of a 16384-element row fits once per SM: one 32 KB row in flight per SM, measured at 46% of a
// copy on the H200. 512 threads of 32 elements fit twice.
constexpr RowShape kRowShapes16[] = {
    {32, 4, 8},     {64, 8, 8},       {128, 16, 8},     {256, 32, 8},     {512, 32, 16},
    {1024, 32, 32}, {2048, 64, 32},   {4096, 128, 32},  {8192, 256, 32},  {16384, 512, 32},
};
constexpr int kShapes = sizeof(kRowShapes32) / sizeof(RowShape);
static_assert(kShapes == sizeof(kRowShapes16) / sizeof(RowShape), "one row shape per length in each table");
template <typename T>
constexpr const RowShape (&kRowShapes)[kShapes] = sizeof(T) == 4 ? kRowShapes32 : kRowShapes16;
constexpr int64_t kMaxCols = kRowShapes32[kShapes - 1].max_cols;
static_assert(kMaxCols == kRowShapes16[kShapes - 1].max_cols, "the same limit in every dtype");
constexpr int kWarpGroupBlock = 256;  // threads per block when groups are at most a warp

template <int THREADS_PER_ROW>
constexpr int kBlockThreads = THREADS_PER_ROW > kWarpSize ? THREADS_PER_ROW : kWarpGroupBlock;

// Registers per thread asked of __launch_bounds__: 1024 resident threads of 64 registers fill the
// 65536-register file; 64 holds the 32 registers of row data without spilling.
template <int BLOCK>
constexpr int kMinBlocks = 1024 / BLOCK > 0 ? 1024 / BLOCK : 1;

template <typename T, int THREADS_PER_ROW, int ELEMS>
__global__ void __launch_bounds__(kBlockThreads<THREADS_PER_ROW>, kMinBlocks<kBlockThreads<THREADS_PER_ROW>>)
    register_cached_softmax_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int cols,
                                   int64_t x_stride, int64_t y_stride) {
  constexpr int K = kPack<T>;
  constexpr int PACKS = ELEMS / K;
  static_assert(PACKS * K == ELEMS, "whole 16-byte packs per thread");
  constexpr int kBlock = kBlockThreads<THREADS_PER_ROW>;
  constexpr int kRowsPerBlock = kBlock / THREADS_PER_ROW;
  constexpr bool kWholeBlock = THREADS_PER_ROW > kWarpSize;
  using Reduce = BlockAllReduce<float, kBlock>;
  __shared__ typename Reduce::Storage storage;  // block groups only (a few words)

  // Every lane of a group (and, for warp groups, of the warp) takes part in the reductions, also
  // where its row is past the end: the loop bound is the same for the whole block.
  const auto allreduce = [&](float v, auto op) {
    if constexpr (kWholeBlock) {
      return Reduce::run(v, op, storage);
    } else {
      return warp_allreduce<THREADS_PER_ROW>(v, op);
    }
  };
  const int lane = threadIdx.x % THREADS_PER_ROW;
  for (int64_t first = int64_t{blockIdx.x} * kRowsPerBlock; first < rows;
       first += int64_t{gridDim.x} * kRowsPerBlock) {
    const int64_t row = first + threadIdx.x / THREADS_PER_ROW;
    const bool valid = row < rows;
    const T* xr = x + (valid ? row : 0) * x_stride;
    const bool wide_in = is_aligned(xr);

    // Pack k of this thread holds elements [(lane + k * THREADS_PER_ROW) * K, + K): neighbouring
    // lanes read neighbouring 16 bytes. Elements past the row (or of no row) are -inf, which
    // leaves the max as it is and adds exp(-inf) = 0 to the sum.
    float v[PACKS][K];
#pragma unroll
    for (int k = 0; k < PACKS; ++k) {
      const int e0 = (lane + k * THREADS_PER_ROW) * K;
      if (valid && wide_in && e0 + K <= cols) {
        const Pack<T> p = reinterpret_cast<const Pack<T>*>(xr)[e0 / K];
#pragma unroll
        for (int j = 0; j < K; ++j) v[k][j] = to_float(p.v[j]);
      } else {
#pragma unroll
        for (int j = 0; j < K; ++j) v[k][j] = valid && e0 + j < cols ? to_float(xr[e0 + j]) : -CUDART_INF_F;
      }
    }

    float m = MaxOp::identity();
#pragma unroll
    for (int k = 0; k < PACKS; ++k) {
#pragma unroll
      for (int j = 0; j < K; ++j) m = fmaxf(m, v[k][j]);
    }
    m = allreduce(m, MaxOp{});
    float d = 0.0f;
#pragma unroll
    for (int k = 0; k < PACKS; ++k) {
#pragma unroll
      for (int j = 0; j < K; ++j) {
        v[k][j] = __expf(v[k][j] - m);  // kept for the write: one exponential per element
        d += v[k][j];
      }
    }
    d = allreduce(d, SumOp{});
    if (!valid) continue;  // after the reductions, which need every lane

    const float inv_d = 1.0f / d;
    T* yr = y + row * y_stride;
    const bool wide_out = is_aligned(yr);
#pragma unroll
    for (int k = 0; k < PACKS; ++k) {
      const int e0 = (lane + k * THREADS_PER_ROW) * K;
      Pack<T> out;
#pragma unroll
      for (int j = 0; j < K; ++j) out.v[j] = from_float<T>(v[k][j] * inv_d);
      if (wide_out && e0 + K <= cols) {
        reinterpret_cast<Pack<T>*>(yr)[e0 / K] = out;
      } else {
#pragma unroll
        for (int j = 0; j < K; ++j) {
          if (e0 + j < cols) yr[e0 + j] = out.v[j];
        }
      }
    }
  }
}

// Calls f(threads-per-row constant, elements-per-thread constant) for the first shape of T's table
// that holds rows of `cols` elements.
template <typename T, int I = 0, typename F>
cudaError_t dispatch_row_shape(int64_t cols, F&& f) {
  if constexpr (I == kShapes) {
    return cudaErrorInvalidValue;  // unreachable: the launcher refuses rows over kMaxCols
  } else {
    constexpr RowShape s = kRowShapes<T>[I];
    if (cols <= s.max_cols) {
      return f(std::integral_constant<int, s.threads_per_row>{}, std::integral_constant<int, s.elems_per_thread>{});
    }
    return dispatch_row_shape<T, I + 1>(cols, f);
  }
}

}  // namespace

cudaError_t softmax_register_cached(const RowsArgs& a, cudaStream_t stream) {
  if (a.cols > kMaxCols) return cudaErrorInvalidValue;  // see Limits in the header
  return dispatch_dtype(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return dispatch_row_shape<T>(a.cols, [&](auto tpr, auto ept) {
      constexpr int kThreadsPerRow = decltype(tpr)::value;
      constexpr int kBlock = kBlockThreads<kThreadsPerRow>;
      constexpr int kRowsPerBlock = kBlock / kThreadsPerRow;
      register_cached_softmax_kernel<T, kThreadsPerRow, decltype(ept)::value>
          <<<row_grid((a.rows + kRowsPerBlock - 1) / kRowsPerBlock), kBlock, 0, stream>>>(
              static_cast<const T*>(a.x), static_cast<T*>(a.y), a.rows, static_cast<int>(a.cols), a.x_row_stride,
              a.y_row_stride);
      LAB_LAUNCH_CHECK();
      return cudaSuccess;
    });
  });
}

}  // namespace lab
