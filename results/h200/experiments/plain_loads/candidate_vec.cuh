// 128-bit vector access to a row of float, half or bfloat16, and the loops that walk a row with
// it. A row is split into a scalar head (until the pointer is 16-byte aligned), a body of 16-byte
// packs, and a scalar tail, so rows of any length and any row stride take the wide path for
// almost all of their elements. Arithmetic is float32 whatever the storage type.
#pragma once

#include <cstdint>
#include <cstring>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace lab {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

constexpr int kVecBytes = 16;  // the widest global load/store a thread can issue (LDG.128)

// Elements of T in one 16-byte access: 4 floats, 8 halves or bfloat16s.
template <typename T>
constexpr int kPack = kVecBytes / sizeof(T);

template <typename T>
struct alignas(kVecBytes) Pack {
  T v[kPack<T>];
};

// A 16-byte pack read by a plain ld.global (LDG.E.128), not the read-only path (ld.global.nc, LDG.E.128.CONSTANT)
// that a load through a const __restrict__ pointer compiles to.
template <typename T>
__device__ __forceinline__ Pack<T> ld_global_pack(const Pack<T>* p) {
  uint4 q;
  asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(q.x), "=r"(q.y), "=r"(q.z), "=r"(q.w)
               : "l"(p));
  Pack<T> pk;
  memcpy(&pk, &q, sizeof(pk));
  return pk;
}

// --- 16-bit data held as raw 32-bit words ---------------------------------------------------------
// A 16-byte pack of half or bfloat16 is kPackWords words as loaded; word i holds elements 2i (low
// 16 bits) and 2i + 1 (high 16 bits), a CUDA pair (__half2, __nv_bfloat162) bit for bit. Kept as
// words, a thread holds 2 elements per register instead of 1 float.
constexpr int kPackWords = kVecBytes / 4;

template <typename T>
struct PairOf;
template <>
struct PairOf<__half> {
  using type = __half2;
  static constexpr uint16_t kMinusInf = 0xFC00u;  // -inf in float16
};
template <>
struct PairOf<__nv_bfloat16> {
  using type = __nv_bfloat162;
  static constexpr uint16_t kMinusInf = 0xFF80u;  // -inf in bfloat16
};

// A word of two -inf elements of T (fills the parts of a fragment past the row).
template <typename T>
constexpr uint32_t kMinusInfWord = uint32_t{PairOf<T>::kMinusInf} * 0x00010001u;

template <typename T>
__device__ __forceinline__ typename PairOf<T>::type word_as_pair(uint32_t w) {
  typename PairOf<T>::type p;
  static_assert(sizeof(p) == sizeof(w), "a pair is one 32-bit word");
  memcpy(&p, &w, sizeof(w));  // a register move: no memory is touched
  return p;
}
template <typename P>
__device__ __forceinline__ uint32_t pair_as_word(P p) {
  uint32_t w;
  static_assert(sizeof(p) == sizeof(w), "a pair is one 32-bit word");
  memcpy(&w, &p, sizeof(w));
  return w;
}

// Both elements of a word as floats (exact: every half and bfloat16 is a float).
template <typename T>
__device__ __forceinline__ float2 word_to_float2(uint32_t w);
template <>
__device__ __forceinline__ float2 word_to_float2<__half>(uint32_t w) { return __half22float2(word_as_pair<__half>(w)); }
template <>
__device__ __forceinline__ float2 word_to_float2<__nv_bfloat16>(uint32_t w) {
  // A bfloat16 is the high 16 bits of a float32: one shift or mask per element.
  return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xFFFF0000u));
}

// A bfloat16 word's two elements as floats, by byte permutes (PRMT) instead of word_to_float2's
// shift and mask: the same values, but instructions ptxas does not recognise as the ones an earlier
// word_to_float2 of the same word issued. A second pass over a fragment (cluster's packed write)
// converts with this: with word_to_float2 there, ptxas merged the two passes' conversions and kept
// the floats of the first live across the exchange, and spilled (16-176 bytes in nine bfloat16
// kernels of 72 and 128 registers).
__device__ __forceinline__ float2 bfloat16_word_to_float2_by_permute(uint32_t w) {
  uint32_t lo, hi;
  asm("prmt.b32 %0, %1, 0, 0x1044;" : "=r"(lo) : "r"(w));  // bytes {0, 0, w0, w1}: the low element
  asm("prmt.b32 %0, %1, 0, 0x3244;" : "=r"(hi) : "r"(w));  // bytes {0, 0, w2, w3}: the high element
  return make_float2(__uint_as_float(lo), __uint_as_float(hi));
}

// Two floats rounded (to nearest even) into one word: lo in the low 16 bits (one cvt instruction).
template <typename T>
__device__ __forceinline__ uint32_t float2_to_word(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t float2_to_word<__half>(float lo, float hi) {
  return pair_as_word(__floats2half2_rn(lo, hi));
}
template <>
__device__ __forceinline__ uint32_t float2_to_word<__nv_bfloat16>(float lo, float hi) {
  return pair_as_word(__floats2bfloat162_rn(lo, hi));
}

// The elementwise max of two words, in 16 bits (exact). As fmaxf, a NaN operand is dropped for the
// other one (NaN only when both are NaN).
template <typename T>
__device__ __forceinline__ uint32_t word_max(uint32_t a, uint32_t b) {
  return pair_as_word(__hmax2(word_as_pair<T>(a), word_as_pair<T>(b)));
}

// Whether `p` may be read or written as 16-byte packs.
template <typename T>
__device__ __forceinline__ bool is_aligned(const T* p) {
  return reinterpret_cast<uintptr_t>(p) % kVecBytes == 0;
}

// Elements before `p` reaches 16-byte alignment (p is at least sizeof(T)-aligned).
template <typename T>
__device__ __forceinline__ int elems_to_alignment(const T* p) {
  const unsigned misaligned = static_cast<unsigned>(reinterpret_cast<uintptr_t>(p) % kVecBytes);
  return misaligned == 0 ? 0 : static_cast<int>((kVecBytes - misaligned) / sizeof(T));
}

// Call f(const float (&v)[K]) on every element of row[0, n) owned by this thread: K = kPack<T>
// for packs of the aligned body, K = 1 for the head and tail. Threads stride through the row, so
// each warp access is coalesced. UNROLL packs are loaded before the first is used, to keep
// several independent loads in flight per thread.
template <int THREADS, int UNROLL, typename T, typename F>
__device__ __forceinline__ void row_for_each(const T* row, int n, F&& f) {
  constexpr int K = kPack<T>;
  const int tid = threadIdx.x;
  const int head = min(n, elems_to_alignment(row));
  for (int i = tid; i < head; i += THREADS) {
    const float v[1] = {to_float(row[i])};
    f(v);
  }
  const Pack<T>* body = reinterpret_cast<const Pack<T>*>(row + head);
  const int packs = (n - head) / K;
  int i = tid;
  for (; i + (UNROLL - 1) * THREADS < packs; i += UNROLL * THREADS) {
    Pack<T> p[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) p[u] = body[i + u * THREADS];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      float v[K];
#pragma unroll
      for (int k = 0; k < K; ++k) v[k] = to_float(p[u].v[k]);
      f(v);
    }
  }
  for (; i < packs; i += THREADS) {
    const Pack<T> p = body[i];
    float v[K];
#pragma unroll
    for (int k = 0; k < K; ++k) v[k] = to_float(p.v[k]);
    f(v);
  }
  for (int j = head + packs * K + tid; j < n; j += THREADS) {
    const float v[1] = {to_float(row[j])};
    f(v);
  }
}

// out[j] = g(in[j]) for the elements of the row owned by this thread. Wide when in and out share
// their alignment (always for contiguous tensors of the same dtype), scalar otherwise.
template <int THREADS, int UNROLL, typename T, typename G>
__device__ __forceinline__ void row_transform(const T* in, T* out, int n, G&& g) {
  constexpr int K = kPack<T>;
  const int tid = threadIdx.x;
  const bool same_alignment =
      (reinterpret_cast<uintptr_t>(in) % kVecBytes) == (reinterpret_cast<uintptr_t>(out) % kVecBytes);
  const int head = same_alignment ? min(n, elems_to_alignment(in)) : n;
  for (int i = tid; i < head; i += THREADS) out[i] = from_float<T>(g(to_float(in[i])));
  const Pack<T>* src = reinterpret_cast<const Pack<T>*>(in + head);
  Pack<T>* dst = reinterpret_cast<Pack<T>*>(out + head);
  const int packs = (n - head) / K;
  int i = tid;
  for (; i + (UNROLL - 1) * THREADS < packs; i += UNROLL * THREADS) {
    Pack<T> p[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) p[u] = src[i + u * THREADS];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
      for (int k = 0; k < K; ++k) p[u].v[k] = from_float<T>(g(to_float(p[u].v[k])));
      dst[i + u * THREADS] = p[u];
    }
  }
  for (; i < packs; i += THREADS) {
    Pack<T> p = src[i];
#pragma unroll
    for (int k = 0; k < K; ++k) p.v[k] = from_float<T>(g(to_float(p.v[k])));
    dst[i] = p;
  }
  for (int j = head + packs * K + tid; j < n; j += THREADS) out[j] = from_float<T>(g(to_float(in[j])));
}

}  // namespace lab
