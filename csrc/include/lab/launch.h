// The framework-free boundary between the kernels (csrc/softmax/*.cu) and the torch bindings.
//
// Nothing here knows torch: a launcher takes raw pointers, sizes, strides and a stream, and
// returns the CUDA error of its launch, or cudaErrorInvalidValue for a shape beyond the variant's
// limits (stated in the header of its .cu). Adding a CUDA variant is one .cu file defining
// `softmax_<name>` plus one line in LAB_SOFTMAX_VARIANTS below (and its entry in
// lab/backends/cuda_variants.py).
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace lab {

enum class DType : int { kFloat32, kFloat16, kBFloat16 };

// Row-wise operation on a (rows x cols) matrix whose columns are contiguous. Strides are in
// elements and may exceed `cols` (a view of a wider matrix). The bindings guarantee rows >= 1,
// 1 <= cols <= INT32_MAX, and that x and y do not overlap.
struct RowsArgs {
  const void* x;
  void* y;
  int64_t rows;
  int64_t cols;
  int64_t x_row_stride;
  int64_t y_row_stride;
  DType dtype;
};

using RowsLauncher = cudaError_t (*)(const RowsArgs&, cudaStream_t);

// X-macro listing the CUDA softmax variants, in ladder order: each becomes torch.ops.lab.<name>.
#define LAB_SOFTMAX_VARIANTS(X) \
  X(three_pass)                 \
  X(warp_shuffle)               \
  X(online)                     \
  X(register_cached)            \
  X(cluster)

#define LAB_DECLARE_LAUNCHER(name) cudaError_t softmax_##name(const RowsArgs& args, cudaStream_t stream);
LAB_SOFTMAX_VARIANTS(LAB_DECLARE_LAUNCHER)
#undef LAB_DECLARE_LAUNCHER

}  // namespace lab
