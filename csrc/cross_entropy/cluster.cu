// cluster: cross-entropy's loss and its gradient from one read of the logits and one write of dlogits, each row
// split over a Hopper thread-block cluster and held in registers in between.
// Production kernel (cuda.cluster of the cross_entropy operator; lab.cross_entropy's choice for the rows and options
// triton_kernels/cross_entropy.py's cuda_takes gives it). Also here: scale_rows, lab.cross_entropy's backward.
//
// Algorithm: a cluster of C CTAs (1 to 16, as few as hold the row) owns a row; CTA r owns the r-th of C slices of
// whole 16-byte packs, counted from the 16-byte boundary at or below the row's start (h elements before it: a row
// of a 50257-element vocabulary starts anywhere); each thread holds up to kElemsPerThread<T> of them, 16-bit
// logits as the words they were loaded in (two to a register), float32 ones as floats. The row's target t is read
// first: an ignored row writes dlogits = 0 and loss 0 and reads nothing; a target outside [0, V) writes NaN.
// Otherwise each thread loads its packs (whole packs as 16-byte loads, the row's edges element by element, -inf
// outside the row), takes its max m_t and the sum d_t of exp(x - m_t); warps merge their (m, d) by shuffles, the
// CTA's warps in shared memory, and the C CTAs' states are read by every CTA through distributed shared memory
// after one cluster barrier (two state slots, alternating by row, so that one barrier per row suffices). With the
// row's (M, D):
//     dlogits_j = c * w_t * (exp(x_j - M) / D - [j = t]),   loss = w_t * (log D + M - x_t)
// c: the reduction's factor (the mean's 1 / denominator, read from the device), w_t: the target's class weight
// (1 without). Each thread writes its elements from the registers, recomputing exp(x_j - M) (two exponentials an
// element, as the softmax cluster kernel's packed path).
// HBM sweeps per row: 1 read of the logits, 1 write of dlogits (the target, the weight and the loss: O(1)).
// Launch: kThreads threads per CTA (two per SM at 80 registers a thread: 16-bit logits 48 a thread, float32 32; at
// 512 threads, 64 registers, 16-bit rows of 32 a thread spilled 4 bytes), C = the fewest CTAs whose registers hold
// the longest shifted row (V + a pack less one element), clusters of C in a grid of one cluster per row (up to the
// grid's limit; clusters then loop over rows). Cluster sizes above 8 use the non-portable cluster size attribute.
// Limits: V <= kMaxCluster * kThreads * kElemsPerThread<T> less a pack's elements but one: 294905 16-bit logits,
// 196605 float32 ones (cross_entropy_cluster_max_cols, for any cluster size, which
// torch.ops.lab.cross_entropy_cluster_max_cols tells Python); past that the launcher refuses with
// cudaErrorInvalidValue. Any rows (64-bit offsets), any row strides; dlogits rows as far past a 16-byte boundary
// as the logits' rows are written in whole packs, others element by element. Options: ignore_index, the
// reductions (through c) and class weights; label smoothing, z-loss and soft-capping are the Triton kernel's.
// sm_90 or newer.
// Why: the Triton kernel streams a row of more than 16384 logits twice (a program holds no more), at 54-69% of a
// copy of the same bytes on an H100 at V = 32000 to 256000 (18-35% where rows start off 16-byte boundaries); a
// cluster holds up to 294905 and reads them once. Measured (notebook/cross-entropy-first-h100/), it is faster than
// the Triton kernel where a row takes up to 5 CTAs and slower from 7: one cluster a row has nothing in flight while
// it reduces, exchanges and writes, where the softmax cluster kernel's persistent grid prefetches the next rows.
// NaN and -inf: a NaN makes D NaN, hence the row's loss and dlogits; an all -inf row has M = -inf and D = 0, so
// both are NaN, as PyTorch's are; a -inf target logit gives an infinite loss and dlogits_t = -c w_t.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <type_traits>

#include <cooperative_groups.h>
#include <math_constants.h>

#include "lab/check.cuh"
#include "lab/dispatch.cuh"
#include "lab/exp.cuh"
#include "lab/launch.h"
#include "lab/vec.cuh"

namespace lab {
namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 384;  // two CTAs per SM: one's loads in flight while the other reduces and writes
constexpr int kMaxCluster = 16;
constexpr int kWarps = kThreads / 32;
// Elements a thread holds: 16-bit logits as loaded (two to a register), float32 logits as floats; 80 registers a
// thread at two CTAs of kThreads per SM.
template <typename T>
constexpr int kElemsPerThread = sizeof(T) == 2 ? 48 : 32;

struct State {
  float m, d;
};

// Two rows' (max, sum of exp(x - max)) merged; -inf maxima add nothing (and give no -inf - -inf).
__device__ __forceinline__ State merge(State a, State b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -CUDART_INF_F) return {m, a.d + b.d};
  return {m, a.d * fast_exp(a.m - m) + b.d * fast_exp(b.m - m)};
}

__device__ __forceinline__ State warp_merge(State s) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    s = merge(s, State{__shfl_xor_sync(0xffffffffu, s.m, o), __shfl_xor_sync(0xffffffffu, s.d, o)});
  }
  return s;
}

// Element j of pack k of a fragment: 16-bit packs held as their words, float32 packs as floats.
template <typename T, int PACKS>
struct Fragment {
  static constexpr int K = kPack<T>;
  static constexpr bool kPacked = sizeof(T) == 2;
  std::conditional_t<kPacked, uint32_t[PACKS][kPackWords], float[PACKS][K]> v;

  __device__ __forceinline__ void set(int k, const Pack<T>& pk) {
    if constexpr (kPacked) {
      const uint4 q = *reinterpret_cast<const uint4*>(&pk);
      v[k][0] = q.x, v[k][1] = q.y, v[k][2] = q.z, v[k][3] = q.w;
    } else {
#pragma unroll
      for (int j = 0; j < K; ++j) v[k][j] = pk.v[j];
    }
  }
  __device__ __forceinline__ float at(int k, int j) const {
    if constexpr (kPacked) {
      const float2 f = word_to_float2<T>(v[k][j / 2]);
      return j % 2 ? f.y : f.x;
    } else {
      return v[k][j];
    }
  }
};

template <typename T>
__global__ void __launch_bounds__(kThreads, 2)
    cross_entropy_cluster_kernel(const T* __restrict__ x, T* __restrict__ dx, const int64_t* __restrict__ target,
                                 const float* __restrict__ weight, const float* __restrict__ scale,
                                 float* __restrict__ loss, int64_t rows, int cols, int64_t x_stride,
                                 int64_t dx_stride, int64_t ignore_index, int slice_packs) {
  constexpr int K = kPack<T>;
  constexpr int PACKS = kElemsPerThread<T> / K;
  __shared__ State warp_states[kWarps];
  __shared__ State cta_state[2];
  cg::cluster_group cluster = cg::this_cluster();
  const int c = static_cast<int>(cluster.num_blocks());
  const int rank = static_cast<int>(cluster.block_rank());
  const int tid = threadIdx.x;
  const float reduction_scale = *scale;
  int parity = 0;
  for (int64_t row = blockIdx.x / c; row < rows; row += gridDim.x / c) {
    const T* xr = x + row * x_stride;
    T* dr = dx + row * dx_stride;
    const int64_t t = target[row];
    // The row is the elements [h, h + cols) of a shifted row starting at the 16-byte boundary at or below it.
    const int h = static_cast<int>(reinterpret_cast<uintptr_t>(xr) % kVecBytes / sizeof(T));
    const bool same_shift = reinterpret_cast<uintptr_t>(dr) % kVecBytes == reinterpret_cast<uintptr_t>(xr) % kVecBytes;
    const int p0 = rank * slice_packs;
    const int p1 = min(p0 + slice_packs, (h + cols + K - 1) / K);
    const auto inside = [&](int e) { return e >= h && e < h + cols; };
    const auto whole = [&](int e0) { return e0 >= h && e0 + K <= h + cols; };
    // Pack p of dlogits from g: 16 bytes at once where it is whole and dlogits is shifted as the logits are.
    const auto store = [&](int p, const float (&g)[K]) {
      const int e0 = p * K;
      if (same_shift && whole(e0)) {
        Pack<T> out;
#pragma unroll
        for (int j = 0; j < K; ++j) out.v[j] = from_float<T>(g[j]);
        *reinterpret_cast<Pack<T>*>(dr - h + e0) = out;
      } else {
#pragma unroll
        for (int j = 0; j < K; ++j) {
          if (inside(e0 + j)) dr[e0 + j - h] = from_float<T>(g[j]);
        }
      }
    };
    if (t == ignore_index || t < 0 || t >= cols) {  // the whole cluster takes this branch: no barrier is skipped
      float fill[K];
#pragma unroll
      for (int j = 0; j < K; ++j) fill[j] = t == ignore_index ? 0.0f : CUDART_NAN_F;
      for (int p = p0 + tid; p < p1; p += kThreads) store(p, fill);
      if (rank == 0 && tid == 0) loss[row] = fill[0];
      continue;
    }
    Fragment<T, PACKS> v;
#pragma unroll
    for (int k = 0; k < PACKS; ++k) {
      const int p = p0 + tid + k * kThreads;
      const int e0 = p * K;
      if (p < p1 && whole(e0)) {
        v.set(k, *reinterpret_cast<const Pack<T>*>(xr - h + e0));
      } else {  // the row's edges element by element, -inf outside it
        Pack<T> pk;
#pragma unroll
        for (int j = 0; j < K; ++j) pk.v[j] = p < p1 && inside(e0 + j) ? xr[e0 + j - h] : from_float<T>(-CUDART_INF_F);
        v.set(k, pk);
      }
    }
    float m = -CUDART_INF_F;
#pragma unroll
    for (int k = 0; k < PACKS; ++k) {
#pragma unroll
      for (int j = 0; j < K; ++j) m = fmaxf(m, v.at(k, j));
    }
    // Exponentials relative to this thread's max: a thread that saw only -inf uses 0 (its elements give 0).
    const float shift = m == -CUDART_INF_F ? 0.0f : m;
    float d = 0.0f;
#pragma unroll
    for (int k = 0; k < PACKS; ++k) {
#pragma unroll
      for (int j = 0; j < K; ++j) d += fast_exp(v.at(k, j) - shift);
    }
    const State warp_state = warp_merge(State{m, d});
    if (tid % 32 == 0) warp_states[tid / 32] = warp_state;
    __syncthreads();
    if (tid < 32) {
      State s = tid < kWarps ? warp_states[tid] : State{-CUDART_INF_F, 0.0f};
      s = warp_merge(s);
      if (tid == 0) cta_state[parity] = s;
    }
    cluster.sync();  // every CTA's state is written (and this CTA's warp states read)
    State total{-CUDART_INF_F, 0.0f};
    for (int r = 0; r < c; ++r) total = merge(total, *cluster.map_shared_rank(&cta_state[parity], r));
    parity ^= 1;

    const int target_col = static_cast<int>(t);  // in [0, cols): an int
    const float w = weight == nullptr ? 1.0f : weight[target_col];
    const float cw = reduction_scale * w;
    // exp(x - M) * cw / D, recomputed from the inputs; an all -inf row has M = -inf and gives NaN, as PyTorch's.
    const float factor = cw / total.d;
    const auto grad = [&](int k, int j, int e) {
      return fast_exp(v.at(k, j) - total.m) * factor - (e - h == target_col ? cw : 0.0f);
    };
#pragma unroll
    for (int k = 0; k < PACKS; ++k) {
      const int p = p0 + tid + k * kThreads;
      if (p >= p1) continue;
      const int e0 = p * K;
      if (same_shift && whole(e0)) {  // 16 bytes, each pair of elements converted into its word as it is made
        uint32_t words[kPackWords];
#pragma unroll
        for (int i = 0; i < kPackWords; ++i) {
          if constexpr (sizeof(T) == 2) {
            words[i] = float2_to_word<T>(grad(k, 2 * i, e0 + 2 * i), grad(k, 2 * i + 1, e0 + 2 * i + 1));
          } else {
            words[i] = __float_as_uint(grad(k, i, e0 + i));
          }
        }
        *reinterpret_cast<uint4*>(dr - h + e0) = make_uint4(words[0], words[1], words[2], words[3]);
      } else {
#pragma unroll
        for (int j = 0; j < K; ++j) {
          if (inside(e0 + j)) dr[e0 + j - h] = from_float<T>(grad(k, j, e0 + j));
        }
      }
    }
    if (rank == 0 && tid == 0) loss[row] = w * (logf(total.d) + (total.m - to_float(xr[target_col])));
  }
  cluster.sync();  // no CTA leaves while another may still read its state
}

template <typename T>
constexpr int64_t kMaxCols = int64_t{kMaxCluster} * kThreads * kElemsPerThread<T> - (kPack<T> - 1);

template <typename T>
cudaError_t launch(const CrossEntropyArgs& a, cudaStream_t stream) {
  constexpr int K = kPack<T>;
  if (a.cols > kMaxCols<T>) return cudaErrorInvalidValue;
  const int64_t row_packs = (a.cols + 2 * (K - 1)) / K;  // the longest shifted row: a pack less one element more
  constexpr int64_t cta_packs = int64_t{kThreads} * (kElemsPerThread<T> / K);
  const int64_t cluster = (row_packs + cta_packs - 1) / cta_packs;
  const int slice_packs = static_cast<int>((row_packs + cluster - 1) / cluster);
  const auto kernel = cross_entropy_cluster_kernel<T>;
  if (cluster > 8) LAB_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = static_cast<unsigned>(cluster);
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cudaLaunchConfig_t config{};
  const int64_t clusters = std::min<int64_t>(a.rows, INT_MAX / cluster);
  config.gridDim = dim3(static_cast<unsigned>(clusters * cluster));
  config.blockDim = dim3(kThreads);
  config.stream = stream;
  config.attrs = &attr;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, static_cast<const T*>(a.x), static_cast<T*>(a.dx), a.target, a.weight,
                            a.scale, a.loss, a.rows, static_cast<int>(a.cols), a.x_row_stride, a.dx_row_stride,
                            a.ignore_index, slice_packs);
}

// scale_rows: the backward of lab.cross_entropy, dlogits scaled in place by the loss's gradient, row by row: g_i *=
// s_i, s one float32 (a mean's or a sum's gradient, stride 0) or one per row (reduction none). A row whose s is 1 (a
// loss at the end of the graph) is neither read nor written: the common backward is a launch and a load per row. A
// block per row, 16-byte packs where the row starts on a boundary and holds whole packs, else element by element.
// (A Triton launch of the same from the autograd thread cost about 0.8 ms of host time a call on an H100.)
constexpr int kScaleThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kScaleThreads) scale_rows_kernel(T* __restrict__ g, const float* __restrict__ scale,
                                                              int64_t rows, int cols, int64_t g_stride,
                                                              int64_t scale_stride) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float s = scale[row * scale_stride];
    if (s == 1.0f) continue;
    T* gr = g + row * g_stride;
    if (is_aligned(gr) && cols % kPack<T> == 0) {
      for (int p = threadIdx.x; p < cols / kPack<T>; p += kScaleThreads) {
        Pack<T> pk = reinterpret_cast<Pack<T>*>(gr)[p];
#pragma unroll
        for (int j = 0; j < kPack<T>; ++j) pk.v[j] = from_float<T>(to_float(pk.v[j]) * s);
        reinterpret_cast<Pack<T>*>(gr)[p] = pk;
      }
    } else {
      for (int j = threadIdx.x; j < cols; j += kScaleThreads) gr[j] = from_float<T>(to_float(gr[j]) * s);
    }
  }
}

}  // namespace

int64_t cross_entropy_cluster_max_cols(DType dtype, int64_t cluster) {
  const int64_t c = std::min<int64_t>(std::max<int64_t>(cluster, 1), kMaxCluster);
  return dtype == DType::kFloat32 ? c * kThreads * kElemsPerThread<float> - (kPack<float> - 1)
                                  : c * kThreads * kElemsPerThread<__nv_bfloat16> - (kPack<__nv_bfloat16> - 1);
}

cudaError_t cross_entropy_cluster(const CrossEntropyArgs& a, cudaStream_t stream) {
  return dispatch_dtype(a.dtype, [&](auto tag) { return launch<typename decltype(tag)::type>(a, stream); });
}

cudaError_t cross_entropy_scale_rows(const ScaleRowsArgs& a, cudaStream_t stream) {
  return dispatch_dtype(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    scale_rows_kernel<T><<<row_grid(a.rows), kScaleThreads, 0, stream>>>(static_cast<T*>(a.g), a.scale, a.rows,
                                                                     static_cast<int>(a.cols), a.g_row_stride,
                                                                     a.scale_stride);
    return cudaGetLastError();
  });
}

}  // namespace lab
