// The backends the 16-bit kernel tests (tests/ops/half_gemm_test.cpp, half_conv2d_test.cpp,
// half_attention_test.cpp, half_native_ops_test.cpp) run each body
// against, as op_backends.h does for float32 and float64: one struct per implementation,
// the same static functions in each.
//
//   CpuConvertHalf     kernels/cpu/half, the Convert path (widen to float32, OpenBLAS)
//   CpuAvx512Bf16Half  kernels/cpu/half, the vdpbf16ps kernel (bfloat16; skipped, saying
//                      so, on a CPU without AVX512-BF16)
//   CpuAmxBf16Half     kernels/cpu/half, the AMX tile kernel (bfloat16; skipped, saying so,
//                      on a CPU or kernel without AMX)
//   CudaHalf           kernels/cuda, the WMMA tensor-core kernel and the cast kernel
//   CudaLibraryHalf    cuBLAS's 16-bit GEMM and cuDNN's 16-bit convolutions (kernels/
//                      cuda_libraries, through the engine dispatch), the rest as CudaHalf;
//                      in HalfLibraryBackends only (the GEMM and conv2d tests)
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/half/gemm_half.h"
#include "kernels/cpu/kernels.h"
#include "kernels/half_types.h"
#include "support/op_backends.h"

#ifdef DPCORE_HAVE_CUDA
#include "kernels/cuda/kernels.h"
#endif
#ifdef DPCORE_CUDA_LIBRARIES
#include "kernels/cuda_libraries/dispatch.h"
#include "kernels/cuda_libraries/engine_config.h"
#endif

namespace dpcore::testing {

// The 16-bit values of the tests: float32 rounded to nearest even, widened exactly, the
// unit roundoff of a type (half an ulp, relative), its name, and random values uniform in
// [-1, 1] rounded to it.
template <class H>
H to_half(float v) {
  if constexpr (std::is_same_v<H, kernels::BFloat16>) return kernels::float_to_bfloat16(v);
  else return kernels::float_to_float16(v);
}
template <class H>
double to_double(H h) {
  if constexpr (std::is_same_v<H, kernels::BFloat16>) return kernels::bfloat16_to_float(h);
  else if constexpr (std::is_same_v<H, kernels::Float16>) return kernels::float16_to_float(h);
  else return double(h);
}
template <class H>
constexpr double unit_roundoff() {
  if constexpr (std::is_same_v<H, kernels::BFloat16>) return 1.0 / 256;
  else if constexpr (std::is_same_v<H, kernels::Float16>) return 1.0 / 2048;
  else return 0.0;  // a float32 output: its rounding is the last addition's, already counted
}
template <class H>
const char* type_name() {
  if constexpr (std::is_same_v<H, kernels::BFloat16>) return "bfloat16";
  else if constexpr (std::is_same_v<H, kernels::Float16>) return "float16";
  else return "float32";
}

template <class H>
std::vector<H> random_half(size_t n, uint64_t seed) {
  const std::vector<float> f = random_vector<float>(n, seed);
  std::vector<H> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = to_half<H>(f[i]);
  return h;
}

// The CPU kernels under one bfloat16 path, restored to the default afterwards.
template <kernels::cpu::HalfGemmPath kPath>
struct CpuHalf {
  template <class U>
  using Array = HostArray<U>;
  static constexpr bool kCuda = false;
  // The AVX512-BF16 kernel multiplies bfloat16 only: float16 and the casts take the same
  // code on both paths, tested under CpuConvert.
  static constexpr bool kBfloat16Only = kPath != kernels::cpu::HalfGemmPath::Convert;
  static std::string name() {
    switch (kPath) {
      case kernels::cpu::HalfGemmPath::Avx512Bf16: return "CpuAvx512Bf16";
      case kernels::cpu::HalfGemmPath::AmxBf16: return "CpuAmxBf16";
      case kernels::cpu::HalfGemmPath::Convert: break;
    }
    return "CpuConvert";
  }
  // Why the backend cannot run here, or empty.
  static std::string missing() {
    if (kPath == kernels::cpu::HalfGemmPath::Avx512Bf16 && !kernels::cpu::cpu_has_avx512_bf16())
      return "this CPU has no AVX512-BF16 (vdpbf16ps): its bfloat16 products take the convert path, tested as CpuConvert";
    if (kPath == kernels::cpu::HalfGemmPath::AmxBf16 && !kernels::cpu::cpu_has_amx_bf16())
      return "this CPU (or its kernel) gives no AMX tiles with tdpbf16ps: its bfloat16 products take another path, "
             "tested as CpuAvx512Bf16 or CpuConvert";
    return "";
  }
  static std::vector<int> thread_counts() { return kernel_thread_counts(); }
  template <class In, class Out>
  static void gemm_half(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const In* A, int64_t lda,
                        int64_t sa, const In* B, int64_t ldb, int64_t sb, float beta, Out* C, int64_t ldc, int64_t sc,
                        int64_t batch) {
    on_path([&] { kernels::cpu::gemm_half<In, Out>(ta, tb, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch); });
  }
  template <class From, class To>
  static void cast(int64_t n, const From* x, To* y) {
    kernels::cpu::cast<From, To>(n, x, y);
  }
  // conv2d (kernels/cpu/half/conv2d_half.cpp) on this path's GEMM.
  template <class H>
  static void conv2d_forward(const kernels::Conv2dShape& s, const H* x, const H* w, const H* bias, H* y) {
    on_path([&] { kernels::cpu::conv2d_forward<H>(s, x, w, bias, y); });
  }
  template <class H>
  static void conv2d_backward_data(const kernels::Conv2dShape& s, const H* dy, const H* w, H* dx) {
    on_path([&] { kernels::cpu::conv2d_backward_data<H>(s, dy, w, dx); });
  }
  template <class H>
  static void conv2d_backward_weight(const kernels::Conv2dShape& s, const H* x, const H* dy, H* dw, H* dbias,
                                     bool accumulate) {
    on_path([&] { kernels::cpu::conv2d_backward_weight<H>(s, x, dy, dw, dbias, accumulate); });
  }
  // scaled_dot_product_attention (kernels/cpu/half/attention_half.cpp: widened to float32
  // whatever the GEMM path).
  template <class H>
  static void attention_forward(const kernels::AttentionShape& s, const H* q, const H* k, const H* v, const H* mask,
                                H* o, float* lse) {
    kernels::cpu::attention_forward<H>(s, q, k, v, mask, o, lse);
  }
  template <class H>
  static void attention_backward(const kernels::AttentionShape& s, const H* q, const H* k, const H* v, const H* mask,
                                 const H* o, const float* lse, const H* dout, H* dq, H* dk, H* dv) {
    std::vector<double> row_dot(size_t(s.rows()));
    kernels::cpu::attention_backward<H>(s, q, k, v, mask, o, lse, dout, row_dot.data(), dq, dk, dv);
  }
  // batch_norm2d's passes over activations, max_pool2d and dropout, on 16-bit tensors or
  // (X = float) on their widening: kernels/cpu/batch_norm2d.cpp, max_pool2d.cpp and
  // dropout.cpp, whatever the path.
  template <class X>
  static void batch_norm2d_stats(const kernels::BatchNorm2dShape& s, const X* x, float* mean, float* var) {
    kernels::cpu::batch_norm2d_stats<X, float>(s, x, mean, var);
  }
  template <class X>
  static void batch_norm2d_apply(const kernels::BatchNorm2dShape& s, const X* x, const float* mean,
                                 const float* invstd, const float* weight, const float* bias, X* y) {
    kernels::cpu::batch_norm2d_apply<X, float>(s, x, mean, invstd, weight, bias, y);
  }
  template <class X>
  static void batch_norm2d_backward_reduce(const kernels::BatchNorm2dShape& s, const X* dy, const X* x,
                                           const float* mean, const float* invstd, float* sum_dy, float* sum_dy_xhat,
                                           float* dweight, float* dbias, bool accumulate) {
    kernels::cpu::batch_norm2d_backward_reduce<X, float>(s, dy, x, mean, invstd, sum_dy, sum_dy_xhat, dweight, dbias,
                                                         accumulate);
  }
  template <class X>
  static void batch_norm2d_backward_apply(const kernels::BatchNorm2dShape& s, const X* dy, const X* x,
                                          const float* mean, const float* invstd, const float* weight,
                                          const float* sum_dy, const float* sum_dy_xhat, X* dx) {
    kernels::cpu::batch_norm2d_backward_apply<X, float>(s, dy, x, mean, invstd, weight, sum_dy, sum_dy_xhat, dx);
  }
  template <class X>
  static void max_pool2d_forward(const kernels::Pool2dShape& s, const X* x, X* y, int32_t* argmax) {
    kernels::cpu::max_pool2d_forward<X>(s, x, y, argmax);
  }
  template <class X>
  static void max_pool2d_backward(const kernels::Pool2dShape& s, const X* dy, const int32_t* argmax, X* dx) {
    kernels::cpu::max_pool2d_backward<X>(s, dy, argmax, dx);
  }
  template <class X>
  static void dropout(const kernels::DropoutConfig& cfg, int64_t samples, int64_t size, const X* x, X* y) {
    kernels::cpu::dropout<X>(cfg, samples, size, x, y);
  }
  // The elementwise ops (gelu.cpp, tanh.cpp, elementwise.cpp) and average pooling
  // (avg_pool2d.cpp), 16-bit or (X = float) on the widening.
  template <class X>
  static void gelu_forward(kernels::GeluApproximate form, int64_t n, const X* x, X* y) {
    kernels::cpu::gelu_forward<X>(form, n, x, y);
  }
  template <class X>
  static void gelu_backward(kernels::GeluApproximate form, int64_t n, const X* dy, const X* x, X* dx) {
    kernels::cpu::gelu_backward<X>(form, n, dy, x, dx);
  }
  template <class X>
  static void tanh_forward(int64_t n, const X* x, X* y) {
    kernels::cpu::tanh_forward<X>(n, x, y);
  }
  template <class X>
  static void tanh_backward(int64_t n, const X* dy, const X* y, X* dx) {
    kernels::cpu::tanh_backward<X>(n, dy, y, dx);
  }
  template <class X>
  static void scale(int64_t n, float alpha, const X* x, X* y) {
    if constexpr (std::is_same_v<X, float>) kernels::cpu::scale<float>(n, alpha, x, y);
    else kernels::cpu::scale_half<X>(n, alpha, x, y);
  }
  template <class X>
  static void avg_pool2d_forward(const kernels::Pool2dShape& s, bool count_include_pad, const X* x, X* y) {
    kernels::cpu::avg_pool2d_forward<X>(s, count_include_pad, x, y);
  }
  template <class X>
  static void avg_pool2d_backward(const kernels::Pool2dShape& s, bool count_include_pad, const X* dy, X* dx) {
    kernels::cpu::avg_pool2d_backward<X>(s, count_include_pad, dy, dx);
  }
  template <class X>
  static void global_avg_pool2d_forward(int64_t planes, int64_t plane_size, const X* x, X* y) {
    kernels::cpu::global_avg_pool2d_forward<X>(planes, plane_size, x, y);
  }
  template <class X>
  static void global_avg_pool2d_backward(int64_t planes, int64_t plane_size, const X* dy, X* dx) {
    kernels::cpu::global_avg_pool2d_backward<X>(planes, plane_size, dy, dx);
  }
  template <class X>
  static void layer_norm_forward(int64_t rows, int64_t cols, const X* x, const float* weight, const float* bias,
                                 double eps, X* y, float* mean, float* rstd) {
    kernels::cpu::layer_norm_forward<X, float>(rows, cols, x, weight, bias, eps, y, mean, rstd);
  }
  template <class X>
  static void layer_norm_backward(int64_t rows, int64_t cols, const X* dy, const X* x, const float* weight,
                                  const float* mean, const float* rstd, X* dx, float* dweight, float* dbias,
                                  bool accumulate) {
    kernels::cpu::layer_norm_backward<X, float>(rows, cols, dy, x, weight, mean, rstd, dx, dweight, dbias, accumulate);
  }

 private:
  template <class F>
  static void on_path(F&& f) {
    const kernels::cpu::HalfGemmPath before = kernels::cpu::half_gemm_path();
    kernels::cpu::set_half_gemm_path(kPath);
    f();
    kernels::cpu::set_half_gemm_path(before);
  }
};
using CpuConvertHalf = CpuHalf<kernels::cpu::HalfGemmPath::Convert>;
using CpuAvx512Bf16Half = CpuHalf<kernels::cpu::HalfGemmPath::Avx512Bf16>;
using CpuAmxBf16Half = CpuHalf<kernels::cpu::HalfGemmPath::AmxBf16>;

#ifdef DPCORE_HAVE_CUDA
struct CudaHalf {
  template <class U>
  using Array = DeviceArray<U>;
  static constexpr bool kCuda = true;
  static constexpr bool kBfloat16Only = false;
  static std::string name() { return CudaBackend::name(); }
  static std::string missing() { return ""; }
  static std::vector<int> thread_counts() { return {0}; }
  template <class In, class Out>
  static void gemm_half(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const In* A, int64_t lda,
                        int64_t sa, const In* B, int64_t ldb, int64_t sb, float beta, Out* C, int64_t ldc, int64_t sc,
                        int64_t batch) {
    kernels::cuda::gemm_half_strided_batched<In, Out>(ta, tb, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc,
                                                      batch, nullptr);
  }
  template <class From, class To>
  static void cast(int64_t n, const From* x, To* y) {
    kernels::cuda::cast<From, To>(n, x, y, nullptr);
  }
  template <class H>
  static void conv2d_forward(const kernels::Conv2dShape& s, const H* x, const H* w, const H* bias, H* y) {
    kernels::cuda::conv2d_forward_half<H>(s, x, w, bias, y, nullptr);
  }
  template <class H>
  static void conv2d_backward_data(const kernels::Conv2dShape& s, const H* dy, const H* w, H* dx) {
    kernels::cuda::conv2d_backward_data_half<H>(s, dy, w, dx, nullptr);
  }
  template <class H>
  static void conv2d_backward_weight(const kernels::Conv2dShape& s, const H* x, const H* dy, H* dw, H* dbias,
                                     bool accumulate) {
    kernels::cuda::conv2d_backward_weight_half<H>(s, x, dy, dw, dbias, accumulate, nullptr);
  }
  template <class H>
  static void attention_forward(const kernels::AttentionShape& s, const H* q, const H* k, const H* v, const H* mask,
                                H* o, float* lse) {
    kernels::cuda::attention_forward<H>(s, q, k, v, mask, o, lse, nullptr);
  }
  template <class H>
  static void attention_backward(const kernels::AttentionShape& s, const H* q, const H* k, const H* v, const H* mask,
                                 const H* o, const float* lse, const H* dout, H* dq, H* dk, H* dv) {
    DeviceArray<float> row_dot(size_t(s.rows()));
    kernels::cuda::attention_backward<H>(s, q, k, v, mask, o, lse, dout, row_dot.get(), dq, dk, dv, nullptr);
  }
  template <class X>
  static void batch_norm2d_stats(const kernels::BatchNorm2dShape& s, const X* x, float* mean, float* var) {
    kernels::cuda::batch_norm2d_stats<X>(s, x, mean, var, nullptr);
  }
  template <class X>
  static void batch_norm2d_apply(const kernels::BatchNorm2dShape& s, const X* x, const float* mean,
                                 const float* invstd, const float* weight, const float* bias, X* y) {
    kernels::cuda::batch_norm2d_apply<X>(s, x, mean, invstd, weight, bias, y, nullptr);
  }
  template <class X>
  static void batch_norm2d_backward_reduce(const kernels::BatchNorm2dShape& s, const X* dy, const X* x,
                                           const float* mean, const float* invstd, float* sum_dy, float* sum_dy_xhat,
                                           float* dweight, float* dbias, bool accumulate) {
    kernels::cuda::batch_norm2d_backward_reduce<X>(s, dy, x, mean, invstd, sum_dy, sum_dy_xhat, dweight, dbias,
                                                   accumulate, nullptr);
  }
  template <class X>
  static void batch_norm2d_backward_apply(const kernels::BatchNorm2dShape& s, const X* dy, const X* x,
                                          const float* mean, const float* invstd, const float* weight,
                                          const float* sum_dy, const float* sum_dy_xhat, X* dx) {
    kernels::cuda::batch_norm2d_backward_apply<X>(s, dy, x, mean, invstd, weight, sum_dy, sum_dy_xhat, dx, nullptr);
  }
  template <class X>
  static void max_pool2d_forward(const kernels::Pool2dShape& s, const X* x, X* y, int32_t* argmax) {
    kernels::cuda::max_pool2d_forward<X>(s, x, y, argmax, nullptr);
  }
  template <class X>
  static void max_pool2d_backward(const kernels::Pool2dShape& s, const X* dy, const int32_t* argmax, X* dx) {
    kernels::cuda::max_pool2d_backward<X>(s, dy, argmax, dx, nullptr);
  }
  template <class X>
  static void dropout(const kernels::DropoutConfig& cfg, int64_t samples, int64_t size, const X* x, X* y) {
    kernels::cuda::dropout<X>(cfg, samples, size, x, y, nullptr);
  }
  template <class X>
  static void gelu_forward(kernels::GeluApproximate form, int64_t n, const X* x, X* y) {
    kernels::cuda::gelu_forward<X>(form, n, x, y, nullptr);
  }
  template <class X>
  static void gelu_backward(kernels::GeluApproximate form, int64_t n, const X* dy, const X* x, X* dx) {
    kernels::cuda::gelu_backward<X>(form, n, dy, x, dx, nullptr);
  }
  template <class X>
  static void tanh_forward(int64_t n, const X* x, X* y) {
    kernels::cuda::tanh_forward<X>(n, x, y, nullptr);
  }
  template <class X>
  static void tanh_backward(int64_t n, const X* dy, const X* y, X* dx) {
    kernels::cuda::tanh_backward<X>(n, dy, y, dx, nullptr);
  }
  template <class X>
  static void scale(int64_t n, float alpha, const X* x, X* y) {
    kernels::cuda::scale<X>(n, alpha, x, y, nullptr);
  }
  template <class X>
  static void avg_pool2d_forward(const kernels::Pool2dShape& s, bool count_include_pad, const X* x, X* y) {
    kernels::cuda::avg_pool2d_forward<X>(s, count_include_pad, x, y, nullptr);
  }
  template <class X>
  static void avg_pool2d_backward(const kernels::Pool2dShape& s, bool count_include_pad, const X* dy, X* dx) {
    kernels::cuda::avg_pool2d_backward<X>(s, count_include_pad, dy, dx, nullptr);
  }
  template <class X>
  static void global_avg_pool2d_forward(int64_t planes, int64_t plane_size, const X* x, X* y) {
    kernels::cuda::global_avg_pool2d_forward<X>(planes, plane_size, x, y, nullptr);
  }
  template <class X>
  static void global_avg_pool2d_backward(int64_t planes, int64_t plane_size, const X* dy, X* dx) {
    kernels::cuda::global_avg_pool2d_backward<X>(planes, plane_size, dy, dx, nullptr);
  }
  template <class X>
  static void layer_norm_forward(int64_t rows, int64_t cols, const X* x, const float* weight, const float* bias,
                                 double eps, X* y, float* mean, float* rstd) {
    kernels::cuda::layer_norm_forward<X>(rows, cols, x, weight, bias, float(eps), y, mean, rstd, nullptr);
  }
  template <class X>
  static void layer_norm_backward(int64_t rows, int64_t cols, const X* dy, const X* x, const float* weight,
                                  const float* mean, const float* rstd, X* dx, float* dweight, float* dbias,
                                  bool accumulate) {
    kernels::cuda::layer_norm_backward<X>(rows, cols, dy, x, weight, mean, rstd, dx, dweight, dbias, accumulate,
                                          nullptr);
  }
};
#endif

#ifdef DPCORE_CUDA_LIBRARIES
struct CudaLibraryHalf : CudaHalf {
  static std::string name() { return "CudaLibrary"; }
  template <class In, class Out>
  static void gemm_half(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const In* A, int64_t lda,
                        int64_t sa, const In* B, int64_t ldb, int64_t sb, float beta, Out* C, int64_t ldc, int64_t sc,
                        int64_t batch) {
    library_gemm<In, Out>()(ta, tb, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch, nullptr);
  }
  // cuBLAS's GEMM for each pair of types, from the engines' module.
  template <class In, class Out>
  static kernels::cuda::HalfGemmFn<In, Out> library_gemm() {
    const kernels::cuda_libraries::LibraryEngines& e = libraries();
    if constexpr (std::is_same_v<In, kernels::BFloat16> && std::is_same_v<Out, float>) return e.gemm_bf16_f32;
    else if constexpr (std::is_same_v<In, kernels::BFloat16>) return e.gemm_bf16;
    else if constexpr (std::is_same_v<Out, float>) return e.gemm_fp16_f32;
    else return e.gemm_fp16;
  }
  // conv2d as training runs it with --conv-engine cudnn: the engine dispatch, bias included.
  template <class H>
  static void conv2d_forward(const kernels::Conv2dShape& s, const H* x, const H* w, const H* bias, H* y) {
    on_cudnn([&] { kernels::cuda_libraries::dispatch_conv2d_forward<H>(s, x, w, bias, y, nullptr); });
  }
  template <class H>
  static void conv2d_backward_data(const kernels::Conv2dShape& s, const H* dy, const H* w, H* dx) {
    on_cudnn([&] { kernels::cuda_libraries::dispatch_conv2d_backward_data<H>(s, dy, w, dx, nullptr); });
  }
  template <class H>
  static void conv2d_backward_weight(const kernels::Conv2dShape& s, const H* x, const H* dy, H* dw, H* dbias,
                                     bool accumulate) {
    on_cudnn([&] {
      kernels::cuda_libraries::dispatch_conv2d_backward_weight<H>(s, x, dy, dw, dbias, accumulate, nullptr);
    });
  }

 private:
  template <class F>
  static void on_cudnn(F&& f) {
    namespace libraries = kernels::cuda_libraries;
    const libraries::EngineConfig before = libraries::engine_config();
    libraries::EngineConfig cudnn = before;
    cudnn.conv = libraries::ConvEngine::Cudnn;
    libraries::set_engine_config(cudnn);
    f();
    libraries::set_engine_config(before);
  }
};
#endif

#if defined(DPCORE_HOST_OPS_TEST)
using HalfBackends = ::testing::Types<CudaHalf>;
using HalfLibraryBackends = HalfBackends;
#elif defined(DPCORE_CUDA_LIBRARIES)
using HalfBackends = ::testing::Types<CpuConvertHalf, CpuAvx512Bf16Half, CpuAmxBf16Half, CudaHalf>;
using HalfLibraryBackends = ::testing::Types<CpuConvertHalf, CpuAvx512Bf16Half, CpuAmxBf16Half, CudaHalf, CudaLibraryHalf>;
#elif defined(DPCORE_HAVE_CUDA)
using HalfBackends = ::testing::Types<CpuConvertHalf, CpuAvx512Bf16Half, CpuAmxBf16Half, CudaHalf>;
using HalfLibraryBackends = HalfBackends;
#else
using HalfBackends = ::testing::Types<CpuConvertHalf, CpuAvx512Bf16Half, CpuAmxBf16Half>;
using HalfLibraryBackends = HalfBackends;
#endif

// Skips a backend that cannot run on this machine, saying why (no GPU, no AVX512-BF16).
template <class B>
class HalfTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (B::kCuda && !cuda_available())
      GTEST_SKIP() << "no CUDA device: the " << B::name() << " backend runs only on a GPU (this machine has none)";
    if (!B::missing().empty()) GTEST_SKIP() << B::missing();
  }
};

}  // namespace dpcore::testing
