// cluster: a row split across a Hopper thread-block cluster, read from HBM once at any length.
// Tuned production kernel (cuda.cluster; cuda.auto's choice for long rows on sm_90+). Launch tables: kPlan32 and
// kPlan16 for rows on 16-byte boundaries, kShiftedPlan32 and kShiftedPlan16 for rows off them, by dtype and N (and
// M where an entry has min_rows). Measurements behind the tables: notebook/cluster-tuning/.
//
// Algorithm: a cluster of C CTAs (1 to 16) owns a row; CTA r of the cluster owns the r-th of C
// equal slices (whole 16-byte packs). Each thread copies its packs of the slice into shared memory
// with cp.async (or loads them straight into registers: stages 0), moves them to registers as float32,
// and reduces them to its own online state (m_t, d_t = sum exp(x - m_t)), keeping the exponentials in
// registers. Each warp reduces its threads' states, and the warps' states are exchanged once per row through
// distributed shared memory (each warp sends its (m, d) into a slot of every CTA of the cluster with st.async,
// which completes on that CTA's mbarrier; no cluster barrier per row, see exchange_row); every warp
// merges the received states into the row's (M, D), and each thread writes
// y = e * exp(m_t - M) / D from its registers. One exponential per element.
// Persistent entries: the grid holds as many clusters as can be resident (cudaOccupancyMaxActiveClusters)
// and each loops over rows. A thread's packs live in its own shared-memory slots, so as soon as it
// has moved a row into registers it starts the copy of a later row into the same slots (STAGES
// rows ahead): the next rows are in flight while this one is reduced, exchanged and written.
// Other entries: one cluster per row; the hardware hands out rows as clusters retire.
// Packed 16-bit shapes (`packed`; float16 and bfloat16 only): each thread holds its slice as the 16-byte packs
// it loaded, 8 elements in 4 registers instead of 8 float32 registers, so a CTA holds twice the row per register
// (and twice the bytes in flight with direct loads). The max is taken pairwise in 16 bits (__hmax2, exact, NaN
// skipped like fmaxf), the exp-sum converts each element to float32 on the fly and keeps nothing, and the write
// recomputes y = exp(x - M) / D from the packs: two exponentials per element instead of one.
// Shifted rows: rows whose starts are not 16-byte aligned (odd N, e.g. a 50257-element vocabulary: row r of a
// contiguous tensor starts r * N elements in) are split from the 16-byte boundary below their start, as
// rows of up to a pack less one element more (SHIFTED), where y's rows are as far past a boundary as x's,
// the plan loads straight into registers and the longest shifted row is within the same plan entry: the
// same one read and one write (see cluster_plan).
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
// Why:
// - Packed 16-bit rows, two exponentials per element: a copy-speed bfloat16 softmax moves 4 bytes per element, so
//   at the H200's ~4.3 TB/s copy it needs ~1.1e12 elements/s, ~2.2e12 ex2/s; the MUFU unit issues 16 ex2 per clock
//   per SM, 132 x 16 x 1.98 GHz = 4.2e12/s (3.7e12 at 1.755 GHz): about half to 60% of it, with the FP32 work
//   (~10 operations per element, 128 per clock per SM) at about a third. Packed won by 1 to 5 points of a copy
//   from N = 8192 to 131072 on the H200.
// - Most entries launch one cluster per row: a persistent grid's fixed share of rows leaves a tail (256 rows on 28
//   resident clusters: 10 rounds where 9.14 would be even).
// NaN and -inf: a NaN makes D NaN, hence the whole row; an all -inf row has M = -inf and x - M = NaN, as in
// torch; slots past the row hold -inf.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <tuple>
#include <type_traits>

#include <cooperative_groups.h>
#include <math_constants.h>

#include "lab/async_copy.cuh"
#include "lab/check.cuh"
#include "lab/tune.h"
#include "lab/dispatch.cuh"
#include "lab/exp.cuh"
#include "lab/launch.h"
#include "lab/online.cuh"
#include "lab/reduce.cuh"
#include "lab/vec.cuh"

namespace cg = cooperative_groups;

namespace lab {
namespace {

constexpr int kMaxCluster = 16;  // the largest cluster Hopper launches (non-portable above 8)

// The resident path's CTA shapes (threads, elements of row data per thread, rows staged ahead,
// packed). A float shape holds its elements as float32 registers and is compiled for every dtype;
// a packed one holds them as the 16-bit packs loaded, two per register, and is compiled for
// float16 and bfloat16 only (a float32 launch of it is refused). kPlan32 and kPlan16 pick among
// them; new shapes go at the end, since the plans name shapes by index.
// Stages 0: no staging, the row is loaded straight into registers (no prefetch of later rows).
constexpr ResidentShape kResidentShapes[] = {
    {128, 32, 1}, {128, 32, 2}, {256, 16, 1}, {256, 16, 2}, {256, 32, 1}, {256, 32, 2},
    {256, 64, 1}, {256, 64, 2}, {512, 32, 1}, {512, 32, 2}, {512, 64, 1}, {512, 64, 2},
    {128, 32, 0}, {256, 16, 0}, {256, 32, 0}, {256, 64, 0}, {512, 32, 0}, {512, 64, 0},
    // Packed, 16-bit only: 32 or 64 registers of row data hold 64 or 128 elements. At most 128 KiB
    // of 16-bit staging per CTA (the 227 KiB limit).
    {128, 64, 0, true},  {128, 64, 2, true},  {256, 64, 0, true},  {256, 64, 1, true},
    {256, 64, 2, true},  {256, 128, 0, true}, {256, 128, 1, true}, {256, 128, 2, true},
    {512, 64, 0, true},  {512, 64, 1, true},  {512, 64, 2, true},  {512, 128, 0, true},
    {512, 128, 1, true},
    // 128 threads holding 128 elements: a 16384-element slice (a 262144-element row over 16 CTAs) in
    // smaller CTAs than 256 x 64, more of them resident per SM (see the plans).
    {128, 128, 0, true}, {128, 128, 0},
    // Packed and staged one row ahead in 128-thread CTAs: the staging QuACK's kernel uses (cp.async into shared memory,
    // then registers), in the CTA shapes the plan takes from N = 32768 up.
    {128, 64, 1, true}, {128, 128, 1, true},
    // 256 threads holding 40 or 48 elements packed, loaded straight or staged: QuACK's CTA for 16-bit rows of
    // 20480 to 196608 elements (10240 or 12288 a CTA over 2 to 16), where those rows fill no power-of-two shape.
    {256, 40, 0, true}, {256, 40, 1, true}, {256, 48, 0, true}, {256, 48, 1, true},
    // One row per CTA (one_row: no row loop, one cluster per row only), 16-bit elements held as floats after a
    // cp.async copy into shared memory: QuACK's registers and staging for 16-bit slices of 8192 and 16384 elements,
    // one exponential per element, at the 80 registers that hold three 256-thread CTAs an SM (with the row loop
    // the float-held 256 x 64 shapes spilled 56-112 bytes there).
    {256, 64, 1, false, true}, {128, 64, 1, false, true},
};
constexpr int kResidentShapeCount = sizeof(kResidentShapes) / sizeof(ResidentShape);

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
// - A stagger only where measured to help (see Stagger): one CTA per row lost with every stagger tried.
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
    {196608, 32, 12, false, 0, {6, 1000}},
    {262144, 32, 16, false, 0, {6, 1000}},
    {524288, 17, 16, false},
};
constexpr PlanEntry kPlan16[] = {  // float16, bfloat16 (measured in bfloat16)
    {4096, 0, 1, true},
    {8192, 18, 1, false},
    {16384, 18, 2, false},
    {24576, 18, 3, false},
    {28671, 26, 1, false},
    {32767, 18, 4, false, 0, {4, 500}},
    {32768, 21, 2, false, 1024, {4, 500}},
    {32768, 18, 4, false, 0, {4, 500}},
    {40960, 18, 5, false, 0, {4, 500}},
    {49152, 18, 6, false, 0, {4, 500}},
    {57344, 18, 7, false, 0, {4, 500}},
    {65535, 18, 8, false, 0, {4, 500}},
    {65536, 33, 8, false, 4096, {4, 500}},
    {65536, 18, 8, false, 0, {4, 500}},
    {98304, 31, 6, false, 0, {6, 1000}},
    {131072, 26, 4, false, 0, {6, 1000}},
    {163840, 31, 10, false, 0, {6, 1000}},
    {262144, 31, 16, false, 0, {6, 1000}},
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

// The 16-byte packs of each CTA's slice of a row of `cols` elements split over `cluster` CTAs (whole packs per
// slice); a shifted row (SHIFTED) is up to a pack less one element longer. launch_resident refuses a slice of more
// packs than the shape's registers hold.
constexpr int64_t slice_packs_of(int64_t cols, int pack, bool shifted, int cluster) {
  const int64_t row_packs = (cols + (shifted ? pack - 1 : 0) + pack - 1) / pack;
  return (row_packs + cluster - 1) / cluster;
}

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

// The value of v, which the compiler may not assume it knows: conditions on it are evaluated where
// they are used instead of being hoisted out of the row loop and kept live in registers.
__device__ __forceinline__ int opaque(int v) {
  asm volatile("mov.b32 %0, %0;" : "+r"(v));
  return v;
}

// --- the exchange: every warp's (m, d) to every CTA of the cluster, once per row ------------------
//
// Each warp reduces its threads' states, then lane r of every warp stores the warp's state into
// CTA r's slots with st.async, which completes on CTA r's mbarrier (counting bytes). A CTA waits on
// its own mbarrier for all warps x cluster states, then each warp merges them. No CTA or cluster
// barrier per row, no fence on the global stores in flight: a CTA waits only for the bytes it needs.
// Two slot sets and mbarriers alternate by row parity. Reuse is safe: a warp sends row i + 2's state
// only after its wait for row i + 1 returned, which needs every warp of every CTA to have sent row
// i + 1's state, which each does only after it read row i's slots.

constexpr int kMaxWarps = 16;  // 512 threads

__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

struct Exchange {
  uint64_t bar[2];
  MaxSum slots[2][kMaxCluster * kMaxWarps];  // [parity][rank * warps + warp]
};

// The mbarriers must be set up, and visible to the cluster, before any peer sends to them: a cluster
// barrier, split in two so that its latency hides behind the first row's loads. exchange_arrive,
// before the row loop, by every thread: set up this CTA's mbarriers and arrive. exchange_row's first
// row waits, before its first send (cluster_wait). A cluster of one CTA has no peers and skips both.
// No barrier is needed at the end either: the only accesses to a CTA's shared memory from its peers
// are their sends into its slots, and each CTA's last row waits until all of them have landed, so
// none is in flight when it exits (a CTA without rows, which the launchers never make, waits on
// the barrier at the end instead).
__device__ __forceinline__ void exchange_arrive(Exchange& ex, int c) {
  if (c == 1) return;
  if (threadIdx.x == 0) {
    for (int p = 0; p < 2; ++p) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(&ex.bar[p])));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  // Relaxed: the only writes the peers must see are the mbarrier inits, which their fence releases
  // (the pattern CUTLASS uses for its cluster pipelines). A .release arrive made every thread wait for
  // a full memory barrier (ERRBAR), 12.6% of the stall samples of a launch of one cluster per row (ncu).
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }

// The row's state from this thread's state: warp reduction, exchange, merge. `row_index` counts
// the rows this CTA has done (it picks the slot set and the mbarrier phase).
template <int WARPS>
__device__ __forceinline__ MaxSum exchange_row(MaxSum thread_state, Exchange& ex, int row_index, int c,
                                               unsigned rank) {
  constexpr int kStates = WARPS * kMaxCluster;
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int parity = row_index & 1;
  const unsigned phase = static_cast<unsigned>(row_index >> 1) & 1u;
  const MaxSum w = warp_state(thread_state);
  if (c == 1) {
    // One CTA: no distributed shared memory (compute-sanitizer rejects st.async::cluster in a
    // cluster of one block). The warps' states meet in this CTA's slots behind one barrier; the
    // parity double-buffering makes that one barrier per row enough, as for the mbarriers.
    if (lane == 0) ex.slots[parity][warp] = w;
    __syncthreads();
    MaxSum s = lane < WARPS ? ex.slots[parity][lane] : MaxSumMerge::identity();
    return warp_state(s);
  }
  if (row_index == 0) cluster_wait();  // every peer's mbarriers are set up (exchange_arrive)
  const unsigned bar = smem_u32(&ex.bar[parity]);
  if (threadIdx.x == 0) {  // this CTA expects warps x cluster states of 8 bytes
    asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;" ::"r"(bar),
                 "r"(static_cast<unsigned>(WARPS * c * sizeof(MaxSum)))
                 : "memory");
  }
  if (lane < c) {
    unsigned slot = smem_u32(&ex.slots[parity][rank * WARPS + warp]);
    unsigned peer_bar = bar;
    asm volatile("mapa.shared::cluster.u32 %0, %0, %1;" : "+r"(slot) : "r"(lane));
    asm volatile("mapa.shared::cluster.u32 %0, %0, %1;" : "+r"(peer_bar) : "r"(lane));
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];" ::"r"(slot),
                 "f"(w.m), "f"(w.d), "r"(peer_bar)
                 : "memory");
  }
  unsigned done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(bar), "r"(phase)
        : "memory");
  } while (!done);
  // Each lane merges the states i = lane, lane + 32, ... of the WARPS x c received.
  const int n = WARPS * c;
  MaxSum s = MaxSumMerge::identity();
#pragma unroll
  for (int i = 0; i < (kStates + kWarpSize - 1) / kWarpSize; ++i) {
    const int k = lane + i * kWarpSize;
    if (k < n) s = MaxSumMerge{}(s, ex.slots[parity][k]);
  }
  return warp_state(s);
}

// After the row loop: a CTA that did no row still owes the cluster barrier its wait.
__device__ __forceinline__ void exchange_finish(int rows_done, int c) {
  if (rows_done == 0 && c > 1) cluster_wait();
}

// --- the first wave's stagger ---------------------------------------------------------------------
//
// A launch of one cluster per row starts as many clusters as fit at once, and they all issue their
// loads in the same microsecond: every CTA's last pack lands at about the same time, when the whole
// first wave has been read, and HBM writes nothing until then; the next waves start as CTAs retire,
// less and less in step. With the first wave's clusters started in `groups` groups `cycles` apart
// (cluster r of the first wave waits (r mod groups) x cycles, on the SM's clock), the first groups'
// rows are reduced and written while the later groups' are still being read. At 256x262144 that is
// most of the fixed cost that held the plan under 95% of a copy: with 6 groups 1 us apart, bfloat16
// 91.0 -> 95.3%, float32 93.9 -> 96.2 (the plans' values; measurements: notebook/cluster-tuning/).
// Only the first wave waits: later clusters start when earlier ones retire, already out of step. And
// only where there are rows enough for a wave: below that (fewer rows than resident clusters) every
// measured launch lost with the stagger (bfloat16 8x262144 73.2 -> 50.8% of a copy), from a wave up every
// one gained (bfloat16 35x262144, the 35 clusters resident, 78.4 -> 87.1).
struct Stagger {
  int64_t first_wave = 0;  // clusters started at once: those with a first row below it may wait
  int groups = 1;
  int64_t cycles = 0;      // SM clock cycles between groups
};

__device__ __forceinline__ void stagger_start(const Stagger& s, int64_t first_row) {
  if (s.cycles <= 0 || first_row >= s.first_wave) return;
  const int g = static_cast<int>(first_row % s.groups);
  if (g == 0) return;
  const long long until = clock64() + g * s.cycles;
  while (clock64() < until) __nanosleep(100);
}

// --- the resident path: the CTA's slice held in registers ----------------------------------------

// Registers of row data per thread: ELEMS floats, or ELEMS 16-bit elements two to a register.
template <typename T, int ELEMS, bool PACKED>
constexpr int kDataRegisters = PACKED ? ELEMS * static_cast<int>(sizeof(T)) / 4 : ELEMS;

// Registers asked of __launch_bounds__: the row data plus about 40 for addresses, loop state and the reductions,
// so that ptxas neither spills nor caps residency lower than needed. 32 for the shapes that stage nothing: with
// 40, float32-register 512 x 32 took 65 registers and one CTA per SM instead of 64 and two, a third slower; at 32
// the packed unstaged shapes fit one more CTA per SM (256 x 64: 4 instead of 3) with no spills.
// A one-row kernel keeps no loop state: 16 registers besides the row data (80 at 64 floats, three 256-thread CTAs an
// SM, as QuACK's kernel runs them). ptxas fits bfloat16's one-row shapes there without spilling, not float16's (8-16
// bytes of spills at 80 registers): float16's keep the usual allowance of 40 besides the row data (85 registers,
// two 256-thread CTAs an SM).
template <int THREADS, int REGS, bool LEAN, bool ONE_ROW = false>
constexpr int kResidentMinBlocks =
    std::max(1, 65536 / (THREADS * (REGS + (ONE_ROW ? 16 : LEAN ? 32 : 40))));

// PACKED (16-bit T only): the thread's fragment is the packs as loaded, kPackWords words each
// (see the header comment); else ELEMS floats.
// SHIFTED (direct loads only): rows whose starts need not be 16-byte aligned (odd N: row r of a
// contiguous tensor starts r * N elements in), y's rows as far from a 16-byte boundary as x's. Each row's
// packs are counted from the boundary at or below its start, h = (start mod 16 bytes) elements before
// it: the row is the elements [h, h + N) of a "shifted" row of h + N, whose packs are split across the
// cluster as an aligned row's are. Whole packs move as 16-byte loads and stores; the first (where h > 0)
// and the last (where it is partial) element by element, -inf in the fragment outside the row. One read
// and one write per element, as for aligned rows, where the streaming path read each row twice.
// ONE_ROW: each CTA does the row blockIdx.x / cluster only (a grid of one cluster per row), with no row loop and
// nothing fetched ahead.
template <typename T, int THREADS, int ELEMS, int STAGES, bool PACKED, bool SHIFTED = false, bool ONE_ROW = false>
__global__ void __launch_bounds__(THREADS,
                                  (kResidentMinBlocks<THREADS, kDataRegisters<T, ELEMS, PACKED>, STAGES == 0,
                                                      ONE_ROW && std::is_same_v<T, __nv_bfloat16>>))
    cluster_resident_softmax_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int cols,
                                    int64_t x_stride, int64_t y_stride, int slice_packs, Stagger stagger) {
  constexpr int K = kPack<T>;
  constexpr int PACKS = ELEMS / K;
  static_assert(PACKS * K == ELEMS, "whole 16-byte packs per thread");
  static_assert(!PACKED || sizeof(T) == 2, "the packed fragment holds 16-bit elements");
  static_assert(!SHIFTED || STAGES == 0, "shifted rows are loaded straight into registers");
  static_assert(!ONE_ROW || STAGES <= 1, "a one-row kernel stages its one row at most");
  using Fragment = std::conditional_t<PACKED, uint32_t[PACKS][kPackWords], float[PACKS][K]>;
  constexpr int kWarps = THREADS / kWarpSize;
  static_assert(kWarps <= kMaxWarps, "the exchange has slots for kMaxWarps warps per CTA");
  __shared__ Exchange ex;
  // [STAGES][PACKS][THREADS] packs: each thread's own slots (one untyped buffer for all instances).
  extern __shared__ __align__(kVecBytes) unsigned char dynamic_smem[];
  Pack<T>* staged = reinterpret_cast<Pack<T>*>(dynamic_smem);

  cg::cluster_group cluster = cg::this_cluster();
  const int c = static_cast<int>(cluster.num_blocks());
  const int64_t first_row = blockIdx.x / c;
  const int64_t row_step = gridDim.x / c;
  stagger_start(stagger, first_row);
  const int row_packs = (cols + K - 1) / K;
  const int p0 = static_cast<int>(cluster.block_rank()) * slice_packs;  // this CTA's first pack
  const int p1 = min(p0 + slice_packs, row_packs);
  const int tid = threadIdx.x;
  // This thread's packs are p0 + tid + k * THREADS for k < PACKS: neighbouring threads copy
  // neighbouring 16 bytes. The first `held` of them are in the row; only the row's last pack can
  // be partial. Each thread reads back only the slots it filled itself, so its own
  // cp.async.wait_group is all the synchronization the staging needs.
  const int held = p1 > p0 + tid ? min(PACKS, (p1 - p0 - tid + THREADS - 1) / THREADS) : 0;
  const int tail = cols % K;  // elements in the row's partial last pack, 0 if it is whole
  Pack<T>* const mine = staged + tid;
  // The slots of packs past the row hold -inf for good (no copy ever lands there), so the loads
  // below need no predicate: -inf leaves the max as it is and adds exp(-inf) = 0 to the sum.
  Pack<T> minus_inf;
#pragma unroll
  for (int j = 0; j < K; ++j) minus_inf.v[j] = from_float<T>(-CUDART_INF_F);
  for (int i = held; i < PACKS; ++i) {
    for (int s = 0; s < STAGES; ++s) mine[(s * PACKS + i) * THREADS] = minus_inf;
  }
  // The owner of a partial last pack sets its zero-filled tail to -inf after each copy lands.
  const int tail_k = tail != 0 && held > 0 && p0 + tid + (held - 1) * THREADS == row_packs - 1 ? held - 1 : -1;

  const auto fetch = [&](int64_t row, int stage) {
    if constexpr (STAGES == 0) return;  // no staging: the row is loaded straight into registers
    if (row < rows) {
      const T* xr = x + row * x_stride + int64_t{p0 + tid} * K;
      // Re-read per row: per-pack predicates hoisted out of the row loop would each hold a register.
      const int n = opaque(held), tk = opaque(tail_k);
#pragma unroll
      for (int k = 0; k < PACKS; ++k) {
        if (k < n) {
          // One form for every pack (a branch to the whole-pack form cost two float32 kernels 8 bytes of spills).
          const int bytes = k == tk ? tail * static_cast<int>(sizeof(T)) : kVecBytes;
          cp_async_16_partial(&mine[(stage * PACKS + k) * THREADS], xr + int64_t{k} * THREADS * K, bytes);
        }
      }
    }
    cp_async_commit();  // one group per row, empty past the last row: the wait count stays uniform
  };
  // A pack of the fragment from its 16 bytes, taken by value: one 16-byte load from shared or
  // global memory at the call.
  const auto hold = [](Fragment& v, int k, const Pack<T> pk) {
    if constexpr (PACKED) {
      const uint4 q = *reinterpret_cast<const uint4*>(&pk);
      v[k][0] = q.x, v[k][1] = q.y, v[k][2] = q.z, v[k][3] = q.w;
    } else {
#pragma unroll
      for (int j = 0; j < K; ++j) v[k][j] = to_float(pk.v[j]);
    }
  };
  // STAGES = 0: 16-byte loads straight into registers, all in flight before the first use.
  const auto load_direct = [&](int64_t row, Fragment& v) {
    const T* xr = x + row * x_stride + int64_t{p0 + tid} * K;
    const int n = opaque(held), tk = opaque(tail_k);
#pragma unroll
    for (int k = 0; k < PACKS; ++k) {
      const T* src = xr + int64_t{k} * THREADS * K;
      if (k < n && k != tk) {
        hold(v, k, *reinterpret_cast<const Pack<T>*>(src));
      } else if constexpr (PACKED) {  // the partial last pack element by element, -inf past the row
        const uint16_t* bits = reinterpret_cast<const uint16_t*>(src);
        const int have = k == tk ? tail : 0;
#pragma unroll
        for (int i = 0; i < kPackWords; ++i) {
          const uint32_t lo = 2 * i < have ? bits[2 * i] : PairOf<T>::kMinusInf;
          const uint32_t hi = 2 * i + 1 < have ? bits[2 * i + 1] : PairOf<T>::kMinusInf;
          v[k][i] = lo | hi << 16;
        }
      } else {
#pragma unroll
        for (int j = 0; j < K; ++j) v[k][j] = k == tk && j < tail ? to_float(src[j]) : -CUDART_INF_F;
      }
    }
  };

  // SHIFTED: the row's elements before the boundary (h) and this thread's packs of its shifted row
  // (held_shifted); pack k is whole when it lies within [h, h + cols), else it is moved element by element.
  const auto shift_of = [](const T* row_start) {
    return static_cast<int>(reinterpret_cast<uintptr_t>(row_start) % kVecBytes / sizeof(T));
  };
  const auto held_shifted = [&](int h) {
    const int rp = (h + cols + K - 1) / K;  // packs of the shifted row
    const int last = min(p0 + slice_packs, rp);
    return last > p0 + tid ? min(PACKS, (last - p0 - tid + THREADS - 1) / THREADS) : 0;
  };
  const auto whole_shifted = [&](int h, int n, int k) {
    const int e = (p0 + tid + k * THREADS) * K;  // the pack's first element in the shifted row
    return k < n && e >= h && e + K <= h + cols;
  };
  // The shifted row's base (16-byte aligned) is xs; element e of it is in the row when h <= e < h + cols.
  const auto load_shifted = [&](const T* xs, int h, Fragment& v) {
    const int n = held_shifted(h);
#pragma unroll
    for (int k = 0; k < PACKS; ++k) {
      const int e = (p0 + tid + k * THREADS) * K;
      const T* src = xs + e;
      if (whole_shifted(h, n, k)) {
        hold(v, k, *reinterpret_cast<const Pack<T>*>(src));
      } else if constexpr (PACKED) {
        const uint16_t* bits = reinterpret_cast<const uint16_t*>(src);
#pragma unroll
        for (int i = 0; i < kPackWords; ++i) {
          const int j = e + 2 * i;
          const uint32_t lo = k < n && j >= h && j < h + cols ? bits[2 * i] : PairOf<T>::kMinusInf;
          const uint32_t hi = k < n && j + 1 >= h && j + 1 < h + cols ? bits[2 * i + 1] : PairOf<T>::kMinusInf;
          v[k][i] = lo | hi << 16;
        }
      } else {
#pragma unroll
        for (int j = 0; j < K; ++j) v[k][j] = k < n && e + j >= h && e + j < h + cols ? to_float(src[j]) : -CUDART_INF_F;
      }
    }
  };

#pragma unroll
  for (int s = 0; s < STAGES; ++s) fetch(first_row + s * row_step, s);
  exchange_arrive(ex, c);  // after the first rows' copies are issued: the barrier waits behind them

  int stage = 0;
  int row_index = 0;
  for (int64_t row = first_row; row < rows; row = ONE_ROW ? rows : row + row_step, ++row_index) {
    Fragment v;
    // SHIFTED: the row's h, and its shifted row's bases in x and y (y's rows are as far from a boundary).
    int h = 0;
    const T* xs = x + row * x_stride;
    T* ys = y + row * y_stride;
    if constexpr (SHIFTED) {
      h = shift_of(xs);
      xs -= h;
      ys -= h;
      load_shifted(xs, h, v);
    } else if constexpr (STAGES == 0) {
      load_direct(row, v);
    } else {
      cp_async_wait<STAGES - 1>();  // this row's group has landed; later rows may be in flight
      if (tail_k >= 0) {
        T* last = mine[(stage * PACKS + tail_k) * THREADS].v;
        for (int j = tail; j < K; ++j) last[j] = from_float<T>(-CUDART_INF_F);
      }
#pragma unroll
      for (int k = 0; k < PACKS; ++k) hold(v, k, mine[(stage * PACKS + k) * THREADS]);
    }
    float m;
    if constexpr (PACKED) {
      m = fragment_max<T>(v);
    } else {
      m = fragment_max(v);
    }
    // The slots' values are in registers now (the max used them all): refill them with a later row.
    if constexpr (!ONE_ROW) {
      fetch(row + STAGES * row_step, stage);
      stage = stage + 1 >= STAGES ? 0 : stage + 1;
    }

    // Exponentials relative to this thread's max; a thread that saw only -inf (or NaN, which
    // fmaxf skips) uses 0, so -inf gives 0 and NaN stays NaN and poisons d.
    const float shift = m == -CUDART_INF_F ? 0.0f : m;
    float d;
    if constexpr (PACKED) {
      d = fragment_exp_sum<T>(v, shift);  // the fragment keeps the inputs
    } else {
      d = fragment_exp_sum(v, shift);  // the fragment now holds the exponentials
    }
    const MaxSum total = exchange_row<kWarps>(MaxSum{m, d}, ex, row_index, c, cluster.block_rank());

    T* yr = ys + int64_t{p0 + tid} * K;
    const int n = SHIFTED ? held_shifted(h) : opaque(held), tk = opaque(tail_k);
    // Pack k's 16 bytes stored whole, or element j of it where `in` (the row's last pack; SHIFTED, also its first).
    const auto whole_out = [&](int k) { return SHIFTED ? whole_shifted(h, n, k) : k != tk; };
    const auto in = [&](int k, int j) {
      const int e = (p0 + tid + k * THREADS) * K + j;
      return SHIFTED ? e >= h && e < h + cols : j < tail;
    };
    if constexpr (PACKED) {
      // y = exp(x - M) / D, recomputed from the inputs. A NaN anywhere in the row made D NaN, so
      // the whole row is NaN; an all -inf row has M = -inf, and x - M = NaN, as in torch; a -inf
      // element of any other row gives exp(-inf) = 0.
      // bfloat16: 2^((x - M) log2 e - log2 D), the division folded into the exponent (one FFMA and one
      // ex2 per element after the subtraction, where the float16 form takes FMUL, ex2 and FMUL), the
      // elements converted by permutes (see bfloat16_word_to_float2_by_permute: with word_to_float2 here
      // ptxas spilled). float16 keeps the multiply: its conversion has no second form that ptxas keeps
      // apart from the exp-sum's.
      // Where |M| <= kFoldMax (exp.cuh) the subtraction folds into the FFMA as well: 2^(x log2 e - c),
      // c = M log2 e + log2 D, one FFMA and one ex2 per element (bfloat16); the loop is compiled for
      // both forms and the row takes one (M is the row's: no divergence).
      const float inv_d = 1.0f / total.d;
      const float log2_d = fast_log2(total.d);
      const float c = total.m * kLog2e + log2_d;
      const auto write = [&](auto fold) {
#pragma unroll
        for (int k = 0; k < PACKS; ++k) {
          if (k >= n) continue;
          uint32_t out[kPackWords];
#pragma unroll
          for (int i = 0; i < kPackWords; ++i) {
            if constexpr (std::is_same_v<T, __nv_bfloat16>) {
              const float2 f = bfloat16_word_to_float2_by_permute(v[k][i]);
              if constexpr (decltype(fold)::value) {
                out[i] = float2_to_word<T>(fast_exp2_fma(f.x, c), fast_exp2_fma(f.y, c));
              } else {
                out[i] = float2_to_word<T>(fast_exp_over(f.x - total.m, log2_d), fast_exp_over(f.y - total.m, log2_d));
              }
            } else {
              const float2 f = word_to_float2<T>(v[k][i]);
              out[i] = float2_to_word<T>(fast_exp(f.x - total.m) * inv_d, fast_exp(f.y - total.m) * inv_d);
            }
          }
          T* dst = yr + k * THREADS * K;
          if (whole_out(k)) {
            *reinterpret_cast<uint4*>(dst) = make_uint4(out[0], out[1], out[2], out[3]);
          } else {
            uint16_t* bits = reinterpret_cast<uint16_t*>(dst);
#pragma unroll
            for (int j = 0; j < K; ++j) {
              if (in(k, j)) bits[j] = static_cast<uint16_t>(out[j / 2] >> (16 * (j % 2)));
            }
          }
        }
      };
      if (std::is_same_v<T, __nv_bfloat16> && foldable(total.m)) {
        write(std::true_type{});
      } else {
        write(std::false_type{});
      }
    } else {
      // y = e * exp(m_t - M) / D. A thread with m_t = -inf holds zeros (or NaN): its factor is 0 / D,
      // which is 0, or NaN when the whole row is -inf (D = 0) as in torch.
      const float factor = (m == -CUDART_INF_F ? 0.0f : fast_exp(m - total.m)) / total.d;
#pragma unroll
      for (int k = 0; k < PACKS; ++k) {
        if (k >= n) continue;
        Pack<T> out;
#pragma unroll
        for (int j = 0; j < K; ++j) out.v[j] = from_float<T>(v[k][j] * factor);
        if (whole_out(k)) {
          *reinterpret_cast<Pack<T>*>(yr + k * THREADS * K) = out;
        } else if constexpr (SHIFTED) {
#pragma unroll
          for (int j = 0; j < K; ++j) {
            if (in(k, j)) yr[k * THREADS * K + j] = out.v[j];
          }
        } else {
          for (int j = 0; j < tail; ++j) yr[k * THREADS * K + j] = out.v[j];
        }
      }
    }
  }
  if constexpr (STAGES > 0) cp_async_wait<0>();  // no copy may land in shared memory after the CTA has exited
  exchange_finish(row_index, c);
}

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

// The clusters of a launch configuration that can be resident at once on the current device: the
// kernel's attributes set and cudaOccupancyMaxActiveClusters asked once per (kernel, device, cluster
// size, threads, shared memory), then remembered (remembered_per_device).
template <typename Kernel>
cudaError_t resident_clusters(Kernel kernel, int cluster, int smem, const cudaLaunchConfig_t& config, int* resident) {
  return remembered_per_device(
      std::make_tuple(reinterpret_cast<const void*>(kernel), cluster, config.blockDim.x, smem),
      [&](int* v) {
        LAB_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        if (cluster > 8) LAB_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
        return cudaOccupancyMaxActiveClusters(v, kernel, &config);
      },
      resident);
}

// make_args(resident clusters, clusters launched) gives the kernel's arguments as a tuple.
template <typename Kernel, typename MakeArgs>
cudaError_t launch_clusters(Kernel kernel, int cluster, int threads, int smem, int64_t rows, bool persistent,
                            cudaStream_t stream, MakeArgs make_args) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = static_cast<unsigned>(cluster);
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(cluster));
  config.blockDim = dim3(static_cast<unsigned>(threads));
  config.dynamicSmemBytes = static_cast<size_t>(smem);
  config.stream = stream;
  config.attrs = &attr;
  config.numAttrs = 1;
  // Persistent grid: as many clusters as fit at once, each looping over rows (never more than
  // the rows); else one cluster per row (up to the grid's limit). A shape that cannot be resident
  // at all is refused rather than launched.
  int resident = 0;
  LAB_CUDA_TRY(resident_clusters(kernel, cluster, smem, config, &resident));
  if (resident < 1) return cudaErrorInvalidConfiguration;
  const int64_t clusters = std::min<int64_t>(rows, persistent ? resident : INT_MAX / cluster);
  config.gridDim = dim3(static_cast<unsigned>(clusters * cluster));
  LAB_CUDA_TRY(std::apply([&](auto... args) { return cudaLaunchKernelEx(&config, kernel, args...); },
                          make_args(resident, clusters)));
  return cudaSuccess;
}

bool rows_aligned(const RowsArgs& a) {
  const int64_t bytes = elem_bytes(a.dtype);
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % kVecBytes == 0; };
  return aligned(a.x) && aligned(a.y) && (a.x_row_stride * bytes) % kVecBytes == 0 &&
         (a.y_row_stride * bytes) % kVecBytes == 0;
}

// Rows the resident path takes shifted (SHIFTED): every row of y as far past a 16-byte boundary as x's
// row, so that one split of the shifted row moves whole packs of both (odd N of a contiguous x and its
// output, e.g.). The rows' starts are at least element-aligned, as a tensor's are.
bool rows_shiftable(const RowsArgs& a) {
  const int64_t bytes = elem_bytes(a.dtype);
  const auto elem_aligned = [bytes](const void* p) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; };
  const auto apart = reinterpret_cast<uintptr_t>(a.x) - reinterpret_cast<uintptr_t>(a.y);
  return elem_aligned(a.x) && elem_aligned(a.y) && apart % kVecBytes == 0 &&
         ((a.x_row_stride - a.y_row_stride) * bytes) % kVecBytes == 0;
}

// The SM clock's peak rate in kHz on the current device (the stagger's unit), asked once per device.
cudaError_t clock_khz(int* khz) {
  return remembered_per_device(std::make_tuple(0), [](int* v) {
    int device = 0;
    LAB_CUDA_TRY(cudaGetDevice(&device));
    return cudaDeviceGetAttribute(v, cudaDevAttrClockRate, device);
  }, khz);
}

// SHIFTED: rows not 16-byte aligned (shiftable), each split as its shifted row of up to K - 1 more elements.
// ONE_ROW: one cluster per row only (a persistent launch is refused), every row in the one grid.
template <typename T, int THREADS, int ELEMS, int STAGES, bool PACKED, bool SHIFTED, bool ONE_ROW = false>
cudaError_t launch_resident(const RowsArgs& a, int cluster, bool persistent, StaggerPlan stagger,
                            cudaStream_t stream) {
  if (ONE_ROW && (persistent || a.rows > INT_MAX / cluster)) return cudaErrorInvalidValue;
  constexpr int K = kPack<T>;
  const int slice_packs = static_cast<int>(slice_packs_of(a.cols, K, SHIFTED, cluster));  // an int kernel argument
  if (slice_packs > THREADS * (ELEMS / K)) return cudaErrorInvalidValue;  // the slice must fit the registers
  const int smem = STAGES * THREADS * ELEMS * static_cast<int>(sizeof(T));
  if (stagger.groups < 1 || stagger.step_ns < 0) return cudaErrorInvalidValue;
  int khz = 0;
  if (stagger.groups > 1 && stagger.step_ns > 0) LAB_CUDA_TRY(clock_khz(&khz));
  return launch_clusters(
      cluster_resident_softmax_kernel<T, THREADS, ELEMS, STAGES, PACKED, SHIFTED, ONE_ROW>, cluster, THREADS, smem, a.rows,
      persistent,
      stream, [&](int resident, int64_t clusters) {
        // Only a launch of a wave or more: with fewer rows than resident clusters the stagger only
        // delays (bfloat16 8x262144: 73.2 -> 50.8% of a copy staggered).
        const int64_t first_wave = clusters >= resident ? resident : 0;
        const Stagger s{first_wave, stagger.groups, int64_t{stagger.step_ns} * khz / 1000000};
        return std::make_tuple(static_cast<const T*>(a.x), static_cast<T*>(a.y), a.rows, static_cast<int>(a.cols),
                               a.x_row_stride, a.y_row_stride, slice_packs, s);
      });
}

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

// Calls f(shape-index constant) for the resident shape `index`: only the table's shapes are compiled.
template <int I = 0, typename F>
cudaError_t dispatch_resident_shape(int index, F&& f) {
  if constexpr (I == kResidentShapeCount) {
    return cudaErrorInvalidValue;
  } else {
    if (index == I) return f(std::integral_constant<int, I>{});
    return dispatch_resident_shape<I + 1>(index, f);
  }
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
