// cluster: cross-entropy's loss and its gradient from one read of the logits and one write of dlogits, each row
// split over a Hopper thread-block cluster and held in registers in between.
// Production kernel (cuda.cluster of the cross_entropy operator; lab.cross_entropy's choice where
// triton_kernels/cross_entropy.py's cuda_takes gives it). Also here: the steps around it (targets: the reduction's
// factor and the first bad target; reduce: the loss's sum or mean), and scale_rows, lab.cross_entropy's backward.
//
// Algorithm: the resident path of lab/cluster_rows.cuh, LOSS: the softmax cluster kernel's split, exchange and
// write, with the row's (M, D) written as
//     dlogits_j = c * w_t * (exp(x_j - M) / D - [j = t]),   loss = w_t * (log D + M - x_t)
// c: the reduction's factor (the mean's 1 / denominator, read from the device), w_t: the target's class weight (1
// without). A row whose target is ignore_index writes dlogits = 0 and loss 0, a target outside [0, V) NaN.
// HBM sweeps per row: 1 read of the logits, 1 write of dlogits (the target, the weight and the loss: O(1)); the loss
// alone (CrossEntropyArgs::grad false, evaluation): 1 read.
// Launch: softmax's cluster launch tables (cluster_plan: shape, cluster size, grid and stagger by dtype, V and
// rows, for rows on 16-byte boundaries and for rows off them), which move the same bytes per row; the loss alone
// (kLossPlan16, kLossPlan32) and the loss with its gradient in 16-bit (kGradPlan16) take their own launches where
// measured faster. The kernel is compiled for the shapes those tables name up to kMaxCols (kShapes32, kShapes16).
// Limits: V <= kMaxCols, and no further than the tables keep rows resident (rows off 16-byte boundaries: up to the
// shifted tables' first streaming entry), cross_entropy_cluster_max_cols, which
// torch.ops.lab.cross_entropy_cluster_max_cols tells Python; rows whose dlogits are not as far past a 16-byte boundary
// as the logits' are refused (cudaErrorInvalidValue), as are longer rows. Any rows (64-bit offsets), any row strides.
// dlogits may be the logits themselves (in place): the resident path loads each CTA's slice of a row into registers
// before the cluster's exchange, and writes it after. Options: ignore_index, the reductions (through c) and
// class weights; label smoothing, z-loss and soft-capping are the Triton kernel's. sm_90 or newer.
// Why softmax's kernel and tables: they move the same bytes per row, and the kernel with the loss's write ran at
// the softmax kernel's speed (4096 x 32000 to 256000 bfloat16 on an H100: 97-99% of a copy alone, 91-98% through
// the op; notebook/cross-entropy-on-the-softmax-cluster-kernel/), where a kernel of its own with one cluster barrier
// a row reached 37-47%.
// NaN and -inf: a NaN makes D NaN, hence the row's loss and dlogits; an all -inf row has M = -inf and D = 0, so
// both are NaN, as PyTorch's are; a -inf target logit gives an infinite loss and dlogits_t = -c w_t. Gradients
// below float32's smallest normal come out 0 (the kernel's exponential flushes denormals: exp.cuh).
#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <mutex>
#include <utility>

#include "lab/cluster_rows.cuh"
#include "lab/dispatch.cuh"
#include "lab/launch.h"
#include "lab/tune.h"
#include "lab/vec.cuh"

namespace lab {
namespace {

// The longest row the kernel is compiled for: the vocabularies of today's models (256000 at most) and a margin.
constexpr int64_t kMaxCols = 262144;
// The resident shapes (kResidentShapes indices) that softmax's launch tables and the kernel's own (kLossPlan16,
// kLossPlan32, kGradPlan16) name for rows of up to kMaxCols, by dtype: the only ones compiled with LOSS.
// cross_entropy_cluster_max_cols stops below the first row length whose plan names another, so a table change that
// needs one more shows there (tests/test_cuda_compile.py).
constexpr int kShapes32[] = {6, 12, 13, 14, 16, 32};
constexpr int kShapes16[] = {0, 1, 4, 6, 18, 20, 21, 26, 31, 33};

template <typename T>
constexpr bool compiled_for(int shape) {
  if constexpr (sizeof(T) == 2) {
    for (int s : kShapes16) {
      if (s == shape) return true;
    }
  } else {
    for (int s : kShapes32) {
      if (s == shape) return true;
    }
  }
  return false;
}

// The loss alone's launches (cross_entropy_plan) where they differ from softmax's tables (cluster_plan), which the
// kernel runs on elsewhere (the loss with its gradient: kGradPlan16 below, read the same way): the first entry whose
// rows (aligned or shifted, as the tables split them) and length cover the input and whose min_rows it reaches. An
// entry covers the row lengths of softmax's table entry around its vocabulary `at_cols` (cluster_plan_span), a
// vocabulary of the cross_entropy operator's sweep where scripts/tune/tune_cross_entropy_cluster.py measured its
// launch ahead of that entry's (the kernel alone, percent of a copy of the same bytes; each entry names the GPU):
// by more than 2% on the H100, by 3% or more on the H200; elsewhere the table's launch was within that of the
// fastest. cross_entropy_cluster_max_cols stops below any length where an entry's shape is not compiled or does not
// hold the row (takes).
// Why: the read-only kernel wants more CTAs a row, or more bytes in flight a CTA, than the kernel that writes the row
// (a slice of half the bytes to wait on a CTA): at 50257 16-bit the tables' two 512 x 64 CTAs a row left a quarter of
// the DRAM peak unused (ncu, H100); on the H200, float32 rows of 128256 on eight 512 x 32 CTAs reached 83-86%.
struct LossPlanEntry {
  int64_t at_cols;
  bool aligned;
  int64_t min_rows;
  ClusterPlan plan;
};
constexpr LossPlanEntry kLossPlan16[] = {
    {32000, true, 4096, {31, 2, false, {6, 1000}}},  // H200 128x128P c2n: 4096-32768 x 32000 90-103%, table 81-86%
    {50257, false, 4096, {31, 4, true, {6, 1000}}},  // H100 128x128P c4p: 4096/16384 x 50257 90/94%, table 84/88%
    {50257, false, 0, {18, 8, true, {4, 500}}},  // H100 128x64P c8p: 1024 x 50257 84%, table 79%
    {128256, true, 0, {31, 8, false, {6, 1000}}},  // H100 128x128P c8n: 1024/4096 x 128256 93.5/102%, table 91/96%
    {256000, true, 4096, {31, 16, true, {6, 1000}}},  // H200 128x128P c16p: 4096 x 256000 90.4%, c16n 87.3%
};
constexpr LossPlanEntry kLossPlan32[] = {
    {50257, false, 4096, {32, 4, true, {4, 500}}},  // H200 128x128 c4p: 4096/16384 x 50257 98/103%, c4n 93/97%
    {50257, false, 0, {32, 4, false, {6, 1000}}},  // H200 128x128 c4n s6: 1024 x 50257 87.5%, table 79%
    {128256, true, 0, {32, 8, false, {6, 1000}}},  // H200 128x128 c8n: 1024/4096 x 128256 98/105%, table 83/86%
    {151936, true, 0, {32, 12, true, {4, 500}}},  // H200 128x128 c12p: 1024/4096 x 151936 92.5/98.5%, c12n 87/91%
};
// The loss and its gradient's launches where they differ from softmax's tables, chosen as the loss alone's were
// (tune_cross_entropy_cluster.py --grad, H200, bfloat16; a copy of twice the bytes). At 32000 softmax's four-CTA
// clusters left 5-6% of a copy from 16384 tokens; at 50257 (rows off 16-byte boundaries) no launch passed 87%, and
// the entry for many rows, within 2% of the table's launch, keeps the entry for 1024 rows from reaching them.
constexpr LossPlanEntry kGradPlan16[] = {
    {32000, true, 0, {26, 1, false, {1, 0}}},  // 512x64P c1n: 1024-32768 x 32000 88/94/97/97%, table 87/90/92/91%
    {50257, false, 4096, {26, 2, false, {6, 1000}}},  // 512x64P c2n s6: 4096/16384 x 50257 85/87%, table 84/86%
    {50257, false, 0, {18, 8, false, {6, 1000}}},  // 128x64P c8n s6: 1024 x 50257 84.7%, table 79.9%
};

template <typename T, bool GRAD>
cudaError_t launch(const RowsArgs& rows, const LossRows& loss, const ClusterPlan& plan, bool shifted,
                   cudaStream_t stream) {
  return dispatch_resident_shape(plan.shape, [&](auto i) {
    constexpr int index = decltype(i)::value;
    constexpr ResidentShape s = kResidentShapes[index];
    if constexpr (!compiled_for<T>(index)) {
      return cudaErrorInvalidValue;
    } else if constexpr (s.stages == 0) {
      return shifted ? launch_resident<T, s.threads, s.elems, 0, s.packed, true, s.one_row, true, GRAD>(
                           rows, plan.cluster, plan.persistent, plan.stagger, stream, loss)
                     : launch_resident<T, s.threads, s.elems, 0, s.packed, false, s.one_row, true, GRAD>(
                           rows, plan.cluster, plan.persistent, plan.stagger, stream, loss);
    } else {
      if (shifted) return cudaErrorInvalidValue;
      return launch_resident<T, s.threads, s.elems, s.stages, s.packed, false, s.one_row, true, GRAD>(
          rows, plan.cluster, plan.persistent, plan.stagger, stream, loss);
    }
  });
}

// Whether `plan` launches rows of `cols` elements of `dtype` on a shape compiled for the kernel whose registers hold
// them (shifted rows: a pack less one element longer, loaded straight into registers).
bool holds(const ClusterPlan& plan, int64_t cols, DType dtype, bool aligned) {
  if (plan.shape < 0 || plan.shape >= kResidentShapeCount || plan.cluster < 1 || plan.cluster > kMaxCluster) {
    return false;
  }
  if (dtype == DType::kFloat32 ? !compiled_for<float>(plan.shape) : !compiled_for<__nv_bfloat16>(plan.shape)) {
    return false;
  }
  const ResidentShape& s = kResidentShapes[plan.shape];
  const int pack = kVecBytes / elem_bytes(dtype);
  return !(s.one_row && plan.persistent) && (aligned || s.stages == 0) &&
         slice_packs_of(cols, pack, !aligned, plan.cluster) <= int64_t{s.threads} * s.elems / pack;
}

// Whether rows of `cols` elements (any number of them) take a compiled shape of the resident path, with the gradient
// and without it.
bool takes(int64_t cols, DType dtype, bool aligned) {
  for (const int64_t rows : {int64_t{1}, INT64_MAX}) {  // the tables' entries for few rows and for many
    if (!holds(cross_entropy_plan(cols, rows, dtype, aligned, true), cols, dtype, aligned) ||
        !holds(cross_entropy_plan(cols, rows, dtype, aligned, false), cols, dtype, aligned)) {
      return false;
    }
  }
  return true;
}

// targets and reduce: the operator's steps around the kernel (CrossEntropyTargetsArgs, CrossEntropyReduceArgs), each
// one block of kOneBlock threads: a thread sums or scans a strided share of the rows in a fixed order, the warps and
// then the block combine them in a fixed order, so that a result does not change from run to run.
constexpr int kOneBlock = 1024;

// Sum (float) and first row (int64 minimum) over a block of THREADS; thread 0's values are the block's.
template <int THREADS>
__device__ __forceinline__ void block_sum_min(float& sum, int64_t& first) {
  __shared__ float sums[THREADS / 32];
  __shared__ long long firsts[THREADS / 32];
#pragma unroll
  for (int m = 16; m > 0; m /= 2) {
    sum += __shfl_xor_sync(0xffffffffu, sum, m);
    first = min(first, static_cast<int64_t>(__shfl_xor_sync(0xffffffffu, static_cast<long long>(first), m)));
  }
  if (threadIdx.x % 32 == 0) sums[threadIdx.x / 32] = sum, firsts[threadIdx.x / 32] = first;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < THREADS / 32; ++w) sum += sums[w], first = min(first, static_cast<int64_t>(firsts[w]));
  }
}

template <int THREADS>
__global__ void __launch_bounds__(THREADS) targets_kernel(CrossEntropyTargetsArgs a) {
  float total = 0.0f;
  int64_t first = a.rows;
  for (int64_t i = threadIdx.x; i < a.rows; i += THREADS) {
    const int64_t t = a.target[i];
    if (t == a.ignore_index) continue;
    if (t < 0 || t >= a.cols) {
      first = min(first, i);
    } else {
      total += a.weight == nullptr ? 1.0f : a.weight[t];
    }
  }
  block_sum_min<THREADS>(total, first);
  if (threadIdx.x == 0) {
    a.summary[0] = total;
    a.summary[1] = a.mean ? 1.0f / total : 1.0f;
    if (a.bad != nullptr) {
      a.bad[0] = first < a.rows ? first : -1;
      a.bad[1] = first < a.rows ? a.target[first] : 0;
    }
  }
}

template <int THREADS>
__global__ void __launch_bounds__(THREADS) reduce_kernel(CrossEntropyReduceArgs a) {
  float total = 0.0f;
  int64_t unused = 0;
  for (int64_t i = threadIdx.x; i < a.rows; i += THREADS) total += a.loss_rows[i];
  block_sum_min<THREADS>(total, unused);
  if (threadIdx.x == 0) *a.loss = a.mean ? total / a.summary[0] : total;
}

// scale_rows: the backward of lab.cross_entropy, dlogits scaled in place by the loss's gradient, row by row: g_i *=
// s_i, s one float32 (a mean's or a sum's gradient, stride 0) or one per row (reduction none). A row whose s is 1 (a
// loss at the end of the graph) is neither read nor written: the common backward is a launch and a load per row. A
// block per row, 16-byte packs where the row starts on a boundary and holds whole packs, else element by element;
// one scale for every row: at most kScalarScaleBlocks blocks over the rows, each returning at once where it is 1 (a
// block per row of a 256000 x 2304 dweight took 0.13 ms to read its 1 256000 times).
// (A Triton launch of the same from the autograd thread cost about 0.8 ms of host time a call on an H100.)
constexpr int kScaleThreads = 256;
constexpr int64_t kScalarScaleBlocks = 1024;

template <typename T>
__global__ void __launch_bounds__(kScaleThreads) scale_rows_kernel(T* __restrict__ g, const float* __restrict__ scale,
                                                              int64_t rows, int cols, int64_t g_stride,
                                                              int64_t scale_stride) {
  if (scale_stride == 0 && scale[0] == 1.0f) return;
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

ClusterPlan cross_entropy_plan(int64_t cols, int64_t rows, DType dtype, bool aligned, bool grad) {
  const auto pick = [&](const auto& table) {
    for (const LossPlanEntry& e : table) {
      if (e.aligned != aligned || rows < e.min_rows) continue;
      const ClusterSpan span = cluster_plan_span(e.at_cols, dtype, aligned);
      if (cols >= span.first && cols <= span.last) return &e.plan;
    }
    return static_cast<const ClusterPlan*>(nullptr);
  };
  const ClusterPlan* p = grad ? (dtype == DType::kFloat32 ? nullptr : pick(kGradPlan16))
                              : (dtype == DType::kFloat32 ? pick(kLossPlan32) : pick(kLossPlan16));
  return p != nullptr ? *p : cluster_plan(cols, rows, dtype, aligned);
}

int64_t cross_entropy_cluster_max_cols(DType dtype, bool aligned) {
  // The first row length up to kMaxCols that the kernel cannot take, less one: found once per (dtype, aligned)
  // by asking the tables at every length (a few milliseconds), then remembered.
  static std::mutex mutex;
  static std::map<std::pair<int, bool>, int64_t> known;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(static_cast<int>(dtype), aligned);
  if (const auto it = known.find(key); it != known.end()) return it->second;
  int64_t n = 1;
  while (n <= kMaxCols && takes(n, dtype, aligned)) ++n;
  return known[key] = n - 1;
}

cudaError_t cross_entropy_cluster_with(const CrossEntropyArgs& a, const ClusterPlan& plan, cudaStream_t stream) {
  const RowsArgs rows{a.x, a.dx, a.rows, a.cols, a.x_row_stride, a.dx_row_stride, a.dtype};
  const bool aligned = rows_aligned(rows);
  if ((!aligned && !rows_shiftable(rows)) || plan.cluster < 1 || plan.cluster > kMaxCluster) {
    return cudaErrorInvalidValue;
  }
  const LossRows loss{a.target, a.weight, a.scale, a.loss, a.ignore_index};
  return dispatch_dtype(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return a.grad ? launch<T, true>(rows, loss, plan, !aligned, stream)
                  : launch<T, false>(rows, loss, plan, !aligned, stream);
  });
}

int cross_entropy_cluster_shapes(DType dtype, const int** shapes) {
  if (dtype == DType::kFloat32) {
    *shapes = kShapes32;
    return static_cast<int>(std::size(kShapes32));
  }
  *shapes = kShapes16;
  return static_cast<int>(std::size(kShapes16));
}

cudaError_t cross_entropy_cluster(const CrossEntropyArgs& a, cudaStream_t stream) {
  const RowsArgs rows{a.x, a.dx, a.rows, a.cols, a.x_row_stride, a.dx_row_stride, a.dtype};
  const bool aligned = rows_aligned(rows);
  if (!aligned && !rows_shiftable(rows)) return cudaErrorInvalidValue;
  if (a.cols > cross_entropy_cluster_max_cols(a.dtype, aligned)) return cudaErrorInvalidValue;
  return cross_entropy_cluster_with(a, cross_entropy_plan(a.cols, a.rows, a.dtype, aligned, a.grad), stream);
}

cudaError_t cross_entropy_targets(const CrossEntropyTargetsArgs& a, cudaStream_t stream) {
  targets_kernel<kOneBlock><<<1, kOneBlock, 0, stream>>>(a);
  return cudaGetLastError();
}

cudaError_t cross_entropy_reduce(const CrossEntropyReduceArgs& a, cudaStream_t stream) {
  reduce_kernel<kOneBlock><<<1, kOneBlock, 0, stream>>>(a);
  return cudaGetLastError();
}

cudaError_t cross_entropy_scale_rows(const ScaleRowsArgs& a, cudaStream_t stream) {
  return dispatch_dtype(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t blocks = a.scale_stride == 0 ? std::min(a.rows, kScalarScaleBlocks) : a.rows;
    scale_rows_kernel<T><<<row_grid(blocks), kScaleThreads, 0, stream>>>(static_cast<T*>(a.g), a.scale, a.rows,
                                                                     static_cast<int>(a.cols), a.g_row_stride,
                                                                     a.scale_stride);
    return cudaGetLastError();
  });
}

}  // namespace lab
