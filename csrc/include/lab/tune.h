// Launch choices exposed for tuning and explaining (torch.ops.lab_tune.*, scripts/tune/tune_cluster.py):
// the cluster variant's launch table and launchers that take a choice the table would make. The
// data itself lives once, in the variant's .cu file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "lab/launch.h"

namespace lab {

// A CTA shape of the resident path: threads per CTA, elements of row data per thread, how many
// rows each thread's shared-memory slots stage ahead, and how a thread holds its elements in
// registers: as float32 (one register each), or packed, as the 16-bit packs it loaded (two per
// register; compiled for float16 and bfloat16 only). A one-row shape (one_row) is compiled without the
// row loop, for a grid of one cluster per row only (a persistent launch of it is refused): the registers
// the loop's state would hold go to the row data (float16 and bfloat16 only).
struct ResidentShape {
  int threads;
  int elems;
  int stages;
  bool packed = false;
  bool one_row = false;
};

// The resident path's first wave (cluster.cu, Stagger): its clusters start in `groups` groups,
// `step_ns` nanoseconds of the SM's peak clock apart (groups 1 or step_ns 0: all at once; a launch of
// fewer clusters than are resident at once is never staggered).
struct StaggerPlan {
  int groups = 1;
  int step_ns = 0;
};

// How a row length is launched: shape >= 0 indexes the resident shapes with `cluster` CTAs per
// row; shape kStreamingShape is the streaming path (2 reads), with `cluster` CTAs per row.
constexpr int kStreamingShape = -1;
struct ClusterPlan {
  int shape;
  int cluster;
  bool persistent;  // a grid of the resident clusters looping over rows, else one cluster per row
  StaggerPlan stagger;
};

// The resident shapes compiled into the extension (a pointer to the table and its length).
int cluster_resident_shapes(const ResidentShape** shapes);

// The plan the cluster launcher uses for `rows` rows of `cols` elements of `dtype`: rows whose starts are
// 16-byte aligned (aligned), or, where they are not, rows as far past a boundary in y as in x (cluster.cu,
// SHIFTED: the shifted rows' own tables by N, kShiftedPlan32 and kShiftedPlan16, whose entries load straight into
// registers or stream).
ClusterPlan cluster_plan(int64_t cols, int64_t rows, DType dtype, bool aligned = true);

// The row lengths [first, last] that take the same entry of cluster_plan's tables as `cols` (rows on 16-byte
// boundaries or off them, by dtype; an entry for many rows shares the span of the entry after it; past the tables'
// last entry: to INT64_MAX).
struct ClusterSpan {
  int64_t first;
  int64_t last;
};
ClusterSpan cluster_plan_span(int64_t cols, DType dtype, bool aligned);

// How the cluster launcher takes `args` where its rows are off 16-byte boundaries, against aligned rows of that
// length: kStreaming on its streaming path (two reads of every element); kCrossing where N is within a pack of
// the end of its entry in the aligned table (the shifted row, up to a pack less one element longer, crosses it:
// 2^k - 1 and the like); else, and for aligned rows, kNone.
enum class ClusterDetour { kNone, kCrossing, kStreaming };
ClusterDetour cluster_detour(const RowsArgs& args);
// The same for `rows` rows of `cols` elements whose starts are 16-byte aligned in x and y (aligned: never), or as
// far past a boundary in both (a contiguous input of odd N and its output).
ClusterDetour cluster_detour(int64_t cols, int64_t rows, DType dtype, bool aligned);

// cross_entropy's cluster kernel (csrc/cross_entropy/cluster.cu) with a given plan, for tuning: cudaErrorInvalidValue
// where the plan names a shape not compiled for the kernel (cross_entropy_cluster_shapes), or one whose registers do
// not hold the slice, or the rows are neither 16-byte aligned nor shiftable. The kernel alone: the caller gives the
// reduction's factor (args.scale, read with args.grad only).
cudaError_t cross_entropy_cluster_with(const CrossEntropyArgs& args, const ClusterPlan& plan, cudaStream_t stream);
// The plan the cross-entropy kernel runs with, with the gradient (grad) or for the loss alone: its own table's where
// it has an entry (csrc/cross_entropy/cluster.cu: kGradPlan16; kLossPlan16 and kLossPlan32), else cluster_plan's.
ClusterPlan cross_entropy_plan(int64_t cols, int64_t rows, DType dtype, bool aligned, bool grad);
// The resident shapes (indices) compiled for the cross-entropy kernel in `dtype` (a pointer to them and their count).
int cross_entropy_cluster_shapes(DType dtype, const int** shapes);

// softmax_backward's cluster variant (csrc/softmax_backward/cluster.cu). Its plan for rows of `cols` elements of
// `dtype` (aligned: y, dy and dx rows on 16-byte boundaries; else as shifted rows, a pack less one element longer):
// shape indexes softmax_backward_cluster_shapes, or is kStreamingShape past the longest row its registers hold
// (softmax_backward_cluster_max_cols), which two_pass takes.
ClusterPlan softmax_backward_cluster_plan(int64_t cols, DType dtype, bool aligned);
int64_t softmax_backward_cluster_max_cols(DType dtype);
// Its CTA shapes, [threads, packs of y (and of dy) per thread, dy in shared memory (1 or 0)] per shape, flattened
// (a pointer and the count).
int softmax_backward_cluster_shapes(const int** flat);
// The kernel with a given shape, cluster size and grid, for tuning: cudaErrorInvalidValue where the slice does not
// fit the shape's registers; shape kStreamingShape: two_pass.
cudaError_t softmax_backward_cluster_with(const RowsGradArgs& args, int shape, int cluster, bool persistent,
                                          cudaStream_t stream);
// The softmax backward's register_cached with its table's shape, or with twice its threads per row, each with half
// the elements (cudaErrorInvalidValue where the length has no such shape), for tuning the table.
cudaError_t softmax_backward_register_cached_with(const RowsGradArgs& args, bool twice_the_threads,
                                                  cudaStream_t stream);

// The longest row register_cached takes (register_cached.cu, kMaxCols).
constexpr int64_t kRegisterCachedMaxCols = 16384;

// The resident path with a given shape index and cluster size, for tuning: cudaErrorInvalidValue
// when the slice does not fit the shape's registers or the rows are neither 16-byte aligned nor shiftable
// (cluster.cu). shape kStreamingShape: the streaming path instead (its own cluster size; cluster, persistent
// and stagger are not used).
// persistent: a grid of the resident clusters looping over rows (else one cluster per row); stagger:
// the first wave's start (cudaErrorInvalidValue for groups < 1 or step_ns < 0).
cudaError_t softmax_cluster_with(const RowsArgs& args, int shape, int cluster, bool persistent, StaggerPlan stagger,
                                 cudaStream_t stream);

// register_cached with a persistent grid (persistent = 1: the resident blocks loop over rows,
// loading the next rows ahead), one block per row group (0), or the table's choice (-1). With 0 and
// -1, an entry's few-rows shape takes the rows where its grid is resident all at once.
cudaError_t softmax_register_cached_with(const RowsArgs& args, int persistent, cudaStream_t stream);

// How register_cached takes ragged rows of `cols` elements (rows that start off a 16-byte boundary, or whose N is
// not a multiple of a pack) on its table's grids: true where on a PEELED kernel (the whole packs from the first
// boundary on in 16-byte accesses, the edge before and after them held beside), else element by element;
// *entry_cols is the max_cols of the table entry whose shapes take them (register_cached.cu, ragged_entry).
// False and 0 past its limit.
bool register_cached_ragged(int64_t cols, DType dtype, int64_t* entry_cols);
// Whether register_cached takes `args` as ragged rows (x's rows off 16-byte boundaries, or N not a multiple of a
// pack).
bool register_cached_rows_ragged(const RowsArgs& args);

// register_cached's shapes compiled for tuning (register_cached.cu): *flat points at kTuneShapeFields
// ints per shape for `dtype`: threads per row, elements per thread, threads per block, packed (1: 16-bit
// elements held two to a register, else as floats), staged (1: copied to shared memory by cp.async
// first), lean (1: the straight-line kernel where the rows allow it); returns how many shapes.
constexpr int kTuneShapeFields = 6;
int register_cached_tune_shapes(DType dtype, const int** flat);

// register_cached with tuning shape `index` on a grid of one block per row group:
// cudaErrorInvalidValue when there is no such shape or the row is longer than it holds.
cudaError_t softmax_register_cached_shape(const RowsArgs& args, int index, cudaStream_t stream);

// auto (csrc/softmax/dispatch/auto.cu): torch.ops.lab.softmax, dispatching each call to a CUDA variant.
cudaError_t softmax_auto(const RowsArgs& args, cudaStream_t stream);

// Install the dispatch table of one GPU model (its name as the device reports it): flat (dtype,
// max_cols, max_rows, index into names) quadruples, names of softmax CUDA variants; an empty table
// removes the model's. False, with the reason in *error, if it is malformed.
bool set_auto_table(const std::string& gpu, const std::vector<std::string>& names, const std::vector<int64_t>& flat,
                    std::string* error);

// The variant auto runs for this shape on the current device, for rows whose starts are 16-byte aligned in x
// and y (aligned) or rows as far past a boundary in both (a contiguous input of odd N, its output); whether
// its model's table (rather than the default rule) chose it, and in *odd_rows why the odd-rows rule (auto.cu) then
// replaced that choice ("entry below N", "cluster streams", "cluster crosses an entry") or the tiles rule did ("short
// rows in tiles"), else "". Rows not aligned are ragged (register_cached's PEELED kernels); the input is taken as
// contiguous. gpu (not empty): the choice on that GPU model instead, by its table, and where the table has no entry
// by the default rule for compute capability `major` (the rules past the table are the same on every device).
std::string auto_choice(int64_t rows, int64_t cols, DType dtype, bool aligned, bool* from_table,
                        std::string* odd_rows, const std::string& gpu = "", int major = -1);

}  // namespace lab
