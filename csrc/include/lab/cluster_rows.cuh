// The row-split cluster machinery: a row split across a Hopper thread-block cluster, held in registers, read from
// HBM once and written once. Shared by softmax's cluster variant (csrc/softmax/cluster.cu, which holds the launch
// tables that pick a shape per row length, the streaming path and the softmax entries) and cross-entropy's
// (csrc/cross_entropy/cluster.cu, LOSS: the same rows written as the loss's gradient, with the loss per row).
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
// same one read and one write (see cluster_plan, tune.h).
// HBM sweeps per row: 1 read of x, 1 write of y, whatever the row length: the bytes of a copy.
// Why:
// - Packed 16-bit rows, two exponentials per element: a copy-speed bfloat16 softmax moves 4 bytes per element, so
//   at the H200's ~4.3 TB/s copy it needs ~1.1e12 elements/s, ~2.2e12 ex2/s; the MUFU unit issues 16 ex2 per clock
//   per SM, 132 x 16 x 1.98 GHz = 4.2e12/s (3.7e12 at 1.755 GHz): about half to 60% of it, with the FP32 work
//   (~10 operations per element, 128 per clock per SM) at about a third. Packed won by 1 to 5 points of a copy
//   from N = 8192 to 131072 on the H200.
// NaN and -inf: a NaN makes D NaN, hence the whole row; an all -inf row has M = -inf and x - M = NaN, as in
// torch; slots past the row hold -inf.
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>
#include <tuple>
#include <type_traits>

#include <cooperative_groups.h>
#include <math_constants.h>

#include "lab/async_copy.cuh"
#include "lab/check.cuh"
#include "lab/dispatch.cuh"
#include "lab/exp.cuh"
#include "lab/launch.h"
#include "lab/online.cuh"
#include "lab/reduce.cuh"
#include "lab/tune.h"
#include "lab/vec.cuh"

namespace lab {
namespace {

namespace cg = cooperative_groups;

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

// The 16-byte packs of each CTA's slice of a row of `cols` elements split over `cluster` CTAs (whole packs per
// slice); a shifted row (SHIFTED) is up to a pack less one element longer. launch_resident refuses a slice of more
// packs than the shape's registers hold.
constexpr int64_t slice_packs_of(int64_t cols, int pack, bool shifted, int cluster) {
  const int64_t row_packs = (cols + (shifted ? pack - 1 : 0) + pack - 1) / pack;
  return (row_packs + cluster - 1) / cluster;
}

// The value of v, which the compiler may not assume it knows: conditions on it are evaluated where
// they are used instead of being hoisted out of the row loop and kept live in registers.
__device__ __forceinline__ int opaque(int v) {
  asm volatile("mov.b32 %0, %0;" : "+r"(v));
  return v;
}

// --- the exchange: every warp's state to every CTA of the cluster, once per row -----------------
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

// What the exchange carries, per Rule: a State (8 bytes at most), the warp's state from its threads' (warp), the
// state of several (fold, identity), and the st.async that sends one into a peer's slot (send).
// MaxSumRule: softmax's online (m, d). SumRule: a plain float sum (the backward's sum(dy * y) over the row).
struct MaxSumRule {
  using State = MaxSum;
  __device__ __forceinline__ static MaxSum warp(MaxSum s) { return warp_state(s); }
  __device__ __forceinline__ static MaxSum identity() { return MaxSumMerge::identity(); }
  // The max first, then one exponential a state and no branch (a merge of two at a time took two exponentials and a
  // branch each). Where the max is -inf every state holds only -inf (d = 0) or a NaN (d = NaN): shifted by 0,
  // d * exp(-inf) adds 0 or NaN, as the states' sum would; a NaN d stays NaN in any row, as in MaxSumMerge.
  // The states slots[first + i * step] for i < N where that index is below n (n >= 1; a lane may have none), read
  // twice from shared memory rather than held between the passes (held, they spilled a one-row kernel). Past n a
  // lane reads state 0 instead, which leaves the row's max as it is and is not added: no branch.
  template <int N>
  __device__ __forceinline__ static MaxSum fold(const volatile MaxSum* slots, int first, int step, int n) {
    float m = -CUDART_INF_F;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const int k = first + i * step;
      m = fmaxf(m, slots[k < n ? k : 0].m);
    }
    const float shift = m == -CUDART_INF_F ? 0.0f : m;
    float d = 0.0f;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const int k = first + i * step;
      const int at = k < n ? k : 0;
      const float term = slots[at].d * fast_exp(slots[at].m - shift);
      d += k < n ? term : 0.0f;
    }
    return {m, d};
  }
  __device__ __forceinline__ static void send(unsigned slot, unsigned peer_bar, MaxSum s) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];" ::"r"(slot),
                 "f"(s.m), "f"(s.d), "r"(peer_bar)
                 : "memory");
  }
};
struct SumRule {
  using State = float;
  __device__ __forceinline__ static float warp(float s) { return warp_allreduce(s, SumOp{}); }
  __device__ __forceinline__ static float identity() { return 0.0f; }
  template <int N>
  __device__ __forceinline__ static float fold(const volatile float* slots, int first, int step, int n) {
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const int k = first + i * step;
      const float term = slots[k < n ? k : 0];
      sum += k < n ? term : 0.0f;
    }
    return sum;
  }
  __device__ __forceinline__ static void send(unsigned slot, unsigned peer_bar, float s) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(slot),
                 "r"(__float_as_uint(s)), "r"(peer_bar)
                 : "memory");
  }
};

template <typename State>
struct ExchangeOf {
  uint64_t bar[2];
  State slots[2][kMaxCluster * kMaxWarps];  // [parity][rank * warps + warp]
};
using Exchange = ExchangeOf<MaxSum>;

// The mbarriers must be set up, and visible to the cluster, before any peer sends to them: a cluster
// barrier, split in two so that its latency hides behind the first row's loads. exchange_arrive,
// before the row loop, by every thread: set up this CTA's mbarriers and arrive. exchange_row's first
// row waits, before its first send (cluster_wait). A cluster of one CTA has no peers and skips both.
// No barrier is needed at the end either: the only accesses to a CTA's shared memory from its peers
// are their sends into its slots, and each CTA's last row waits until all of them have landed, so
// none is in flight when it exits (a CTA without rows, which the launchers never make, waits on
// the barrier at the end instead).
template <typename State>
__device__ __forceinline__ void exchange_arrive(ExchangeOf<State>& ex, int c) {
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
// This CTA's cluster in the grid (%clusterid.x) and the grid's clusters (%nclusterid.x), for a grid of clusters along x.
__device__ __forceinline__ unsigned cluster_index() {
  unsigned v;
  asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(v));
  return v;
}
__device__ __forceinline__ unsigned cluster_count() {
  unsigned v;
  asm volatile("mov.u32 %0, %%nclusterid.x;" : "=r"(v));
  return v;
}
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }

// The row's state from this thread's state: warp reduction, exchange, merge. `row_index` counts
// the rows this CTA has done (it picks the slot set and the mbarrier phase).
template <int WARPS, typename Rule = MaxSumRule, typename State = typename Rule::State>
__device__ __forceinline__ State exchange_row(State thread_state, ExchangeOf<State>& ex, int row_index, int c,
                                              unsigned rank) {
  static_assert(sizeof(State) <= 8, "a state is sent by one st.async");
  constexpr int kStates = WARPS * kMaxCluster;
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int parity = row_index & 1;
  const unsigned phase = static_cast<unsigned>(row_index >> 1) & 1u;
  const State w = Rule::warp(thread_state);
  if (c == 1) {
    // One CTA: no distributed shared memory (compute-sanitizer rejects st.async::cluster in a
    // cluster of one block). The warps' states meet in this CTA's slots behind one barrier; the
    // parity double-buffering makes that one barrier per row enough, as for the mbarriers.
    if (lane == 0) ex.slots[parity][warp] = w;
    __syncthreads();
    State s = lane < WARPS ? ex.slots[parity][lane] : Rule::identity();
    return Rule::warp(s);
  }
  if (row_index == 0) cluster_wait();  // every peer's mbarriers are set up (exchange_arrive)
  const unsigned bar = smem_u32(&ex.bar[parity]);
  if (threadIdx.x == 0) {  // this CTA expects warps x cluster states
    asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;" ::"r"(bar),
                 "r"(static_cast<unsigned>(WARPS * c * sizeof(State)))
                 : "memory");
  }
  if (lane < c) {
    unsigned slot = smem_u32(&ex.slots[parity][rank * WARPS + warp]);
    unsigned peer_bar = bar;
    asm volatile("mapa.shared::cluster.u32 %0, %0, %1;" : "+r"(slot) : "r"(lane));
    asm volatile("mapa.shared::cluster.u32 %0, %0, %1;" : "+r"(peer_bar) : "r"(lane));
    Rule::send(slot, peer_bar, w);
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
  // Each lane folds the states i = lane, lane + 32, ... of the WARPS x c received.
  return Rule::warp(Rule::template fold<(kStates + kWarpSize - 1) / kWarpSize>(ex.slots[parity], lane, kWarpSize,
                                                                                WARPS * c));
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

// LOSS kernels' per-row inputs and outputs (cross-entropy, as CrossEntropyArgs: launch.h); not read otherwise.
struct LossRows {
  const int64_t* target = nullptr;
  const float* weight = nullptr;  // null: every class weighs 1
  const float* scale = nullptr;   // the reduction's factor c, one float32 on the device (read with GRAD only)
  float* loss = nullptr;
  int64_t ignore_index = 0;
};

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
// A staged LOSS kernel (cross-entropy) keeps 48 besides the row data, a one-row one too: with 40, ptxas spilled 8 bytes
// in bfloat16's 128 x 64 (one CTA fewer an SM: 6 of 128 threads at 80 registers); with 16, bfloat16's one-row 128 x 64
// spilled (24 bytes stored, 48 loaded).
template <int THREADS, int REGS, bool LEAN, bool ONE_ROW = false, bool LOSS = false>
constexpr int kResidentMinBlocks =
    std::max(1, 65536 / (THREADS * (REGS + (ONE_ROW && !LOSS ? 16 : LEAN ? 32 : LOSS ? 48 : 40))));

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
// LOSS: y is cross-entropy's gradient and `loss` the loss per row (LossRows), from the same (M, D): the softmax
// scaled by the row's factor c w_t, less c w_t at the target; the 16-bit exp-sum is never folded (EXACT in
// fragment_exp_sum: the loss is log D + M - x_t, and a confident row's loss is log D itself, D near 1). Its inputs are
// loaded while the row's loads are in
// flight (the target with them, the weight and the target's logit before the exchange), so that none waits on
// another. The 16-bit write folds |c w_t| into D (one more XOR a word where c w_t < 0), float32 multiplies it into
// its factor, and the thread that holds the target's pack writes the target's element again after its pack, and the
// row's loss. A row whose target is ignore_index writes zeros and loss 0, one outside [0, N) NaN; both still take
// part in the exchange, which counts rows.
// LOSS without GRAD: the loss alone (evaluation), one read of the row and nothing of its size written (y unused).
template <typename T, int THREADS, int ELEMS, int STAGES, bool PACKED, bool SHIFTED = false, bool ONE_ROW = false,
          bool LOSS = false, bool GRAD = true>
__global__ void __launch_bounds__(THREADS,
                                  (kResidentMinBlocks<THREADS, kDataRegisters<T, ELEMS, PACKED>, STAGES == 0,
                                                      ONE_ROW && std::is_same_v<T, __nv_bfloat16>, LOSS>))
    cluster_rows_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int cols, int64_t x_stride,
                        int64_t y_stride, int slice_packs, Stagger stagger, LossRows loss_rows) {
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
  // The cluster's index and count from the cluster's own registers (a division by c took some 40 instructions before
  // the first load; ncu), read by asm volatile: from __clusterIdx() and __clusterGridDimInClusters(), the same
  // registers, ptxas spilled 4 bytes in float32's 128 x 128 kernels of shifted rows.
  const int64_t first_row = cluster_index();
  const int64_t row_step = cluster_count();
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
  // The owner of a partial last pack sets its zero-filled tail to -inf after each copy lands.
  const int tail_k = tail != 0 && held > 0 && p0 + tid + (held - 1) * THREADS == row_packs - 1 ? held - 1 : -1;
  const int whole = tail_k >= 0 ? held - 1 : held;  // this thread's packs [0, whole) are whole

  // The row's packs into this thread's slots of `stage`: the whole ones by one predicated 16-byte copy each, from one
  // base address and one shared-memory address plus constants; the partial last pack, where this thread has it, by
  // one zero-filling copy after them. (One zero-filling form for every pack, its size chosen per pack, took about 19
  // instructions a pack and delayed a one-row launch's last load by 168 instructions a warp; ncu.)
  const unsigned my_slots = smem_u32(mine);
  const auto fetch = [&](int64_t row, int stage) {
    if constexpr (STAGES == 0) return;  // no staging: the row is loaded straight into registers
    if (row < rows) {
      const T* xr = x + row * x_stride + int64_t{p0 + tid} * K;
      // Re-read per row: per-pack predicates hoisted out of the row loop would each hold a register.
      const int n = opaque(whole);
      const unsigned slots = my_slots + static_cast<unsigned>(stage * PACKS * THREADS * kVecBytes);
#pragma unroll
      for (int k = 0; k < PACKS; ++k) {
        cp_async_16_if(slots + k * THREADS * kVecBytes, xr + int64_t{k} * THREADS * K, k < n);
      }
      const int tk = opaque(tail_k);
      if (tk >= 0) {
        cp_async_16_partial(&mine[(stage * PACKS + tk) * THREADS], xr + int64_t{tk} * THREADS * K,
                            tail * static_cast<int>(sizeof(T)));
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
  // The slots of packs past the row hold -inf for good (no copy ever lands there; filled after the first copies are
  // issued, which they do not touch), so the reads of the slots need no predicate: -inf leaves the max as it is and
  // adds exp(-inf) = 0 to the sum.
  Pack<T> minus_inf;
#pragma unroll
  for (int j = 0; j < K; ++j) minus_inf.v[j] = from_float<T>(-CUDART_INF_F);
  for (int i = held; i < PACKS; ++i) {
    for (int s = 0; s < STAGES; ++s) mine[(s * PACKS + i) * THREADS] = minus_inf;
  }

  int stage = 0;
  int row_index = 0;
  for (int64_t row = first_row; row < rows; row = ONE_ROW ? rows : row + row_step, ++row_index) {
    Fragment v;
    int64_t target = 0;
    if constexpr (LOSS) target = loss_rows.target[row];  // in flight with the row's loads, used after them
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
    // LOSS: the target's element of the shifted row (te), or kIgnored or kOutOfRange.
    constexpr int kIgnored = -1, kOutOfRange = -2;
    int te = 0;
    if constexpr (LOSS) {
      te = target == loss_rows.ignore_index ? kIgnored
           : target >= 0 && target < cols  ? h + static_cast<int>(target)
                                            : kOutOfRange;
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
      d = fragment_exp_sum<T, PACKS, KeepNone, LOSS>(v, shift);  // the fragment keeps the inputs; LOSS: exact
    } else {
      d = fragment_exp_sum(v, shift);  // the fragment now holds the exponentials
    }
    // LOSS: the reduction's factor, the target's weight and, by the thread that holds the target's pack, its logit,
    // loaded here to land during the exchange. As few values as can be are kept across it: the fragment is live all
    // the while.
    float s = 1.0f, w = 1.0f, target_logit = 0.0f;
    if constexpr (LOSS) {
      if (te >= 0) {
        if constexpr (GRAD) s = *loss_rows.scale;  // the loss alone has no factor (nor need it be written)
        if (loss_rows.weight != nullptr) w = loss_rows.weight[te - h];
        const int pack = te / K - p0;  // within this CTA's slice where in [0, slice_packs)
        if (pack >= 0 && pack < slice_packs && pack % THREADS == tid) target_logit = to_float(xs[te]);
      }
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
    float cw = 1.0f;  // LOSS: the row's factor c w_t
    // LOSS: where this thread holds the target, the target's element of dlogits (stored after the pack that holds
    // it, overwriting it) at yr + target_at; else target_at is -1.
    int target_at = -1;
    T target_grad{};
    if constexpr (LOSS) {
      if (te < 0) {  // the target is ignore_index (zeros, loss 0) or out of range (NaN), for the whole cluster
        const float fill = te == kIgnored ? 0.0f : CUDART_NAN_F;
        if (cluster.block_rank() == 0 && tid == 0) loss_rows.loss[row] = fill;
        if constexpr (!GRAD) continue;
        Pack<T> f;
#pragma unroll
        for (int j = 0; j < K; ++j) f.v[j] = from_float<T>(fill);
#pragma unroll
        for (int k = 0; k < PACKS; ++k) {
          if (k >= n) continue;
          if (whole_out(k)) {
            *reinterpret_cast<Pack<T>*>(yr + k * THREADS * K) = f;
          } else {
#pragma unroll
            for (int j = 0; j < K; ++j) {
              if (in(k, j)) yr[k * THREADS * K + j] = f.v[j];
            }
          }
        }
        continue;
      }
      cw = s * w;
      const int pack = te / K - p0;
      if (pack >= 0 && pack < slice_packs && pack % THREADS == tid) {
        target_at = te - (p0 + tid) * K;
        target_grad = from_float<T>(cw * (fast_exp(target_logit - total.m) * __fdividef(1.0f, total.d) - 1.0f));
        loss_rows.loss[row] = w * (logf(total.d) + (total.m - target_logit));
      }
      if constexpr (!GRAD) continue;  // the loss alone: nothing else of the row is written
    }
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
      // LOSS: |c w_t| folded into D, its sign put back by an XOR of the words' sign bits.
      const float dd = LOSS ? total.d * __fdividef(1.0f, fabsf(cw)) : total.d;
      const bool negate = LOSS && cw < 0.0f;
      const float inv_d = 1.0f / dd;
      const float log2_d = fast_log2(dd);
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
            if (negate) out[i] ^= 0x80008000u;
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
      float factor = (m == -CUDART_INF_F ? 0.0f : fast_exp(m - total.m)) / total.d;
      if constexpr (LOSS) factor *= cw;
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
    // After this thread's store of the target's pack: the later store is the one that stays.
    if constexpr (LOSS) {
      if (target_at >= 0) yr[target_at] = target_grad;
    }
  }
  if constexpr (STAGES > 0) cp_async_wait<0>();  // no copy may land in shared memory after the CTA has exited
  exchange_finish(row_index, c);
}

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

// Whether every row of a tensor starting at `p`, `stride` elements of `bytes` apart, starts on a 16-byte boundary.
bool rows_on_boundaries(const void* p, int64_t stride, int64_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % kVecBytes == 0 && (stride * bytes) % kVecBytes == 0;
}

bool rows_aligned(const RowsArgs& a) {
  const int64_t bytes = elem_bytes(a.dtype);
  return rows_on_boundaries(a.x, a.x_row_stride, bytes) && rows_on_boundaries(a.y, a.y_row_stride, bytes);
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
// LOSS: cross-entropy (a.y takes the gradient, unless !GRAD: the loss alone), with `loss_rows`.
template <typename T, int THREADS, int ELEMS, int STAGES, bool PACKED, bool SHIFTED, bool ONE_ROW = false,
          bool LOSS = false, bool GRAD = true>
cudaError_t launch_resident(const RowsArgs& a, int cluster, bool persistent, StaggerPlan stagger,
                            cudaStream_t stream, const LossRows& loss_rows = {}) {
  if (ONE_ROW && (persistent || a.rows > INT_MAX / cluster)) return cudaErrorInvalidValue;
  constexpr int K = kPack<T>;
  const int slice_packs = static_cast<int>(slice_packs_of(a.cols, K, SHIFTED, cluster));  // an int kernel argument
  if (slice_packs > THREADS * (ELEMS / K)) return cudaErrorInvalidValue;  // the slice must fit the registers
  const int smem = STAGES * THREADS * ELEMS * static_cast<int>(sizeof(T));
  if (stagger.groups < 1 || stagger.step_ns < 0) return cudaErrorInvalidValue;
  int khz = 0;
  if (stagger.groups > 1 && stagger.step_ns > 0) LAB_CUDA_TRY(clock_khz(&khz));
  return launch_clusters(
      cluster_rows_kernel<T, THREADS, ELEMS, STAGES, PACKED, SHIFTED, ONE_ROW, LOSS, GRAD>, cluster, THREADS, smem,
      a.rows, persistent, stream, [&](int resident, int64_t clusters) {
        // Only a launch of a wave or more: with fewer rows than resident clusters the stagger only
        // delays (bfloat16 8x262144: 73.2 -> 50.8% of a copy staggered).
        const int64_t first_wave = clusters >= resident ? resident : 0;
        const Stagger s{first_wave, stagger.groups, int64_t{stagger.step_ns} * khz / 1000000};
        return std::make_tuple(static_cast<const T*>(a.x), static_cast<T*>(a.y), a.rows, static_cast<int>(a.cols),
                               a.x_row_stride, a.y_row_stride, slice_packs, s, loss_rows);
      });
}

// Calls f(shape-index constant) for the resident shape `index`: only the table's shapes are compiled.
template <typename F>
cudaError_t dispatch_resident_shape(int index, F&& f) {
  return dispatch_index<kResidentShapeCount>(index, f);
}

}  // namespace
}  // namespace lab
