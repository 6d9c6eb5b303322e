// cluster: dx = y * (dy - sum(dy * y)) per row, the row split across a Hopper thread-block cluster and held in
// registers: y and dy read from HBM once, dx written once, at any length up to 16 CTAs' registers.
//
// Algorithm: a cluster of C CTAs (1 to 16) owns a row; CTA r owns the r-th of C equal slices of it (whole 16-byte
// packs). Each thread loads its packs of y and of dy straight into registers as loaded (16 bytes each, every load in
// flight before the first use), or, in the shapes that hold dy in shared memory, its packs of dy into its own
// shared-memory slots by cp.async first (read back by the thread that copied them: no barrier) and y's into
// registers, sums dy * y over them in float32, and the row's sum s is reduced once per row: xor
// shuffles in each warp, then each warp's partial sent to every CTA of the cluster through distributed shared
// memory (exchange_row with SumRule, lab/cluster_rows.cuh: st.async into each CTA's slots, completed on its
// mbarrier; no cluster barrier per row). Each thread then writes dx = y * (dy - s) from its registers (and slots).
// Rows off 16-byte boundaries (odd N: row r of a contiguous tensor starts r * N elements in) are split from the
// boundary below their start, as rows of up to a pack less one element longer, as the forward's SHIFTED rows are:
// whole packs move as 16-byte accesses, the first and last element by element. That needs y, dy and dx rows equally
// far past a boundary (contiguous tensors are); a row where they differ moves every element alone.
// HBM traffic: read y and dy once, write dx once: 3 * M * N * itemsize bytes (2R + 1W).
// Launch: by N and dtype, from kPlan32 and kPlan16: the CTA shape (threads, packs of each input per thread), the
// cluster size and the grid: persistent (as many clusters as are resident, each looping over rows) or one
// cluster per row (the hardware hands out rows as clusters retire).
// Why: two_pass reads a row past one CTA's registers (16384 elements) twice (4R + 1W: 60% of a copy); one read
// needs the whole row on chip, which only a cluster's registers hold. The sum is a plain float, so the exchange
// carries one word per warp. dy in shared memory: a float32 row of 262144 in registers alone needs 16 CTAs of one SM
// each, and only 7 clusters of 16 are resident on an H200 (112 of its 132 SMs); in registers (y) and shared memory
// (dy, 128-132 KB) together it fits 8 CTAs, which ran 89-98% of a copy against 82-86% on 16 (ncu: 15 clusters of 8
// resident, on 120 SMs; at 256 rows one of them takes 18 rows, the others 17: 94.8% of the steady rate at most).
// Limits: any M (rows past the grid's limit are looped over), any row strides; rows of up to kMaxCols32 float32 or
// kMaxCols16 16-bit elements (the last plan entries: float32 on 8 CTAs of 256 x 32, dy in shared memory; 16-bit on
// 16 CTAs of 512 threads holding 8 packs of each input); longer
// rows take two_pass (2 reads of y and dy), so the variant's traffic model holds to those lengths.
#include <algorithm>
#include <cstdint>

#include "lab/async_copy.cuh"
#include "lab/cluster_rows.cuh"
#include "lab/grad_words.cuh"

namespace lab {

cudaError_t softmax_backward_two_pass(const RowsGradArgs& a, cudaStream_t stream);  // two_pass.cu: rows of any length

namespace {

// A CTA shape: threads, 16-byte packs of y (and as many of dy) per thread, and where dy is held: in registers (its
// registers of row data are 8 x packs: two inputs, 4 words a pack, whatever the dtype) or in shared memory (4 x
// packs registers; threads x packs x 16 bytes of shared memory, one CTA an SM past 113 KB). The two shapes of dy
// in shared memory, 384 x 22 and 256 x 32, each hold a float32 row of 262144 over 8 CTAs (8192 packs a CTA) without
// spilling in any dtype or form; 512 x 16 spilled 16 bytes in the shifted 16-bit form (128 registers at most for 512
// threads).
struct BackwardShape {
  int threads;
  int packs;
  int dy_shared;  // 1: dy in shared memory
};
constexpr BackwardShape kShapes[] = {
    {128, 4, 0}, {256, 4, 0}, {512, 4, 0}, {128, 8, 0}, {256, 8, 0}, {512, 8, 0}, {384, 22, 1}, {256, 32, 1},
};
constexpr int kShapeCount = sizeof(kShapes) / sizeof(BackwardShape);

struct PlanEntry {
  int64_t max_cols;
  int shape;  // index into kShapes
  int cluster;
  bool persistent;
};
// The launch table by N (rows on 16-byte boundaries; shifted rows take the entry of their longest shifted row): at
// each length of the backward's sweeps, the configuration measured fastest by scripts/tune/tune_backward_cluster.py
// (H200, M = 4096 and the fixed sweep's M; float16 takes bfloat16's), or one within 1% of the fastest at both M.
// Mostly small CTAs (128 x 4), one cluster per row, as many CTAs as the row needs: 102% of a copy at 32768 to 131072
// elements. Float32 rows of 262144: 8 CTAs of 256 x 32 with dy in shared memory on a persistent grid, 89% of a copy
// at 256 rows and 98% at 4096 (16 CTAs of 512 x 8 with dy in registers, one cluster per row: 82% and 86%).
// bfloat16's 524288 was not measured (no sweep reaches it).
constexpr PlanEntry kPlan32[] = {  // float32
    {2048, 0, 1, true},     {4096, 0, 2, false},    {8192, 0, 4, false},   {16384, 0, 8, false},
    {32768, 0, 16, false},  {65536, 1, 16, false},  {131072, 4, 16, false}, {262144, 7, 8, true},
};
constexpr PlanEntry kPlan16[] = {  // float16, bfloat16 (measured in bfloat16)
    {2048, 0, 1, true},     {4096, 0, 1, false},    {8192, 0, 2, false},   {16384, 0, 4, false},
    {32768, 0, 8, false},   {65536, 3, 8, false},   {131072, 4, 8, false}, {262144, 4, 16, false},
    {524288, 5, 16, false},
};

template <size_t N>
constexpr bool plan_fits(const PlanEntry (&plan)[N], int pack) {
  for (size_t i = 0; i < N; ++i) {
    const PlanEntry& e = plan[i];
    if (i > 0 && plan[i - 1].max_cols >= e.max_cols) return false;
    if (e.shape < 0 || e.shape >= kShapeCount || e.cluster < 1 || e.cluster > kMaxCluster) return false;
    const BackwardShape& s = kShapes[e.shape];
    if (slice_packs_of(e.max_cols, pack, false, e.cluster) > int64_t{s.threads} * s.packs) return false;
  }
  return true;
}
static_assert(plan_fits(kPlan32, 4) && plan_fits(kPlan16, 8), "a plan entry's slice exceeds its shape's registers");
constexpr int64_t kMaxCols32 = kPlan32[sizeof(kPlan32) / sizeof(PlanEntry) - 1].max_cols;
constexpr int64_t kMaxCols16 = kPlan16[sizeof(kPlan16) / sizeof(PlanEntry) - 1].max_cols;

// Resident CTAs asked of __launch_bounds__: the row data plus about 40 registers for addresses and the loop (with 32,
// 16-bit shifted rows spilled 8 bytes at 4 packs, 48-56 at 128 x 8).
template <int THREADS, int PACKS, bool DY_SHARED>
constexpr int kMinBlocks = std::max(1, 65536 / (THREADS * ((DY_SHARED ? 4 : 8) * PACKS + 40)));

// ALIGNED: every row of y, dy and dx starts on a 16-byte boundary (the shifted form's h is 0 and every pack whole).
// DY_SHARED: dy's packs in dynamic shared memory, [PACKS][THREADS] (thread t's pack k at k * THREADS + t:
// consecutive threads, consecutive 16 bytes), y's in registers.
template <typename T, int THREADS, int PACKS, bool ALIGNED, bool DY_SHARED>
__global__ void __launch_bounds__(THREADS, (kMinBlocks<THREADS, PACKS, DY_SHARED>))
    softmax_backward_cluster_kernel(const T* __restrict__ y, const T* __restrict__ dy, T* __restrict__ dx,
                                    int64_t rows, int cols, int64_t y_stride, int64_t dy_stride, int64_t dx_stride,
                                    int slice_packs) {
  constexpr int K = kPack<T>;
  constexpr int kWarps = THREADS / kWarpSize;
  static_assert(kWarps <= kMaxWarps, "the exchange has slots for kMaxWarps warps per CTA");
  __shared__ ExchangeOf<float> ex;
  extern __shared__ __align__(kVecBytes) unsigned char dy_slots[];  // DY_SHARED only (none launched otherwise)
  uint4* const mine = reinterpret_cast<uint4*>(dy_slots) + threadIdx.x;  // this thread's pack k at mine[k * THREADS]
  cg::cluster_group cluster = cg::this_cluster();
  const int c = static_cast<int>(cluster.num_blocks());
  const unsigned rank = cluster.block_rank();
  const int tid = threadIdx.x;
  const int p0 = static_cast<int>(rank) * slice_packs;  // this CTA's first pack of the (shifted) row
  const auto shift_of = [](const void* p) {
    return static_cast<int>(reinterpret_cast<uintptr_t>(p) % kVecBytes / sizeof(T));
  };
  exchange_arrive(ex, c);
  int row_index = 0;
  for (int64_t row = blockIdx.x / c; row < rows; row += gridDim.x / c, ++row_index) {
    const T* yr = y + row * y_stride;
    const T* dyr = dy + row * dy_stride;
    T* dxr = dx + row * dx_stride;
    // The row is the elements [h, h + cols) of its shifted row, which starts on the boundary at or below it.
    int h = 0;
    bool wide = true;  // packs of y, dy and dx may move whole (equally far past a boundary)
    if constexpr (!ALIGNED) {
      h = shift_of(yr);
      wide = shift_of(dyr) == h && shift_of(dxr) == h;
      yr -= h;
      dyr -= h;
      dxr -= h;
    }
    const int end = h + cols;
    // This thread's packs are p0 + tid + k * THREADS; the first `n` of them are in this CTA's part of the row.
    const int last = min(p0 + slice_packs, (end + K - 1) / K);
    const int n = last > p0 + tid ? min(PACKS, (last - p0 - tid + THREADS - 1) / THREADS) : 0;
    const auto first_of = [&](int k) { return (p0 + tid + k * THREADS) * K; };
    const auto whole = [&](int k) { return wide && k < n && first_of(k) >= h && first_of(k) + K <= end; };
    const auto in = [&](int k, int e) { return k < n && e >= h && e < end; };
    uint32_t a[PACKS][kPackWords], b[DY_SHARED ? 1 : PACKS][kPackWords];  // y's and dy's packs as loaded, 4 words each
    if constexpr (DY_SHARED) {  // dy's copies first, into this thread's slots, then y's loads into registers
#pragma unroll
      for (int k = 0; k < PACKS; ++k) {
        const int e0 = first_of(k);
        if (whole(k)) {
          cp_async_16_ca(&mine[k * THREADS], dyr + e0);
        } else {  // a partial pack (or none): element by element, 0 outside the row, stored by this thread
          uint32_t w[kPackWords];
#pragma unroll
          for (int i = 0; i < kPackWords; ++i) w[i] = element_word<T>(dyr, e0, i, [&](int e) { return in(k, e); });
          mine[k * THREADS] = make_uint4(w[0], w[1], w[2], w[3]);
        }
      }
      cp_async_commit();
    }
    const auto dy_pack = [&](int k, uint32_t (&w)[kPackWords]) {  // dy's pack k: its registers, or its slot read back
      if constexpr (DY_SHARED) {
        const uint4 q = ld_shared_16_volatile(&mine[k * THREADS]);  // read for each pass, not held between them
        w[0] = q.x, w[1] = q.y, w[2] = q.z, w[3] = q.w;
      } else {
#pragma unroll
        for (int i = 0; i < kPackWords; ++i) w[i] = b[k][i];
      }
    };
#pragma unroll
    for (int k = 0; k < PACKS; ++k) {
      const int e0 = first_of(k);
      if constexpr (DY_SHARED) {
        if (whole(k)) {
          const uint4 p = *reinterpret_cast<const uint4*>(yr + e0);
          a[k][0] = p.x, a[k][1] = p.y, a[k][2] = p.z, a[k][3] = p.w;
        } else {
#pragma unroll
          for (int i = 0; i < kPackWords; ++i) a[k][i] = element_word<T>(yr, e0, i, [&](int e) { return in(k, e); });
        }
      } else if (whole(k)) {
        const uint4 p = *reinterpret_cast<const uint4*>(yr + e0);
        const uint4 q = *reinterpret_cast<const uint4*>(dyr + e0);
        a[k][0] = p.x, a[k][1] = p.y, a[k][2] = p.z, a[k][3] = p.w;
        b[k][0] = q.x, b[k][1] = q.y, b[k][2] = q.z, b[k][3] = q.w;
      } else {  // a partial pack (or none): element by element, 0 outside the row (adding nothing to the sum)
#pragma unroll
        for (int i = 0; i < kPackWords; ++i) {
          a[k][i] = element_word<T>(yr, e0, i, [&](int e) { return in(k, e); });
          b[k][i] = element_word<T>(dyr, e0, i, [&](int e) { return in(k, e); });
        }
      }
    }
    if constexpr (DY_SHARED) cp_async_wait<0>();  // this thread's copies of dy have landed
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < PACKS; ++k) {
      uint32_t w[kPackWords];
      dy_pack(k, w);
#pragma unroll
      for (int i = 0; i < kPackWords; ++i) s += word_dot<T>(a[k][i], w[i]);
    }
    s = exchange_row<kWarps, SumRule>(s, ex, row_index, c, rank);
#pragma unroll
    for (int k = 0; k < PACKS; ++k) {
      const int e0 = first_of(k);
      uint32_t w[kPackWords], out[kPackWords];
      dy_pack(k, w);
#pragma unroll
      for (int i = 0; i < kPackWords; ++i) out[i] = word_grad<T>(a[k][i], w[i], s);
      if (whole(k)) {
        *reinterpret_cast<uint4*>(dxr + e0) = make_uint4(out[0], out[1], out[2], out[3]);
      } else {
#pragma unroll
        for (int i = 0; i < kPackWords; ++i) store_element_word<T>(dxr, e0, i, out[i], [&](int e) { return in(k, e); });
      }
    }
  }
  exchange_finish(row_index, c);
}

bool rows_aligned(const RowsGradArgs& a) {
  const int64_t bytes = elem_bytes(a.dtype);
  return rows_on_boundaries(a.y, a.y_row_stride, bytes) && rows_on_boundaries(a.dy, a.dy_row_stride, bytes) &&
         rows_on_boundaries(a.dx, a.dx_row_stride, bytes);
}

template <typename T, int THREADS, int PACKS, bool DY_SHARED>
cudaError_t launch(const RowsGradArgs& a, int cluster, bool persistent, cudaStream_t stream) {
  constexpr int K = kPack<T>;
  const bool aligned = rows_aligned(a);
  const int64_t slice_packs = slice_packs_of(a.cols, K, !aligned, cluster);
  if (slice_packs > THREADS * PACKS) return cudaErrorInvalidValue;  // the slice must fit the registers
  const auto args = [&](int, int64_t) {
    return std::make_tuple(static_cast<const T*>(a.y), static_cast<const T*>(a.dy), static_cast<T*>(a.dx), a.rows,
                           static_cast<int>(a.cols), a.y_row_stride, a.dy_row_stride, a.dx_row_stride,
                           static_cast<int>(slice_packs));
  };
  constexpr int smem = DY_SHARED ? THREADS * PACKS * kVecBytes : 0;
  return aligned ? launch_clusters(softmax_backward_cluster_kernel<T, THREADS, PACKS, true, DY_SHARED>, cluster,
                                   THREADS, smem, a.rows, persistent, stream, args)
                 : launch_clusters(softmax_backward_cluster_kernel<T, THREADS, PACKS, false, DY_SHARED>, cluster,
                                   THREADS, smem, a.rows, persistent, stream, args);
}

cudaError_t launch_shape(const RowsGradArgs& a, int shape, int cluster, bool persistent, cudaStream_t stream) {
  if (shape < 0 || shape >= kShapeCount || cluster < 1 || cluster > kMaxCluster) return cudaErrorInvalidValue;
  return dispatch_dtype(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return dispatch_index<kShapeCount>(shape, [&](auto i) {
      constexpr BackwardShape s = kShapes[decltype(i)::value];
      return launch<T, s.threads, s.packs, s.dy_shared != 0>(a, cluster, persistent, stream);
    });
  });
}

}  // namespace

int64_t softmax_backward_cluster_max_cols(DType dtype) {
  return dtype == DType::kFloat32 ? kMaxCols32 : kMaxCols16;
}

ClusterPlan softmax_backward_cluster_plan(int64_t cols, DType dtype, bool aligned) {
  const int pack = kVecBytes / elem_bytes(dtype);
  const int64_t longest = aligned ? cols : cols + pack - 1;  // a shifted row is up to a pack less one element longer
  const auto pick = [longest](const auto& plan) {
    for (const PlanEntry& e : plan) {
      if (longest <= e.max_cols) return ClusterPlan{e.shape, e.cluster, e.persistent, StaggerPlan{}};
    }
    return ClusterPlan{kStreamingShape, 1, true, StaggerPlan{}};  // two_pass
  };
  return dtype == DType::kFloat32 ? pick(kPlan32) : pick(kPlan16);
}

int softmax_backward_cluster_shapes(const int** flat) {
  static_assert(sizeof(BackwardShape) == 3 * sizeof(int), "the shapes read as triples of ints");
  *flat = reinterpret_cast<const int*>(kShapes);
  return kShapeCount;
}

cudaError_t softmax_backward_cluster_with(const RowsGradArgs& a, int shape, int cluster, bool persistent,
                                          cudaStream_t stream) {
  if (shape == kStreamingShape) return softmax_backward_two_pass(a, stream);
  return launch_shape(a, shape, cluster, persistent, stream);
}

cudaError_t softmax_backward_cluster(const RowsGradArgs& a, cudaStream_t stream) {
  const ClusterPlan plan = softmax_backward_cluster_plan(a.cols, a.dtype, rows_aligned(a));
  return softmax_backward_cluster_with(a, plan.shape, plan.cluster, plan.persistent, stream);
}

}  // namespace lab
