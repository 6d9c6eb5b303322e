// Host-side dispatch from run-time values (dtype, threads per block) to kernel template arguments,
// written once for every launcher: a launcher passes a generic lambda that receives a type tag
// and a compile-time constant.
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>
#include <map>
#include <mutex>
#include <type_traits>
#include <utility>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "lab/check.cuh"
#include "lab/launch.h"
#include "lab/vec.cuh"

namespace lab {

template <typename T>
struct TypeTag {
  using type = T;
};

template <typename F>
cudaError_t dispatch_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32: return f(TypeTag<float>{});
    case DType::kFloat16: return f(TypeTag<__half>{});
    case DType::kBFloat16: return f(TypeTag<__nv_bfloat16>{});
  }
  return cudaErrorInvalidValue;
}

// Resident blocks of THREADS asked of __launch_bounds__: 1536 of the 2048 threads a Hopper SM can
// hold (at most 32 blocks). ptxas then keeps registers at or under 65536 / 1536 = 42 per thread,
// which these memory-bound kernels fit without spilling; full occupancy (32 registers) spills.
constexpr int kMaxRowBlockThreads = 512;
template <int THREADS>
constexpr int kMinResidentBlocks = (1536 / THREADS) < 32 ? (1536 / THREADS) : 32;

// Threads per block for block-per-row kernels: enough threads for one 16-byte pack each, as a
// power of two between one warp and kMaxRowBlockThreads.
inline int block_threads_for_row(int64_t cols, int elem_bytes) {
  const int64_t packs = (cols * elem_bytes + kVecBytes - 1) / kVecBytes;
  int threads = 32;
  while (threads < kMaxRowBlockThreads && threads < packs) threads *= 2;
  return threads;
}

// Calls f(std::integral_constant<int, index>) for 0 <= index < COUNT (each of a table's entries compiled as a
// constant); cudaErrorInvalidValue for any other index.
template <int COUNT, int I = 0, typename F>
cudaError_t dispatch_index(int index, F&& f) {
  if constexpr (I == COUNT) {
    return cudaErrorInvalidValue;
  } else {
    if (index == I) return f(std::integral_constant<int, I>{});
    return dispatch_index<COUNT, I + 1>(index, f);
  }
}

template <typename F>
cudaError_t dispatch_threads(int threads, F&& f) {
  switch (threads) {
    case 32: return f(std::integral_constant<int, 32>{});
    case 64: return f(std::integral_constant<int, 64>{});
    case 128: return f(std::integral_constant<int, 128>{});
    case 256: return f(std::integral_constant<int, 256>{});
    case 512: return f(std::integral_constant<int, 512>{});
  }
  return cudaErrorInvalidConfiguration;
}

// One block per row, blocks striding over rows when there are more rows than a grid may have.
inline unsigned row_grid(int64_t rows) {
  return static_cast<unsigned>(std::min<int64_t>(rows, INT_MAX));
}

// The current device's number of SMs, for launchers that size their grids by it.
inline cudaError_t device_sm_count(int* sms) {
  int device = 0;
  LAB_CUDA_TRY(cudaGetDevice(&device));
  return cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, device);
}

// A launch-configuration query (an occupancy count) answered once per key and device, then remembered:
// asked on every call, it is host time that a small input's kernel cannot hide. `key` names the kernel
// and its configuration (the current device is added to it); `query(int*)` asks the runtime. Each
// instantiation keeps its own table: each call site's lambda is a type of its own (two sites passing
// queries of one type, a function pointer say, with keys of one type would share a table). The lock
// guards the table, not the query, which two threads may then both ask once.
template <typename Key, typename Query>
cudaError_t remembered_per_device(const Key& key, Query&& query, int* value) {
  static std::mutex mutex;
  static std::map<std::pair<int, Key>, int> known;
  int device = 0;
  LAB_CUDA_TRY(cudaGetDevice(&device));
  const std::pair<int, Key> k{device, key};
  {
    const std::lock_guard<std::mutex> lock(mutex);
    const auto it = known.find(k);
    if (it != known.end()) {
      *value = it->second;
      return cudaSuccess;
    }
  }
  LAB_CUDA_TRY(query(value));
  const std::lock_guard<std::mutex> lock(mutex);
  known.emplace(k, *value);
  return cudaSuccess;
}

inline int elem_bytes(DType dtype) { return dtype == DType::kFloat32 ? 4 : 2; }

}  // namespace lab
