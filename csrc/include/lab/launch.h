// The framework-free boundary between the kernels (csrc/<operator>/<variant>.cu) and the torch
// bindings (csrc/bindings.cpp).
//
// Nothing here knows torch: a launcher takes raw pointers, sizes, strides and a stream, and returns
// the CUDA error of its launch, or cudaErrorInvalidValue for a shape beyond the variant's limits
// (stated in the header of its .cu). Each operator has one argument struct and one launcher type;
// a variant of operator OP is the file csrc/OP/NAME.cu defining `OP_NAME` (setup.py lists the files
// per operator in the generated header lab/variants.h, from which the bindings register them).
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace lab {

enum class DType : int { kFloat32, kFloat16, kBFloat16 };

// softmax: row-wise on a (rows x cols) matrix whose columns are contiguous. Strides are in
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

// vector_add: c = a + b over n >= 1 contiguous elements; the three may start anywhere (any
// alignment of their first element).
struct VectorArgs {
  const void* a;
  const void* b;
  void* c;
  int64_t n;
  DType dtype;
};
using VectorLauncher = cudaError_t (*)(const VectorArgs&, cudaStream_t);

// softmax_backward: dx = y * (dy - sum(dy * y)) per row; the same guarantees as RowsArgs, each of
// y, dy and dx with its own row stride.
struct RowsGradArgs {
  const void* y;
  const void* dy;
  void* dx;
  int64_t rows;
  int64_t cols;
  int64_t y_row_stride;
  int64_t dy_row_stride;
  int64_t dx_row_stride;
  DType dtype;
};
using RowsGradLauncher = cudaError_t (*)(const RowsGradArgs&, cudaStream_t);

// cross_entropy: per row i of the logits x (rows x cols, columns contiguous), with t = target[i]:
// loss[i] = w_t * (logsumexp(x_i) - x_it) and dx_i = *scale * w_t * (softmax(x_i) - onehot(t)), w_t = weight[t]
// (1 where weight is null; float32, cols of them) and *scale the reduction's factor (float32, on the device). A row
// whose target is ignore_index has loss 0 and dx 0; a target outside [0, cols) gives NaN. The bindings guarantee
// rows >= 1, 1 <= cols <= INT32_MAX, int64 targets, float32 loss (rows), and that x and dx do not overlap
// (where grad: else dx is x, and nothing is written at it).
struct CrossEntropyArgs {
  const void* x;
  void* dx;
  const int64_t* target;
  const float* weight;
  const float* scale;
  float* loss;
  int64_t rows;
  int64_t cols;
  int64_t x_row_stride;
  int64_t dx_row_stride;
  int64_t ignore_index;
  DType dtype;
  bool grad;  // false: the loss alone (evaluation)
};
using CrossEntropyLauncher = cudaError_t (*)(const CrossEntropyArgs&, cudaStream_t);

// cross_entropy's targets, before its kernel: summary = (the mean's denominator: the counted rows' class weights, or
// their number; the gradient's factor c: 1 / the denominator for the mean, else 1), bad = (the first row whose target
// is neither ignore_index nor in [0, cols), that target), or (-1, 0). weight: float32, cols of them, or null.
struct CrossEntropyTargetsArgs {
  const int64_t* target;
  const float* weight;
  int64_t rows;
  int64_t cols;
  int64_t ignore_index;
  bool mean;
  float* summary;
  int64_t* bad;  // null: not written (nothing checks the targets); else device or mapped pinned host memory
};

// cross_entropy's reduction, after its kernel: loss = the sum of the rows' losses, divided by summary[0] for the mean.
struct CrossEntropyReduceArgs {
  const float* loss_rows;
  int64_t rows;
  const float* summary;
  bool mean;
  float* loss;
};

// cross_entropy's backward: g (rows x cols, columns contiguous) scaled in place, row i by scale[i * scale_stride]
// (float32; stride 0 for one scale of every row); rows whose scale is 1 are left as they are.
struct ScaleRowsArgs {
  void* g;
  const float* scale;
  int64_t rows;
  int64_t cols;
  int64_t g_row_stride;
  int64_t scale_stride;
  DType dtype;
};

}  // namespace lab
