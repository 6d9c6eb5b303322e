// The cluster variant's launch table, for the bindings (tuning and --explain) and the launcher.
// The data itself lives once, in csrc/softmax/cluster.cu.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "lab/launch.h"

namespace lab {

// A CTA shape of the resident path: threads per CTA, float32 registers of row data per thread,
// and how many rows each thread's shared-memory slots stage ahead.
struct ResidentShape {
  int threads;
  int elems;
  int stages;
};

// How a row length is launched: shape >= 0 indexes the resident shapes with `cluster` CTAs per
// row; shape < 0 is the streaming path (2 reads), with `cluster` CTAs per row.
struct ClusterPlan {
  int shape;
  int cluster;
};

// The resident shapes compiled into the extension (a pointer to the table and its length).
int cluster_resident_shapes(const ResidentShape** shapes);

// The plan the cluster launcher uses for rows of `cols` elements of `dtype` (aligned rows).
ClusterPlan cluster_plan(int64_t cols, DType dtype);

// The resident path with a given shape index and cluster size, for tuning: cudaErrorInvalidValue
// when the slice does not fit the shape's registers or the rows are not 16-byte aligned.
cudaError_t softmax_cluster_with(const RowsArgs& args, int shape, int cluster, cudaStream_t stream);

}  // namespace lab
