// three_pass: the baseline of the CUDA ladder.
//
// Algorithm: one block per row, three sweeps over the row in global memory (max, sum of exp,
// normalized write), each block reduction a shared-memory tree (one slot per thread, log2(threads)
// barriers). Accumulation in float32; 16-byte loads and stores (csrc/include/lab/vec.cuh).
// HBM sweeps per row: 3 reads of x, 1 write of y.
// Launch: grid = rows (blocks stride over rows past 2^31 - 1), threads = one 16-byte pack per
// thread rounded up to a power of two in [32, 512].
// Limits: any rows, 1 <= cols <= 2^31 - 1, any row strides; 64-bit row offsets.
// Next rung: warp_shuffle.cu replaces the tree with warp shuffles.
#include "three_sweep.cuh"

namespace lab {

cudaError_t softmax_three_pass(const RowsArgs& args, cudaStream_t stream) {
  return launch_three_sweep<SharedTreeAllReduce>(args, stream);
}

}  // namespace lab
