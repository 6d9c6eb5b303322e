// cluster: a row split across a Hopper thread-block cluster, read from HBM once at any length.
// Tuned production kernel (cuda.cluster; cuda.auto's choice for long rows on sm_90+). Launch tables: kPlan32 and
// kPlan16 for rows on 16-byte boundaries, kShiftedPlan32 and kShiftedPlan16 for rows off them, by dtype and N (and
// M where an entry has min_rows). Measurements behind the tables: notebook/cluster-tuning/.
//
// Algorithm: the resident path of lab/cluster_rows.cuh (a row split over a cluster of 1 to 16 CTAs, held in
// registers, its (max, sum) exchanged once through distributed shared memory), writing y = softmax(x); that header
// says how rows are held, staged, shifted and exchanged.
// Streaming path: rows that do not fit (N past the plan's last entry: float32 512K elements, 16-bit 1M held
// packed, two to a register, in 16 CTAs of 512 x 128), and misaligned rows that cannot be shifted: the same
// cluster split, but each CTA sweeps its slice twice from global memory (online (m, d), then the write), the
// second read mostly from L2 because a slice was read moments before.
// HBM sweeps per row: 1 read of x, 1 write of y, whatever the row length: the bytes of a copy. Streaming path:
// 2 reads + 1 write.
// Launch: (threads, elements per thread, stages, packed) and the cluster size, persistent or one cluster per row,
// and the first wave's stagger, from the plan entry by dtype and N (and, for some N, by M: min_rows). Cluster
// sizes above 8 use the non-portable cluster size attribute.
// Limits: any rows (64-bit offsets), 1 <= N <= 2^31 - 1, any row strides; sm_90 or newer (the
// launcher returns cudaErrorInvalidDeviceFunction elsewhere, through the bindings' error).
// Why most entries launch one cluster per row: a persistent grid's fixed share of rows leaves a tail (256 rows on
// 28 resident clusters: 10 rounds where 9.14 would be even).
#include <algorithm>
#include <climits>
#include <cstdint>
#include <tuple>

#include "lab/check.cuh"
#include "lab/cluster_rows.cuh"
#include "lab/dispatch.cuh"
#include "lab/launch.h"
#include "lab/online.cuh"
#include "lab/reduce.cuh"
#include "lab/tune.h"

namespace lab {
namespace {

// The launch table by row length: the first entry whose max_cols covers the row (and whose min_rows the input
// reaches); rows longer than the last entry take the streaming path. Each entry is the shape, cluster size, grid
// (persistent or one cluster per row) and stagger that scripts/tune/tune_cluster.py, scripts/tune/stagger.py and A/B calls
// measured fastest at its longest row on the H200, in percent of a copy; kPlan16 was measured in bfloat16.
// Measurements behind this table: notebook/cluster-tuning/.
// Why:
// - float32 loads straight into registers (stages 0): they beat cp.async staging at every length (N = 262144:
//   90-94% of a copy against 80-83%). 16-bit rows are held packed instead (see the header).
// - An entry with min_rows > 0 applies only to inputs of at least that many rows and precedes the entry of the same
//   max_cols for fewer: with many rows a shape that needs fewer CTAs per row fills the GPU on its own (fewer states
//   to merge per row, fewer cluster placements lost). Between measured row counts the fewer-rows entry stays.
// - Entries between the powers of two (12288, 40960, 24576, ...): a shape chosen at its longest row leaves each
//   CTA's slice partly empty at shorter rows (float32 20480 over 8 CTAs of 256 x 16: 74% of a copy; over 5, full:
//   97.1%), so such lengths get a shape filled on their cluster size.
// - Decode-time rows (a few rows of a vocabulary: fewer than kFewRows, or than an entry's min_rows): where the entry
//   for many rows spreads each row over few CTAs, a few rows keep few SMs busy, so their entries spread each row
//   wider. 32000: 8 CTAs of 128 x 32 held as floats, staged two rows ahead, 1.08-1.16x the 4 packed CTAs
//   (notebook/decode-rows/). The others from every launch at 1 to 64 rows (128256: 16 to 64) timed in 5 interleaved
//   rounds with the copy on the H200 (notebook/decode-table-in-rounds/; against the table's launch before, its stagger
//   included): 128256 over 16 CTAs of 256 x 32 held as floats on a persistent grid, 1.03/1.05/1.11x at 16/32/64
//   bfloat16 rows (float16 1.14x at 64), level at 1 to 8 (one cluster a row, notebook/decode-rows/); 16-bit 256000 and
//   float32 151936 over 16 CTAs of 256 x 64 held as floats on a persistent grid up to 63 rows, level at 1 to 16 rows,
//   1.17x and 1.12x at 32, where at 64 the staggered entries for many rows stay ahead (1.02x, 1.03x); float32 256000
//   the same up to 31 rows, 1.03-1.09x at 1 to 16, where at 32 the staggered entry stays ahead (1.07x). A persistent
//   grid launches one cluster a row while the rows fit at once, more rows looping, the next row staged ahead.
// - A stagger only where measured to help (see Stagger): one CTA per row lost with every stagger tried.
// Where the entries for many rows start at 32767 and 131072 elements (the decode entries take fewer): the decode
// sweep's most rows (64, DECODE_ROWS in lab/inputs.py) rounded up to a power of two (tests/test_gpu.py). The other
// entries for many rows start where measured (min_rows 32 to 4096).
constexpr int64_t kFewRows = 128;

struct PlanEntry {
  int64_t max_cols;
  int shape;  // index into kResidentShapes
  int cluster;
  bool persistent;
  int64_t min_rows = 0;
  StaggerPlan stagger{};  // the first wave's start (see Stagger): none unless measured to help
};
constexpr PlanEntry kPlan32[] = {  // float32
    {2048, 12, 1, true},
    {4096, 12, 1, false},
    {8192, 14, 1, false},
    {12288, 14, 2, false, 0, {4, 250}},
    {16384, 13, 4, false, 0, {4, 250}},
    {32768, 12, 8, false, 0, {4, 500}},
    {40960, 12, 12, false, 0, {4, 500}},
    {65536, 12, 16, false, 0, {4, 500}},
    {81920, 16, 5, false, 0, {4, 500}},
    {98304, 16, 6, false, 0, {4, 500}},
    {114688, 16, 7, false, 0, {4, 500}},
    {131072, 16, 8, false, 0, {4, 500}},
    {196608, 32, 12, false, 64, {6, 1000}},
    {196608, 6, 16, true},
    {262144, 32, 16, false, 32, {6, 1000}},
    {262144, 6, 16, true},
    {524288, 17, 16, false},
};
constexpr PlanEntry kPlan16[] = {  // float16, bfloat16 (measured in bfloat16)
    {4096, 0, 1, true},
    {8192, 18, 1, false},
    {16384, 18, 2, false},
    {24576, 18, 3, false},
    {28671, 26, 1, false},
    {32767, 18, 4, false, kFewRows, {4, 500}},
    {32767, 1, 8, false},
    {32768, 21, 2, false, 1024, {4, 500}},
    {32768, 18, 4, false, 0, {4, 500}},
    {40960, 18, 5, false, 0, {4, 500}},
    {49152, 18, 6, false, 0, {4, 500}},
    {57344, 18, 7, false, 0, {4, 500}},
    {65535, 18, 8, false, 0, {4, 500}},
    {65536, 33, 8, false, 4096, {4, 500}},
    {65536, 18, 8, false, 0, {4, 500}},
    {98304, 31, 6, false, 0, {6, 1000}},
    {131072, 26, 4, false, kFewRows, {6, 1000}},
    {131072, 4, 16, true},
    {163840, 31, 10, false, 0, {6, 1000}},
    {262144, 31, 16, false, 64, {6, 1000}},
    {262144, 6, 16, true},
    {524288, 23, 16, false},
    {1048576, 29, 16, false},
};

// Every entry's slice fits its shape: max_cols / cluster elements in threads x elems registers;
// float32 (sixteen_bit false) takes no packed shape.
// An entry for many rows (min_rows > 0) is followed by the entry of the same max_cols for any rows.
template <size_t N>
constexpr bool plan_fits(const PlanEntry (&plan)[N], bool sixteen_bit) {
  for (size_t i = 0; i < N; ++i) {
    const PlanEntry& e = plan[i];
    const ResidentShape& s = kResidentShapes[e.shape];
    if ((s.packed || s.one_row) && !sixteen_bit) return false;
    if (s.one_row && e.persistent) return false;
    if (e.cluster > kMaxCluster || e.max_cols > int64_t{e.cluster} * s.threads * s.elems) return false;
    if (e.min_rows > 0 && (i + 1 == N || plan[i + 1].max_cols != e.max_cols || plan[i + 1].min_rows != 0)) return false;
  }
  return true;
}
static_assert(plan_fits(kPlan32, false) && plan_fits(kPlan16, true),
              "a plan entry's slice exceeds its shape's registers, float32 names a packed or one-row shape, or a "
              "persistent entry names a one-row shape");

// Shifted rows (rows off 16-byte boundaries, e.g. a contiguous input of odd N: SHIFTED, below) have launch tables
// of their own, by N: data, generated by scripts/tune/make_shifted_plan.py from scripts/tune/tune_cluster.py --shape at 5 odd
// lengths per octave (2^(k-1) + 1, 5, 6 and 7 eighths of 2^k, plus one, and 2^k - 1; 4096 rows up to 65537, fewer
// beyond): each length's entry is the configuration measured fastest there among those within 90% of the best at
// the length below (the entry's shortest rows), a shape that loads straight into registers, or the streaming path
// (kStreamingShape). Rows longer than the last entry stream. float16 takes bfloat16's, as in the aligned tables.
// Why tables of their own: on the aligned table's plan of N (one more CTA where the shifted row crosses an entry's
// end) shifted rows ran 20-35% behind the best configuration at many lengths (notebook/cluster-tuning/).
constexpr PlanEntry kShiftedPlan32[] = {  // float32
    {2049, 12, 1, false},  // 128x32 c1n
    {2561, 12, 1, true},  // 128x32 c1p
    {3585, 12, 1, false},  // 128x32 c1n
    {6145, 14, 1, false},  // 256x32 c1n
    {7169, 12, 2, false},  // 128x32 c2n
    {10241, 12, 3, false},  // 128x32 c3n
    {14337, 12, 4, false},  // 128x32 c4n
    {20481, 12, 6, false},  // 128x32 c6n
    {32001, 12, 8, false},  // 128x32 c8n
    {32769, 32, 3, false},  // 128x128 c3n
    {40961, 12, 12, false},  // 128x32 c12n
    {50257, 14, 8, false},  // 256x32 c8n
    {57345, 12, 16, false},  // 128x32 c16n
    {81921, 32, 6, false},  // 128x128 c6n
    {98305, 32, 8, false},  // 128x128 c8n
    {114689, 14, 16, false},  // 256x32 c16n
    {131071, 16, 9, false},  // 512x32 c9n
    {131073, 32, 12, true},  // 128x128 c12p
    {163841, 32, 12, false},  // 128x128 c12n
    {229377, 32, 16, false},  // 128x128 c16n
    {262145, kStreamingShape, 1, true},  // streaming
    {327681, 17, 12, true},  // 512x64 c12p
    {393217, 17, 16, true},  // 512x64 c16p
    {458753, 17, 16, false},  // 512x64 c16n
    {524287, kStreamingShape, 1, true},  // streaming
};
constexpr PlanEntry kShiftedPlan16[] = {  // float16, bfloat16 (measured in bfloat16)
    {4097, 18, 1, false},  // 128x64P c1n
    {5121, 18, 1, true},  // 128x64P c1p
    {7169, 18, 1, false},  // 128x64P c1n
    {8191, 20, 1, true},  // 256x64P c1p
    {14337, 20, 1, false},  // 256x64P c1n
    {20481, 18, 3, false},  // 128x64P c3n
    {28673, 26, 1, false},  // 512x64P c1n
    {32001, 18, 4, false},  // 128x64P c4n
    {32769, 18, 6, false},  // 128x64P c6n
    {40961, 31, 3, false},  // 128x128P c3n
    {57345, 26, 2, false},  // 512x64P c2n
    {65535, 18, 9, false},  // 128x64P c9n
    {65537, 20, 6, false},  // 256x64P c6n
    {81921, 31, 6, false},  // 128x128P c6n
    {98305, 20, 8, false},  // 256x64P c8n
    {114689, 31, 8, false},  // 128x128P c8n
    {131071, 26, 5, false},  // 512x64P c5n
    {131073, 31, 12, false},  // 128x128P c12n
    {163841, 20, 12, false},  // 256x64P c12n
    {196609, 20, 16, false},  // 256x64P c16n
    {229377, 31, 16, false},  // 128x128P c16n
    {327681, kStreamingShape, 1, true},  // streaming
    {458753, 26, 16, false},  // 512x64P c16n
    {524287, kStreamingShape, 1, true},  // streaming
};


// Every entry of a shifted table loads straight into registers (or streams) and holds its longest shifted row,
// max_cols + pack - 1 elements, in the shape's registers of `cluster` CTAs, as launch_resident checks.
template <size_t N>
constexpr bool shifted_plan_fits(const PlanEntry (&plan)[N], int pack, bool sixteen_bit) {
  for (size_t i = 0; i < N; ++i) {
    const PlanEntry& e = plan[i];
    if (i > 0 && plan[i - 1].max_cols >= e.max_cols) return false;
    if (e.min_rows != 0) return false;
    if (e.shape == kStreamingShape) continue;
    const ResidentShape& s = kResidentShapes[e.shape];
    if (s.stages != 0 || s.one_row || (s.packed && !sixteen_bit) || e.cluster < 1 || e.cluster > kMaxCluster) return false;
    if (slice_packs_of(e.max_cols, pack, true, e.cluster) > int64_t{s.threads} * s.elems / pack) return false;
  }
  return true;
}
static_assert(shifted_plan_fits(kShiftedPlan32, 4, false) && shifted_plan_fits(kShiftedPlan16, 8, true),
              "a shifted plan entry stages, exceeds its shape's registers, or float32 names a packed shape");

// --- the streaming path: rows beyond the registers of 16 CTAs, or misaligned rows ----------------

constexpr int kStreamThreads = 512;
constexpr int kStreamUnroll = 4;  // 4 x 16 bytes in flight per thread in each sweep

template <typename T>
__global__ void __launch_bounds__(kStreamThreads, 1)
    cluster_streaming_softmax_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int cols,
                                     int64_t x_stride, int64_t y_stride, int slice_cols) {
  __shared__ Exchange ex;
  cg::cluster_group cluster = cg::this_cluster();
  const int c = static_cast<int>(cluster.num_blocks());
  const int c0 = static_cast<int>(cluster.block_rank()) * slice_cols;
  const int n = max(0, min(slice_cols, cols - c0));
  exchange_arrive(ex, c);
  int row_index = 0;
  for (int64_t row = blockIdx.x / c; row < rows; row += gridDim.x / c, ++row_index) {
    const T* xr = x + row * x_stride + c0;
    T* yr = y + row * y_stride + c0;
    MaxSum s = MaxSumMerge::identity();
    row_for_each<kStreamThreads, kStreamUnroll>(xr, n, [&](const auto& v) { s = absorb(s, v); });
    s = exchange_row<kStreamThreads / kWarpSize>(s, ex, row_index, c, cluster.block_rank());
    const float m = s.m;
    const float inv_d = 1.0f / s.d;
    row_transform<kStreamThreads, kStreamUnroll>(xr, yr, n, [&](float e) { return fast_exp(e - m) * inv_d; });
  }
  exchange_finish(row_index, c);
}

// --- launch ---------------------------------------------------------------------------------------

// The streaming path's cluster: enough CTAs that each slice is at most 64K elements, 16 at most.
int streaming_cluster(int64_t cols) {
  constexpr int64_t kSliceTarget = 65536;
  return static_cast<int>(std::clamp<int64_t>((cols + kSliceTarget - 1) / kSliceTarget, 1, kMaxCluster));
}

// The plan of the streaming path for rows of `cols` elements.
ClusterPlan streaming_plan(int64_t cols) {
  return ClusterPlan{kStreamingShape, streaming_cluster(cols), true, StaggerPlan{}};
}

// Whether two plans split a row the same way: the same shape over as many CTAs (the streaming path: kStreamingShape).
bool same_split(const ClusterPlan& a, const ClusterPlan& b) { return a.shape == b.shape && a.cluster == b.cluster; }

// Slices are whole packs, so that every CTA's slice starts as aligned as the row does.
template <typename T>
cudaError_t launch_streaming(const RowsArgs& a, cudaStream_t stream) {
  const int cluster = streaming_cluster(a.cols);
  constexpr int K = kPack<T>;
  const int64_t slice = ((a.cols + cluster - 1) / cluster + K - 1) / K * K;
  return launch_clusters(cluster_streaming_softmax_kernel<T>, cluster, kStreamThreads, 0, a.rows, true, stream,
                         [&](int, int64_t) {
                           return std::make_tuple(static_cast<const T*>(a.x), static_cast<T*>(a.y), a.rows,
                                                  static_cast<int>(a.cols), a.x_row_stride, a.y_row_stride,
                                                  static_cast<int>(slice));
                         });
}


// shifted: the rows are not 16-byte aligned but shiftable; only the shapes that load straight into
// registers (stages 0) take them (cudaErrorInvalidValue for the others).
template <typename T>
cudaError_t launch_resident_index(const RowsArgs& a, int index, int cluster, bool persistent, StaggerPlan stagger,
                                  bool shifted, cudaStream_t stream) {
  return dispatch_resident_shape(index, [&](auto i) {
    constexpr ResidentShape s = kResidentShapes[decltype(i)::value];
    if constexpr ((s.packed || s.one_row) && sizeof(T) != 2) {
      return cudaErrorInvalidValue;  // packed and one-row shapes are compiled for 16-bit dtypes only
    } else if constexpr (s.one_row) {
      if (shifted) return cudaErrorInvalidValue;
      return launch_resident<T, s.threads, s.elems, s.stages, s.packed, false, true>(a, cluster, persistent, stagger,
                                                                                    stream);
    } else if constexpr (s.stages == 0) {
      return shifted ? launch_resident<T, s.threads, s.elems, 0, s.packed, true>(a, cluster, persistent, stagger, stream)
                     : launch_resident<T, s.threads, s.elems, 0, s.packed, false>(a, cluster, persistent, stagger, stream);
    } else {
      if (shifted) return cudaErrorInvalidValue;
      return launch_resident<T, s.threads, s.elems, s.stages, s.packed, false>(a, cluster, persistent, stagger, stream);
    }
  });
}

}  // namespace

int cluster_resident_shapes(const ResidentShape** shapes) {
  *shapes = kResidentShapes;
  return kResidentShapeCount;
}

ClusterPlan cluster_plan(int64_t cols, int64_t rows, DType dtype, bool aligned) {
  const ClusterPlan streaming = streaming_plan(cols);
  const auto pick = [rows, &streaming](const auto& plan, int64_t n) {
    for (const PlanEntry& e : plan) {
      if (n <= e.max_cols && rows >= e.min_rows) return ClusterPlan{e.shape, e.cluster, e.persistent, e.stagger};
    }
    return streaming;
  };
  const auto plan_of = [&](int64_t n) { return dtype == DType::kFloat32 ? pick(kPlan32, n) : pick(kPlan16, n); };
  if (aligned) return plan_of(cols);
  // Shifted rows: their own tables (kShiftedPlan32, kShiftedPlan16), whose entries may name the streaming path.
  const ClusterPlan plan = dtype == DType::kFloat32 ? pick(kShiftedPlan32, cols) : pick(kShiftedPlan16, cols);
  return plan.shape == kStreamingShape ? streaming : plan;
}

ClusterSpan cluster_plan_span(int64_t cols, DType dtype, bool aligned) {
  const auto span = [cols](const auto& plan) {
    int64_t first = 1;
    for (const PlanEntry& e : plan) {
      if (cols <= e.max_cols) return ClusterSpan{first, e.max_cols};
      first = e.max_cols + 1;  // an entry for many rows shares its max_cols with the entry after it
    }
    return ClusterSpan{first, INT64_MAX};
  };
  if (aligned) return dtype == DType::kFloat32 ? span(kPlan32) : span(kPlan16);
  return dtype == DType::kFloat32 ? span(kShiftedPlan32) : span(kShiftedPlan16);
}

namespace {
// The plan softmax_cluster launches `a` with: cluster_plan's for aligned or shiftable rows, else the streaming path.
ClusterPlan plan_for(const RowsArgs& a) {
  const bool aligned = rows_aligned(a);
  return aligned || rows_shiftable(a) ? cluster_plan(a.cols, a.rows, a.dtype, aligned) : streaming_plan(a.cols);
}

// How shifted rows of `cols` elements are taken (`plan`, their own table's) against aligned rows of that length:
// streamed, or within a pack of the end of N's entry in the aligned table (the shifted row, up to a pack less one
// element longer, would not fit N's aligned split), else neither.
ClusterDetour detour_of(const ClusterPlan& plan, int64_t cols, int64_t rows, DType dtype) {
  if (plan.shape == kStreamingShape) return ClusterDetour::kStreaming;
  const int pack = kVecBytes / elem_bytes(dtype);
  const bool crosses = !same_split(cluster_plan(cols, rows, dtype, true), cluster_plan(cols + pack - 1, rows, dtype, true));
  return crosses ? ClusterDetour::kCrossing : ClusterDetour::kNone;
}
}  // namespace

ClusterDetour cluster_detour(int64_t cols, int64_t rows, DType dtype, bool aligned) {
  if (aligned) return ClusterDetour::kNone;
  return detour_of(cluster_plan(cols, rows, dtype, false), cols, rows, dtype);
}

ClusterDetour cluster_detour(const RowsArgs& a) {
  if (rows_aligned(a)) return ClusterDetour::kNone;
  return detour_of(plan_for(a), a.cols, a.rows, a.dtype);
}

cudaError_t softmax_cluster(const RowsArgs& a, cudaStream_t stream) {
  const ClusterPlan plan = plan_for(a);
  return dispatch_dtype(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (plan.shape < 0) return launch_streaming<T>(a, stream);
    return launch_resident_index<T>(a, plan.shape, plan.cluster, plan.persistent, plan.stagger, !rows_aligned(a),
                                    stream);
  });
}

cudaError_t softmax_cluster_with(const RowsArgs& a, int shape, int cluster, bool persistent, StaggerPlan stagger,
                                 cudaStream_t stream) {
  if (shape == kStreamingShape) {  // the streaming path, its own cluster size: the others are not used
    return dispatch_dtype(a.dtype, [&](auto tag) { return launch_streaming<typename decltype(tag)::type>(a, stream); });
  }
  const bool aligned = rows_aligned(a);
  if (shape < 0 || shape >= kResidentShapeCount || cluster < 1 || cluster > kMaxCluster ||
      (!aligned && !rows_shiftable(a))) {
    return cudaErrorInvalidValue;
  }
  return dispatch_dtype(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return launch_resident_index<T>(a, shape, cluster, persistent, stagger, !aligned, stream);
  });
}

}  // namespace lab
