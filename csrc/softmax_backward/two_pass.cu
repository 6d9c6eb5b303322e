// two_pass: dx = y * (dy - sum(dy * y)) per row, for rows of any length.
//
// Algorithm: one block per row. Sweep 1: each thread sums dy * y over its 16-byte packs (kUnroll
// packs of each in flight), then the block all-reduce gives s. Sweep 2: dx = y * (dy - s). When y,
// dy and dx rows are equally misaligned (views starting mid-pack) a scalar head aligns them first;
// when they differ, every element is scalar.
// HBM traffic: read y and dy twice, write dx once: 5 * M * N * itemsize bytes (4R + 1W); the
// second sweep hits L2 while the rows in flight fit there.
// Launch: grid = rows (blocks stride past 2^31 - 1), threads = one pack per thread rounded up to a
// power of two in [32, 512].
// Limits: any rows (64-bit offsets), 1 <= N <= 2^31 - 1, any row strides.
#include <cstdint>

#include "lab/check.cuh"
#include "lab/dispatch.cuh"
#include "lab/launch.h"
#include "lab/reduce.cuh"
#include "lab/vec.cuh"

namespace lab {
namespace {

constexpr int kUnroll = 2;  // packs of y and of dy in flight per thread in each sweep
// 1024 resident threads of up to 64 registers: two inputs' packs in flight do not fit the 42 that
// softmax's block-per-row kernels ask for (kMinResidentBlocks).
template <int THREADS>
constexpr int kMinBlocks = 1024 / THREADS > 0 ? 1024 / THREADS : 1;

template <typename T, int THREADS>
__global__ void __launch_bounds__(THREADS, kMinBlocks<THREADS>)
    softmax_backward_two_pass_kernel(const T* __restrict__ y, const T* __restrict__ dy, T* __restrict__ dx,
                                     int64_t rows, int cols, int64_t y_stride, int64_t dy_stride, int64_t dx_stride) {
  constexpr int K = kPack<T>;
  using Reduce = BlockAllReduce<float, THREADS>;
  __shared__ typename Reduce::Storage storage;
  Reduce reduce(storage);
  const int tid = threadIdx.x;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* yr = y + row * y_stride;
    const T* dyr = dy + row * dy_stride;
    T* dxr = dx + row * dx_stride;
    const auto misalignment = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % kVecBytes; };
    const bool wide = misalignment(yr) == misalignment(dyr) && misalignment(yr) == misalignment(dxr);
    const int head = wide ? min(cols, elems_to_alignment(yr)) : cols;
    const int packs = (cols - head) / K;
    const Pack<T>* py = reinterpret_cast<const Pack<T>*>(yr + head);
    const Pack<T>* pd = reinterpret_cast<const Pack<T>*>(dyr + head);

    float s = 0.0f;
    for (int i = tid; i < head; i += THREADS) s += to_float(dyr[i]) * to_float(yr[i]);
    int p = tid;
    for (; p + (kUnroll - 1) * THREADS < packs; p += kUnroll * THREADS) {
      Pack<T> a[kUnroll], b[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        a[u] = py[p + u * THREADS];
        b[u] = pd[p + u * THREADS];
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
        for (int j = 0; j < K; ++j) s += to_float(b[u].v[j]) * to_float(a[u].v[j]);
      }
    }
    for (; p < packs; p += THREADS) {
      const Pack<T> a = py[p], b = pd[p];
#pragma unroll
      for (int j = 0; j < K; ++j) s += to_float(b.v[j]) * to_float(a.v[j]);
    }
    for (int i = head + packs * K + tid; i < cols; i += THREADS) s += to_float(dyr[i]) * to_float(yr[i]);
    s = reduce(s, SumOp{});

    for (int i = tid; i < head; i += THREADS) dxr[i] = from_float<T>(to_float(yr[i]) * (to_float(dyr[i]) - s));
    Pack<T>* px = reinterpret_cast<Pack<T>*>(dxr + head);
    for (p = tid; p < packs; p += THREADS) {
      const Pack<T> a = py[p], b = pd[p];
      Pack<T> out;
#pragma unroll
      for (int j = 0; j < K; ++j) out.v[j] = from_float<T>(to_float(a.v[j]) * (to_float(b.v[j]) - s));
      px[p] = out;
    }
    for (int i = head + packs * K + tid; i < cols; i += THREADS) {
      dxr[i] = from_float<T>(to_float(yr[i]) * (to_float(dyr[i]) - s));
    }
  }
}

}  // namespace

cudaError_t softmax_backward_two_pass(const RowsGradArgs& a, cudaStream_t stream) {
  const int threads = block_threads_for_row(a.cols, elem_bytes(a.dtype));
  return dispatch_dtype(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return dispatch_threads(threads, [&](auto th) {
      constexpr int kThreads = decltype(th)::value;
      softmax_backward_two_pass_kernel<T, kThreads><<<row_grid(a.rows), kThreads, 0, stream>>>(
          static_cast<const T*>(a.y), static_cast<const T*>(a.dy), static_cast<T*>(a.dx), a.rows,
          static_cast<int>(a.cols), a.y_row_stride, a.dy_row_stride, a.dx_row_stride);
      LAB_LAUNCH_CHECK();
      return cudaSuccess;
    });
  });
}

}  // namespace lab
