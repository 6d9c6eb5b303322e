// The only file that sees torch: validates inputs once, maps the dtype, picks the current stream,
// and registers every CUDA variant of LAB_SOFTMAX_VARIANTS as two operators,
//   torch.ops.lab.<name>(Tensor x) -> Tensor
//   torch.ops.lab.<name>.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)
// Softmax is taken over the last dimension of a 2-D tensor.
#include <Python.h>

#include <climits>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "lab/tune.h"
#include "lab/launch.h"

namespace lab {
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

void check_input(const at::Tensor& x, const char* op) {
  TORCH_CHECK(x.is_cuda(), "lab::", op, ": expected a CUDA tensor, got one on ", x.device());
  TORCH_CHECK(x.dim() == 2, "lab::", op, ": expected a 2-D tensor (rows, cols), got ", x.dim(), " dims");
  to_lab_dtype(x, op);
  TORCH_CHECK(x.size(1) <= INT_MAX, "lab::", op, ": rows longer than 2^31 - 1 elements are not supported");
  TORCH_CHECK(x.size(1) <= 1 || x.stride(1) == 1, "lab::", op,
              ": the last dimension must be contiguous (stride 1), got strides ", x.strides());
}

// launch(const RowsArgs&, cudaStream_t) -> cudaError_t: a RowsLauncher, or a lambda around one.
template <typename Launch>
void run(Launch&& launch, const at::Tensor& x, at::Tensor& out, const char* op) {
  TORCH_CHECK(out.device() == x.device(), "lab::", op, ": out is on ", out.device(), ", x on ", x.device());
  TORCH_CHECK(out.scalar_type() == x.scalar_type(), "lab::", op, ": out has dtype ", out.scalar_type(),
              ", x has ", x.scalar_type());
  TORCH_CHECK(out.sizes() == x.sizes(), "lab::", op, ": out has shape ", out.sizes(), ", x has ", x.sizes());
  TORCH_CHECK(out.size(1) <= 1 || out.stride(1) == 1, "lab::", op, ": out's last dimension must be contiguous");
  if (x.numel() == 0) return;
  const c10::cuda::CUDAGuard guard(x.device());
  const RowsArgs args{x.data_ptr(), out.data_ptr(), x.size(0), x.size(1),
                      x.stride(0),  out.stride(0),  to_lab_dtype(x, op)};
  const cudaError_t err = launch(args, c10::cuda::getCurrentCUDAStream());
  // A refused launch (a runtime call that returned an error) also left that error as the runtime's
  // "last error": clear it, or the next CUDA call anywhere in the process would report it again.
  if (err != cudaSuccess) (void)cudaGetLastError();
  // Every argument was checked above, so a launcher's cudaErrorInvalidValue means this variant
  // cannot take the shape (its limits are in the header of csrc/softmax/<op>.cu).
  TORCH_CHECK(err != cudaErrorInvalidValue, "lab::", op, ": rows of ", x.size(1),
              " elements are beyond this variant's limit (see csrc/softmax/", op, ".cu)");
  TORCH_CHECK(err == cudaSuccess, "lab::", op, ": CUDA error: ", cudaGetErrorString(err));
}

template <RowsLauncher L>
struct Op {
  static at::Tensor functional(const at::Tensor& x, const char* op) {
    check_input(x, op);
    at::Tensor out = at::empty(x.sizes(), x.options());
    run(L, x, out, op);
    return out;
  }
  static at::Tensor& with_out(const at::Tensor& x, at::Tensor& out, const char* op) {
    check_input(x, op);
    run(L, x, out, op);
    return out;
  }
};

}  // namespace
}  // namespace lab

#define LAB_DEFINE_OPS(name)                                                                        \
  m.def(#name "(Tensor x) -> Tensor");                                                              \
  m.def(#name ".out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)");
// torch.ops.lab.softmax (and .out): auto, the dispatching entry (csrc/softmax/auto.cu).
TORCH_LIBRARY(lab, m) {
  LAB_SOFTMAX_VARIANTS(LAB_DEFINE_OPS)
  LAB_DEFINE_OPS(softmax)
}
#undef LAB_DEFINE_OPS

#define LAB_IMPL_OPS(name)                                                                          \
  m.impl(#name, [](const at::Tensor& x) { return lab::Op<lab::softmax_##name>::functional(x, #name); }); \
  m.impl(#name ".out", [](const at::Tensor& x, at::Tensor& out) -> at::Tensor& {                    \
    return lab::Op<lab::softmax_##name>::with_out(x, out, #name);                                   \
  });
#define LAB_IMPL_AUTO                                                                              \
  m.impl("softmax", [](const at::Tensor& x) { return lab::Op<lab::softmax_auto>::functional(x, "softmax"); }); \
  m.impl("softmax.out", [](const at::Tensor& x, at::Tensor& out) -> at::Tensor& {                  \
    return lab::Op<lab::softmax_auto>::with_out(x, out, "softmax");                                 \
  });
TORCH_LIBRARY_IMPL(lab, CUDA, m) {
  LAB_SOFTMAX_VARIANTS(LAB_IMPL_OPS)
  LAB_IMPL_AUTO
}
// On CPU tensors the same entry points run their validation, which rejects them with a clear
// message instead of the dispatcher's list of backends.
TORCH_LIBRARY_IMPL(lab, CPU, m) {
  LAB_SOFTMAX_VARIANTS(LAB_IMPL_OPS)
  LAB_IMPL_AUTO
}
#undef LAB_IMPL_AUTO
#undef LAB_IMPL_OPS

// Tuning and explaining the cluster variant's launch table (scripts/tune_cluster.py, --explain):
//   torch.ops.lab_tune.cluster(Tensor x, int shape, int cluster, bool persistent=True) -> Tensor
//       the resident path with a given shape index and cluster size (errors when the slice does not
//       fit that shape), on a persistent grid or one cluster per row
//   torch.ops.lab_tune.register_cached(Tensor x, bool persistent) -> Tensor
//   torch.ops.lab_tune.cluster_shapes() -> int[]       [threads, elems, stages] per shape, flattened
//   torch.ops.lab_tune.cluster_plan(int cols, ScalarType dtype) -> int[]   [shape, cluster, persistent]
//   torch.ops.lab_tune.set_auto_table(str[] names, int[] flat)  auto's dispatch table (lab/dispatch.py)
//   torch.ops.lab_tune.auto_choice(int rows, int cols, ScalarType dtype) -> str[]  [variant, "table" or
//       "default rule"]
namespace {
template <typename Launch>
at::Tensor tuned(const at::Tensor& x, const char* op, Launch&& launch) {
  lab::check_input(x, op);
  at::Tensor out = at::empty(x.sizes(), x.options());
  lab::run(launch, x, out, op);
  return out;
}

at::Tensor tune_cluster(const at::Tensor& x, int64_t shape, int64_t cluster, bool persistent) {
  return tuned(x, "cluster (tuned)", [&](const lab::RowsArgs& a, cudaStream_t s) {
    return lab::softmax_cluster_with(a, static_cast<int>(shape), static_cast<int>(cluster), persistent, s);
  });
}

at::Tensor tune_register_cached(const at::Tensor& x, bool persistent) {
  return tuned(x, "register_cached (tuned)", [&](const lab::RowsArgs& a, cudaStream_t s) {
    return lab::softmax_register_cached_with(a, persistent ? 1 : 0, s);
  });
}

std::vector<int64_t> tune_cluster_shapes() {
  const lab::ResidentShape* shapes = nullptr;
  const int count = lab::cluster_resident_shapes(&shapes);
  std::vector<int64_t> flat;
  for (int i = 0; i < count; ++i) flat.insert(flat.end(), {shapes[i].threads, shapes[i].elems, shapes[i].stages});
  return flat;
}

void tune_set_auto_table(const std::vector<std::string>& names, const std::vector<int64_t>& flat) {
  std::string error;
  TORCH_CHECK(lab::set_auto_table(names, flat, &error), "lab_tune::set_auto_table: ", error);
}

std::vector<std::string> tune_auto_choice(int64_t rows, int64_t cols, at::ScalarType dtype) {
  const at::Tensor probe = at::empty({0}, at::TensorOptions().dtype(dtype));
  bool from_table = false;
  const std::string name = lab::auto_choice(rows, cols, lab::to_lab_dtype(probe, "auto_choice"), &from_table);
  return {name, from_table ? "table" : "default rule"};
}

std::vector<int64_t> tune_cluster_plan(int64_t cols, at::ScalarType dtype) {
  const at::Tensor probe = at::empty({0}, at::TensorOptions().dtype(dtype));
  const lab::ClusterPlan plan = lab::cluster_plan(cols, lab::to_lab_dtype(probe, "cluster_plan"));
  return {plan.shape, plan.cluster, plan.persistent ? 1 : 0};
}
}  // namespace

TORCH_LIBRARY(lab_tune, m) {
  m.def("cluster(Tensor x, int shape, int cluster, bool persistent=True) -> Tensor");
  m.def("register_cached(Tensor x, bool persistent) -> Tensor");
  m.def("cluster_shapes() -> int[]", &tune_cluster_shapes);
  m.def("cluster_plan(int cols, ScalarType dtype) -> int[]", &tune_cluster_plan);
  m.def("set_auto_table(str[] names, int[] flat) -> ()", &tune_set_auto_table);
  m.def("auto_choice(int rows, int cols, ScalarType dtype) -> str[]", &tune_auto_choice);
}
TORCH_LIBRARY_IMPL(lab_tune, CUDA, m) {
  m.impl("cluster", &tune_cluster);
  m.impl("register_cached", &tune_register_cached);
}
TORCH_LIBRARY_IMPL(lab_tune, CPU, m) {
  m.impl("cluster", &tune_cluster);
  m.impl("register_cached", &tune_register_cached);
}

// `import lab._C` loads this library, whose static initializers register the operators above; the
// module itself is empty, so the library uses the stable Python ABI only.
extern "C" PyObject* PyInit__C(void) {
  static PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  return PyModule_Create(&module);
}
