// register_cached: dx = y * (dy - sum(dy * y)) per row, with the row's y and dy held in registers.
//
// Algorithm: as softmax's register_cached: a group of THREADS_PER_ROW threads owns a row (2 to 32
// lanes of a warp for short rows, several rows per warp; a whole block for medium rows). Each thread
// loads its packs of y and of dy (16 bytes each, all loads in flight before the first use), keeps
// them as float32, reduces s = sum(dy * y) over the group (xor shuffles, or the block all-reduce),
// then writes dx = y * (dy - s) from its registers. Elements past the row count as 0 in the sum.
// HBM traffic: read y and dy once, write dx once: 3 * M * N * itemsize bytes (2R + 1W).
// Launch: (threads per row, elements per thread) from kShapes32 / kShapes16 by N; warp groups in
// 256-thread blocks; blocks stride over rows past the grid's limit.
// Limits: N <= 16384 (kMaxCols): two rows' slices must fit a thread's registers; past that the
// launcher refuses with cudaErrorInvalidValue (softmax_backward/two_pass takes any N). Any M,
// any row strides (a row that is not 16-byte aligned is read or written element by element).
#include <cstdint>
#include <type_traits>

#include "lab/check.cuh"
#include "lab/dispatch.cuh"
#include "lab/launch.h"
#include "lab/reduce.cuh"
#include "lab/vec.cuh"

namespace lab {
namespace {

struct RowShape {
  int max_cols;
  int threads_per_row;
  int elems_per_thread;
};
// The forward's tables (csrc/softmax/register_cached.cu): float32 packs of 4, 16-bit packs of 8.
constexpr RowShape kShapes32[] = {
    {32, 4, 8},     {64, 8, 8},      {128, 16, 8},    {256, 32, 8},    {512, 32, 16},
    {1024, 32, 32}, {2048, 128, 16}, {4096, 256, 16}, {8192, 512, 16}, {16384, 1024, 16},
};
constexpr RowShape kShapes16[] = {
    {32, 2, 16},    {64, 4, 16},    {128, 8, 16},    {256, 16, 16},   {512, 16, 32},
    {1024, 32, 32}, {2048, 64, 32}, {4096, 128, 32}, {8192, 256, 32}, {16384, 512, 32},
};
constexpr int kCount = sizeof(kShapes32) / sizeof(RowShape);
static_assert(kCount == sizeof(kShapes16) / sizeof(RowShape), "one shape per length in each table");
constexpr int64_t kMaxCols = kShapes32[kCount - 1].max_cols;
constexpr int kWarpGroupBlock = 256;

template <int THREADS_PER_ROW>
constexpr int kBlockThreads = THREADS_PER_ROW > kWarpSize ? THREADS_PER_ROW : kWarpGroupBlock;

// Resident blocks asked of __launch_bounds__: two slices of ELEMS floats plus about 40 registers.
template <int ELEMS, int BLOCK>
constexpr int kMinBlocks = 65536 / (BLOCK * (2 * ELEMS + 40)) > 0 ? 65536 / (BLOCK * (2 * ELEMS + 40)) : 1;

// v[k][j] = row[(lane + k * TPR) * K + j] as float, 0 past the row (or for no row).
template <typename T, int TPR, int PACKS>
__device__ __forceinline__ void load_slice(float (&v)[PACKS][kPack<T>], const T* row, bool valid, int lane,
                                           int cols) {
  constexpr int K = kPack<T>;
  const bool wide = valid && is_aligned(row);
#pragma unroll
  for (int k = 0; k < PACKS; ++k) {
    const int e0 = (lane + k * TPR) * K;
    if (wide && e0 + K <= cols) {
      const Pack<T> p = reinterpret_cast<const Pack<T>*>(row)[e0 / K];
#pragma unroll
      for (int j = 0; j < K; ++j) v[k][j] = to_float(p.v[j]);
    } else {
#pragma unroll
      for (int j = 0; j < K; ++j) v[k][j] = valid && e0 + j < cols ? to_float(row[e0 + j]) : 0.0f;
    }
  }
}

template <typename T, int TPR, int ELEMS>
__global__ void __launch_bounds__(kBlockThreads<TPR>, (kMinBlocks<ELEMS, kBlockThreads<TPR>>))
    softmax_backward_register_cached_kernel(const T* __restrict__ y, const T* __restrict__ dy, T* __restrict__ dx,
                                            int64_t rows, int cols, int64_t y_stride, int64_t dy_stride,
                                            int64_t dx_stride) {
  constexpr int K = kPack<T>;
  constexpr int PACKS = ELEMS / K;
  static_assert(PACKS * K == ELEMS, "whole 16-byte packs per thread");
  constexpr int kBlock = kBlockThreads<TPR>;
  constexpr int kRowsPerBlock = kBlock / TPR;
  using Reduce = BlockAllReduce<float, kBlock, TPR>;  // a warp group by shuffles alone, a block group with the block
  __shared__ typename Reduce::Storage storage;  // block groups only
  Reduce reduce(storage);
  const int lane = threadIdx.x % TPR;
  for (int64_t first = int64_t{blockIdx.x} * kRowsPerBlock; first < rows; first += int64_t{gridDim.x} * kRowsPerBlock) {
    const int64_t row = first + threadIdx.x / TPR;
    const bool valid = row < rows;
    const int64_t r = valid ? row : 0;
    float vy[PACKS][K], vd[PACKS][K];
    load_slice<T, TPR>(vy, y + r * y_stride, valid, lane, cols);
    load_slice<T, TPR>(vd, dy + r * dy_stride, valid, lane, cols);
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < PACKS; ++k) {
#pragma unroll
      for (int j = 0; j < K; ++j) s += vd[k][j] * vy[k][j];
    }
    // Every lane of the group (and of the block, for block groups) reduces, also past the last row.
    s = reduce(s, SumOp{});
    if (!valid) continue;
    T* out = dx + row * dx_stride;
    const bool wide = is_aligned(out);
#pragma unroll
    for (int k = 0; k < PACKS; ++k) {
      const int e0 = (lane + k * TPR) * K;
      Pack<T> p;
#pragma unroll
      for (int j = 0; j < K; ++j) p.v[j] = from_float<T>(vy[k][j] * (vd[k][j] - s));
      if (wide && e0 + K <= cols) {
        reinterpret_cast<Pack<T>*>(out)[e0 / K] = p;
      } else {
#pragma unroll
        for (int j = 0; j < K; ++j) {
          if (e0 + j < cols) out[e0 + j] = p.v[j];
        }
      }
    }
  }
}

// Calls f(threads-per-row constant, elements-per-thread constant) for the first shape that holds N.
template <typename T, int I = 0, typename F>
cudaError_t dispatch_shape(int64_t cols, F&& f) {
  if constexpr (I == kCount) {
    return cudaErrorInvalidValue;  // unreachable: the launcher refuses rows over kMaxCols
  } else {
    constexpr RowShape s = sizeof(T) == 4 ? kShapes32[I] : kShapes16[I];
    if (cols <= s.max_cols) {
      return f(std::integral_constant<int, s.threads_per_row>{}, std::integral_constant<int, s.elems_per_thread>{});
    }
    return dispatch_shape<T, I + 1>(cols, f);
  }
}

}  // namespace

cudaError_t softmax_backward_register_cached(const RowsGradArgs& a, cudaStream_t stream) {
  if (a.cols > kMaxCols) return cudaErrorInvalidValue;  // see Limits in the header
  return dispatch_dtype(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return dispatch_shape<T>(a.cols, [&](auto tpr, auto ept) {
      constexpr int kTpr = decltype(tpr)::value;
      constexpr int kRowsPerBlock = kBlockThreads<kTpr> / kTpr;
      softmax_backward_register_cached_kernel<T, kTpr, decltype(ept)::value>
          <<<row_grid((a.rows + kRowsPerBlock - 1) / kRowsPerBlock), kBlockThreads<kTpr>, 0, stream>>>(
              static_cast<const T*>(a.y), static_cast<const T*>(a.dy), static_cast<T*>(a.dx), a.rows,
              static_cast<int>(a.cols), a.y_row_stride, a.dy_row_stride, a.dx_row_stride);
      LAB_LAUNCH_CHECK();
      return cudaSuccess;
    });
  });
}

}  // namespace lab
