// 128-bit vector access to a row of float, half or bfloat16, and the loops that walk a row with
// it. A row is split into a scalar head (until the pointer is 16-byte aligned), a body of 16-byte
// packs, and a scalar tail, so rows of any length and any row stride take the wide path for
// almost all of their elements. Arithmetic is float32 whatever the storage type.
#pragma once

#include <cstdint>

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
