// register_cached: dx = y * (dy - sum(dy * y)) per row, with the row's y and dy held in registers.
//
// Algorithm: as softmax's register_cached: a group of THREADS_PER_ROW threads owns a row (2 to 32
// lanes of a warp for short rows, several rows per warp; a whole block for medium rows). Each thread
// loads its packs of y and of dy (16 bytes each, all loads in flight before the first use) and keeps
// them as loaded, 32-bit words (lab/grad_words.cuh: two 16-bit elements a register), reduces
// s = sum(dy * y) in float32 over the group (xor shuffles, or the block all-reduce), then writes
// dx = y * (dy - s) from its registers. Elements past the row count as 0 in the sum.
// HBM traffic: read y and dy once, write dx once: 3 * M * N * itemsize bytes (2R + 1W).
// Launch: (threads per row, elements per thread) from kShapes32 / kShapes16 by N; warp groups in
// 128-thread blocks, as the forward's; blocks stride over rows past the grid's limit.
// Limits: N <= 16384 (kMaxCols): two rows' slices must fit a thread's registers; past that the
// launcher refuses with cudaErrorInvalidValue (softmax_backward/two_pass takes any N). Any M,
// any row strides (a row that is not 16-byte aligned is read or written element by element).
#include <cstdint>
#include <type_traits>

#include "lab/check.cuh"
#include "lab/dispatch.cuh"
#include "lab/grad_words.cuh"
#include "lab/launch.h"
#include "lab/reduce.cuh"
#include "lab/tune.h"
#include "lab/vec.cuh"

namespace lab {
namespace {

struct RowShape {
  int max_cols;
  int threads_per_row;
  int elems_per_thread;
};
// By N: float32 packs of 4, 16-bit packs of 8. Each length's shape was timed against twice its threads per row, each
// with half the elements (softmax_backward_register_cached_with; notebook/backward-register-cached-shapes/, H200), and
// takes the doubled shape where that measured more than 1% faster at 4096 rows and no slower at the fixed sweep's
// 2^26 / N: float32 32, 64 and 1024, 16-bit 64, 1024, 2048 and 8192 (a shorter chain of loads, sums and stores per
// thread).
constexpr RowShape kShapes32[] = {
    {32, 8, 4},     {64, 16, 4},     {128, 16, 8},    {256, 32, 8},    {512, 32, 16},
    {1024, 64, 16}, {2048, 128, 16}, {4096, 256, 16}, {8192, 512, 16}, {16384, 1024, 16},
};
constexpr RowShape kShapes16[] = {
    {32, 2, 16},    {64, 8, 8},     {128, 8, 16},    {256, 16, 16},   {512, 16, 32},
    {1024, 64, 16}, {2048, 128, 16}, {4096, 128, 32}, {8192, 512, 16}, {16384, 512, 32},
};
constexpr int kCount = sizeof(kShapes32) / sizeof(RowShape);
static_assert(kCount == sizeof(kShapes16) / sizeof(RowShape), "one shape per length in each table");
constexpr int64_t kMaxCols = kShapes32[kCount - 1].max_cols;
constexpr int kWarpGroupBlock = 128;

template <int THREADS_PER_ROW>
constexpr int kBlockThreads = THREADS_PER_ROW > kWarpSize ? THREADS_PER_ROW : kWarpGroupBlock;

// Resident blocks asked of __launch_bounds__: two slices of PACKS packs (4 words each) plus about 40 registers.
template <int PACKS, int BLOCK>
constexpr int kMinBlocks = 65536 / (BLOCK * (8 * PACKS + 40)) > 0 ? 65536 / (BLOCK * (8 * PACKS + 40)) : 1;

// w[k] = the pack of row[(lane + k * TPR) * K, +K) as loaded: 16 bytes at once where `wide`, else element by element
// (0 past the row, or for no row: nothing added to the sum).
template <typename T, int TPR, int PACKS>
__device__ __forceinline__ void load_slice(uint32_t (&w)[PACKS][kPackWords], const T* row, bool valid, bool wide,
                                           int lane, int cols) {
  constexpr int K = kPack<T>;
#pragma unroll
  for (int k = 0; k < PACKS; ++k) {
    const int e0 = (lane + k * TPR) * K;
    if (wide && e0 + K <= cols) {
      const uint4 p = *reinterpret_cast<const uint4*>(row + e0);
      w[k][0] = p.x, w[k][1] = p.y, w[k][2] = p.z, w[k][3] = p.w;
    } else {
#pragma unroll
      for (int i = 0; i < kPackWords; ++i) w[k][i] = element_word<T>(row, e0, i, [&](int e) { return valid && e < cols; });
    }
  }
}

template <typename T, int TPR, int ELEMS>
__global__ void __launch_bounds__(kBlockThreads<TPR>, (kMinBlocks<ELEMS / kPack<T>, kBlockThreads<TPR>>))
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
    const T* yr = y + r * y_stride;
    const T* dyr = dy + r * dy_stride;
    uint32_t a[PACKS][kPackWords], b[PACKS][kPackWords];  // y's and dy's packs as loaded
    load_slice<T, TPR>(a, yr, valid, valid && is_aligned(yr), lane, cols);
    load_slice<T, TPR>(b, dyr, valid, valid && is_aligned(dyr), lane, cols);
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < PACKS; ++k) {
#pragma unroll
      for (int i = 0; i < kPackWords; ++i) s += word_dot<T>(a[k][i], b[k][i]);
    }
    // Every lane of the group (and of the block, for block groups) reduces, also past the last row.
    s = reduce(s, SumOp{});
    if (!valid) continue;
    T* out = dx + row * dx_stride;
    const bool wide = is_aligned(out);
#pragma unroll
    for (int k = 0; k < PACKS; ++k) {
      const int e0 = (lane + k * TPR) * K;
      uint32_t o[kPackWords];
#pragma unroll
      for (int i = 0; i < kPackWords; ++i) o[i] = word_grad<T>(a[k][i], b[k][i], s);
      if (wide && e0 + K <= cols) {
        *reinterpret_cast<uint4*>(out + e0) = make_uint4(o[0], o[1], o[2], o[3]);
      } else {
#pragma unroll
        for (int i = 0; i < kPackWords; ++i) store_element_word<T>(out, e0, i, o[i], [&](int e) { return e < cols; });
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

// One block per row group (past the grid's limit, blocks stride over rows).
template <typename T, int TPR, int ELEMS>
cudaError_t launch(const RowsGradArgs& a, cudaStream_t stream) {
  constexpr int kRowsPerBlock = kBlockThreads<TPR> / TPR;
  softmax_backward_register_cached_kernel<T, TPR, ELEMS>
      <<<row_grid((a.rows + kRowsPerBlock - 1) / kRowsPerBlock), kBlockThreads<TPR>, 0, stream>>>(
          static_cast<const T*>(a.y), static_cast<const T*>(a.dy), static_cast<T*>(a.dx), a.rows,
          static_cast<int>(a.cols), a.y_row_stride, a.dy_row_stride, a.dx_row_stride);
  LAB_LAUNCH_CHECK();
  return cudaSuccess;
}

// Twice the table's threads per row, each with half the elements (at least a pack), in groups of at most a block:
// what the tuning op times beside each table entry (softmax_backward_register_cached_with).
template <typename T, int TPR, int ELEMS>
constexpr bool kHasTwiceTheThreads = ELEMS / 2 >= kPack<T> && 2 * TPR <= 1024;

}  // namespace

cudaError_t softmax_backward_register_cached_with(const RowsGradArgs& a, bool twice_the_threads,
                                                  cudaStream_t stream) {
  if (a.cols > kMaxCols) return cudaErrorInvalidValue;  // see Limits in the header
  return dispatch_dtype(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return dispatch_shape<T>(a.cols, [&](auto tpr, auto ept) {
      constexpr int kTpr = decltype(tpr)::value, kElems = decltype(ept)::value;
      if (!twice_the_threads) return launch<T, kTpr, kElems>(a, stream);
      if constexpr (kHasTwiceTheThreads<T, kTpr, kElems>) {
        return launch<T, 2 * kTpr, kElems / 2>(a, stream);
      } else {
        return cudaErrorInvalidValue;  // no such shape at this length
      }
    });
  });
}

cudaError_t softmax_backward_register_cached(const RowsGradArgs& a, cudaStream_t stream) {
  return softmax_backward_register_cached_with(a, false, stream);
}

}  // namespace lab
