// Reductions across a warp and across a thread block, over functors (MaxOp, SumOp, or any type
// with `V operator()(V, V)` and a static `identity()`). Every helper is an all-reduce: every
// thread receives the result, so no second broadcast step is needed by the caller.
#pragma once

#include <cuda_runtime.h>
#include <math_constants.h>

#include "lab/exp.cuh"
#include "lab/vec.cuh"

namespace lab {

constexpr int kWarpSize = 32;

struct MaxOp {
  // fmaxf drops a NaN operand; a NaN in a row still poisons the row later through exp(NaN - m),
  // which reproduces torch's "NaN in, NaN row out".
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
  __device__ __forceinline__ static float identity() { return -CUDART_INF_F; }
};

struct SumOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
  __device__ __forceinline__ static float identity() { return 0.0f; }
};

__device__ __forceinline__ float shfl_xor(float v, int lane_mask) {
  return __shfl_xor_sync(0xffffffffu, v, lane_mask);
}

// A thread's register fragment of a row: P packs of K floats (compile-time sizes, so the fragment
// stays in registers). The max of its elements (fmaxf skips NaN).
template <int P, int K>
__device__ __forceinline__ float fragment_max(const float (&v)[P][K]) {
  float m = MaxOp::identity();
#pragma unroll
  for (int k = 0; k < P; ++k) {
#pragma unroll
    for (int j = 0; j < K; ++j) m = fmaxf(m, v[k][j]);
  }
  return m;
}

// Replace each element by exp(v - shift), kept for the write (one exponential per element), and
// return their sum.
template <int P, int K>
__device__ __forceinline__ float fragment_exp_sum(float (&v)[P][K], float shift) {
  float d = 0.0f;
#pragma unroll
  for (int k = 0; k < P; ++k) {
#pragma unroll
    for (int j = 0; j < K; ++j) {
      v[k][j] = fast_exp(v[k][j] - shift);
      d += v[k][j];
    }
  }
  return d;
}

// The same for a fragment of 16-bit elements held as loaded (T = half or bfloat16): P packs of
// kPackWords words, two elements per word (vec.cuh). The max in 16 bits, pairwise (exact, NaN
// skipped as by fmaxf), with one chain per word position for independent instructions.
template <typename T, int P>
__device__ __forceinline__ float fragment_max(const uint32_t (&w)[P][kPackWords]) {
  static_assert(sizeof(T) == 2, "two 16-bit elements per word");
  uint32_t m[kPackWords];
#pragma unroll
  for (int i = 0; i < kPackWords; ++i) m[i] = w[0][i];
#pragma unroll
  for (int k = 1; k < P; ++k) {
#pragma unroll
    for (int i = 0; i < kPackWords; ++i) m[i] = word_max<T>(m[i], w[k][i]);
  }
#pragma unroll
  for (int i = 1; i < kPackWords; ++i) m[0] = word_max<T>(m[0], m[i]);
  const float2 f = word_to_float2<T>(m[0]);
  return fmaxf(f.x, f.y);
}

// The sum of exp(v - shift) over a 16-bit fragment, converting each element on the fly; the
// fragment is left as it is (the write recomputes the exponentials from it, unless `keep` stored them).
// One loop, given the exponential: folded (one FFMA per element, exp.cuh fast_exp2_fma) where the shift
// allows, else subtract and exponentiate; two sums, one per half of a word, for independent instructions.
// keep(k, i, e) (optional) receives word i of pack k's two exponentials (elements 2i and 2i + 1 of the
// pack), called in order: k ascending, and for each k, i = 0 to kPackWords - 1.
// EXACT: never folded, for a sum whose logarithm is a result (cross-entropy's loss: the fold's exponent error,
// up to |shift| 2^-24, is a relative error of D that a near-zero loss, log D with D near 1, would carry whole).
struct KeepNone {
  __device__ __forceinline__ void operator()(int, int, float2) const {}
};
template <typename T, int P, typename Keep = KeepNone, bool EXACT = false>
__device__ __forceinline__ float fragment_exp_sum(const uint32_t (&w)[P][kPackWords], float shift, Keep keep = {}) {
  static_assert(sizeof(T) == 2, "two 16-bit elements per word");
  float d0 = 0.0f, d1 = 0.0f;
  const auto sum = [&](auto exp) {
#pragma unroll
    for (int k = 0; k < P; ++k) {
#pragma unroll
      for (int i = 0; i < kPackWords; ++i) {
        const float2 f = word_to_float2<T>(w[k][i]);
        const float2 e = make_float2(exp(f.x), exp(f.y));
        keep(k, i, e);
        d0 += e.x;
        d1 += e.y;
      }
    }
  };
  if (!EXACT && foldable(shift)) {
    const float c = shift * kLog2e;
    sum([c](float x) { return fast_exp2_fma(x, c); });
  } else {
    sum([shift](float x) { return fast_exp(x - shift); });
  }
  return d0 + d1;
}

// The softmax of a word's two 16-bit elements, rounded to T: exp(x - m) / d each, given the row's
// max m and log2_d = fast_log2(d) of its sum d (fast_exp_over: no multiply by 1 / d).
template <typename T>
__device__ __forceinline__ uint32_t word_softmax(uint32_t w, float m, float log2_d) {
  const float2 f = word_to_float2<T>(w);
  return float2_to_word<T>(fast_exp_over(f.x - m, log2_d), fast_exp_over(f.y - m, log2_d));
}

// The same with the row max folded into the FFMA: c = m log2 e + log2 d, for |m| <= kFoldMax only
// (exp.cuh, fast_exp2_fma).
template <typename T>
__device__ __forceinline__ uint32_t word_softmax_folded(uint32_t w, float c) {
  const float2 f = word_to_float2<T>(w);
  return float2_to_word<T>(fast_exp2_fma(f.x, c), fast_exp2_fma(f.y, c));
}

// Butterfly (xor) all-reduce inside groups of WIDTH consecutive lanes (a whole warp by default):
// after log2(WIDTH) steps every lane holds op over its group. xor with a mask below WIDTH never
// leaves the group, so several groups reduce independently in one warp. All 32 lanes must call it.
template <int WIDTH = kWarpSize, typename V, typename Op>
__device__ __forceinline__ V warp_allreduce(V v, Op op) {
  static_assert(WIDTH >= 1 && WIDTH <= kWarpSize && (WIDTH & (WIDTH - 1)) == 0, "a power of two up to 32");
#pragma unroll
  for (int mask = WIDTH / 2; mask > 0; mask /= 2) v = op(v, shfl_xor(v, mask));
  return v;
}

// The smallest power of two >= n (n >= 1).
constexpr int pow2_ceil(int n) { return n <= 1 ? 1 : 2 * pow2_ceil((n + 1) / 2); }

// Two-level block all-reduce, one barrier per call: xor shuffles inside each warp, lane 0 of each
// warp stores the warp's partial, one barrier, then every warp reads all the partials and reduces
// them with xor shuffles. Every lane of the block ends with the same bits: each lane combines the
// same operands in the same order (the ops are commutative), so no broadcast step is needed.
// GROUP < THREADS: the block holds THREADS / GROUP groups of GROUP threads, each reduced on its own: groups of
// whole warps as above (a warp reads its own group's partials only; the one barrier is still the block's), and
// groups of a warp or less by xor shuffles inside the group alone (warp_allreduce<GROUP>: no shared memory, no
// barrier).
// The partials alternate between two halves of the storage, call by call: a thread writes half p
// again two calls later, after the barrier of the call between, and no thread reaches that barrier
// before it has read half p. So no barrier guards the storage from the previous call's readers (the
// version this replaced took three per call: guard, partials, and the first warp's total).
// An object made once per kernel, before the row loop (it keeps the half for the next call); every
// thread of the block makes the same sequence of calls.
template <typename V, int THREADS, int GROUP = THREADS>
class BlockAllReduce {
 public:
  static_assert(THREADS % kWarpSize == 0 && THREADS <= 1024, "whole warps, at most 1024 threads");
  static_assert(GROUP >= 1 && THREADS % GROUP == 0, "groups that divide the block");
  static_assert(GROUP <= kWarpSize ? pow2_ceil(GROUP) == GROUP
                                   : GROUP % kWarpSize == 0 &&
                                         (GROUP == THREADS || pow2_ceil(GROUP / kWarpSize) == GROUP / kWarpSize),
                "a power-of-two group of at most a warp, or whole warps (a power-of-two count of them where several "
                "groups share the block)");
  static constexpr int kWarps = GROUP < kWarpSize ? 1 : GROUP / kWarpSize;  // per group
  // Lanes i and i + kWidth read the same partial: each group of kWidth lanes reduces all of them.
  static constexpr int kWidth = pow2_ceil(kWarps);
  struct Storage {
    V partial[2][THREADS / kWarpSize];
  };

  __device__ __forceinline__ explicit BlockAllReduce(Storage& s) : s_(s) {}

  template <typename Op>
  __device__ __forceinline__ V operator()(V v, Op op) {
    if constexpr (GROUP < kWarpSize) return warp_allreduce<GROUP>(v, op);
    v = warp_allreduce(v, op);
    if constexpr (kWarps == 1) {
      return v;
    } else {
      V* partial = s_.partial[half_];
      half_ ^= 1;
      const int lane = threadIdx.x % kWarpSize;
      const int warp = threadIdx.x / kWarpSize;
      if (lane == 0) partial[warp] = v;
      __syncthreads();
      const int i = lane % kWidth;
      const int first = GROUP == THREADS ? 0 : warp / kWarps * kWarps;  // the group's first warp
      return warp_allreduce<kWidth>(i < kWarps ? partial[first + i] : Op::identity(), op);
    }
  }

 private:
  Storage& s_;
  int half_ = 0;
};

// The classic shared-memory tree: one slot per thread, halve the active threads each step with a
// barrier between steps (log2(THREADS) barriers). Kept as the teaching baseline of three_pass;
// BlockAllReduce does the same work with one barrier. The same interface as BlockAllReduce.
template <typename V, int THREADS>
class SharedTreeAllReduce {
 public:
  static_assert((THREADS & (THREADS - 1)) == 0, "the tree halves THREADS: it must be a power of two");
  struct Storage {
    V slot[THREADS];
  };

  __device__ __forceinline__ explicit SharedTreeAllReduce(Storage& s) : s_(s) {}

  template <typename Op>
  __device__ __forceinline__ V operator()(V v, Op op) {
    const int tid = threadIdx.x;
    __syncthreads();  // every thread has read the previous call's slot[0]
    s_.slot[tid] = v;
    __syncthreads();
#pragma unroll
    for (int stride = THREADS / 2; stride > 0; stride /= 2) {
      if (tid < stride) s_.slot[tid] = op(s_.slot[tid], s_.slot[tid + stride]);
      __syncthreads();
    }
    return s_.slot[0];
  }

 private:
  Storage& s_;
};

}  // namespace lab
