// grid_split: few long rows spread over every SM of the GPU, each read from HBM once.
// Tuned production kernel (cuda.grid_split). No launch table: one 512-thread CTA per SM (kThreads, kElems,
// kCtasPerSm) and parts_for() give the split. Measurements behind it: notebook/grid-split-tuning/.
//
// Algorithm: a cooperative grid of one 512-thread CTA per SM (fully resident, so a grid-wide
// barrier cannot deadlock). With M rows and a grid of S CTAs, each row gets G = S / M CTAs
// (M <= S / 2); CTA b owns the (b % G)-th of G equal slices (whole 16-byte packs) of row b / G, and
// only M x G CTAs are launched. Each thread loads its packs of the slice straight into registers as
// float32 (all loads in flight before the first use), reduces them to its own online state
// (m_t, d_t = sum exp(x - m_t)), keeping the exponentials in registers; the warps' states meet in
// shared memory as the CTA's (m, d), which one thread stores into a global array of partial states.
// One grid barrier (cooperative_groups::this_grid().sync()); then every warp merges its row's G
// partial states into the row's (M, D), and each thread writes y = e * exp(m_t - M) / D from its
// registers. One exponential per element.
// More rows than S / 2 (G would be 1): no barrier and no partial states; a persistent grid of the
// same CTAs, one row per CTA at a time (rows b, b + grid, ...), the row held in registers as above.
// HBM sweeps per row: 1 read of x, 1 write of y: the bytes of a copy.
// Launch: cudaLaunchKernelEx with cudaLaunchAttributeCooperative. The grid is kCtasPerSm CTAs per
// SM (the occupancy calculator must allow that many, else the launcher refuses with
// cudaErrorCooperativeLaunchTooLarge), at most kMaxGrid. The partial states live in scratch memory
// taken from the CUDA runtime's stream-ordered allocator for each launch (cudaMallocAsync before it,
// cudaFreeAsync after it, on its stream): a launch on another stream can only reuse that memory once
// the free has run, i.e. once this grid has finished; a CUDA graph captures the pair as its own
// allocation.
// Limits: the slice of each CTA must fit its registers: ceil(ceil(N / K) / G) <= 512 x 64 / K
// packs (K = 4 elements per pack in float32, 8 in 16-bit types), i.e. N <= G x 32768 (about 4.3M
// elements for M = 1 on 132 SMs, 2^20 for M <= 4, 2^19 for M <= 8; N <= 32768 once M > S / 2).
// Beyond that the launcher refuses with cudaErrorInvalidValue (lab/backends/cuda_variants.py
// declares the same rule, so the harness skips those shapes with the reason).
// Any rows (64-bit offsets), any N >= 1 within that limit, odd N (the last pack is read and
// written element by element), any row strides; rows whose start is not 16-byte aligned are read
// (or written) with scalar accesses. -inf rows give NaN, a NaN poisons its row, as in torch.
// Why, and where it falls short: with G CTAs per row a CTA holds N / G elements, so short rows leave
// most threads idle (N = 65536 on 132 CTAs: about 124 packs of float32 per CTA), and the grid
// barrier and launch cost a few microseconds that a 4 MB row (about 2 us of HBM time) does not hide.
// It beats cluster on a few very long rows (float32 1 x 4194304 on the H200: 1654 GB/s against 564), not on
// many or short ones.
#include <algorithm>
#include <climits>
#include <cstdint>

#include <cooperative_groups.h>
#include <math_constants.h>

#include "lab/check.cuh"
#include "lab/dispatch.cuh"
#include "lab/exp.cuh"
#include "lab/launch.h"
#include "lab/online.cuh"
#include "lab/reduce.cuh"
#include "lab/vec.cuh"

namespace cg = cooperative_groups;

namespace lab {
namespace {

constexpr int kThreads = 512;
constexpr int kElems = 64;  // float32 registers of row data per thread
constexpr int kWarps = kThreads / kWarpSize;
constexpr int kCtasPerSm = 1;  // 512 threads x up to 128 registers: the whole register file of an SM
constexpr int kMaxGrid = 1024;


// The CTA's state from this thread's: warp states in shared memory, one barrier, every warp merges
// them. Two slot sets alternate by `parity` (the row loop's), so one barrier per row is enough: a
// warp writes a set again only after the next row's barrier, which every warp reaches after it
// read this row's set.
__device__ __forceinline__ MaxSum block_state(MaxSum s, MaxSum (&slots)[2][kWarps], int parity) {
  const int lane = threadIdx.x % kWarpSize;
  const MaxSum w = warp_state(s);
  if (lane == 0) slots[parity][threadIdx.x / kWarpSize] = w;
  __syncthreads();
  return warp_state(lane < kWarps ? slots[parity][lane] : MaxSumMerge::identity());
}

// This thread's packs of a slice: packs p0 + tid + k * kThreads of the row for k < held, each
// loaded as 16 bytes where the row's start allows it and the pack is whole, else element by
// element. Packs past the slice (and elements past the row) are -inf, which leaves the max as it
// is and adds exp(-inf) = 0 to the sum.
template <typename T, int PACKS>
__device__ __forceinline__ void load_slice(const T* xr, int cols, int p0, int held, float (&v)[PACKS][kPack<T>]) {
  constexpr int K = kPack<T>;
  const bool wide = is_aligned(xr);
#pragma unroll
  for (int k = 0; k < PACKS; ++k) {
    const int p = p0 + static_cast<int>(threadIdx.x) + k * kThreads;
    const T* src = xr + int64_t{p} * K;
    if (k < held && wide && (p + 1) * K <= cols) {
      const Pack<T> pk = *reinterpret_cast<const Pack<T>*>(src);
#pragma unroll
      for (int j = 0; j < K; ++j) v[k][j] = to_float(pk.v[j]);
    } else {
#pragma unroll
      for (int j = 0; j < K; ++j) v[k][j] = k < held && p * K + j < cols ? to_float(src[j]) : -CUDART_INF_F;
    }
  }
}

// y = e * factor for this thread's packs of the slice (as load_slice reads them).
template <typename T, int PACKS>
__device__ __forceinline__ void store_slice(T* yr, int cols, int p0, int held, const float (&v)[PACKS][kPack<T>],
                                            float factor) {
  constexpr int K = kPack<T>;
  const bool wide = is_aligned(yr);
#pragma unroll
  for (int k = 0; k < PACKS; ++k) {
    if (k >= held) continue;
    const int p = p0 + static_cast<int>(threadIdx.x) + k * kThreads;
    T* dst = yr + int64_t{p} * K;
    Pack<T> out;
#pragma unroll
    for (int j = 0; j < K; ++j) out.v[j] = from_float<T>(v[k][j] * factor);
    if (wide && (p + 1) * K <= cols) {
      *reinterpret_cast<Pack<T>*>(dst) = out;
    } else {
#pragma unroll
      for (int j = 0; j < K; ++j) {
        if (p * K + j < cols) dst[j] = out.v[j];
      }
    }
  }
}

// Packs of this thread among [p0, p1) (see load_slice).
__device__ __forceinline__ int held_packs(int p0, int p1, int packs) {
  const int first = p0 + static_cast<int>(threadIdx.x);
  return p1 > first ? min(packs, (p1 - first + kThreads - 1) / kThreads) : 0;
}

// SPLIT: CTA b owns slice b % parts of row b / parts (gridDim.x = rows x parts), one grid barrier.
// Else: a persistent grid, CTA b owns rows b, b + gridDim.x, ... whole (parts = 1, no barrier).
template <typename T, bool SPLIT>
__global__ void __launch_bounds__(kThreads, kCtasPerSm)
    grid_split_softmax_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int cols, int64_t x_stride,
                              int64_t y_stride, int parts, int slice_packs, float2* __restrict__ partials) {
  constexpr int K = kPack<T>;
  constexpr int PACKS = kElems / K;
  static_assert(PACKS * K == kElems, "whole 16-byte packs per thread");
  __shared__ MaxSum slots[2][kWarps];
  const int row_packs = (cols + K - 1) / K;
  const int lane = threadIdx.x % kWarpSize;

  const int64_t first_row = SPLIT ? blockIdx.x / parts : blockIdx.x;
  const int64_t row_step = SPLIT ? rows : gridDim.x;  // SPLIT: one row per CTA
  const int p0 = SPLIT ? static_cast<int>(blockIdx.x % parts) * slice_packs : 0;
  const int p1 = min(p0 + slice_packs, row_packs);
  const int held = held_packs(p0, p1, PACKS);
  int parity = 0;
  for (int64_t row = first_row; row < rows; row += row_step, parity ^= 1) {
    float v[PACKS][K];
    load_slice<T, PACKS>(x + row * x_stride, cols, p0, held, v);
    const float m = fragment_max(v);
    // Exponentials relative to this thread's max; a thread that saw only -inf (or NaN, which fmaxf
    // skips) uses 0, so -inf gives 0 and NaN stays NaN and poisons d.
    const float d = fragment_exp_sum(v, m == -CUDART_INF_F ? 0.0f : m);
    MaxSum total = block_state(MaxSum{m, d}, slots, parity);
    if constexpr (SPLIT) {
      if (threadIdx.x == 0) __stcg(&partials[blockIdx.x], make_float2(total.m, total.d));
      cg::this_grid().sync();  // every CTA's partial state is stored and visible
      // Lane i merges the partial states i, i + 32, ... of this row's `parts` CTAs (read from L2:
      // another SM wrote them).
      const float2* mine = partials + row * parts;
      MaxSum s = MaxSumMerge::identity();
      for (int i = lane; i < parts; i += kWarpSize) {
        const float2 q = __ldcg(&mine[i]);
        s = MaxSumMerge{}(s, MaxSum{q.x, q.y});
      }
      total = warp_state(s);
    }
    // y = e * exp(m_t - M) / D. A thread with m_t = -inf holds zeros (or NaN): its factor is 0 / D,
    // which is 0, or NaN when the whole row is -inf (D = 0) as in torch.
    const float factor = (m == -CUDART_INF_F ? 0.0f : fast_exp(m - total.m)) / total.d;
    store_slice<T, PACKS>(y + row * y_stride, cols, p0, held, v, factor);
  }
}

// The CTAs per row for `rows` rows on a grid of `grid` CTAs: all of them split evenly while each
// row gets at least two, else 1 (the persistent path).
int64_t parts_for(int64_t rows, int grid) { return rows <= grid / 2 ? grid / rows : 1; }

template <typename T>
cudaError_t launch(const RowsArgs& a, cudaStream_t stream) {
  constexpr int K = kPack<T>;
  constexpr int kSlicePacks = kThreads * kElems / K;
  int device = 0;
  int sms = 0;
  LAB_CUDA_TRY(cudaGetDevice(&device));
  LAB_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int grid = std::min(kMaxGrid, sms * kCtasPerSm);
  const int64_t parts = parts_for(a.rows, grid);
  const int64_t row_packs = (a.cols + K - 1) / K;
  const int64_t slice_packs = (row_packs + parts - 1) / parts;
  if (slice_packs > kSlicePacks) return cudaErrorInvalidValue;  // see Limits in the header

  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
  const int cols = static_cast<int>(a.cols);
  const auto split = grid_split_softmax_kernel<T, true>;
  const auto whole = grid_split_softmax_kernel<T, false>;
  int per_sm = 0;
  LAB_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, parts > 1 ? split : whole, kThreads, 0));
  if (per_sm < kCtasPerSm) return cudaErrorCooperativeLaunchTooLarge;

  if (parts == 1) {
    const auto blocks = static_cast<unsigned>(std::min<int64_t>(a.rows, grid));
    whole<<<blocks, kThreads, 0, stream>>>(x, y, a.rows, cols, a.x_row_stride, a.y_row_stride, 1,
                                           static_cast<int>(slice_packs), nullptr);
    LAB_LAUNCH_CHECK();
    return cudaSuccess;
  }

  int cooperative = 0;
  LAB_CUDA_TRY(cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device));
  if (!cooperative) return cudaErrorNotSupported;
  // Stream-ordered scratch for the CTAs' partial states (see the header).
  float2* partials = nullptr;
  LAB_CUDA_TRY(cudaMallocAsync(reinterpret_cast<void**>(&partials),
                               sizeof(float2) * static_cast<size_t>(a.rows * parts), stream));

  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeCooperative;
  attr.val.cooperative = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(a.rows * parts));  // <= grid: every CTA resident
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  config.attrs = &attr;
  config.numAttrs = 1;
  const cudaError_t launched = cudaLaunchKernelEx(&config, split, x, y, a.rows, cols, a.x_row_stride,
                                                  a.y_row_stride, static_cast<int>(parts),
                                                  static_cast<int>(slice_packs), partials);
  const cudaError_t freed = cudaFreeAsync(partials, stream);  // after the grid, in stream order
  return launched != cudaSuccess ? launched : freed;
}

}  // namespace

cudaError_t softmax_grid_split(const RowsArgs& a, cudaStream_t stream) {
  return dispatch_dtype(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return launch<T>(a, stream);
  });
}

}  // namespace lab
