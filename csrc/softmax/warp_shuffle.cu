// warp_shuffle: three_pass with a two-level reduction.
//
// Algorithm: the same three sweeps as three_pass (max, sum of exp, normalized write), but each
// block reduction is done with xor shuffles inside each warp, one partial per warp in shared
// memory, and a final shuffle reduction of the partials by every warp (BlockAllReduce in
// lab/reduce.cuh): one barrier per reduction instead of log2(threads), and no shared-memory tree traffic.
// HBM sweeps per row: 3 reads of x, 1 write of y. Same launch shape and limits as three_pass.
// Next rung: online.cu removes the first sweep.
#include "three_sweep.cuh"

namespace lab {

cudaError_t softmax_warp_shuffle(const RowsArgs& args, cudaStream_t stream) {
  return launch_three_sweep<BlockAllReduce>(args, stream);
}

}  // namespace lab
