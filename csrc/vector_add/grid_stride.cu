// grid_stride: c = a + b with 16-byte accesses in a grid-stride loop.
//
// Algorithm: each thread takes kUnroll 16-byte packs of a and of b per step, all loads in flight
// before the first add (bytes in flight per SM decide a streaming kernel's speed), adds them in
// float32 and stores the packs of c; the grid is a few waves of resident blocks striding over the
// vector. When a, b and c are equally misaligned (a view starting mid-pack), a scalar head brings
// them to 16-byte alignment first; when they differ, every element is scalar. The tail past the
// last whole pack is scalar.
// HBM traffic: read a and b once, write c once: 3 * N * itemsize bytes (2R + 1W).
// Launch: 256 threads per block, blocks = min(packs / (256 * kUnroll), SMs * resident blocks).
// Limits: any N >= 1 (64-bit indexing), float32, float16 and bfloat16.
#include <algorithm>
#include <cstdint>

#include "lab/check.cuh"
#include "lab/dispatch.cuh"
#include "lab/launch.h"
#include "lab/vec.cuh"

namespace lab {
namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;  // 4 x 16 bytes of a and of b in flight per thread

template <typename T>
__global__ void __launch_bounds__(kThreads) vector_add_kernel(const T* __restrict__ a, const T* __restrict__ b,
                                                              T* __restrict__ c, int64_t n, bool wide) {
  constexpr int K = kPack<T>;
  const int64_t stride = int64_t{gridDim.x} * kThreads;
  const int64_t tid = int64_t{blockIdx.x} * kThreads + threadIdx.x;
  const int64_t to_aligned = elems_to_alignment(c);
  const int64_t head = !wide ? n : (to_aligned < n ? to_aligned : n);
  for (int64_t i = tid; i < head; i += stride) c[i] = from_float<T>(to_float(a[i]) + to_float(b[i]));
  if (!wide) return;
  const int64_t packs = (n - head) / K;
  const Pack<T>* pa = reinterpret_cast<const Pack<T>*>(a + head);
  const Pack<T>* pb = reinterpret_cast<const Pack<T>*>(b + head);
  Pack<T>* pc = reinterpret_cast<Pack<T>*>(c + head);
  int64_t p = tid;
  for (; p + (kUnroll - 1) * stride < packs; p += kUnroll * stride) {
    Pack<T> x[kUnroll], y[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      x[u] = pa[p + u * stride];
      y[u] = pb[p + u * stride];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int j = 0; j < K; ++j) x[u].v[j] = from_float<T>(to_float(x[u].v[j]) + to_float(y[u].v[j]));
      pc[p + u * stride] = x[u];
    }
  }
  for (; p < packs; p += stride) {
    Pack<T> x = pa[p];
    const Pack<T> y = pb[p];
#pragma unroll
    for (int j = 0; j < K; ++j) x.v[j] = from_float<T>(to_float(x.v[j]) + to_float(y.v[j]));
    pc[p] = x;
  }
  for (int64_t i = head + packs * K + tid; i < n; i += stride) c[i] = from_float<T>(to_float(a[i]) + to_float(b[i]));
}

}  // namespace

cudaError_t vector_add_grid_stride(const VectorArgs& args, cudaStream_t stream) {
  int sms = 0;
  LAB_CUDA_TRY(device_sm_count(&sms));
  return dispatch_dtype(args.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto misalignment = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % kVecBytes; };
    const bool wide = misalignment(args.a) == misalignment(args.c) && misalignment(args.b) == misalignment(args.c);
    int per_sm = 0;
    LAB_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, vector_add_kernel<T>, kThreads, 0));
    const int64_t work = wide ? args.n / kPack<T> / kUnroll + 1 : args.n;
    const int64_t blocks = std::clamp<int64_t>((work + kThreads - 1) / kThreads, 1, int64_t{std::max(per_sm, 1)} * sms);
    vector_add_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        static_cast<const T*>(args.a), static_cast<const T*>(args.b), static_cast<T*>(args.c), args.n, wide);
    LAB_LAUNCH_CHECK();
    return cudaSuccess;
  });
}

}  // namespace lab
