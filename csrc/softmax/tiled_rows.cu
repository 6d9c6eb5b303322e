// tiled_rows: short rows moved as whole tiles through shared memory, so that a row's alignment does not matter.
// Tuned production kernel (cuda.tiled_rows; cuda.auto's choice for many short ragged rows, its tiles rule). Launch
// table: kTileShapes by N, and rotate_slots (a model of the shared-memory banks) for the slot layout. Measurements
// behind them: notebook/tiled-rows-tuning/.
//
// Algorithm: a block of 128 threads owns a tile of consecutive rows. Where the rows are contiguous (row stride
// == N), the tile is one run of memory, whatever N is: the block copies it to shared memory with 16-byte
// cp.async copies (a few elements before the first 16-byte boundary and after the last one element by
// element), at the same offset from a 16-byte boundary in shared memory as in HBM. Groups of GROUP lanes
// (a power of two up to a warp) then take one row each: each lane reads its at most EPT elements from shared
// memory, the group reduces the max and the sum of exp with xor shuffles, and each lane writes its normalized
// elements back to shared memory (in place where y is as far past a 16-byte boundary as x; else to a second
// buffer at y's offset). Last, the block stores the tile with 16-byte stores the same way.
// Rows that are not contiguous (a view with row stride > N) take the tile element by element (coalesced
// along each row, one read and one write still).
// HBM sweeps per row: 1 read of x, 1 write of y: the bytes of a copy.
// Launch: GROUP and EPT from kTileShapes by N; a tile of about kTileBytes of x (a whole number of passes
// of 128 / GROUP rows), smaller where that leaves fewer than kFewRowsBlocksPerSm blocks per SM; one block
// per tile, blocks striding over tiles past the grid's limit.
// Limits: N <= kMaxCols (512: a row must fit one warp's registers at 16 elements per lane); past that the
// launcher refuses with cudaErrorInvalidValue. Any number of rows (64-bit offsets), any N >= 1, any row strides.
// Why:
// - Tiles: register_cached gives each row its own group of lanes, and a row of odd N starts anywhere in a 16-byte
//   pack. It peels each row's edges element by element, so a 63-element bfloat16 row (126 bytes) is mostly
//   edges: many small accesses per row. Here a tile of 64 such rows is 8 KB of whole 16-byte copies (float32 rows
//   of 31 to 64 elements: 95-99% of a copy from 131072 rows, where register_cached makes 88-95%).
// - The 16-bit kernels are issue-bound (about 34 instructions per element), not bound on HBM: hence constant slots
//   wherever the banks allow (rotate_slots).
// - Many rows only: a tile's load, reduce and store run one after the other in a block, and with fewer than a few
//   blocks per SM the latency shows (4096x63: 80% of a copy against register_cached's 95%).
// Next rung: rows too long for a warp take register_cached's block groups, then cluster.
#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>

#include <math_constants.h>

#include "lab/async_copy.cuh"
#include "lab/check.cuh"
#include "lab/dispatch.cuh"
#include "lab/exp.cuh"
#include "lab/launch.h"
#include "lab/reduce.cuh"
#include "lab/vec.cuh"

namespace lab {
namespace {

constexpr int kThreads = 128;
constexpr int kTileBytes = 8192;  // of x per tile, at most (a tile holds one row at least)
constexpr int kFewRowsBlocksPerSm = 4;  // the launcher shrinks tiles until the grid has this many blocks per SM
constexpr int kResidentBlocks = 12;  // asked of __launch_bounds__: at most 42 registers a thread
// float32 rows of one lane each with constant slots (the kernel's ROTATE false) take 10 (at most 48 registers): at 42
// ptxas spilled 4 bytes there.
template <typename T, int GROUP, bool ROTATE>
constexpr int resident_blocks() {
  return sizeof(T) == 4 && GROUP == 1 && !ROTATE ? 10 : kResidentBlocks;
}

// The row shapes: the first whose max_cols covers N. 16 slots a lane, not 8, halve the groups' reductions per
// element (bfloat16 524288x128: 74% -> 94% of a copy on the H200). kTileBytes is not tuned.
struct TileShape {
  int max_cols;
  int group;  // lanes per row
  int ept;    // elements per lane, at most
};
constexpr TileShape kTileShapes[] = {
    {16, 1, 16}, {32, 2, 16}, {64, 4, 16}, {128, 8, 16}, {256, 16, 16}, {512, 32, 16},
};
constexpr int kShapes = sizeof(kTileShapes) / sizeof(TileShape);
constexpr int kMaxCols = kTileShapes[kShapes - 1].max_cols;
constexpr bool tile_shapes_hold() {
  for (int i = 0; i < kShapes; ++i) {
    const TileShape& s = kTileShapes[i];
    if ((s.ept & (s.ept - 1)) != 0) return false;  // the slots' rotation wraps by a mask
    if (s.group * s.ept < s.max_cols || s.group < 1 || s.group > kWarpSize || (s.group & (s.group - 1)) != 0) {
      return false;
    }
    if (i > 0 && kTileShapes[i - 1].max_cols >= s.max_cols) return false;
  }
  return true;
}
static_assert(tile_shapes_hold(),
              "a tile shape does not hold its longest row in a power-of-two group of a warp (power-of-two slots)");

// The column that slot k of a lane reads, past the lane's own (lane + slot_column(...)): chunk (k + rot) mod ept of
// the row, chunks of `group` columns. rot is the rotation of the row's group, 0 with constant slots (slot_rotation).
// One definition for the kernel and for the host's model of its banks (slot_wavefronts), so that the model reads the
// layout the kernel does.
__host__ __device__ constexpr int slot_rotation(bool rotate, int group_in_warp, int ept) {
  return rotate ? group_in_warp & (ept - 1) : 0;
}
__host__ __device__ constexpr int slot_column(int k, int rot, int ept, int group) {
  return ((k + rot) & (ept - 1)) * group;
}

// The n elements at p as whole 16-byte packs and edges: the packs from the 16-byte boundary `first` (at or after p)
// up to the one at or before the end, `head` elements before them, the edge after them from element `tail`. a0: the
// 16-byte boundary at or below p.
struct PackSpan {
  uintptr_t a0, first;
  int head, packs, tail;
};
template <typename T>
__device__ __forceinline__ PackSpan pack_span(const T* p, int n) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  PackSpan s;
  s.a0 = a & ~uintptr_t{kVecBytes - 1};
  s.first = (a + kVecBytes - 1) & ~uintptr_t{kVecBytes - 1};
  const uintptr_t last = (a + uintptr_t(n) * sizeof(T)) & ~uintptr_t{kVecBytes - 1};
  const uintptr_t before = (s.first - a) / sizeof(T);
  s.head = before < uintptr_t(n) ? static_cast<int>(before) : n;
  s.packs = last > s.first ? static_cast<int>((last - s.first) / kVecBytes) : 0;
  s.tail = s.head + s.packs * (kVecBytes / static_cast<int>(sizeof(T)));
  return s;
}

// x's tile -> shared memory: the whole 16-byte packs by cp.async, the edges (and non-contiguous rows)
// element by element. The image: element i of the tile (row r, column c: i = r N + c) at smem[phase + i], phase the
// elements between the tile's first element in HBM and the 16-byte boundary below it (0 for rows that are not
// contiguous), so that each pack lands on a 16-byte boundary of shared memory. Returns the phase.
template <typename T>
__device__ __forceinline__ int load_tile(T* smem, const T* __restrict__ x, int64_t r0, int rows, int cols,
                                         int64_t stride, bool contiguous) {
  const int n = rows * cols;
  if (!contiguous) {
    for (int i = threadIdx.x; i < n; i += kThreads) {
      const int r = i / cols;
      smem[i] = x[(r0 + r) * stride + (i - r * cols)];
    }
    return 0;
  }
  const T* src = x + r0 * stride;
  const PackSpan s = pack_span(src, n);
  const int phase = static_cast<int>((reinterpret_cast<uintptr_t>(src) - s.a0) / sizeof(T));
  char* base = reinterpret_cast<char*>(smem) + (s.first - s.a0);
  for (int p = threadIdx.x; p < s.packs; p += kThreads) {
    cp_async_16_ca(base + p * kVecBytes, reinterpret_cast<const char*>(s.first) + p * kVecBytes);
  }
  cp_async_commit();
  const int edge = s.head + (n - s.tail);
  for (int e = threadIdx.x; e < edge; e += kThreads) {
    const int i = e < s.head ? e : s.tail + (e - s.head);
    smem[phase + i] = src[i];
  }
  cp_async_wait<0>();
  return phase;
}

// The tile from shared memory -> y: the mirror of load_tile.
template <typename T>
__device__ __forceinline__ void store_tile(const T* smem, int phase, T* __restrict__ y, int64_t r0, int rows, int cols,
                                           int64_t stride, bool contiguous) {
  const int n = rows * cols;
  if (!contiguous) {
    for (int i = threadIdx.x; i < n; i += kThreads) {
      const int r = i / cols;
      y[(r0 + r) * stride + (i - r * cols)] = smem[i];
    }
    return;
  }
  T* dst = y + r0 * stride;
  const PackSpan s = pack_span(dst, n);
  const char* base = reinterpret_cast<const char*>(smem) + (s.first - s.a0);
  for (int p = threadIdx.x; p < s.packs; p += kThreads) {
    *reinterpret_cast<uint4*>(s.first + p * kVecBytes) = *reinterpret_cast<const uint4*>(base + p * kVecBytes);
  }
  const int edge = s.head + (n - s.tail);
  for (int e = threadIdx.x; e < edge; e += kThreads) {
    const int i = e < s.head ? e : s.tail + (e - s.head);
    dst[i] = smem[phase + i];
  }
}

// The phase of y's image of the tile that starts at row r0 (the elements between its first element and the
// 16-byte boundary below it; 0 where y's rows are not contiguous).
template <typename T>
__device__ __forceinline__ int phase_of(const T* p, int64_t offset, bool contiguous) {
  if (!contiguous) return 0;
  return static_cast<int>((reinterpret_cast<uintptr_t>(p + offset) % kVecBytes) / sizeof(T));
}

// One block per tile of tile_rows rows (a whole number of passes of kThreads / GROUP rows), striding over the
// tiles. Dynamic shared memory: x's image (in_bytes), then y's where it has a buffer of its own (separate).
template <typename T, int GROUP, int EPT, bool ROTATE>
__global__ void __launch_bounds__(kThreads, (resident_blocks<T, GROUP, ROTATE>()))
    tiled_rows_softmax_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int cols, int64_t x_stride,
                              int64_t y_stride, int tile_rows, bool x_contiguous, bool y_contiguous, bool separate,
                              int in_bytes) {
  extern __shared__ __align__(16) unsigned char tile_smem[];
  T* in = reinterpret_cast<T*>(tile_smem);
  T* out = separate ? reinterpret_cast<T*>(tile_smem + in_bytes) : in;
  constexpr int kRowsPerPass = kThreads / GROUP;
  const int group = threadIdx.x / GROUP;
  const int lane = threadIdx.x % GROUP;
  // ROTATE: the groups of a warp start their rows at different slots (slot k of a lane holds the row's chunk
  // (k + rot) mod EPT). Rows whose bytes are a multiple of 128 start on the same bank, so without it the rows of a
  // warp read and write the same banks at each step (ncu on the H200, bfloat16 1048576x64 without it: 2 of every 3
  // shared-memory wavefronts were bank conflicts). Without it, each slot's offset is a constant of the unrolled loop,
  // where the rotation costs its arithmetic at every slot of both passes; the launcher rotates only where the rows'
  // lengths make it pay (rotate_slots).
  const int rot = slot_rotation(ROTATE, group % (kWarpSize / GROUP), EPT);
  const int64_t tiles = (rows + tile_rows - 1) / tile_rows;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t r0 = t * tile_rows;
    const int n_rows = rows - r0 < tile_rows ? static_cast<int>(rows - r0) : tile_rows;
    if (t != blockIdx.x) __syncthreads();  // the previous tile's stores have read the buffers
    const int in_phase = load_tile(in, x, r0, n_rows, cols, x_stride, x_contiguous);
    const int out_phase = separate ? phase_of(y, r0 * y_stride, y_contiguous) : in_phase;
    __syncthreads();
    // Every lane takes part in every pass (the shuffles), its row or not (lim 0: no element).
    for (int base = 0; base < n_rows; base += kRowsPerPass) {
      const int r = base + group;
      const int lim = r < n_rows ? cols - lane : 0;  // slot k holds column lane + off(k) where off(k) < lim
      const T* row_in = in + in_phase + r * cols + lane;
      float v[EPT];
      float m = -CUDART_INF_F;
#pragma unroll
      for (int k = 0; k < EPT; ++k) {
        const int off = slot_column(k, rot, EPT, GROUP);
        v[k] = -CUDART_INF_F;
        if (off < lim) v[k] = to_float(row_in[off]);
        m = fmaxf(m, v[k]);
      }
      m = warp_allreduce<GROUP>(m, MaxOp{});
      float d = 0.0f;
#pragma unroll
      for (int k = 0; k < EPT; ++k) {
        v[k] = fast_exp(v[k] - m);  // a slot past the row: exp(-inf) = 0 (its value is never written)
        d += v[k];
      }
      d = warp_allreduce<GROUP>(d, SumOp{});
      const float inv = __frcp_rn(d);
      T* row_out = out + out_phase + r * cols + lane;
#pragma unroll
      for (int k = 0; k < EPT; ++k) {
        const int off = slot_column(k, rot, EPT, GROUP);
        if (off < lim) row_out[off] = from_float<T>(v[k] * inv);
      }
    }
    __syncthreads();
    store_tile(out, out_phase, y, r0, n_rows, cols, y_stride, y_contiguous);
  }
}

// Calls f(std::integral_constant<int, index>) for the first shape of kTileShapes that holds rows of `cols`.
template <int I = 0, typename F>
cudaError_t dispatch_tile_shape(int64_t cols, F&& f) {
  if constexpr (I == kShapes) {
    return cudaErrorInvalidValue;
  } else {
    if (cols <= kTileShapes[I].max_cols) return f(std::integral_constant<int, I>{});
    return dispatch_tile_shape<I + 1>(cols, f);
  }
}

// Shared-memory wavefronts of one warp's reads of a tile's rows, slot by slot as the kernel reads them: per slot, the
// most distinct 4-byte words that any of the 32 banks serves (1: no conflict), summed over the EPT slots and over
// the phases a tile's image can start at (elem_size-byte elements of rows of `cols`; lanes past the row read
// nothing). The kernel's address of slot k: row r of the warp at r * cols, lane + off(k) after it.
int slot_wavefronts(int cols, int elem_size, int group, int ept, bool rotate) {
  const int rows_per_warp = kWarpSize / group;
  int total = 0;
  for (int phase = 0; phase < kVecBytes / elem_size; ++phase) {
    for (int k = 0; k < ept; ++k) {
      int64_t words[kWarpSize];
      int count = 0;
      for (int t = 0; t < kWarpSize; ++t) {
        const int r = t / group, lane = t % group;
        const int col = lane + slot_column(k, slot_rotation(rotate, r % rows_per_warp, ept), ept, group);
        if (col < cols) words[count++] = (int64_t{phase} + int64_t{r} * cols + col) * elem_size / 4;
      }
      int most = 0;
      for (int bank = 0; bank < kWarpSize; ++bank) {
        int distinct = 0;
        for (int i = 0; i < count; ++i) {
          if (words[i] % kWarpSize != bank) continue;
          bool seen = false;
          for (int j = 0; j < i && !seen; ++j) seen = words[j] == words[i];
          distinct += seen ? 0 : 1;
        }
        most = std::max(most, distinct);
      }
      total += most;
    }
  }
  return total;
}

// Whether the groups' slots rotate (the kernel's ROTATE) for rows of `cols`: where the rows without the rotation
// would take more than kRotateRatio (1.9) times its wavefronts (slot_wavefronts). Why 1.9: the arithmetic the
// constant slots save is worth some more wavefronts, not twice as many (bfloat16 N = 53 at 1.69 times the
// wavefronts: 0.79 of the rotated time; N = 63 at 2.47: 1.24). The model falls short at float32 N = 94 and 95
// (1.03 at 1.68 and 1.71). Rows of odd N <= 16 (one lane a row) do not rotate: they already sit on different banks,
// and the rotation would put them on few (float32 N = 15: 60 wavefronts against 960). The answer is remembered per
// element size and length.
constexpr int kRotateRatioNum = 19, kRotateRatioDen = 10;  // 1.9
bool rotate_slots(int cols, int elem_size, int group, int ept) {
  static std::atomic<signed char> memo[2][kMaxCols + 1];  // 0: not asked yet, 1: constant slots, 2: rotated
  std::atomic<signed char>& m = memo[elem_size == 4 ? 1 : 0][cols];
  signed char v = m.load(std::memory_order_relaxed);
  if (v == 0) {
    const int plain = slot_wavefronts(cols, elem_size, group, ept, false);
    const int rotated = slot_wavefronts(cols, elem_size, group, ept, true);
    v = plain * kRotateRatioDen > rotated * kRotateRatioNum ? 2 : 1;
    m.store(v, std::memory_order_relaxed);
  }
  return v == 2;
}

// Bytes of one side's image: the tile plus up to 15 bytes of phase, in whole 16-byte packs.
constexpr int image_bytes(int elems, int elem_size) {
  return (elems * elem_size + 2 * kVecBytes - 1) / kVecBytes * kVecBytes;
}

}  // namespace

cudaError_t softmax_tiled_rows(const RowsArgs& a, cudaStream_t stream) {
  if (a.cols > kMaxCols) return cudaErrorInvalidValue;  // see Limits in the header
  int sms = 0;
  LAB_CUDA_TRY(device_sm_count(&sms));
  return dispatch_dtype(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return dispatch_tile_shape(a.cols, [&](auto index) {
      constexpr TileShape s = kTileShapes[decltype(index)::value];
      constexpr int kRowsPerPass = kThreads / s.group;
      const int cols = static_cast<int>(a.cols);
      const int64_t row_bytes = a.cols * static_cast<int64_t>(sizeof(T));
      const int fit = static_cast<int>(std::max<int64_t>(1, kTileBytes / row_bytes));
      const int64_t rows_wanted = fit >= kRowsPerPass ? fit / kRowsPerPass * kRowsPerPass : fit;
      // Few rows: smaller tiles (whole passes still), so that the grid has kFewRowsBlocksPerSm blocks per SM.
      const int64_t spread = (a.rows + int64_t{sms} * kFewRowsBlocksPerSm - 1) / (int64_t{sms} * kFewRowsBlocksPerSm);
      const int64_t spread_rows = (spread + kRowsPerPass - 1) / kRowsPerPass * kRowsPerPass;
      const int tile_rows = static_cast<int>(std::min({rows_wanted, spread_rows, a.rows}));
      const bool x_contiguous = a.x_row_stride == a.cols || a.rows == 1;
      const bool y_contiguous = a.y_row_stride == a.cols || a.rows == 1;
      // In place where y's image would sit at x's phase in every tile: both contiguous and as far past a
      // 16-byte boundary, or both element by element (phase 0).
      const auto offset = reinterpret_cast<uintptr_t>(a.x) - reinterpret_cast<uintptr_t>(a.y);
      const bool separate =
          x_contiguous != y_contiguous || (x_contiguous && offset % kVecBytes != 0);
      const int in_bytes = image_bytes(tile_rows * cols, sizeof(T));
      const int smem = in_bytes * (separate ? 2 : 1);
      const bool rotate = rotate_slots(cols, sizeof(T), s.group, s.ept);
      const auto kernel = rotate ? tiled_rows_softmax_kernel<T, s.group, s.ept, true>
                                 : tiled_rows_softmax_kernel<T, s.group, s.ept, false>;
      const int64_t tiles = (a.rows + tile_rows - 1) / tile_rows;
      const unsigned grid = static_cast<unsigned>(std::min<int64_t>(tiles, INT_MAX));
      kernel<<<grid, kThreads, smem, stream>>>(static_cast<const T*>(a.x), static_cast<T*>(a.y), a.rows, cols,
                                               a.x_row_stride, a.y_row_stride, tile_rows, x_contiguous,
                                               y_contiguous, separate, in_bytes);
      LAB_LAUNCH_CHECK();
      return cudaSuccess;
    });
  });
}

}  // namespace lab
