#include "kernels/cuda_libraries/cudnn_conv2d.h"

#include <cudnn.h>

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <type_traits>

#include "kernels/error.h"
#include "kernels/cuda_runtime/caching_allocator.h"
#include "kernels/cuda_runtime/check.h"
#include "kernels/cuda_runtime/devices.h"
#include "kernels/cuda_libraries/engine_config.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda_runtime/library_handles.h"

namespace dpcore::kernels::cuda_libraries::cudnn {

namespace {

constexpr size_t kMaxWorkspace = size_t(1) << 30;  // algorithms wanting more than 1 GiB are skipped

// One direction of one convolution: its descriptor (math type is per direction) and algorithm.
template <class Algo>
struct Direction {
  cudnnConvolutionDescriptor_t conv = nullptr;
  Algo algo{};
  size_t workspace = 0;
  // Set last, under the plan mutex, once the fields above are final; they are never written
  // again, so a thread that reads ready == true may use them without the mutex.
  std::atomic<bool> ready{false};
};

struct Plan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  Direction<cudnnConvolutionFwdAlgo_t> forward;
  Direction<cudnnConvolutionBwdDataAlgo_t> backward_data;
  Direction<cudnnConvolutionBwdFilterAlgo_t> backward_filter;
};

using PlanKey = std::array<int64_t, 14>;

// How a convolution may compute: FP32 (FMA kernels only), TF32 (float32 tensors on
// tensor cores, engine_config().tf32) or Half (16-bit tensors on tensor cores, float32
// accumulation).
enum class Math { Fp32, Tf32, Half };

template <class T>
Math math_for() {
  if constexpr (std::is_same_v<T, float>) return engine_config().tf32 ? Math::Tf32 : Math::Fp32;
  else return Math::Half;
}
const char* math_name(Math math) { return math == Math::Fp32 ? "FP32" : math == Math::Tf32 ? "TF32" : "16-bit"; }

template <class T>
cudnnDataType_t data_type() {
  if constexpr (std::is_same_v<T, float>) return CUDNN_DATA_FLOAT;
  else if constexpr (std::is_same_v<T, kernels::BFloat16>) return CUDNN_DATA_BFLOAT16;
  else return CUDNN_DATA_HALF;
}

// The compute type is float32 for every tensor type: for 16-bit tensors that is cuDNN's
// PSEUDO_HALF / PSEUDO_BFLOAT16 configuration (float32 sums, one rounding of each output),
// as PyTorch sets it; TRUE_HALF would accumulate in float16.
cudnnConvolutionDescriptor_t make_conv_desc(const kernels::Conv2dShape& s) {
  cudnnConvolutionDescriptor_t conv;
  CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv));
  CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv, int(s.pad_h), int(s.pad_w), int(s.stride_h), int(s.stride_w), 1, 1,
                                              CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  return conv;
}

std::unique_ptr<Plan> make_plan(const kernels::Conv2dShape& s, cudnnDataType_t type) {
  auto plan = std::make_unique<Plan>();
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&plan->x));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(plan->x, CUDNN_TENSOR_NCHW, type, int(s.N), int(s.C), int(s.H), int(s.W)));
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&plan->y));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(plan->y, CUDNN_TENSOR_NCHW, type, int(s.N), int(s.K), int(s.P), int(s.Q)));
  CUDNN_CHECK(cudnnCreateFilterDescriptor(&plan->w));
  CUDNN_CHECK(cudnnSetFilter4dDescriptor(plan->w, type, CUDNN_TENSOR_NCHW, int(s.K), int(s.C), int(s.R), int(s.S)));
  plan->forward.conv = make_conv_desc(s);
  plan->backward_data.conv = make_conv_desc(s);
  plan->backward_filter.conv = make_conv_desc(s);
  int n, c, h, w;
  CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(plan->forward.conv, plan->x, plan->w, &n, &c, &h, &w));
  DPCORE_CHECK(n == s.N && c == s.K && h == s.P && w == s.Q, "conv2d (cudnn): cuDNN computes output ", n, "x", c, "x",
               h, "x", w, " for a shape that expects ", s.N, "x", s.K, "x", s.P, "x", s.Q);
  return plan;
}

// The plan cache's mutex, held only while a plan is looked up or created and while one of
// its directions is prepared (both rare after the first step), never while a convolution
// is enqueued: replica threads convolving on their own streams then do not wait on each
// other. The enqueue may read a plan without the mutex because plans are never freed or
// moved (the map owns them through unique_ptr and never erases one) and a direction is
// read only once its `ready` flag says that it is final. cuDNN's calls may run on several
// threads at once as long as no handle is shared (its "Thread Safety" note); each stream
// has its own handle, and the enqueue only reads the shared descriptors.
std::mutex& plan_mutex() {
  static std::mutex mutex;
  return mutex;
}

// Descriptors are host objects (valid on any device); algorithms are per device and
// math mode (which also names the element type: Half's is in `type`), so both are part of
// the key. Plans are never freed: one per layer shape.
Plan& plan_for(const kernels::Conv2dShape& s, int device, Math math, cudnnDataType_t type) {
  static std::map<PlanKey, std::unique_ptr<Plan>> plans;
  std::lock_guard<std::mutex> lock(plan_mutex());
  const PlanKey key{device, int64_t(math), type,       s.N,        s.C,     s.H,    s.W,
                    s.K,    s.R,           s.S,        s.stride_h, s.stride_w, s.pad_h, s.pad_w};
  std::unique_ptr<Plan>& plan = plans[key];
  if (!plan) plan = make_plan(s, type);
  return *plan;
}

// Winograd and FFT algorithms compute in a transformed domain (Winograd's input and output
// transforms have entries well above 1, FFT goes through complex twiddle factors) and round
// there, so their FP32 results err several times more than a direct sum's: beyond the 1e-5
// against the CPU that FP32 mode is held to (kFp32Tolerance in the tests). They are refused
// in FP32 mode and for 16-bit tensors (whose tests bound a float32 direct sum, then one
// rounding: half_conv2d_test.cpp); in TF32 mode the 10-bit inputs already err far more
// than they do.
bool transforms_operands(cudnnConvolutionFwdAlgo_t a) {
  return a == CUDNN_CONVOLUTION_FWD_ALGO_FFT || a == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
}
bool transforms_operands(cudnnConvolutionBwdDataAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
}
bool transforms_operands(cudnnConvolutionBwdFilterAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
}

// The first heuristic result that works, is deterministic, stays within the workspace cap
// and, in FP32 mode, uses no tensor cores; in FP32 and Half modes it must not transform the
// operands either. Tensor cores on 16-bit tensors multiply exactly (a product of two
// 16-bit values fits in float32) and accumulate in float32, so Half allows them.
template <class Perf>
const Perf* pick(const Perf* results, int count, Math math) {
  for (int i = 0; i < count; ++i) {
    const Perf& p = results[i];
    const bool tensor_cores = p.mathType == CUDNN_TENSOR_OP_MATH || p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
    const bool allowed = math == Math::Tf32 || (!transforms_operands(p.algo) && (math == Math::Half || !tensor_cores));
    if (p.status == CUDNN_STATUS_SUCCESS && p.determinism == CUDNN_DETERMINISTIC && p.memory <= kMaxWorkspace &&
        allowed)
      return &p;
  }
  return nullptr;
}

// FP32 mode restricts cuDNN to FMA kernels (CUDNN_DEFAULT_MATH would allow TF32 on Hopper);
// TF32 and Half modes allow tensor-core kernels and then run with the math type of the
// chosen one (never ALLOW_CONVERSION for Half: the query does not offer it, as the tensor
// types need no conversion).
cudnnMathType_t query_math(Math math) { return math == Math::Fp32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH; }
cudnnMathType_t run_math(Math math, cudnnMathType_t chosen) { return math == Math::Fp32 ? CUDNN_FMA_MATH : chosen; }

constexpr int kCandidates = 16;

// Picks and caches the algorithm of one direction, under the plan mutex. `query` fills
// cuDNN's ranked candidates (cudnnGet*Algorithm_v7), `workspace_size` the bytes the chosen
// one needs.
template <class Perf, class Algo, class Query, class WorkspaceSize>
void prepare(Direction<Algo>& d, Math math, const char* what, const kernels::Conv2dShape& s, Query query,
             WorkspaceSize workspace_size) {
  if (d.ready) return;
  std::lock_guard<std::mutex> lock(plan_mutex());
  if (d.ready) return;  // another thread prepared it while this one waited
  CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, query_math(math)));
  Perf results[kCandidates];
  int count = 0;
  CUDNN_CHECK(query(results, &count));
  const Perf* best = pick(results, count, math);
  DPCORE_CHECK(best, "conv2d (cudnn): no deterministic ", what, " algorithm for input ", s.N, "x", s.C, "x", s.H, "x",
               s.W, ", weight ", s.K, "x", s.C, "x", s.R, "x", s.S, " in ", math_name(math), " mode");
  CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, run_math(math, best->mathType)));
  d.algo = best->algo;
  CUDNN_CHECK(workspace_size(d.algo, &d.workspace));
  d.ready = true;
}

// The plan for T's convolutions of shape s on the current device, and its math mode.
template <class T>
struct Setup {
  const kernels::Conv2dShape& s;
  const int device = cuda_runtime::current_device();
  const Math math = math_for<T>();
  Plan& plan = plan_for(s, device, math, data_type<T>());
  explicit Setup(const kernels::Conv2dShape& shape) : s(shape) {}
};

}  // namespace

// alpha and beta are float for float32 and 16-bit tensors alike (cuDNN's scaling
// parameters are double only for double tensors).
template <class T>
void conv2d_forward(const kernels::Conv2dShape& s, const T* x, const T* w, T* y, bool accumulate, cudaStream_t stream) {
  kernels::cuda::check_conv_shape("conv2d", s);
  if (s.y_size() == 0) return;
  const Setup<T> setup(s);
  Plan& p = setup.plan;
  cudnnHandle_t handle = cuda_runtime::cudnn_handle(setup.device, stream);
  auto& d = p.forward;
  prepare<cudnnConvolutionFwdAlgoPerf_t>(
      d, setup.math, "forward", s,
      [&](cudnnConvolutionFwdAlgoPerf_t* r, int* n) {
        return cudnnGetConvolutionForwardAlgorithm_v7(handle, p.x, p.w, d.conv, p.y, kCandidates, n, r);
      },
      [&](cudnnConvolutionFwdAlgo_t algo, size_t* bytes) {
        return cudnnGetConvolutionForwardWorkspaceSize(handle, p.x, p.w, d.conv, p.y, algo, bytes);
      });
  cuda_runtime::Workspace workspace(d.workspace, stream);
  const float alpha = 1.f, beta = accumulate ? 1.f : 0.f;  // beta = 0: y is not read
  CUDNN_CHECK(cudnnConvolutionForward(handle, &alpha, p.x, x, p.w, w, d.conv, d.algo, workspace.data(), d.workspace,
                                      &beta, p.y, y));
}

template <class T>
void conv2d_backward_data(const kernels::Conv2dShape& s, const T* dy, const T* w, T* dx, cudaStream_t stream) {
  kernels::cuda::check_conv_shape("conv2d backward", s);
  if (s.x_size() == 0) return;
  const Setup<T> setup(s);
  Plan& p = setup.plan;
  cudnnHandle_t handle = cuda_runtime::cudnn_handle(setup.device, stream);
  auto& d = p.backward_data;
  prepare<cudnnConvolutionBwdDataAlgoPerf_t>(
      d, setup.math, "backward-data", s,
      [&](cudnnConvolutionBwdDataAlgoPerf_t* r, int* n) {
        return cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, p.w, p.y, d.conv, p.x, kCandidates, n, r);
      },
      [&](cudnnConvolutionBwdDataAlgo_t algo, size_t* bytes) {
        return cudnnGetConvolutionBackwardDataWorkspaceSize(handle, p.w, p.y, d.conv, p.x, algo, bytes);
      });
  cuda_runtime::Workspace workspace(d.workspace, stream);
  const float alpha = 1.f, beta = 0.f;
  CUDNN_CHECK(cudnnConvolutionBackwardData(handle, &alpha, p.w, w, p.y, dy, d.conv, d.algo, workspace.data(),
                                           d.workspace, &beta, p.x, dx));
}

template <class T>
void conv2d_backward_weight(const kernels::Conv2dShape& s, const T* x, const T* dy, T* dw, bool accumulate,
                            cudaStream_t stream) {
  kernels::cuda::check_conv_shape("conv2d backward", s);
  if (s.w_size() == 0) return;
  const Setup<T> setup(s);
  Plan& p = setup.plan;
  cudnnHandle_t handle = cuda_runtime::cudnn_handle(setup.device, stream);
  auto& d = p.backward_filter;
  prepare<cudnnConvolutionBwdFilterAlgoPerf_t>(
      d, setup.math, "backward-filter", s,
      [&](cudnnConvolutionBwdFilterAlgoPerf_t* r, int* n) {
        return cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, p.x, p.y, d.conv, p.w, kCandidates, n, r);
      },
      [&](cudnnConvolutionBwdFilterAlgo_t algo, size_t* bytes) {
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(handle, p.x, p.y, d.conv, p.w, algo, bytes);
      });
  cuda_runtime::Workspace workspace(d.workspace, stream);
  const float alpha = 1.f, beta = accumulate ? 1.f : 0.f;  // beta = 0: dw is not read
  CUDNN_CHECK(cudnnConvolutionBackwardFilter(handle, &alpha, p.x, x, p.y, dy, d.conv, d.algo, workspace.data(),
                                             d.workspace, &beta, p.w, dw));
}

#define DPCORE_CUDNN_CONV2D(T)                                                                                    \
  template void conv2d_forward<T>(const kernels::Conv2dShape&, const T*, const T*, T*, bool, cudaStream_t);      \
  template void conv2d_backward_data<T>(const kernels::Conv2dShape&, const T*, const T*, T*, cudaStream_t);      \
  template void conv2d_backward_weight<T>(const kernels::Conv2dShape&, const T*, const T*, T*, bool, cudaStream_t);
DPCORE_CUDNN_CONV2D(float)
DPCORE_CUDNN_CONV2D(kernels::BFloat16)
DPCORE_CUDNN_CONV2D(kernels::Float16)
#undef DPCORE_CUDNN_CONV2D

}  // namespace dpcore::kernels::cuda_libraries::cudnn
