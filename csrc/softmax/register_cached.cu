// register_cached: each row read from HBM once and written once, held in registers in between.
// Tuned production kernel (cuda.register_cached; cuda.auto's default for rows of up to 8192 float32 / 2048 16-bit
// elements). Launch tables: kRowShapes32 (float32) and kRowShapes16 (float16, bfloat16), by N, each entry with a
// few-rows shape and lean shapes beside the table's own, taken by M. Measurements behind the tables:
// notebook/register-cached-tuning/.
//
// Algorithm: a group of THREADS_PER_ROW threads owns a row: 2 to 32 lanes of a warp for short
// rows (several rows per warp, so no lane idles), a whole block of 64 to 1024 threads for medium
// rows. Each thread loads its 8, 16 or 32 elements of the row as 16-byte packs, all loads in flight
// before the first use (16-bit rows of up to 2048 elements: cp.async copies to shared memory, then
// read back; the table's `staged`), and keeps them in registers: float32 as floats; float16 and bfloat16
// packed, as the words they were loaded in (two elements per register, so 32 elements take 16
// registers and a thread can keep 64 bytes in flight at 64 registers). The row max and the sum of
// exp are then reduced from those registers (16-bit: the max pairwise in 16 bits, the exp-sum
// converting each element on the fly, and the write recomputes exp(x - m) / d from the inputs,
// the division folded into the exponent: two exponentials per element; the few-rows shapes of 16-bit rows
// of 257 to 1024 elements keep them in shared memory instead, one per element), with xor shuffles inside the group
// (warp_allreduce<THREADS_PER_ROW>) or, for block groups, the two-level BlockAllReduce of
// warp_shuffle. Last, the normalized row is written.
// Ragged rows (not whole packs from a 16-byte boundary: odd N, a view one element in) have their edge, the
// elements before their first 16-byte boundary and after their last whole pack, held beside the packs of the rest
// (PEELED); y's row is written the same way where it is as far past a boundary as x's, else element by element.
// Lean kernel (register_cached_lean_kernel): rows of whole 16-byte packs on 16-byte boundaries, where the entry has
// a lean shape: straight-line code with the loads first and one exponential per element.
// HBM sweeps per row: 1 read of x, 1 write of y: the bytes of a copy.
// Launch: (threads per row, elements per thread) from kRowShapes32 or kRowShapes16 by the row's length. Where the
// rows allow the lean kernel, its few-rows shape (`lean`) if that grid is resident all at once, else its many-rows
// shape (`lean_many`) if that grid is more than one wave; then the few-rows shape (FewRowsShape) if its grid is
// resident all at once; else the table's shape. Warp groups run in 128-thread blocks of 128 / THREADS_PER_ROW rows
// (64 where 128 would leave fewer than 2 blocks per SM); a block group is one row per block. Blocks stride over
// rows past the grid's limit.
// Limits: N <= 16384 (kMaxCols): the row must fit in the group's registers (16 floats per thread
// of a 1024-thread block in float32, 32 per thread of 512 in 16-bit types); past that the launcher
// refuses with cudaErrorInvalidValue (cluster splits such rows). Any rows (64-bit offsets), any N >= 1, any row
// strides.
// Why:
// - 16-bit rows held packed: held as floats, bfloat16 reached 81-95% of a copy (96 registers for 32 elements, two
//   blocks of 256 per SM, warps stalled on their loads); packed, 96-100% from N = 32 to 4096 on the H200.
// - A few-rows shape where its grid fits in one wave: every row's loads are in flight together, and a call lasts
//   about one row's latency (bfloat16 4096x1024 ran in 1.29 waves on the table's shape, in one at 32 registers).
// - The lean kernel: triton.multirow's straight-line form of the same layout (bfloat16 4096x512) was 162 SASS
//   instructions against 359.
// Next rung: rows too long for one block's registers need a thread-block cluster.
#include <algorithm>
#include <array>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>

#include <math_constants.h>

#include "lab/async_copy.cuh"
#include "lab/check.cuh"
#include "lab/dispatch.cuh"
#include "lab/launch.h"
#include "lab/reduce.cuh"
#include "lab/tune.h"
#include "lab/vec.cuh"

namespace lab {
namespace {

// The launch heuristic as data: the first entry whose max_cols covers the row. Short rows share a warp among 16 to
// 1 rows; medium rows grow the group to a whole block. Elements per thread are whole 16-byte packs (row_shapes_hold).
// persistent: the grid is the resident blocks, each looping over rows with the next rows' packs
// loaded ahead; else one block per row group. Every entry is the shape and grid measured fastest at its length on
// the H200 (scripts/tune/tune_register_cached.py, scripts/tune/tune_cluster.py, A/B calls in interleaved rounds beside QuACK).
// Measurements behind these tables: notebook/register-cached-tuning/.
// A second shape for few rows (threads_per_row 0: none; only beside a non-persistent entry): a group
// in blocks of kBlockThreads (a warp group in kWarpGroupBlock-thread blocks, or a group that is the block),
// one block per row group, taken where that grid is resident all at once (the occupancy calculator, asked
// once per kernel and device). Then every row's loads are in flight together and a call lasts about one
// row's latency, where with more rows than fit at once the per-row work's throughput counts. It may set
// its own register budget (`registers`): a kernel of its own, compiled for more resident blocks.
// Why each few-rows shape:
// - bfloat16 N = 65 to 128: twice the threads per row (8 elements a thread, not 16): a shorter chain of loads,
//   reductions, exponentials and stores per thread.
// - float32 N = 513 to 1024: QuACK's grid, four rows of 32 threads in a block of 128 (a warp's reduction without the
//   block's barrier, the whole grid in one wave at 55 registers), staged.
// - 16-bit N = 257 to 1024: the exponentials kept in shared memory (`shared_exps`), one exponential per element;
//   few rows only: once the SMs are full, the shared memory's traffic costs more than the MUFU work saved.
// - 16-bit N = 513 to 1024: the table's shape at 32 registers, not 40: 32 blocks per SM where 24 fit, so the
//   tutorial's 4096 rows run in one wave; many rows keep the table's budget (0.2-0.7% slower at 32).
// - 16-bit N = 1025 to 2048: the table's 64 x 32 staged at 32 registers, the row left in shared memory and read
//   again for each pass (`shared_row`; held in registers, it spilled at 32): one wave at 4096 rows, 4-5% faster on
//   an H100.
struct FewRowsShape {
  int threads_per_row = 0;
  int elems_per_thread = 0;
  bool staged = false;
  int registers = 0;  // per thread, asked of __launch_bounds__ (0: kThreadRegisters' estimate)
  bool shared_exps = false;  // the exponentials kept in shared memory for the write (16-bit only)
  bool shared_row = false;   // staged packs read from shared memory for each pass, not held in registers (16-bit)
};
// A lean shape (threads_per_row 0: none): register_cached_lean_kernel, taken before the few-rows shape for rows it
// takes (lean_rows: whole 16-byte packs from 16-byte boundaries in x and y, 32-bit offsets) where its grid is
// resident all at once, as the few-rows shape is (on the table's grid or on one block per row group asked for).
// A many-rows lean shape (RowShape.lean_many) takes such rows where its grid is not resident all at once (more
// than one wave); rows between the two (the few-rows lean shape's grid not resident, the many-rows one's resident)
// take the entry's other shapes.
struct LeanShape {
  int threads_per_row = 0;
  int elems_per_thread = 0;
  int block = 0;
};
struct RowShape {
  int max_cols;
  int threads_per_row;
  int elems_per_thread;
  bool persistent;
  bool staged;  // whole packs copied to shared memory by cp.async, then read (one block per row group only)
  FewRowsShape few = {};
  bool peel = true;  // rows off 16-byte boundaries on the PEELED kernels (else element by element); see below
  LeanShape lean = {};       // few rows (its grid resident at once)
  LeanShape lean_many = {};  // many rows (its grid more than one wave)
};
// peel: the PEELED kernels move a ragged row's body as 16-byte packs, where element by element every element is
// a load and a store of its own (bfloat16 4096x8191: 3.44 times faster peeled). Not where a thread holds one pack
// of a short row: the head's load, exponential and store cost more than the packs save (float32 2097152x17 peeled
// took 1 / 0.73 the time), so float32 N <= 64 stays element by element.
// The entries of 1536, 3072 and 6144: a row there filled 62-75% of the next entry's shape. float32's 3072 and 6144
// take their next entry's shapes (the lab led QuACK there; the two tables keep one entry per length).
constexpr RowShape kRowShapes32[] = {  // float32
    {32, 8, 4, false, false, {}, false, {}, {8, 4, 128}},
    {64, 16, 4, false, false, {}, false, {}, {16, 4, 128}},
    {128, 16, 8, false, false, {}, true, {32, 4, 128}, {32, 4, 128}},
    {208, 32, 8, false, false, {}, true, {16, 16, 128}},
    {256, 32, 8, false, false, {}, true, {}, {32, 8, 128}},
    {512, 64, 8, false, false, {}, true, {64, 8, 128}, {64, 8, 128}},
    {1024, 64, 16, false, false, {32, 32, true}, true, {32, 32, 128}, {64, 16, 64}},
    {1536, 64, 24, false, false, {}, true, {64, 24, 64}, {64, 24, 64}},
    {2048, 64, 32, false, false},
    {3072, 256, 16, false, false, {}, true, {}, {128, 32, 128}},  // the 4096 entry's shapes (not timed at 3072)
    {4096, 256, 16, false, false, {}, true, {}, {128, 32, 128}},
    {6144, 512, 16, false, false},  // the 8192 entry's shape (not timed at 6144)
    {8192, 512, 16, false, false},
    {16384, 1024, 16, true, false},
};
// float16 and bfloat16 (measured in bfloat16): the same bytes per thread as float32, so twice the elements in half
// the threads. With float32's shapes a 16-bit thread loads half the bytes: ncu on the H200 found the warps of
// bfloat16 N = 32 and 512 stalled on their loads at 71-74% of peak DRAM throughput with 16-32 bytes in flight per
// thread. Held packed (see the header), 32 elements cost 16 registers: 64 bytes in flight per thread.
// staged (rows up to 2048): cp.async copies, as QuACK loads them: time relative to QuACK's fell by up to 2.6%
// (bfloat16 4096x128); at 4096x4096 it rose by 1.3%, so rows past 2048 load straight into registers.
// The 208 entry: 8 threads x 32 elements, 4 packs a thread, more bytes in flight than the 256 entry's 16 x 16 where
// a row leaves a quarter of its slots empty (bfloat16 151296x197, a ViT's 197 tokens: 1.09 times faster); at 224 it
// lost, so the entry ends at 208.
constexpr RowShape kRowShapes16[] = {
    {32, 2, 16, false, true, {}, true, {}, {4, 8, 128}},
    {64, 4, 16, false, true, {}, true, {}, {8, 8, 128}},
    {128, 8, 16, false, true, {16, 8, false}, true, {8, 16, 128}, {8, 16, 128}},
    {208, 8, 32, false, false, {}, true, {16, 16, 128}, {16, 16, 128}},
    {256, 16, 16, false, true, {}, true, {}, {16, 16, 128}},
    {512, 32, 16, false, true, {32, 16, true, 0, true}, true, {32, 16, 128}, {32, 16, 128}},
    {1024, 64, 16, false, true, {64, 16, true, 32, true}, true, {64, 16, 128}},
    {1536, 64, 24, false, true, {}, true, {32, 48, 128}, {64, 24, 64}},
    {2048, 64, 32, false, true, {64, 32, true, 32, false, true}},
    {3072, 128, 24, false, false, {}, true, {128, 24, 128}},
    {4096, 128, 32, false, false},
    {6144, 256, 24, false, false, {}, true, {256, 24, 256}, {256, 24, 256}},
    {8192, 256, 32, false, false},
    {16384, 512, 32, false, false},
};
constexpr int kShapes = sizeof(kRowShapes32) / sizeof(RowShape);
static_assert(kShapes == sizeof(kRowShapes16) / sizeof(RowShape), "one row shape per length in each table");
template <typename T>
constexpr const RowShape (&kRowShapes)[kShapes] = sizeof(T) == 4 ? kRowShapes32 : kRowShapes16;
constexpr int64_t kMaxCols = kRowShapes32[kShapes - 1].max_cols;
static_assert(kMaxCols == kRowShapes16[kShapes - 1].max_cols, "the same limit in every dtype");
static_assert(kMaxCols == kRegisterCachedMaxCols, "tune.h's copy of the limit (auto.cu's odd-rows rule reads it)");

// Every shape holds its longest row (threads x elements >= max_cols: a shorter group would leave
// elements unread), in whole 16-byte packs of its dtype, with a power-of-two group (the xor
// reductions) of at most a block; lengths in increasing order (the first entry that covers a row
// takes it).
// A group the xor reductions can take: a power of two of at most a block's 1024 threads.
constexpr bool power_of_two_group(int threads) {
  return threads >= 1 && threads <= 1024 && (threads & (threads - 1)) == 0;
}
constexpr bool row_shapes_hold(const RowShape (&table)[kShapes], int pack) {
  for (int i = 0; i < kShapes; ++i) {
    const RowShape& s = table[i];
    if (int64_t{s.threads_per_row} * s.elems_per_thread < s.max_cols || s.elems_per_thread % pack != 0) return false;
    if (!power_of_two_group(s.threads_per_row)) return false;
    if (i > 0 && table[i - 1].max_cols >= s.max_cols) return false;
    const FewRowsShape& f = s.few;
    if (f.threads_per_row != 0 && (s.persistent || int64_t{f.threads_per_row} * f.elems_per_thread < s.max_cols ||
                                   f.elems_per_thread % pack != 0 || !power_of_two_group(f.threads_per_row) ||
                                   f.registers < 0 || f.registers > 255 || (f.shared_exps && pack != 8) ||
                                   (f.shared_row && (pack != 8 || !f.staged || f.shared_exps || !s.peel)))) {
      return false;  // the few-rows shape is a group holding the entry's rows in whole packs, beside an
                     // entry of one block per row group (the launcher's persistent < 0 and 0)
    }
    for (const LeanShape& l : {s.lean, s.lean_many}) {
      if (l.threads_per_row != 0 &&
          (s.persistent || int64_t{l.threads_per_row} * l.elems_per_thread < s.max_cols ||
           l.elems_per_thread % pack != 0 || !power_of_two_group(l.threads_per_row) ||
           l.block % l.threads_per_row != 0 || l.block % 32 != 0 || l.block > 1024)) {
        return false;  // a lean shape holds the entry's rows in whole packs, in blocks of whole groups and warps
      }
    }
  }
  return true;
}
static_assert(row_shapes_hold(kRowShapes32, 4) && row_shapes_hold(kRowShapes16, 8),
              "a row shape does not hold its longest row in whole packs of a power-of-two group");
// Threads per block when groups are at most a warp: 128, or 64 when 128-thread blocks would give
// fewer than kMinBlocksPerSm blocks per SM (few short rows: more, smaller blocks spread the rows
// over every SM; where an entry has a few-rows shape, that shape takes such rows first, unless the
// launcher is asked for a persistent grid). 128 rather than 256: more achieved occupancy (QuACK's kernel, faster
// there, ran 128-thread blocks at 86% against 79% at 256), and float32 rows of 32 to 1024 elements gained 0.4 to
// 3.7 points of a copy on the H200.
constexpr int kWarpGroupBlock = 128;
constexpr int kSmallWarpGroupBlock = 64;
constexpr int kMinBlocksPerSm = 2;
// Threads per block of a group of `threads_per_row` on the table's grids: the group itself past a warp,
// else kWarpGroupBlock (the launcher's smaller blocks for few short rows aside).
constexpr int block_threads(int threads_per_row) {
  return threads_per_row > kWarpSize ? threads_per_row : kWarpGroupBlock;
}
template <int THREADS_PER_ROW>
constexpr int kBlockThreads = block_threads(THREADS_PER_ROW);

// A staged shape runs on a grid of one block per row group, and its block's copies (the row data of
// its largest block, kWarpGroupBlock threads or the group; a few-rows shape's block, kBlockThreads, or, with
// shared_exps, its exponentials as float32, which take the copies' place) fit in kMaxStagedBytes of static
// shared memory.
constexpr int kMaxStagedBytes = 32 * 1024;
constexpr bool staging_fits(const RowShape (&table)[kShapes], int elem_bytes) {
  for (const RowShape& s : table) {
    const int64_t bytes = int64_t{s.elems_per_thread} * elem_bytes * std::max(s.threads_per_row, kWarpGroupBlock);
    if (s.staged && (s.persistent || bytes > kMaxStagedBytes)) return false;
    const int64_t few_bytes = int64_t{s.few.elems_per_thread} * (s.few.shared_exps ? 4 : elem_bytes) *
                              block_threads(s.few.threads_per_row);  // exponentials as float32 over the copies
    if ((s.few.staged || s.few.shared_exps) && few_bytes > kMaxStagedBytes) return false;
  }
  return true;
}
static_assert(staging_fits(kRowShapes32, 4) && staging_fits(kRowShapes16, 2),
              "a staged row shape is persistent, or its copies or kept exponentials exceed kMaxStagedBytes");

// Resident blocks asked of __launch_bounds__, from the registers a thread needs: ELEMS floats of
// row data, on a persistent grid the next row's raw packs (ELEMS * sizeof(T) / 4 registers), and
// about 48 for addresses, loop state and reductions. ptxas then has that many registers without
// spilling. 16-bit types hold their elements packed, as the words they were loaded in (two per
// register, see the header), and need about 32 more up to 32 elements (past that, holding 64 or 128
// elements, ptxas spilled 132 to 824 bytes within 32 more and needs 48); float32 holds floats and asks for 48,
// as do 16-bit elements held as floats (PACKED false, tuning shapes only).
// Counted per scheduler: each of an SM's four holds a quarter of the register file (16384) and a
// quarter of its warps, in steps of 8 registers per thread; counted per SM instead, 21 blocks of 64
// threads left ptxas 40 registers (11 warps on some scheduler) where 48 were asked, and it spilled.
template <typename T>
constexpr bool kPacked = sizeof(T) == 2;
// PACKED: a 16-bit type held packed (the default); a tuning shape may hold it as floats instead.
template <typename T, int ELEMS, bool PERSISTENT, bool PACKED = kPacked<T>>
constexpr int kThreadRegisters = (PACKED ? ELEMS / 2 : ELEMS) + (PERSISTENT ? ELEMS * int{sizeof(T)} / 4 : 0) +
                                 (PACKED && ELEMS <= 32 ? 32 : 48);
// The blocks of BLOCK threads an SM holds at REGISTERS registers per thread (at most 32 blocks and 2048
// threads: below 32 registers the threads, not the registers, are the limit).
constexpr int resident_blocks_at(int registers, int block) {
  return std::max(1, std::min({32, 2048 / block,
                               4 * (16384 / (kWarpSize * ((registers + 7) / 8 * 8))) / (block / kWarpSize)}));
}
// REGISTERS: the kernel's own budget where one is given (a few-rows shape's), else kThreadRegisters.
template <typename T, int ELEMS, int BLOCK, bool PERSISTENT, bool PACKED = kPacked<T>, int REGISTERS = 0>
constexpr int kMinBlocks =
    resident_blocks_at(REGISTERS > 0 ? REGISTERS : kThreadRegisters<T, ELEMS, PERSISTENT, PACKED>, BLOCK);

// PERSISTENT: compiled for a grid of the resident blocks, each looping over row groups with the
// next group's packs loaded ahead (into `next`); else for a grid of one block per row group (a
// block strides over groups only past the grid's limit), which loads each group straight into
// the fragment and keeps no registers for a next one.
// PACKED: 16-bit elements held as loaded, two per register (float32: false).
// STAGED (one block per row group only): the group's whole packs are copied to shared memory by
// cp.async, all issued before the first is waited for, then read from there into the fragment. Each
// thread reads back only its own copies, so no barrier is needed.
// REGISTERS (0: kThreadRegisters' estimate): the registers per thread asked of __launch_bounds__.
// SHARED_EXPS (packed, one block per row group): the exp-sum stores each exponential, as float32, in shared
// memory (over the staged packs, which are in registers by then), and the write multiplies them by 1 / d:
// one exponential per element instead of two, for 8 bytes of shared-memory traffic per element.
// PEELED (ragged rows: x's row starts off a 16-byte boundary, or N is not a multiple of K; odd N, a view one
// element in): each row's body, its whole packs from its first boundary on, is split into packs as an aligned
// row is, read and written as 16-byte packs (y's body too where y's row is as far past a boundary as x's: a
// contiguous output). The row's edge, the h < K elements of the head before the body and the t < K of the
// tail after it, is held as floats beside the fragment (edge element e by lane e % THREADS_PER_ROW). One read
// and one write per element, where without it every element of such a row is read and written on its own.
// The body has at most N / K packs, so the entry of N / K * K elements holds it (ragged_entry): bfloat16
// rows of 1025 elements take the 1024 entry's shapes, which the 2048 entry's would hold twice over.
// Why the tail in edge slots too, not in a partial last pack read element by element: bfloat16 4096x1025 took
// 12.80 -> 9.34 us.
template <typename T, int THREADS_PER_ROW, int ELEMS, int BLOCK, bool PERSISTENT, bool PACKED = kPacked<T>,
          bool STAGED = false, int REGISTERS = 0, bool SHARED_EXPS = false, bool PEELED = false,
          bool SHARED_ROW = false>
__global__ void __launch_bounds__(BLOCK, (kMinBlocks<T, ELEMS, BLOCK, PERSISTENT, PACKED, REGISTERS>))
    register_cached_softmax_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int cols,
                                   int64_t x_stride, int64_t y_stride) {
  constexpr int K = kPack<T>;
  constexpr int PACKS = ELEMS / K;
  static_assert(PACKS * K == ELEMS, "whole 16-byte packs per thread");
  static_assert(!PACKED || kPacked<T>, "only 16-bit types are held packed");
  using Fragment = std::conditional_t<PACKED, uint32_t[PACKS][kPackWords], float[PACKS][K]>;
  constexpr int kBlock = BLOCK;
  constexpr int kRowsPerBlock = kBlock / THREADS_PER_ROW;
  // Block groups reduce each group on its own (several groups of 64 in a block of 128, say).
  using Reduce = BlockAllReduce<float, kBlock, THREADS_PER_ROW>;  // each group on its own
  __shared__ typename Reduce::Storage storage;  // block groups only (a few words)
  static_assert(!(STAGED && PERSISTENT), "the persistent grid loads the next rows into registers instead");
  static_assert(!STAGED || PACKS * kBlock * kVecBytes <= kMaxStagedBytes, "staged copies past kMaxStagedBytes");
  // Pack k of thread t at stage[k][t]: a warp's reads of pack k are 512 consecutive bytes.
  // SHARED_EXPS: pack k's exponentials at stage[2k][t] and stage[2k + 1][t] as float4 (over the staged
  // inputs, which are in registers by then: each thread reads and writes only its own slots).
  static_assert(!SHARED_EXPS || (PACKED && !PERSISTENT && 2 * PACKS * kBlock * kVecBytes <= kMaxStagedBytes),
                "shared exponentials: a packed fragment, one block per row group, within kMaxStagedBytes");
  // SHARED_ROW (staged, packed, one block per row group): the staged packs stay where they are, and each pass
  // (max, exp-sum, write) reads them again from shared memory, so that the row takes no registers between the
  // passes; a pack that is not whole is stored to its slot as the words the fragment holds (-inf past the row).
  static_assert(!SHARED_ROW || (STAGED && PACKED && !PERSISTENT && !SHARED_EXPS),
                "a shared row: staged packed packs on a grid of one block per row group, without shared exponentials");
  constexpr int kSlotRows = SHARED_EXPS ? 2 * PACKS : STAGED ? PACKS : 1;
  __shared__ uint4 stage[kSlotRows][STAGED || SHARED_EXPS ? kBlock : 1];
  // Every lane of a group (and, for warp groups, of the warp) takes part in the reductions, also
  // where its row is past the end: the loop bound is the same for the whole block.
  Reduce allreduce(storage);
  const int lane = threadIdx.x % THREADS_PER_ROW;
  const int64_t step = int64_t{gridDim.x} * kRowsPerBlock;
  // Pack k of this thread holds elements [(lane + k * THREADS_PER_ROW) * K, + K): neighbouring
  // lanes read neighbouring 16 bytes. Blocks stride over row groups, and the 16-byte packs of a
  // block's next rows are loaded (raw, into `next`) before this row is reduced and written, so that
  // on a persistent grid loads stay in flight while the row's math runs: ncu on the H200 found the
  // one-row-per-iteration version stalled on its loads (long scoreboard) at 50-74% of peak DRAM
  // throughput for bfloat16. On a grid of one block per row group the prefetch finds no next row.
  // A pack that is not whole, or of a misaligned row, is read element by element when it is used (PEELED: it is
  // -inf, and the edge slots hold those elements).
  // PEELED: packs split the row's body, the whole packs from its first 16-byte boundary, `head` elements in; the
  // head and the tail after the body (at most K - 1 elements each) are the row's edge, held in kEdgeSlots floats.
  constexpr int kEdgeSlots = PEELED ? (2 * (K - 1) + THREADS_PER_ROW - 1) / THREADS_PER_ROW : 0;
  const auto head_of = [&](int64_t row) {  // at most the row: a row shorter than K may end before a boundary
    return PEELED ? min(elems_to_alignment(x + row * x_stride), cols) : 0;
  };
  // The elements of the body: PEELED, a multiple of K; else the whole row, whose last pack may be partial.
  const auto body_after = [&](int head) { return PEELED ? (cols - head) / K * K : cols; };
  const auto wide_pack = [&](int64_t row, int k) {
    return row < rows && (PEELED || is_aligned(x + row * x_stride)) &&
           (lane + k * THREADS_PER_ROW + 1) * K <= body_after(head_of(row));
  };
  const auto pack_at = [&](int64_t row, int k) {
    return reinterpret_cast<const Pack<T>*>(x + row * x_stride + head_of(row)) + lane + k * THREADS_PER_ROW;
  };
  Pack<T> next[PERSISTENT ? PACKS : 1];
  const auto prefetch = [&](int64_t row) {
    if constexpr (PERSISTENT) {
#pragma unroll
      for (int k = 0; k < PACKS; ++k) {
        if (wide_pack(row, k)) next[k] = *pack_at(row, k);
      }
    }
  };
  // This row's pack k, whole and aligned (wide_pack): from `next`, the stage, or global memory.
  const auto wide = [&](int64_t row, int k) {
    if constexpr (PERSISTENT) {
      return next[k];
    } else if constexpr (STAGED) {
      Pack<T> pk;
      memcpy(&pk, &stage[k][threadIdx.x], sizeof(pk));
      return pk;
    } else {
      return *pack_at(row, k);
    }
  };
  prefetch(int64_t{blockIdx.x} * kRowsPerBlock + threadIdx.x / THREADS_PER_ROW);
  for (int64_t first = int64_t{blockIdx.x} * kRowsPerBlock; first < rows; first += step) {
    const int64_t row = first + threadIdx.x / THREADS_PER_ROW;
    const bool valid = row < rows;
    const T* xr = x + (valid ? row : 0) * x_stride;
    const int head = valid ? head_of(row) : 0;  // 0 unless PEELED
    const T* xb = xr + head;                     // the body
    const int body = body_after(head);
    const int edge = PEELED && valid ? cols - body : 0;  // head and tail
    // PEELED: edge element e = lane + i * THREADS_PER_ROW in slot i: the head's element e, or past the head the
    // tail's, element e + body of the row (-inf past the edge or of no row).
    const auto edge_elem = [&](int e) { return e < head ? e : e + body; };
    float edge_v[kEdgeSlots > 0 ? kEdgeSlots : 1];
#pragma unroll
    for (int i = 0; i < kEdgeSlots; ++i) {
      const int e = lane + i * THREADS_PER_ROW;
      edge_v[i] = e < edge ? to_float(xr[edge_elem(e)]) : -CUDART_INF_F;
    }

    if constexpr (STAGED) {
#pragma unroll
      for (int k = 0; k < PACKS; ++k) {
        if (wide_pack(row, k)) cp_async_16_ca(&stage[k][threadIdx.x], pack_at(row, k));
      }
      cp_async_commit();
      cp_async_wait<0>();
    }
    // Elements past the row (or of no row) are -inf, which leaves the max as it is and adds
    // exp(-inf) = 0 to the sum.
    Fragment v;
#pragma unroll
    for (int k = 0; k < PACKS; ++k) {
      const int e0 = (lane + k * THREADS_PER_ROW) * K;
      const bool whole = wide_pack(row, k);
      if constexpr (PACKED) {
        if (whole) {
          const Pack<T> pk = wide(row, k);
          const uint4 q = *reinterpret_cast<const uint4*>(&pk);
          v[k][0] = q.x, v[k][1] = q.y, v[k][2] = q.z, v[k][3] = q.w;
        } else if constexpr (PEELED) {  // past the body: the edge slots hold the rest
#pragma unroll
          for (int i = 0; i < kPackWords; ++i) v[k][i] = kMinusInfWord<T>;
        } else {
          const uint16_t* bits = reinterpret_cast<const uint16_t*>(xb);
#pragma unroll
          for (int i = 0; i < kPackWords; ++i) {
            const int j = e0 + 2 * i;
            const uint32_t lo = valid && j < body ? bits[j] : PairOf<T>::kMinusInf;
            const uint32_t hi = valid && j + 1 < body ? bits[j + 1] : PairOf<T>::kMinusInf;
            v[k][i] = lo | hi << 16;
          }
        }
        if constexpr (SHARED_ROW) {
          if (!whole) memcpy(&stage[k][threadIdx.x], v[k], sizeof(uint4));
        }
      } else if (whole) {
        const Pack<T> pk = wide(row, k);
#pragma unroll
        for (int j = 0; j < K; ++j) v[k][j] = to_float(pk.v[j]);
      } else if constexpr (PEELED) {
#pragma unroll
        for (int j = 0; j < K; ++j) v[k][j] = -CUDART_INF_F;
      } else {
#pragma unroll
        for (int j = 0; j < K; ++j) v[k][j] = valid && e0 + j < body ? to_float(xb[e0 + j]) : -CUDART_INF_F;
      }
    }
    prefetch(row + step);

    // The edge's share of the max and the sum (PEELED; nothing otherwise).
    const auto edge_max = [&](float mv) {
#pragma unroll
      for (int i = 0; i < kEdgeSlots; ++i) mv = fmaxf(mv, edge_v[i]);
      return mv;
    };
    const auto edge_sum = [&](float dv, float shift) {
#pragma unroll
      for (int i = 0; i < kEdgeSlots; ++i) dv += fast_exp(edge_v[i] - shift);
      return dv;
    };
    // SHARED_ROW: the fragment read again from the row's slots (each thread its own: no barrier).
    const auto reload = [&]() {
      if constexpr (SHARED_ROW) {
#pragma unroll
        for (int k = 0; k < PACKS; ++k) {
          const uint4 q = ld_shared_16_volatile(&stage[k][threadIdx.x]);
          v[k][0] = q.x, v[k][1] = q.y, v[k][2] = q.z, v[k][3] = q.w;
        }
      }
    };
    float m, d;
    if constexpr (PACKED) {
      m = allreduce(edge_max(fragment_max<T>(v)), MaxOp{});
      reload();
      if constexpr (SHARED_EXPS) {
        float4 e4;  // word i's exponentials, stored by pairs of words
        const auto keep = [&](int k, int i, float2 e) {
          if (i % 2 == 0) {
            e4.x = e.x, e4.y = e.y;
          } else {
            e4.z = e.x, e4.w = e.y;
            memcpy(&stage[2 * k + i / 2][threadIdx.x], &e4, sizeof(e4));
          }
        };
        d = allreduce(edge_sum(fragment_exp_sum<T>(v, m, keep), m), SumOp{});
      } else {
        d = allreduce(edge_sum(fragment_exp_sum<T>(v, m), m), SumOp{});  // the fragment keeps the inputs
      }
    } else {
      m = allreduce(edge_max(fragment_max(v)), MaxOp{});
      d = allreduce(edge_sum(fragment_exp_sum(v, m), m), SumOp{});  // the fragment now holds the exponentials
    }
    if (!valid) continue;  // after the reductions, which need every lane

    // Packed: y = exp(x - m) / d recomputed from the inputs (word_softmax, the division folded into
    // the exponent), or, with SHARED_EXPS, y = e * (1 / d) from the exponentials kept in shared memory;
    // else (float32 registers) y = e * (1 / d) from the exponentials kept in the fragment.
    // Packed, where |m| <= kFoldMax (exp.cuh): the subtraction folds into the FFMA too
    // (word_softmax_folded); the loop is compiled for both forms and the row's group takes one.
    const float inv_d = 1.0f / d;
    const float log2_d = fast_log2(d);
    const float c = m * kLog2e + log2_d;
    T* yr = y + row * y_stride;
    T* yb = yr + head;
    const bool wide_out = is_aligned(yb);
#pragma unroll
    for (int i = 0; i < kEdgeSlots; ++i) {
      const int e = lane + i * THREADS_PER_ROW;
      if (e < edge) yr[edge_elem(e)] = from_float<T>(fast_exp(edge_v[i] - m) * inv_d);
    }
    const auto write = [&](auto fold) {
      reload();
#pragma unroll
      for (int k = 0; k < PACKS; ++k) {
        const int e0 = (lane + k * THREADS_PER_ROW) * K;
        Pack<T> out;
        if constexpr (PACKED) {
          uint32_t w[kPackWords];
          if constexpr (SHARED_EXPS) {
            float e[2 * kPackWords];
            memcpy(e, &stage[2 * k][threadIdx.x], sizeof(uint4));
            memcpy(e + kPackWords, &stage[2 * k + 1][threadIdx.x], sizeof(uint4));
#pragma unroll
            for (int i = 0; i < kPackWords; ++i) w[i] = float2_to_word<T>(e[2 * i] * inv_d, e[2 * i + 1] * inv_d);
          } else {
#pragma unroll
            for (int i = 0; i < kPackWords; ++i) {
              w[i] = decltype(fold)::value ? word_softmax_folded<T>(v[k][i], c) : word_softmax<T>(v[k][i], m, log2_d);
            }
          }
          memcpy(&out, w, sizeof(out));  // register moves
        } else {
#pragma unroll
          for (int j = 0; j < K; ++j) out.v[j] = from_float<T>(v[k][j] * inv_d);
        }
        if (wide_out && e0 + K <= body) {
          reinterpret_cast<Pack<T>*>(yb)[e0 / K] = out;
        } else {
#pragma unroll
          for (int j = 0; j < K; ++j) {
            if (e0 + j < body) yb[e0 + j] = out.v[j];
          }
        }
      }
    };
    if constexpr (SHARED_EXPS) {
      write(std::false_type{});  // the exponentials are kept: no exponent to fold into
    } else if (PACKED && foldable(m)) {
      write(std::true_type{});
    } else {
      write(std::false_type{});
    }
  }
}

// Calls f(index constant) for the first shape of T's table that holds rows of `cols` elements.
template <typename T, int I = 0, typename F>
cudaError_t dispatch_row_shape(int64_t cols, F&& f) {
  if constexpr (I == kShapes) {
    return cudaErrorInvalidValue;  // unreachable: the launcher refuses rows over kMaxCols
  } else {
    if (cols <= kRowShapes<T>[I].max_cols) return f(std::integral_constant<int, I>{});
    return dispatch_row_shape<T, I + 1>(cols, f);
  }
}

// Launch shapes compiled for scripts/tune/tune_register_cached.py (torch.ops.lab_tune.register_cached_shape),
// each on a grid of one block per row group: a group of threads_per_row threads holds a row of up to
// threads_per_row x elems_per_thread elements, in blocks of `block` threads (block / threads_per_row
// rows per block; a group of more than a warp is a whole block): the alternatives, in rows per block and
// elements per thread, that the script times beside the table's own shape (QuACK's grids, triton.multirow's
// layouts, the lean kernel's). What they answered: notebook/register-cached-tuning/.
// A tuning shape loads straight into registers unless it is `staged` (below): where the table stages a
// shape (16-bit rows up to 2048), compare the table's timing with its staged twin's.
// packed (16-bit types): held as loaded, two elements per register, as the table's shapes hold them;
// else as floats (an exponential per element, not two; twice the registers; kThreadRegisters counts them
// as float32's).
// staged: the whole packs copied to shared memory by cp.async first, as the table's `staged` shapes are
// (within kMaxStagedBytes per block; the kernel's static_assert checks it).
// triton.multirow's layouts: a group of 64 in a block of 128 is two block groups, each reduced on its own.
struct BlockShape {
  int threads_per_row;
  int elems_per_thread;
  int block;
  bool packed = true;
  bool staged = false;
  bool lean = false;  // register_cached_lean_kernel (below) where the rows allow it
};
constexpr BlockShape kTuneShapes32[] = {  // float32: whole packs of 4
    {8, 4, 128}, {2, 16, 128}, {4, 8, 64}, {4, 8, 256},                              // N <= 32
    {16, 4, 128}, {4, 16, 128}, {8, 8, 128}, {8, 8, 64},                             // N <= 64
    {32, 4, 128}, {8, 16, 128}, {16, 8, 64},                                         // N <= 128
    {32, 16, 128}, {128, 4, 128}, {16, 32, 128}, {64, 8, 64},                        // N <= 512
    {32, 32, 128}, {32, 32, 64}, {64, 16, 64}, {128, 8, 128}, {256, 4, 256},         // N <= 1024
    {64, 32, 64}, {256, 8, 256}, {32, 64, 128},                                      // N <= 2048
    {128, 32, 128}, {512, 8, 512}, {64, 64, 64},                                     // N <= 4096
    // triton.multirow's faster layouts at the tutorial's small tensors (below)
    {64, 8, 128}, {32, 16, 32}, {64, 16, 128}, {32, 32, 32},                         // N <= 512, 1024
    // lean
    {8, 4, 128, true, false, true},                                                  // N <= 32
    {16, 4, 128, true, false, true}, {8, 8, 128, true, false, true},                // N <= 64
    {16, 4, 256, true, false, true},                                                 // N <= 64
    {32, 4, 128, true, false, true}, {16, 8, 128, true, false, true},               // N <= 128
    {32, 8, 128, true, false, true}, {16, 16, 128, true, false, true},              // N <= 256
    {64, 8, 128, true, false, true}, {32, 16, 32, true, false, true},               // N <= 512
    {32, 16, 128, true, false, true},                                                // N <= 512
    {64, 16, 64, true, false, true}, {32, 32, 128, true, false, true},              // N <= 1024
    {64, 16, 128, true, false, true}, {32, 32, 32, true, false, true},              // N <= 1024
    {64, 32, 64, true, false, true}, {128, 16, 128, true, false, true},             // N <= 2048
    {128, 32, 128, true, false, true}, {256, 16, 256, true, false, true},           // N <= 4096
    // staged
    {32, 4, 128, true, true}, {16, 8, 128, true, true},                             // N <= 128
    {32, 16, 128, true, true}, {64, 8, 64, true, true},                             // N <= 512
    {32, 32, 128, true, true}, {64, 16, 64, true, true},                            // N <= 1024
    {32, 64, 128, true, true}, {64, 32, 64, true, true},                            // N <= 2048
    // rows of 1536 held exactly (no pack past the end): straight, lean
    {64, 24, 64}, {32, 48, 128}, {128, 12, 128},                                     // N <= 1536
    {64, 24, 64, true, false, true}, {128, 12, 128, true, false, true},             // N <= 1536
};
constexpr BlockShape kTuneShapes16[] = {  // float16 and bfloat16: whole packs of 8
    {4, 8, 128}, {2, 16, 64}, {2, 16, 256},                                          // N <= 32
    {8, 8, 128}, {2, 32, 128}, {4, 16, 64}, {4, 16, 256},                            // N <= 64
    {4, 32, 128}, {16, 8, 128}, {8, 16, 64},                                         // N <= 128
    {8, 32, 128}, {32, 8, 128},                                                      // N <= 256
    {16, 32, 128}, {64, 8, 64}, {32, 16, 64}, {32, 16, 256},                         // N <= 512
    {32, 32, 128}, {32, 32, 64}, {32, 32, 256}, {16, 64, 128}, {128, 8, 128},        // N <= 1024
    {32, 64, 128}, {32, 64, 64}, {64, 32, 64}, {256, 8, 256},                        // N <= 2048
    {64, 64, 64}, {256, 16, 256}, {512, 8, 512},                                     // N <= 4096
    // triton.multirow's faster layouts at the tutorial's small tensors (below)
    {64, 8, 128}, {64, 8, 128, true, true}, {64, 8, 128, false}, {32, 16, 32},       // N <= 512
    {32, 32, 32}, {64, 16, 128},                                                     // N <= 1024
    // lean (held as floats)
    {4, 8, 128, false, false, true},                                                 // N <= 32
    {8, 8, 128, false, false, true}, {4, 16, 128, false, false, true},              // N <= 64
    {8, 8, 256, false, false, true}, {8, 8, 64, false, false, true},                // N <= 64
    {16, 8, 128, false, false, true}, {8, 16, 128, false, false, true},             // N <= 128
    {32, 8, 128, false, false, true}, {16, 16, 128, false, false, true},            // N <= 256
    {64, 8, 128, false, false, true}, {32, 16, 128, false, false, true},            // N <= 512
    {32, 32, 32, false, false, true}, {64, 16, 128, false, false, true},            // N <= 1024
    {128, 8, 128, false, false, true}, {32, 32, 128, false, false, true},           // N <= 1024
    {64, 32, 64, false, false, true}, {128, 16, 128, false, false, true},           // N <= 2048
    {256, 8, 256, false, false, true},                                               // N <= 2048
    {128, 32, 128, false, false, true}, {256, 16, 256, false, false, true},         // N <= 4096
    // held as floats
    {16, 8, 128, false}, {8, 16, 64, false},                                         // N <= 128
    {32, 16, 128, false}, {32, 16, 64, false}, {64, 8, 64, false},                   // N <= 512
    {32, 32, 128, false}, {32, 32, 256, false}, {64, 16, 64, false}, {128, 8, 128, false},  // N <= 1024
    {64, 32, 64, false}, {128, 16, 128, false},                                      // N <= 2048
    {128, 32, 128, false}, {256, 16, 256, false},                                    // N <= 4096
    // staged
    {16, 8, 128, true, true}, {8, 16, 64, true, true},                              // N <= 128
    {32, 16, 128, true, true}, {32, 16, 64, true, true},                            // N <= 512
    {32, 32, 128, true, true}, {32, 32, 64, true, true}, {64, 16, 64, true, true},  // N <= 1024
    {32, 64, 128, true, true}, {64, 32, 64, true, true},                            // N <= 2048
    // rows of 1536 held exactly (no pack past the end): packed, staged, lean
    {32, 48, 128}, {64, 24, 64}, {64, 24, 128},                                      // N <= 1536
    {32, 48, 128, true, true}, {64, 24, 64, true, true},                            // N <= 1536
    {64, 24, 64, false, false, true}, {32, 48, 128, false, false, true},            // N <= 1536
    // rows of 3072 and 6144 held exactly: packed, lean
    {128, 24, 128}, {64, 48, 64}, {128, 24, 128, false, false, true}, {64, 48, 64, false, false, true},  // 3072
    {256, 24, 256}, {128, 48, 128}, {256, 24, 256, false, false, true}, {128, 48, 128, false, false, true},  // 6144
};
template <typename T>
constexpr const auto& tune_shapes() {
  if constexpr (sizeof(T) == 4) {
    return kTuneShapes32;
  } else {
    return kTuneShapes16;
  }
}
template <typename T>
constexpr int kTuneCount = sizeof(tune_shapes<T>()) / sizeof(BlockShape);

// Whole packs, a power-of-two group of at most a warp in blocks of whole groups, or a group of whole warps
// in a block of one or more such groups (each group reduced on its own: BlockAllReduce's GROUP).
constexpr bool block_shape_holds(const BlockShape& s, int pack) {
  const bool warp_group = s.threads_per_row <= kWarpSize && s.block % s.threads_per_row == 0 &&
                          s.block % kWarpSize == 0 && s.block <= 1024;
  const bool block_group = s.threads_per_row > kWarpSize && s.block % s.threads_per_row == 0 && s.block <= 1024;
  return power_of_two_group(s.threads_per_row) && s.elems_per_thread % pack == 0 && (warp_group || block_group);
}
template <size_t COUNT>
constexpr bool block_shapes_hold(const BlockShape (&shapes)[COUNT], int pack) {
  for (size_t i = 0; i < COUNT; ++i) {
    if (!block_shape_holds(shapes[i], pack)) return false;
  }
  return true;
}
static_assert(block_shapes_hold(kTuneShapes32, 4) && block_shapes_hold(kTuneShapes16, 8),
              "a tuning shape is not whole packs of a power-of-two group in whole blocks");

// How many blocks of `block` threads of `kernel` an SM holds at once on the current device: the occupancy
// calculator, asked once per (kernel, device, block) and then remembered (remembered_per_device).
template <typename Kernel>
cudaError_t resident_blocks_per_sm(Kernel kernel, int block, int* per_sm) {
  return remembered_per_device(
      std::make_tuple(reinterpret_cast<const void*>(kernel), block),
      [&](int* v) { return cudaOccupancyMaxActiveBlocksPerMultiprocessor(v, kernel, block, 0); }, per_sm);
}

// Whether a grid of one block of `block` threads per `rows_per_block` of `rows` rows of `kernel` is resident all
// at once on `sms` SMs (`resident`).
template <typename Kernel>
cudaError_t grid_resident(Kernel kernel, int block, int rows_per_block, int64_t rows, int sms, bool* resident) {
  int per_sm = 0;
  LAB_CUDA_TRY(resident_blocks_per_sm(kernel, block, &per_sm));
  *resident = (rows + rows_per_block - 1) / rows_per_block <= int64_t{per_sm} * sms;
  return cudaSuccess;
}

// Persistent grid: as many blocks as are resident at once (the occupancy calculator, times the
// SMs), never more than the row groups; else one block per row group (up to the grid's limit).
template <typename T, int THREADS_PER_ROW, int ELEMS, int BLOCK, bool PERSISTENT, bool PACKED = kPacked<T>,
          bool STAGED = false, int REGISTERS = 0, bool SHARED_EXPS = false, bool PEELED = false,
          bool SHARED_ROW = false>
cudaError_t launch_grid(const RowsArgs& a, int sms, cudaStream_t stream) {
  constexpr int kRowsPerBlock = BLOCK / THREADS_PER_ROW;
  const auto kernel = register_cached_softmax_kernel<T, THREADS_PER_ROW, ELEMS, BLOCK, PERSISTENT, PACKED, STAGED,
                                                     REGISTERS, SHARED_EXPS, PEELED, SHARED_ROW>;
  int64_t resident = INT_MAX;
  if constexpr (PERSISTENT) {
    int per_sm = 0;
    LAB_CUDA_TRY(resident_blocks_per_sm(kernel, BLOCK, &per_sm));
    resident = int64_t{std::max(per_sm, 1)} * sms;
  }
  const int64_t groups = (a.rows + kRowsPerBlock - 1) / kRowsPerBlock;
  const auto grid = static_cast<unsigned>(std::min<int64_t>(groups, resident));
  kernel<<<grid, BLOCK, 0, stream>>>(static_cast<const T*>(a.x), static_cast<T*>(a.y), a.rows,
                                     static_cast<int>(a.cols), a.x_row_stride, a.y_row_stride);
  LAB_LAUNCH_CHECK();
  return cudaSuccess;
}

// A staged shape is staged on a grid of one block per row group; forced onto the persistent grid
// (softmax_register_cached_with), it loads into registers as every persistent kernel does.
template <typename T, int THREADS_PER_ROW, int ELEMS, int BLOCK, bool STAGED>
cudaError_t launch(const RowsArgs& a, int sms, bool persistent, cudaStream_t stream) {
  return persistent ? launch_grid<T, THREADS_PER_ROW, ELEMS, BLOCK, true>(a, sms, stream)
                    : launch_grid<T, THREADS_PER_ROW, ELEMS, BLOCK, false, kPacked<T>, STAGED>(a, sms, stream);
}

// A table entry's launch: ragged rows (`peeled`) on a PEELED kernel where the entry peels (PEEL).
// PEELED kernels are compiled for the table's own grid (TABLE_PERSISTENT) only: such rows forced onto the other
// grid (a tuning call) run that grid's kernel, element by element.
template <typename T, int THREADS_PER_ROW, int ELEMS, int BLOCK, bool STAGED, bool TABLE_PERSISTENT, bool PEEL>
cudaError_t launch_entry(const RowsArgs& a, int sms, bool persistent, bool peeled, cudaStream_t stream) {
  if constexpr (PEEL) {
    if (peeled && persistent == TABLE_PERSISTENT) {
      return launch_grid<T, THREADS_PER_ROW, ELEMS, BLOCK, TABLE_PERSISTENT, kPacked<T>, STAGED && !TABLE_PERSISTENT,
                         0, false, true>(a, sms, stream);
    }
  }
  return launch<T, THREADS_PER_ROW, ELEMS, BLOCK, STAGED>(a, sms, persistent, stream);
}

// Calls f(threads-per-row, elements-per-thread, block, packed, staged, lean constants) for T's tuning shape
// `index`.
template <typename T, int I = 0, typename F>
cudaError_t dispatch_tune_shape(int index, F&& f) {
  if constexpr (I == kTuneCount<T>) {
    return cudaErrorInvalidValue;  // no such shape
  } else {
    if (index == I) {
      constexpr BlockShape s = tune_shapes<T>()[I];
      return f(std::integral_constant<int, s.threads_per_row>{}, std::integral_constant<int, s.elems_per_thread>{},
               std::integral_constant<int, s.block>{}, std::bool_constant<kPacked<T> && s.packed>{},
               std::bool_constant<s.staged>{}, std::bool_constant<s.lean>{});
    }
    return dispatch_tune_shape<T, I + 1>(index, f);
  }
}

// LEAN: the straight-line kernel triton.multirow's compiler makes, for rows that allow it (lean_rows: whole 16-byte
// packs from 16-byte boundaries in x and y, offsets within 32 bits). One block per row group and no loop over rows,
// no per-pack alignment tests and no element-by-element paths, the loads first, the row held as floats with one
// exponential per element, and an approximate reciprocal (__fdividef; the sum is at least 1, the max's own
// exponential). The table's lean shapes (RowShape.lean, lean_many) take such rows; the tuning shapes flagged lean too.
// Why: triton.multirow's kernel in register_cached's own layouts (bfloat16 4096x512) was 162 SASS instructions
// against 359, its load issued 29 in against about 50; this form is 155, the load at 24, and ran 6.78 us against
// the table's 7.02 there.
template <typename T, int THREADS_PER_ROW, int ELEMS, int BLOCK>
__global__ void __launch_bounds__(BLOCK)
    register_cached_lean_kernel(const T* __restrict__ x, T* __restrict__ y, int rows, int cols, int x_stride,
                                int y_stride) {
  constexpr int K = kPack<T>;
  constexpr int PACKS = ELEMS / K;
  static_assert(PACKS * K == ELEMS, "whole 16-byte packs per thread");
  using Reduce = BlockAllReduce<float, BLOCK, THREADS_PER_ROW>;  // each group on its own
  __shared__ typename Reduce::Storage storage;  // block groups only
  Reduce allreduce(storage);
  const int lane = threadIdx.x % THREADS_PER_ROW;
  const int row = blockIdx.x * (BLOCK / THREADS_PER_ROW) + threadIdx.x / THREADS_PER_ROW;
  const bool valid = row < rows;  // a row past the end still takes part in the reductions
  const int packs = cols / K;
  const Pack<T>* xr = reinterpret_cast<const Pack<T>*>(x + (valid ? row : 0) * x_stride);
  Pack<T> pk[PACKS];
#pragma unroll
  for (int k = 0; k < PACKS; ++k) {
    const int p = lane + k * THREADS_PER_ROW;
    if (valid && p < packs) pk[k] = xr[p];
  }
  float v[PACKS][K];
#pragma unroll
  for (int k = 0; k < PACKS; ++k) {
    const bool in = valid && lane + k * THREADS_PER_ROW < packs;
#pragma unroll
    for (int j = 0; j < K; ++j) v[k][j] = in ? to_float(pk[k].v[j]) : -CUDART_INF_F;
  }
  const float m = allreduce(fragment_max(v), MaxOp{});
  const float d = allreduce(fragment_exp_sum(v, m), SumOp{});  // v now holds the exponentials
  if (!valid) return;  // after the reductions, which need every thread
  const float inv_d = __fdividef(1.0f, d);
  Pack<T>* yr = reinterpret_cast<Pack<T>*>(y + row * y_stride);
#pragma unroll
  for (int k = 0; k < PACKS; ++k) {
    const int p = lane + k * THREADS_PER_ROW;
    if (p < packs) {
      Pack<T> out;
#pragma unroll
      for (int j = 0; j < K; ++j) out.v[j] = from_float<T>(v[k][j] * inv_d);
      yr[p] = out;
    }
  }
}

template <typename T, int THREADS_PER_ROW, int ELEMS, int BLOCK>
cudaError_t launch_lean(const RowsArgs& a, cudaStream_t stream) {
  constexpr int kRowsPerBlock = BLOCK / THREADS_PER_ROW;
  const auto grid = static_cast<unsigned>((a.rows + kRowsPerBlock - 1) / kRowsPerBlock);
  register_cached_lean_kernel<T, THREADS_PER_ROW, ELEMS, BLOCK><<<grid, BLOCK, 0, stream>>>(
      static_cast<const T*>(a.x), static_cast<T*>(a.y), static_cast<int>(a.rows), static_cast<int>(a.cols),
      static_cast<int>(a.x_row_stride), static_cast<int>(a.y_row_stride));
  LAB_LAUNCH_CHECK();
  return cudaSuccess;
}

// Whether the rows of x are ragged: not whole 16-byte packs from a 16-byte boundary (some row starts off one, or N
// is not a multiple of a pack). The PEELED kernels take such rows.
bool rows_ragged(const RowsArgs& a) {
  const int bytes = elem_bytes(a.dtype);
  return reinterpret_cast<uintptr_t>(a.x) % kVecBytes != 0 || (a.x_row_stride * bytes) % kVecBytes != 0 ||
         (a.cols * bytes) % kVecBytes != 0;
}

// Whether register_cached_lean_kernel takes these rows: x's rows not ragged, y's rows whole 16-byte packs from
// 16-byte boundaries too, every offset within 32 bits.
bool lean_rows(const RowsArgs& a) {
  const int64_t span = std::max({a.x_row_stride, a.y_row_stride, a.cols});
  return !rows_ragged(a) && reinterpret_cast<uintptr_t>(a.y) % kVecBytes == 0 &&
         (a.y_row_stride * elem_bytes(a.dtype)) % kVecBytes == 0 && a.rows * span < INT_MAX;
}

// The table entry that takes ragged rows of `cols` elements (1 <= cols <= kMaxCols) on the grid `persistent` asks
// for (-1: the table's). A PEELED kernel holds the row's body, at most cols / pack whole packs, and its edge beside
// them, so the entry of the body's longest length holds the row: where that entry peels and the launch is on its
// own grid, that entry (bfloat16 N = 1025: the 1024 entry's shapes, where the 2048 entry's held rows up to twice
// as long); else the entry of `cols` (PEELED where it peels, else element by element).
const RowShape& ragged_entry(const RowShape (&table)[kShapes], int pack, int64_t cols, int persistent) {
  const int64_t packed = std::max<int64_t>(cols / pack * pack, 1);
  for (const RowShape& s : table) {
    if (packed <= s.max_cols) {
      if (s.peel && (persistent < 0 || (persistent != 0) == s.persistent)) return s;
      break;
    }
  }
  for (const RowShape& s : table) {
    if (cols <= s.max_cols) return s;
  }
  return table[kShapes - 1];  // unreachable: cols <= kMaxCols
}

}  // namespace

int register_cached_tune_shapes(DType dtype, const int** flat) {
  static constexpr auto flatten = [](const auto& shapes, bool can_pack) {
    std::array<int, kTuneShapeFields * sizeof(shapes) / sizeof(BlockShape)> out{};
    for (size_t i = 0; i < out.size() / kTuneShapeFields; ++i) {
      const BlockShape& s = shapes[i];
      int* o = &out[kTuneShapeFields * i];
      o[0] = s.threads_per_row, o[1] = s.elems_per_thread, o[2] = s.block;
      o[3] = s.packed && can_pack && !s.lean ? 1 : 0, o[4] = s.staged ? 1 : 0, o[5] = s.lean ? 1 : 0;
    }
    return out;
  };
  static constexpr auto k32 = flatten(kTuneShapes32, false);
  static constexpr auto k16 = flatten(kTuneShapes16, true);
  const bool wide = dtype == DType::kFloat32;
  *flat = wide ? k32.data() : k16.data();
  return static_cast<int>((wide ? k32.size() : k16.size()) / kTuneShapeFields);
}

bool register_cached_rows_ragged(const RowsArgs& a) { return rows_ragged(a); }

bool register_cached_ragged(int64_t cols, DType dtype, int64_t* entry_cols) {
  *entry_cols = 0;
  if (cols < 1 || cols > kMaxCols) return false;
  const auto& table = dtype == DType::kFloat32 ? kRowShapes32 : kRowShapes16;
  const RowShape& s = ragged_entry(table, kVecBytes / elem_bytes(dtype), cols, -1);
  *entry_cols = s.max_cols;
  return s.peel;
}

cudaError_t softmax_register_cached_shape(const RowsArgs& a, int index, cudaStream_t stream) {
  int sms = 0;
  LAB_CUDA_TRY(device_sm_count(&sms));
  return dispatch_dtype(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return dispatch_tune_shape<T>(index, [&](auto tpr, auto ept, auto block, auto packed, auto staged, auto lean) {
      if (a.cols > int64_t{decltype(tpr)::value} * decltype(ept)::value) return cudaErrorInvalidValue;
      if constexpr (decltype(lean)::value) {
        if (lean_rows(a)) {
          return launch_lean<T, decltype(tpr)::value, decltype(ept)::value, decltype(block)::value>(a, stream);
        }
      }
      return launch_grid<T, decltype(tpr)::value, decltype(ept)::value, decltype(block)::value, false,
                         decltype(packed)::value, decltype(staged)::value>(a, sms, stream);
    });
  });
}

cudaError_t softmax_register_cached(const RowsArgs& a, cudaStream_t stream) {
  return softmax_register_cached_with(a, -1, stream);
}

cudaError_t softmax_register_cached_with(const RowsArgs& a, int persistent, cudaStream_t stream) {
  if (a.cols > kMaxCols) return cudaErrorInvalidValue;  // see Limits in the header
  int sms = 0;
  LAB_CUDA_TRY(device_sm_count(&sms));
  const bool peeled = rows_ragged(a);  // on a PEELED kernel where the entry peels
  return dispatch_dtype(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t entry_cols = peeled ? ragged_entry(kRowShapes<T>, kPack<T>, a.cols, persistent).max_cols : a.cols;
    return dispatch_row_shape<T>(entry_cols, [&](auto index) {
      constexpr RowShape s = kRowShapes<T>[decltype(index)::value];
      if (persistent != 1 && lean_rows(a)) {  // the table's grid, or one block per row group asked for
        if constexpr (s.lean.threads_per_row > 0) {  // few rows
          constexpr LeanShape l = s.lean;
          bool resident = false;
          LAB_CUDA_TRY(grid_resident(register_cached_lean_kernel<T, l.threads_per_row, l.elems_per_thread, l.block>,
                                     l.block, l.block / l.threads_per_row, a.rows, sms, &resident));
          if (resident) return launch_lean<T, l.threads_per_row, l.elems_per_thread, l.block>(a, stream);
        }
        if constexpr (s.lean_many.threads_per_row > 0) {  // many rows
          constexpr LeanShape l = s.lean_many;
          bool resident = false;
          LAB_CUDA_TRY(grid_resident(register_cached_lean_kernel<T, l.threads_per_row, l.elems_per_thread, l.block>,
                                     l.block, l.block / l.threads_per_row, a.rows, sms, &resident));
          if (!resident) return launch_lean<T, l.threads_per_row, l.elems_per_thread, l.block>(a, stream);
        }
      }
      if constexpr (s.few.threads_per_row > 0) {
        // Few rows, on a grid of one block per row group (the table's choice or asked for): the few-rows
        // shape where its whole grid is resident at once (see FewRowsShape).
        constexpr FewRowsShape f = s.few;
        constexpr int kFewBlock = kBlockThreads<f.threads_per_row>;
        constexpr int kRowsPerBlock = kFewBlock / f.threads_per_row;
        // Launches the few-rows shape where its whole grid is resident at once (`launched`), else nothing.
        const auto few = [&](auto peel, bool* launched) {
          // A shared row takes every row on its PEELED kernel (whole rows too: their edge is empty): the other
          // one, reading a partial last pack element by element, spilled at its 32 registers (8 bytes).
          constexpr bool kPeeled = decltype(peel)::value || f.shared_row;
          LAB_CUDA_TRY(grid_resident(
              register_cached_softmax_kernel<T, f.threads_per_row, f.elems_per_thread, kFewBlock, false, kPacked<T>,
                                             f.staged, f.registers, f.shared_exps, kPeeled, f.shared_row>,
              kFewBlock, kRowsPerBlock, a.rows, sms, launched));
          if (!*launched) return cudaSuccess;
          return launch_grid<T, f.threads_per_row, f.elems_per_thread, kFewBlock, false, kPacked<T>, f.staged,
                             f.registers, f.shared_exps, kPeeled, f.shared_row>(a, sms, stream);
        };
        if (persistent != 1) {
          bool launched = false;
          cudaError_t e;
          if constexpr (s.peel) {
            e = peeled ? few(std::true_type{}, &launched) : few(std::false_type{}, &launched);
          } else {
            e = few(std::false_type{}, &launched);
          }
          if (e != cudaSuccess || launched) return e;
        }
      }
      const bool persistent_grid = persistent < 0 ? s.persistent : persistent != 0;
      constexpr int kThreadsPerRow = s.threads_per_row;
      constexpr int kElems = s.elems_per_thread;
      if constexpr (kThreadsPerRow <= kWarpSize) {
        constexpr int kRowsPerBlock = kWarpGroupBlock / kThreadsPerRow;
        if ((a.rows + kRowsPerBlock - 1) / kRowsPerBlock < int64_t{kMinBlocksPerSm} * sms) {
          return launch_entry<T, kThreadsPerRow, kElems, kSmallWarpGroupBlock, s.staged, s.persistent, s.peel>(
              a, sms, persistent_grid, peeled, stream);
        }
      }
      return launch_entry<T, kThreadsPerRow, kElems, kBlockThreads<kThreadsPerRow>, s.staged, s.persistent, s.peel>(
          a, sms, persistent_grid, peeled, stream);
    });
  });
}

}  // namespace lab
