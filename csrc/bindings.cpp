// The only file that sees torch: validates each operator's inputs once, maps the dtype, picks the
// current stream, and registers every CUDA variant of every operator (the generated lists of
// lab/variants.h, one per csrc/<operator>/ folder) as two operators each:
//   softmax:          torch.ops.lab.<name>(Tensor x) -> Tensor
//   vector_add:       torch.ops.lab.vector_add_<name>(Tensor a, Tensor b) -> Tensor
//   softmax_backward: torch.ops.lab.softmax_backward_<name>(Tensor y, Tensor dy) -> Tensor
//   cross_entropy:    torch.ops.lab.cross_entropy_<name>(Tensor logits, Tensor target, Tensor? weight,
//                     Tensor summary, int ignore_index, str reduction, *, Tensor(a!) loss_rows, Tensor(b!)? dlogits,
//                     Tensor(c!) loss) -> () (out only; no dlogits: the loss alone), after
//                     torch.ops.lab.cross_entropy_targets, which writes summary
// and each with an `.out` overload taking `*, Tensor(a!) out` and returning nothing (a custom op
// that returns an alias of its input cannot be functionalized: torch.compile's AOT dispatch and
// torch.library.opcheck refuse it). Softmax is taken over the last
// dimension of a 2-D tensor; torch.ops.lab.softmax is auto, the dispatching entry.
#include <Python.h>

#include <climits>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "lab/launch.h"
#include "lab/tune.h"
#include "lab/variants.h"

#ifndef LAB_SOFTMAX_VARIANTS
#define LAB_SOFTMAX_VARIANTS(X)
#endif
#ifndef LAB_VECTOR_ADD_VARIANTS
#define LAB_VECTOR_ADD_VARIANTS(X)
#endif
#ifndef LAB_SOFTMAX_BACKWARD_VARIANTS
#define LAB_SOFTMAX_BACKWARD_VARIANTS(X)
#endif
#ifndef LAB_CROSS_ENTROPY_VARIANTS
#define LAB_CROSS_ENTROPY_VARIANTS(X)
#endif

namespace lab {

#define LAB_DECLARE(op, launcher) \
  cudaError_t launcher(const op& args, cudaStream_t stream);
#define LAB_DECLARE_SOFTMAX(name) LAB_DECLARE(RowsArgs, softmax_##name)
#define LAB_DECLARE_VECTOR_ADD(name) LAB_DECLARE(VectorArgs, vector_add_##name)
#define LAB_DECLARE_SOFTMAX_BACKWARD(name) LAB_DECLARE(RowsGradArgs, softmax_backward_##name)
#define LAB_DECLARE_CROSS_ENTROPY(name) LAB_DECLARE(CrossEntropyArgs, cross_entropy_##name)
LAB_SOFTMAX_VARIANTS(LAB_DECLARE_SOFTMAX)
LAB_VECTOR_ADD_VARIANTS(LAB_DECLARE_VECTOR_ADD)
LAB_SOFTMAX_BACKWARD_VARIANTS(LAB_DECLARE_SOFTMAX_BACKWARD)
LAB_CROSS_ENTROPY_VARIANTS(LAB_DECLARE_CROSS_ENTROPY)
#ifdef LAB_HAS_CROSS_ENTROPY
int64_t cross_entropy_cluster_max_cols(DType dtype, bool aligned);  // csrc/cross_entropy/cluster.cu's limit
cudaError_t cross_entropy_targets(const CrossEntropyTargetsArgs& args, cudaStream_t stream);  // cluster.cu too
cudaError_t cross_entropy_reduce(const CrossEntropyReduceArgs& args, cudaStream_t stream);    // cluster.cu too
cudaError_t cross_entropy_scale_rows(const ScaleRowsArgs& args, cudaStream_t stream);        // cluster.cu too
#endif
#undef LAB_DECLARE_CROSS_ENTROPY
#undef LAB_DECLARE_SOFTMAX_BACKWARD
#undef LAB_DECLARE_VECTOR_ADD
#undef LAB_DECLARE_SOFTMAX
#undef LAB_DECLARE

namespace {

DType to_lab_dtype(const at::Tensor& t, const char* op) {
  switch (t.scalar_type()) {
    case at::kFloat: return DType::kFloat32;
    case at::kHalf: return DType::kFloat16;
    case at::kBFloat16: return DType::kBFloat16;
    default:
      TORCH_CHECK_TYPE(false, "lab::", op, ": expected float32, float16 or bfloat16, got ", t.scalar_type());
  }
}

// A CUDA tensor of a supported dtype whose last dimension is contiguous, of the given rank.
void check_tensor(const at::Tensor& t, int64_t dims, const char* op, const char* what) {
  TORCH_CHECK(t.is_cuda(), "lab::", op, ": expected a CUDA tensor, got one on ", t.device());
  TORCH_CHECK(t.dim() == dims, "lab::", op, ": expected ", what, " to be ",
              dims == 2 ? "a 2-D tensor (rows, cols)" : "a 1-D tensor", ", got ", t.dim(), " dims");
  to_lab_dtype(t, op);
  TORCH_CHECK(t.size(-1) <= 1 || t.stride(-1) == 1, "lab::", op,
              ": the last dimension must be contiguous (stride 1), got strides ", t.strides());
}

// `other` (an out, or a second input) matches `x` in device, dtype and shape.
void check_like(const at::Tensor& x, const at::Tensor& other, const char* op, const char* xname, const char* what) {
  TORCH_CHECK(other.device() == x.device(), "lab::", op, ": ", what, " is on ", other.device(), ", ", xname, " on ",
              x.device());
  TORCH_CHECK(other.scalar_type() == x.scalar_type(), "lab::", op, ": ", what, " has dtype ", other.scalar_type(),
              ", ", xname, " has ", x.scalar_type());
  TORCH_CHECK(other.sizes() == x.sizes(), "lab::", op, ": ", what, " has shape ", other.sizes(), ", ", xname, " has ",
              x.sizes());
  TORCH_CHECK(other.size(-1) <= 1 || other.stride(-1) == 1, "lab::", op, ": ", what,
              "'s last dimension must be contiguous");
}

void check_rows(const at::Tensor& x, const char* op) {
  check_tensor(x, 2, op, "x");
  TORCH_CHECK(x.size(1) <= INT_MAX, "lab::", op, ": rows longer than 2^31 - 1 elements are not supported");
}

// A CUDA call's status as an exception that says what happened. A failed call also left its error as the
// runtime's "last error": it is cleared, or the next CUDA call anywhere in the process would report it again.
void check_cuda(cudaError_t err, const char* op) {
  if (err == cudaSuccess) return;
  (void)cudaGetLastError();
  TORCH_CHECK(false, "lab::", op, ": CUDA error: ", cudaGetErrorString(err));
}

// Launch on the current stream and turn its status into an exception that says what happened.
template <typename Args, typename Launch>
void launch_checked(Launch&& launch, const Args& args, const at::Tensor& x, const char* op, const char* source,
                    int64_t length) {
  const c10::cuda::CUDAGuard guard(x.device());
  const cudaError_t err = launch(args, c10::cuda::getCurrentCUDAStream());
  // Every argument was checked before, so a launcher's cudaErrorInvalidValue means this variant
  // cannot take the shape (its limits are in the header of its source).
  if (err == cudaErrorInvalidValue) {
    (void)cudaGetLastError();  // as check_cuda does
    TORCH_CHECK(false, "lab::", op, ": rows of ", length, " elements are beyond this variant's limit (see csrc/",
                source, ".cu)");
  }
  check_cuda(err, op);
}

// launch(const RowsArgs&, cudaStream_t) -> cudaError_t: a RowsLauncher, or a lambda around one.
template <typename Launch>
void run(Launch&& launch, const at::Tensor& x, at::Tensor& out, const char* op) {
  check_like(x, out, op, "x", "out");
  if (x.numel() == 0) return;
  const RowsArgs args{x.data_ptr(), out.data_ptr(), x.size(0), x.size(1),
                      x.stride(0),  out.stride(0),  to_lab_dtype(x, op)};
  launch_checked(launch, args, x, op, (std::string("softmax/") + op).c_str(), x.size(1));
}

// One operator's two entry points (functional and .out) for a launcher of it.
template <RowsLauncher L>
struct Softmax {
  static at::Tensor functional(const at::Tensor& x, const char* op) {
    check_rows(x, op);
    at::Tensor out = at::empty(x.sizes(), x.options());
    run(L, x, out, op);
    return out;
  }
  static at::Tensor& with_out(const at::Tensor& x, at::Tensor& out, const char* op) {
    check_rows(x, op);
    run(L, x, out, op);
    return out;
  }
};

template <VectorLauncher L>
struct VectorAdd {
  static at::Tensor& with_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out, const char* op) {
    check_tensor(a, 1, op, "a");
    check_like(a, b, op, "a", "b");
    check_like(a, out, op, "a", "out");
    if (a.numel() == 0) return out;
    const VectorArgs args{a.data_ptr(), b.data_ptr(), out.data_ptr(), a.numel(), to_lab_dtype(a, op)};
    launch_checked(L, args, a, op, op, a.numel());
    return out;
  }
  static at::Tensor functional(const at::Tensor& a, const at::Tensor& b, const char* op) {
    at::Tensor out = at::empty(a.sizes(), a.options());
    return with_out(a, b, out, op);
  }
};

template <RowsGradLauncher L>
struct SoftmaxBackward {
  static at::Tensor& with_out(const at::Tensor& y, const at::Tensor& dy, at::Tensor& out, const char* op) {
    check_rows(y, op);
    check_like(y, dy, op, "y", "dy");
    check_like(y, out, op, "y", "out");
    if (y.numel() == 0) return out;
    const RowsGradArgs args{y.data_ptr(),  dy.data_ptr(),  out.data_ptr(), y.size(0),           y.size(1),
                            y.stride(0),   dy.stride(0),   out.stride(0),  to_lab_dtype(y, op)};
    launch_checked(L, args, y, op, op, y.size(1));
    return out;
  }
  static at::Tensor functional(const at::Tensor& y, const at::Tensor& dy, const char* op) {
    at::Tensor out = at::empty(y.sizes(), y.options());
    return with_out(y, dy, out, op);
  }
};

#ifdef LAB_HAS_CROSS_ENTROPY
void check_aux(const at::Tensor& t, const at::Device& device, at::ScalarType type, int64_t n, const char* op,
               const char* what) {
  TORCH_CHECK(t.device() == device && t.scalar_type() == type && t.dim() == 1 && t.size(0) == n && t.is_contiguous(),
              "lab::", op, ": expected ", what, " to be a contiguous 1-D ", type, " tensor of ", n, " elements on ",
              device, ", got ", t.scalar_type(), " of shape ", t.sizes(), " on ", t.device());
}

// cross_entropy's first step, on the current stream: summary = (the mean's denominator, the gradient's factor c), and
// where found is given (pinned host memory, two int64), found = (the first row whose target is neither ignore_index
// nor in [0, vocab), that target), or (-1, 0). found is written straight through its mapping (a copy after the step
// cost 10-15 us of the GPU's time a call, in the copy and the gaps around it, on an H100); nothing waits here: the
// caller records an event after this op and waits for it where it needs the answer (triton_kernels/cross_entropy.py,
// TargetCheck), so that the wait is for this step alone, never for the kernel launched after it.
void cross_entropy_targets_out(const at::Tensor& target, const std::optional<at::Tensor>& weight, int64_t vocab,
                               int64_t ignore_index, c10::string_view reduction, at::Tensor& summary,
                               const std::optional<at::Tensor>& found) {
  const char* op = "cross_entropy_targets";
  TORCH_CHECK(target.is_cuda() && target.scalar_type() == at::kLong && target.dim() == 1 && target.is_contiguous(),
              "lab::", op, ": expected target to be a contiguous 1-D int64 CUDA tensor, got ", target.scalar_type(),
              " of shape ", target.sizes(), " on ", target.device());
  TORCH_CHECK(vocab >= 0, "lab::", op, ": vocab must be >= 0, got ", vocab);
  TORCH_CHECK(reduction == "mean" || reduction == "sum" || reduction == "none", "lab::", op,
              ": reduction must be mean, sum or none, got ", reduction);
  check_aux(summary, target.device(), at::kFloat, 2, op, "summary");
  if (weight.has_value()) check_aux(*weight, target.device(), at::kFloat, vocab, op, "weight");
  TORCH_CHECK(!found.has_value() || (found->is_pinned() && found->scalar_type() == at::kLong &&
                                     found->numel() == 2 && found->is_contiguous()),
              "lab::", op, ": found must be a pinned host tensor of two int64");
  const c10::cuda::CUDAGuard guard(target.device());
  int64_t* bad = nullptr;
  if (found.has_value()) {
    void* mapped = nullptr;
    check_cuda(cudaHostGetDevicePointer(&mapped, found->data_ptr(), 0), op);
    bad = static_cast<int64_t*>(mapped);
  }
  const float* w = weight.has_value() ? weight->data_ptr<float>() : nullptr;
  check_cuda(cross_entropy_targets({target.data_ptr<int64_t>(), w, target.size(0), vocab, ignore_index,
                                    reduction == "mean", summary.data_ptr<float>(), bad},
                                   c10::cuda::getCurrentCUDAStream()),
             op);
}

// cross_entropy's out entry, the operator's two steps after cross_entropy_targets, on the current stream: the
// variant's kernel (the loss per row and dlogits, scaled by summary[1]), the reduction (loss: the sum of the rows'
// losses, divided by summary[0] for the mean; not for "none"). A target out of range makes its row NaN (the kernel
// reads nothing at it); the targets' step finds it.
template <CrossEntropyLauncher L>
void cross_entropy_out(const at::Tensor& x, const at::Tensor& target, const std::optional<at::Tensor>& weight,
                       const at::Tensor& summary, int64_t ignore_index, c10::string_view reduction,
                       at::Tensor& loss_rows, const std::optional<at::Tensor>& dlogits, at::Tensor& loss,
                       const char* op) {
  check_rows(x, op);
  if (dlogits.has_value()) check_like(x, *dlogits, op, "logits", "dlogits");
  check_aux(target, x.device(), at::kLong, x.size(0), op, "target");
  check_aux(loss_rows, x.device(), at::kFloat, x.size(0), op, "loss_rows");
  check_aux(summary, x.device(), at::kFloat, 2, op, "summary");
  if (weight.has_value()) check_aux(*weight, x.device(), at::kFloat, x.size(1), op, "weight");
  TORCH_CHECK(reduction == "mean" || reduction == "sum" || reduction == "none", "lab::", op,
              ": reduction must be mean, sum or none, got ", reduction);
  TORCH_CHECK(loss.device() == x.device() && loss.scalar_type() == at::kFloat && loss.numel() == 1, "lab::", op,
              ": expected loss to be one float32 on ", x.device());
  if (x.numel() == 0) return;  // the caller's: an empty batch's mean is NaN, its sum 0
  const c10::cuda::CUDAGuard guard(x.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const bool mean = reduction == "mean";
  const float* w = weight.has_value() ? weight->data_ptr<float>() : nullptr;
  const at::Tensor& dx = dlogits.has_value() ? *dlogits : x;  // the loss alone: dx is x, and not written
  const CrossEntropyArgs args{x.data_ptr(), dx.data_ptr(), target.data_ptr<int64_t>(), w,
                              summary.data_ptr<float>() + 1, loss_rows.data_ptr<float>(), x.size(0), x.size(1),
                              x.stride(0), dx.stride(0), ignore_index, to_lab_dtype(x, op), dlogits.has_value()};
  launch_checked(L, args, x, op, (std::string("cross_entropy/") + (op + sizeof("cross_entropy_") - 1)).c_str(),
                 x.size(1));
  if (reduction != "none") {
    check_cuda(cross_entropy_reduce({loss_rows.data_ptr<float>(), x.size(0), summary.data_ptr<float>(), mean,
                                     loss.data_ptr<float>()}, stream),
               op);
  }
}

// lab.cross_entropy's backward: g scaled in place by the loss's gradient (one float32, or one per row).
void cross_entropy_scale_rows_(at::Tensor& g, const at::Tensor& scale) {
  const char* op = "cross_entropy_scale_rows_";
  check_rows(g, op);
  TORCH_CHECK(scale.device() == g.device() && scale.scalar_type() == at::kFloat &&
                  (scale.numel() == 1 || (scale.dim() == 1 && scale.size(0) == g.size(0))),
              "lab::", op, ": expected scale to be one float32, or one per row, on ", g.device());
  if (g.numel() == 0) return;
  const ScaleRowsArgs args{g.data_ptr(), scale.data_ptr<float>(), g.size(0), g.size(1), g.stride(0),
                           scale.numel() == 1 ? 0 : scale.stride(0), to_lab_dtype(g, op)};
  launch_checked(cross_entropy_scale_rows, args, g, op, "cross_entropy/cluster", g.size(1));
}
#endif

}  // namespace
}  // namespace lab

#define LAB_DEF_SOFTMAX(name)                                                                       \
  m.def(#name "(Tensor x) -> Tensor");                                                              \
  m.def(#name ".out(Tensor x, *, Tensor(a!) out) -> ()");
#define LAB_DEF_VECTOR_ADD(name)                                                                    \
  m.def("vector_add_" #name "(Tensor a, Tensor b) -> Tensor");                                      \
  m.def("vector_add_" #name ".out(Tensor a, Tensor b, *, Tensor(a!) out) -> ()");
#define LAB_DEF_SOFTMAX_BACKWARD(name)                                                              \
  m.def("softmax_backward_" #name "(Tensor y, Tensor dy) -> Tensor");                               \
  m.def("softmax_backward_" #name ".out(Tensor y, Tensor dy, *, Tensor(a!) out) -> ()");
#define LAB_DEF_CROSS_ENTROPY(name)                                                                 \
  m.def("cross_entropy_" #name "(Tensor logits, Tensor target, Tensor? weight, Tensor summary, int ignore_index, " \
        "str reduction, *, Tensor(a!) loss_rows, Tensor(b!)? dlogits, Tensor(c!) loss) -> ()");
TORCH_LIBRARY(lab, m) {
  LAB_SOFTMAX_VARIANTS(LAB_DEF_SOFTMAX)
  LAB_VECTOR_ADD_VARIANTS(LAB_DEF_VECTOR_ADD)
  LAB_SOFTMAX_BACKWARD_VARIANTS(LAB_DEF_SOFTMAX_BACKWARD)
  LAB_CROSS_ENTROPY_VARIANTS(LAB_DEF_CROSS_ENTROPY)
#ifdef LAB_HAS_CROSS_ENTROPY
  m.def("cross_entropy_targets(Tensor target, Tensor? weight, int vocab, int ignore_index, str reduction, *, "
        "Tensor(a!) summary, Tensor(b!)? found) -> ()");
  m.def("cross_entropy_scale_rows_(Tensor(a!) g, Tensor scale) -> ()");
  m.def("cross_entropy_cluster_max_cols(ScalarType dtype, bool aligned=True) -> int",
        [](at::ScalarType type, bool aligned) {
          return lab::cross_entropy_cluster_max_cols(type == at::kFloat ? lab::DType::kFloat32 : lab::DType::kBFloat16,
                                                     aligned);
        });
#endif
#ifdef LAB_HAS_SOFTMAX
  LAB_DEF_SOFTMAX(softmax)  // auto (csrc/softmax/dispatch/auto.cu)
#endif
}
#undef LAB_DEF_CROSS_ENTROPY
#undef LAB_DEF_SOFTMAX_BACKWARD
#undef LAB_DEF_VECTOR_ADD
#undef LAB_DEF_SOFTMAX

#define LAB_IMPL_SOFTMAX_AS(op, launcher)                                                           \
  m.impl(op, [](const at::Tensor& x) { return lab::Softmax<launcher>::functional(x, op); });         \
  m.impl(op ".out", [](const at::Tensor& x, at::Tensor& out) {                                        \
    lab::Softmax<launcher>::with_out(x, out, op);                                                   \
  });
#define LAB_IMPL_SOFTMAX(name) LAB_IMPL_SOFTMAX_AS(#name, lab::softmax_##name)
#define LAB_IMPL_VECTOR_ADD(name)                                                                   \
  m.impl("vector_add_" #name, [](const at::Tensor& a, const at::Tensor& b) {                         \
    return lab::VectorAdd<lab::vector_add_##name>::functional(a, b, "vector_add_" #name);            \
  });                                                                                               \
  m.impl("vector_add_" #name ".out", [](const at::Tensor& a, const at::Tensor& b, at::Tensor& out) { \
    lab::VectorAdd<lab::vector_add_##name>::with_out(a, b, out, "vector_add_" #name);                \
  });
#define LAB_IMPL_SOFTMAX_BACKWARD(name)                                                             \
  m.impl("softmax_backward_" #name, [](const at::Tensor& y, const at::Tensor& dy) {                  \
    return lab::SoftmaxBackward<lab::softmax_backward_##name>::functional(y, dy, "softmax_backward_" #name); \
  });                                                                                               \
  m.impl("softmax_backward_" #name ".out",                                                          \
         [](const at::Tensor& y, const at::Tensor& dy, at::Tensor& out) {                            \
           lab::SoftmaxBackward<lab::softmax_backward_##name>::with_out(y, dy, out,                 \
                                                                                "softmax_backward_" #name); \
         });
#ifdef LAB_HAS_SOFTMAX
#define LAB_IMPL_AUTO LAB_IMPL_SOFTMAX_AS("softmax", lab::softmax_auto)
#else
#define LAB_IMPL_AUTO
#endif
#define LAB_IMPL_CROSS_ENTROPY(name)                                                                \
  m.impl("cross_entropy_" #name,                                                                    \
         [](const at::Tensor& x, const at::Tensor& target, const std::optional<at::Tensor>& weight,  \
            const at::Tensor& summary, int64_t ignore_index, c10::string_view reduction,               \
            at::Tensor& loss_rows, const std::optional<at::Tensor>& dx, at::Tensor& loss) {             \
           lab::cross_entropy_out<lab::cross_entropy_##name>(x, target, weight, summary, ignore_index, reduction, \
                                                             loss_rows, dx, loss, "cross_entropy_" #name); \
         });
#ifdef LAB_HAS_CROSS_ENTROPY
#define LAB_IMPL_SCALE_ROWS                                                                         \
  m.impl("cross_entropy_scale_rows_", &lab::cross_entropy_scale_rows_);                             \
  m.impl("cross_entropy_targets", &lab::cross_entropy_targets_out);
#else
#define LAB_IMPL_SCALE_ROWS
#endif
#define LAB_IMPL_ALL                                                                                \
  LAB_SOFTMAX_VARIANTS(LAB_IMPL_SOFTMAX)                                                            \
  LAB_VECTOR_ADD_VARIANTS(LAB_IMPL_VECTOR_ADD)                                                      \
  LAB_SOFTMAX_BACKWARD_VARIANTS(LAB_IMPL_SOFTMAX_BACKWARD)                                          \
  LAB_CROSS_ENTROPY_VARIANTS(LAB_IMPL_CROSS_ENTROPY)                                                \
  LAB_IMPL_SCALE_ROWS                                                                               \
  LAB_IMPL_AUTO
TORCH_LIBRARY_IMPL(lab, CUDA, m) { LAB_IMPL_ALL }
// On CPU tensors the same entry points run their validation, which rejects them with a clear
// message instead of the dispatcher's list of backends.
TORCH_LIBRARY_IMPL(lab, CPU, m) { LAB_IMPL_ALL }
#undef LAB_IMPL_ALL
#undef LAB_IMPL_SCALE_ROWS
#undef LAB_IMPL_CROSS_ENTROPY
#undef LAB_IMPL_AUTO
#undef LAB_IMPL_SOFTMAX_BACKWARD
#undef LAB_IMPL_VECTOR_ADD
#undef LAB_IMPL_SOFTMAX
#undef LAB_IMPL_SOFTMAX_AS

#ifdef LAB_HAS_SOFTMAX
// Tuning and explaining the cluster variant's launch table (scripts/tune/tune_cluster.py, --explain):
//   torch.ops.lab_tune.cluster(Tensor x, int shape, int cluster, bool persistent=True,
//                              int stagger_groups=1, int stagger_ns=0) -> Tensor
//       the resident path with a given shape index and cluster size (errors when the slice does not
//       fit that shape), on a persistent grid or one cluster per row, the first wave's clusters
//       started in stagger_groups groups stagger_ns apart (cluster.cu, Stagger); shape -1: the streaming
//       path (its own cluster size; the other arguments are not used). A one-row shape errors on a
//       persistent grid (the default): pass persistent=False
//   torch.ops.lab_tune.register_cached(Tensor x, bool persistent) -> Tensor
//   torch.ops.lab_tune.register_cached_shape(Tensor x, int shape) -> Tensor   register_cached with
//       one of its tuning shapes, one block per row group (errors when the row does not fit it)
//   torch.ops.lab_tune.register_cached_shapes(ScalarType dtype) -> int[]   [threads per row, elements
//       per thread, threads per block, packed, staged] per tuning shape, flattened
//   torch.ops.lab_tune.cluster_shapes() -> int[]       [threads, elems, stages, packed, one_row] per shape,
//       flattened (packed 1: 16-bit elements held two to a register, float16/bfloat16 only; one_row 1: no
//       row loop, one cluster per row only, float16/bfloat16 only)
//   torch.ops.lab_tune.cluster_plan(int cols, ScalarType dtype, int rows=0, bool aligned=True) -> int[]
//       [shape, cluster, persistent, stagger_groups, stagger_ns] for `rows` rows (0: the plan of
//       fewest rows); aligned False: rows not 16-byte aligned, as far past a boundary in y as in x
//   torch.ops.lab_tune.set_auto_table(str gpu, str[] names, int[] flat)  auto's table for a GPU model
//       (lab/dispatch.py)
//   torch.ops.lab_tune.register_cached_ragged(int cols, ScalarType dtype) -> int[]  how register_cached takes
//       ragged rows (off 16-byte boundaries, or N not a multiple of a pack): [max_cols of the table entry whose
//       shapes take them, 1 on its PEELED kernels else 0 (element by element)]
//   torch.ops.lab_tune.auto_choice(int rows, int cols, ScalarType dtype, bool aligned=True, str gpu="",
//                                  int major=-1) -> str[]
//       [variant, "table" or "default rule", why the odd-rows rule replaced that choice ("entry below N", "cluster
//       streams", "cluster crosses an entry"), else ""];
//       aligned False: rows off 16-byte boundaries, as far past one in y as in x (a contiguous input of odd N);
//       gpu: another GPU model's choice (its installed table; past it, the default rule for compute capability
//       `major`), on any machine, with or without a GPU
namespace {
template <typename Launch>
at::Tensor tuned(const at::Tensor& x, const char* op, Launch&& launch) {
  lab::check_rows(x, op);
  at::Tensor out = at::empty(x.sizes(), x.options());
  lab::run(launch, x, out, op);
  return out;
}

at::Tensor tune_cluster(const at::Tensor& x, int64_t shape, int64_t cluster, bool persistent, int64_t stagger_groups,
                        int64_t stagger_ns) {
  TORCH_CHECK(stagger_groups >= 1 && stagger_groups <= 64 && stagger_ns >= 0 && stagger_ns <= 100000,
              "lab_tune::cluster: stagger_groups must be 1 to 64 and stagger_ns 0 to 100000, got ", stagger_groups,
              " and ", stagger_ns);
  const lab::StaggerPlan stagger{static_cast<int>(stagger_groups), static_cast<int>(stagger_ns)};
  return tuned(x, "cluster (tuned)", [&](const lab::RowsArgs& a, cudaStream_t s) {
    return lab::softmax_cluster_with(a, static_cast<int>(shape), static_cast<int>(cluster), persistent, stagger, s);
  });
}

at::Tensor tune_register_cached(const at::Tensor& x, bool persistent) {
  return tuned(x, "register_cached (tuned)", [&](const lab::RowsArgs& a, cudaStream_t s) {
    return lab::softmax_register_cached_with(a, persistent ? 1 : 0, s);
  });
}

at::Tensor tune_register_cached_shape(const at::Tensor& x, int64_t shape) {
  return tuned(x, "register_cached (tuned shape)", [&](const lab::RowsArgs& a, cudaStream_t s) {
    return lab::softmax_register_cached_shape(a, static_cast<int>(shape), s);
  });
}

std::vector<int64_t> tune_register_cached_shapes(at::ScalarType dtype) {
  const at::Tensor probe = at::empty({0}, at::TensorOptions().dtype(dtype));
  const int* flat = nullptr;
  const int count = lab::register_cached_tune_shapes(lab::to_lab_dtype(probe, "register_cached_shapes"), &flat);
  return std::vector<int64_t>(flat, flat + lab::kTuneShapeFields * count);
}

std::vector<int64_t> tune_cluster_shapes() {
  const lab::ResidentShape* shapes = nullptr;
  const int count = lab::cluster_resident_shapes(&shapes);
  std::vector<int64_t> flat;
  for (int i = 0; i < count; ++i) {
    flat.insert(flat.end(), {shapes[i].threads, shapes[i].elems, shapes[i].stages, shapes[i].packed ? 1 : 0,
                             shapes[i].one_row ? 1 : 0});
  }
  return flat;
}

void tune_set_auto_table(const std::string& gpu, const std::vector<std::string>& names,
                         const std::vector<int64_t>& flat) {
  std::string error;
  TORCH_CHECK(lab::set_auto_table(gpu, names, flat, &error), "lab_tune::set_auto_table: ", error);
}

std::vector<std::string> tune_auto_choice(int64_t rows, int64_t cols, at::ScalarType dtype, bool aligned,
                                          const std::string& gpu, int64_t major) {
  TORCH_CHECK(gpu.empty() == (major < 0), "lab_tune::auto_choice: gpu and major go together (another model's choice, ",
              "and the compute capability of its default rule) or not at all, got gpu='", gpu, "' and major ", major);
  const at::Tensor probe = at::empty({0}, at::TensorOptions().dtype(dtype));
  bool from_table = false;
  std::string odd_rows;
  const std::string name = lab::auto_choice(rows, cols, lab::to_lab_dtype(probe, "auto_choice"), aligned,
                                            &from_table, &odd_rows, gpu, static_cast<int>(major));
  return {name, from_table ? "table" : "default rule", odd_rows};
}

std::vector<int64_t> tune_register_cached_ragged(int64_t cols, at::ScalarType dtype) {
  const at::Tensor probe = at::empty({0}, at::TensorOptions().dtype(dtype));
  int64_t entry_cols = 0;
  const bool peeled =
      lab::register_cached_ragged(cols, lab::to_lab_dtype(probe, "register_cached_ragged"), &entry_cols);
  return {entry_cols, peeled ? 1 : 0};
}

std::vector<int64_t> tune_cluster_plan(int64_t cols, at::ScalarType dtype, int64_t rows, bool aligned) {
  const at::Tensor probe = at::empty({0}, at::TensorOptions().dtype(dtype));
  const lab::ClusterPlan plan = lab::cluster_plan(cols, rows, lab::to_lab_dtype(probe, "cluster_plan"), aligned);
  return {plan.shape, plan.cluster, plan.persistent ? 1 : 0, plan.stagger.groups, plan.stagger.step_ns};
}
}  // namespace

TORCH_LIBRARY(lab_tune, m) {
  m.def("cluster(Tensor x, int shape, int cluster, bool persistent=True, int stagger_groups=1, int stagger_ns=0) -> Tensor");
  m.def("register_cached(Tensor x, bool persistent) -> Tensor");
  m.def("register_cached_shape(Tensor x, int shape) -> Tensor");
  m.def("register_cached_shapes(ScalarType dtype) -> int[]", &tune_register_cached_shapes);
  m.def("cluster_shapes() -> int[]", &tune_cluster_shapes);
  m.def("cluster_plan(int cols, ScalarType dtype, int rows=0, bool aligned=True) -> int[]", &tune_cluster_plan);
  m.def("set_auto_table(str gpu, str[] names, int[] flat) -> ()", &tune_set_auto_table);
  m.def("auto_choice(int rows, int cols, ScalarType dtype, bool aligned=True, str gpu=\"\", int major=-1) -> str[]",
        &tune_auto_choice);
  m.def("register_cached_ragged(int cols, ScalarType dtype) -> int[]", &tune_register_cached_ragged);
}
TORCH_LIBRARY_IMPL(lab_tune, CUDA, m) {
  m.impl("cluster", &tune_cluster);
  m.impl("register_cached", &tune_register_cached);
  m.impl("register_cached_shape", &tune_register_cached_shape);
}
TORCH_LIBRARY_IMPL(lab_tune, CPU, m) {
  m.impl("cluster", &tune_cluster);
  m.impl("register_cached", &tune_register_cached);
  m.impl("register_cached_shape", &tune_register_cached_shape);
}

#endif  // LAB_HAS_SOFTMAX

#ifdef LAB_HAS_SOFTMAX_BACKWARD
// Tuning the softmax backward's cluster variant (scripts/tune/tune_backward_cluster.py):
//   torch.ops.lab_tune.softmax_backward_cluster(Tensor y, Tensor dy, int shape, int cluster, bool persistent)
//       -> Tensor   dx from the kernel with that shape (an index of the shapes below), cluster size and grid
//       (errors where the slice does not fit the shape's registers); shape -1: two_pass
//   torch.ops.lab_tune.softmax_backward_cluster_shapes() -> int[]   [threads, packs per thread, dy in shared memory
//       (1 or 0)] per shape, flattened
//   torch.ops.lab_tune.softmax_backward_cluster_plan(int cols, ScalarType dtype, bool aligned=True) -> int[]
//       [shape, cluster, persistent] of the launch table (shape -1: two_pass, past the registers)
// and its register_cached's row shapes (notebook/backward-register-cached-shapes/):
//   torch.ops.lab_tune.softmax_backward_register_cached(Tensor y, Tensor dy, bool twice_the_threads) -> Tensor
//       dx with the table's shape, or with twice its threads per row (an error where the length has no such shape)
namespace {
// dx from one tuning launch of a softmax backward kernel, `launch(args, stream)`; where the kernel refuses the rows
// (cudaErrorInvalidValue: the shape does not hold them), an error naming the op and `refused()`.
template <typename Launch, typename Refused>
at::Tensor tuned_backward(const at::Tensor& y, const at::Tensor& dy, const char* op, Launch launch, Refused refused) {
  lab::check_rows(y, op);
  lab::check_like(y, dy, op, "y", "dy");
  at::Tensor out = at::empty(y.sizes(), y.options());
  if (y.numel() == 0) return out;
  const lab::RowsGradArgs args{y.data_ptr(), dy.data_ptr(), out.data_ptr(), y.size(0),        y.size(1),
                               y.stride(0),  dy.stride(0),  out.stride(0),  lab::to_lab_dtype(y, op)};
  const c10::cuda::CUDAGuard guard(y.device());
  const cudaError_t err = launch(args, c10::cuda::getCurrentCUDAStream());
  if (err == cudaErrorInvalidValue) {
    (void)cudaGetLastError();
    TORCH_CHECK(false, "lab_tune::", op, ": ", refused());
  }
  lab::check_cuda(err, op);
  return out;
}

at::Tensor tune_softmax_backward_register_cached(const at::Tensor& y, const at::Tensor& dy, bool twice_the_threads) {
  return tuned_backward(
      y, dy, "softmax_backward_register_cached (tuned)",
      [&](const lab::RowsGradArgs& args, cudaStream_t stream) {
        return lab::softmax_backward_register_cached_with(args, twice_the_threads, stream);
      },
      [&] {
        return twice_the_threads ? c10::str("no shape of twice the threads per row for rows of ", y.size(1), " elements")
                                 : c10::str("rows of ", y.size(1), " elements are longer than it takes");
      });
}

at::Tensor tune_softmax_backward_cluster(const at::Tensor& y, const at::Tensor& dy, int64_t shape, int64_t cluster,
                                         bool persistent) {
  return tuned_backward(
      y, dy, "softmax_backward_cluster (tuned)",
      [&](const lab::RowsGradArgs& args, cudaStream_t stream) {
        return lab::softmax_backward_cluster_with(args, static_cast<int>(shape), static_cast<int>(cluster), persistent,
                                                  stream);
      },
      [&] { return c10::str("shape ", shape, " in clusters of ", cluster, " does not hold rows of ", y.size(1),
                            " elements"); });
}

std::vector<int64_t> tune_softmax_backward_cluster_shapes() {
  const int* flat = nullptr;
  const int count = lab::softmax_backward_cluster_shapes(&flat);
  return std::vector<int64_t>(flat, flat + 3 * count);
}

std::vector<int64_t> tune_softmax_backward_cluster_plan(int64_t cols, at::ScalarType dtype, bool aligned) {
  const at::Tensor probe = at::empty({0}, at::TensorOptions().dtype(dtype));
  const lab::ClusterPlan plan = lab::softmax_backward_cluster_plan(
      cols, lab::to_lab_dtype(probe, "softmax_backward_cluster_plan"), aligned);
  return {plan.shape, plan.cluster, plan.persistent ? 1 : 0};
}
}  // namespace

TORCH_LIBRARY_FRAGMENT(lab_tune, m) {
  m.def("softmax_backward_cluster(Tensor y, Tensor dy, int shape, int cluster, bool persistent) -> Tensor");
  m.def("softmax_backward_cluster_shapes() -> int[]", &tune_softmax_backward_cluster_shapes);
  m.def("softmax_backward_cluster_plan(int cols, ScalarType dtype, bool aligned=True) -> int[]",
        &tune_softmax_backward_cluster_plan);
  m.def("softmax_backward_register_cached(Tensor y, Tensor dy, bool twice_the_threads) -> Tensor");
}
TORCH_LIBRARY_IMPL(lab_tune, CUDA, m) {
  m.impl("softmax_backward_cluster", &tune_softmax_backward_cluster);
  m.impl("softmax_backward_register_cached", &tune_softmax_backward_register_cached);
}
TORCH_LIBRARY_IMPL(lab_tune, CPU, m) {
  m.impl("softmax_backward_cluster", &tune_softmax_backward_cluster);
  m.impl("softmax_backward_register_cached", &tune_softmax_backward_register_cached);
}
#endif  // LAB_HAS_SOFTMAX_BACKWARD

#ifdef LAB_HAS_CROSS_ENTROPY
// Tuning the cross-entropy kernel's launch (scripts/tune/tune_cross_entropy_cluster.py):
//   torch.ops.lab_tune.cross_entropy(Tensor logits, Tensor target, int shape, int cluster, bool persistent,
//                                    int stagger_groups=1, int stagger_ns=0, *, Tensor(a!)? dlogits=None) -> Tensor
//       the loss per row (no reduction, ignore_index -100, no class weights) from the cluster kernel alone on the
//       given plan, with the gradient of the rows' sum written into dlogits where given (else the loss alone);
//       errors where the shape is not compiled for it or its registers do not hold the slice
//   torch.ops.lab_tune.cross_entropy_shapes(ScalarType dtype) -> int[]   the resident shapes (indices of
//       cluster_shapes) compiled for the kernel in that dtype
//   torch.ops.lab_tune.cross_entropy_plan(int cols, ScalarType dtype, int rows=0, bool aligned=True,
//                                         bool grad=False) -> int[]
//       the kernel's plan with the gradient or for the loss alone, as cluster_plan gives softmax's
namespace {
at::Tensor tune_cross_entropy(const at::Tensor& x, const at::Tensor& target, int64_t shape, int64_t cluster,
                              bool persistent, int64_t stagger_groups, int64_t stagger_ns,
                              const std::optional<at::Tensor>& dlogits) {
  const char* op = "cross_entropy (tuned)";
  lab::check_rows(x, op);
  if (dlogits.has_value()) lab::check_like(x, *dlogits, op, "logits", "dlogits");
  lab::check_aux(target, x.device(), at::kLong, x.size(0), op, "target");
  TORCH_CHECK(stagger_groups >= 1 && stagger_groups <= 64 && stagger_ns >= 0 && stagger_ns <= 100000, "lab_tune::",
              op, ": stagger_groups must be 1 to 64 and stagger_ns 0 to 100000, got ", stagger_groups, " and ",
              stagger_ns);
  at::Tensor loss_rows = at::empty({x.size(0)}, x.options().dtype(at::kFloat));
  const at::Tensor one = at::ones({1}, x.options().dtype(at::kFloat));  // the factor c of a sum
  const lab::ClusterPlan plan{static_cast<int>(shape), static_cast<int>(cluster), persistent,
                              {static_cast<int>(stagger_groups), static_cast<int>(stagger_ns)}};
  const at::Tensor& dx = dlogits.has_value() ? *dlogits : x;
  const lab::CrossEntropyArgs args{x.data_ptr(), dx.data_ptr(), target.data_ptr<int64_t>(), nullptr,
                                   one.data_ptr<float>(), loss_rows.data_ptr<float>(), x.size(0), x.size(1),
                                   x.stride(0), dx.stride(0), -100, lab::to_lab_dtype(x, op), dlogits.has_value()};
  if (x.numel() == 0) return loss_rows;
  const c10::cuda::CUDAGuard guard(x.device());
  const cudaError_t err = lab::cross_entropy_cluster_with(args, plan, c10::cuda::getCurrentCUDAStream());
  if (err == cudaErrorInvalidValue) {
    (void)cudaGetLastError();
    TORCH_CHECK(false, "lab_tune::", op, ": shape ", shape, " in clusters of ", cluster,
                " is not compiled for this dtype or does not hold rows of ", x.size(1), " elements");
  }
  lab::check_cuda(err, op);
  return loss_rows;
}

std::vector<int64_t> tune_cross_entropy_shapes(at::ScalarType dtype) {
  const at::Tensor probe = at::empty({0}, at::TensorOptions().dtype(dtype));
  const int* shapes = nullptr;
  const int count = lab::cross_entropy_cluster_shapes(lab::to_lab_dtype(probe, "cross_entropy_shapes"), &shapes);
  return std::vector<int64_t>(shapes, shapes + count);
}

std::vector<int64_t> tune_cross_entropy_plan(int64_t cols, at::ScalarType dtype, int64_t rows, bool aligned,
                                             bool grad) {
  const at::Tensor probe = at::empty({0}, at::TensorOptions().dtype(dtype));
  const lab::ClusterPlan plan =
      lab::cross_entropy_plan(cols, rows, lab::to_lab_dtype(probe, "cross_entropy_plan"), aligned, grad);
  return {plan.shape, plan.cluster, plan.persistent ? 1 : 0, plan.stagger.groups, plan.stagger.step_ns};
}
}  // namespace

TORCH_LIBRARY_FRAGMENT(lab_tune, m) {
  m.def("cross_entropy(Tensor logits, Tensor target, int shape, int cluster, bool persistent, "
        "int stagger_groups=1, int stagger_ns=0, *, Tensor(a!)? dlogits=None) -> Tensor");
  m.def("cross_entropy_shapes(ScalarType dtype) -> int[]", &tune_cross_entropy_shapes);
  m.def("cross_entropy_plan(int cols, ScalarType dtype, int rows=0, bool aligned=True, bool grad=False) -> int[]",
        &tune_cross_entropy_plan);
}
TORCH_LIBRARY_IMPL(lab_tune, CUDA, m) { m.impl("cross_entropy", &tune_cross_entropy); }
TORCH_LIBRARY_IMPL(lab_tune, CPU, m) { m.impl("cross_entropy", &tune_cross_entropy); }
#endif  // LAB_HAS_CROSS_ENTROPY

// `import lab._C` loads this library, whose static initializers register the operators above; the
// module itself is empty, so the library uses the stable Python ABI only.
extern "C" PyObject* PyInit__C(void) {
  static PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  return PyModule_Create(&module);
}
