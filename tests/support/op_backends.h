// The backends the op tests (tests/ops) run each test body against, like Caffe's typed
// tests or ggml's test-backend-ops: one struct per backend and scalar type, with the same
// static functions for every op it implements, and arrays of its own kind.
//
//   CpuBackend<float>, CpuBackend<double>  kernels/cpu (BLAS, OpenMP), on host arrays
//   CudaBackend                            kernels/cuda, the hand kernels (float32)
//   CudaLibraryBackend                     cuDNN (conv2d) and cuBLAS (linear, gemm, batched_matmul) in FP32,
//                                          the hand kernels for everything else
//
// A test body is written once against `B` (TypeParam): it draws random inputs on the host,
// uploads them into B::Array<T> (device arrays for the CUDA backends), lets B run the
// kernel into an array that starts as NaN (all bits set: NaN for floats, -1 for integers),
// downloads the result and compares it with the loop-nest reference of kernels/naive or a
// float64 computation. The CUDA backends are compiled only when CUDA is (DPCORE_HAVE_CUDA,
// set by tests/ops/CMakeLists.txt) and skip without a GPU (OpTest::SetUp).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/parallel.h"
#include "kernels/index_check.h"
#include "kernels/naive/naive.h"
#include "kernels/shapes.h"
#include "support/kernel_checks.h"
#include "support/test_support.h"

#ifdef DPCORE_HAVE_CUDA
#include "kernels/cuda/kernels.h"
#include "support/cuda_test_util.h"
#endif
// The library engines exist in the CUDA build (DPCORE_CUDA_LIBRARIES, set by
// tests/ops/CMakeLists.txt), not in the host builds (the host execution layer's op tests,
// DPCORE_HOST_OPS_TEST, and DPCORE_CUDA=HOST), which run the hand kernels only.
#if defined(DPCORE_HAVE_CUDA) && defined(DPCORE_CUDA_LIBRARIES)
#include "kernels/cuda_libraries/engine_config.h"
#include "kernels/cuda_libraries/library_engines.h"
#endif

namespace dpcore::testing {

namespace naive = kernels::naive;  // the loop-nest references

// The host counterpart of DeviceArray (support/cuda_test_util.h): n elements with all bits
// set, or a copy of given values; download() returns a copy.
template <class U>
class HostArray {
 public:
  // Storage for at least one element, as DeviceArray has: an empty array still has a
  // non-null pointer (which a kernel may require even when it has nothing to do).
  explicit HostArray(size_t n) {
    values_.reserve(std::max<size_t>(n, 1));
    values_.resize(n);
    if (n) std::memset(values_.data(), 0xFF, n * sizeof(U));
  }
  explicit HostArray(const std::vector<U>& values) {
    values_.reserve(std::max<size_t>(values.size(), 1));
    values_ = values;
  }
  U* get() const { return values_.data(); }
  size_t size() const { return values_.size(); }
  void upload(const std::vector<U>& values) { values_ = values; }
  std::vector<U> download() const { return values_; }

 private:
  mutable std::vector<U> values_;
};

// How large a case a backend runs in this build: all of them, except where a backend says
// otherwise (the host execution layer, the sanitizer builds), for time. A case left out
// says so in the log; the normal build, or the GPU, runs it.
struct CaseLimits {
  int64_t elements = std::numeric_limits<int64_t>::max();       // of a flat array or an input
  int64_t multiply_adds = std::numeric_limits<int64_t>::max();  // of a product
  const char* where = "";
  bool runs(int64_t work, int64_t limit, const char* unit) const {
    if (work <= limit) return true;
    std::printf("[ limit    ] a case of %lld %s is left out on %s (limit %lld)\n", static_cast<long long>(work), unit,
                where, static_cast<long long>(limit));
    return false;
  }
};

// "1 thread", "2 threads", or nothing for the backends that have no thread count (0).
inline std::string threads_label(int threads) {
  return threads == 0 ? std::string() : ", " + std::to_string(threads) + (threads == 1 ? " thread" : " threads");
}

template <class T>
struct CpuBackend {
  using Scalar = T;
  template <class U>
  using Array = HostArray<U>;
  static constexpr bool kCuda = false;
  static std::string name() { return std::is_same_v<T, float> ? "CpuFloat" : "CpuDouble"; }
  static void set_up() {}
  // The AddressSanitizer build looks for memory errors, which the smaller cases show as
  // well; the largest cases run in the normal build.
#ifdef DPCORE_SANITIZE_ADDRESS
  static constexpr CaseLimits kLimits{int64_t(1) << 20, int64_t(1) << 23, "the AddressSanitizer build"};
#else
  static constexpr CaseLimits kLimits{};
#endif
  static bool runs_elements(int64_t n) { return kLimits.runs(n, kLimits.elements, "elements"); }
  static bool runs_multiply_adds(int64_t m) { return kLimits.runs(m, kLimits.multiply_adds, "multiply-adds"); }
  // Every test body runs once per count (ScopedKernelThreads): serial, and split in two.
  static std::vector<int> thread_counts() { return kernel_thread_counts(); }
  // Against a double-accumulating reference: a few float roundings over the dot products of
  // the test shapes, or near-exact in double (support/kernel_checks.h).
  static double tolerance() { return kernel_tolerance<T>(); }
  // Quantities computed in double and rounded to T once, plus a few exp/log calls
  // (kernels/cpu/softmax_loss.cpp accumulates every row in double).
  static double rounding_tolerance() { return std::is_same_v<T, float> ? 1e-6 : 1e-13; }
  // sum() accumulates in double: even the float result is the rounded true sum.
  static double sum_tolerance() { return std::is_same_v<T, float> ? 6e-8 : 1e-14; }

  static void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
                   const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
    kernels::cpu::gemm_parallel<T>(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  static void conv2d_forward(const kernels::Conv2dShape& s, const T* x, const T* w, const T* bias, T* y) {
    kernels::cpu::conv2d_forward<T>(s, x, w, bias, y);
  }
  static void conv2d_relu_forward(const kernels::Conv2dShape& s, const T* x, const T* w, const T* bias, T* y) {
    kernels::cpu::conv2d_relu_forward<T>(s, x, w, bias, y);
  }
  static void conv2d_backward_data(const kernels::Conv2dShape& s, const T* dy, const T* w, T* dx) {
    kernels::cpu::conv2d_backward_data<T>(s, dy, w, dx);
  }
  static void conv2d_backward_weight(const kernels::Conv2dShape& s, const T* x, const T* dy, T* dw, T* dbias,
                                     bool accumulate) {
    kernels::cpu::conv2d_backward_weight<T>(s, x, dy, dw, dbias, accumulate);
  }
  static void linear_forward(const kernels::LinearShape& s, const T* x, const T* w, const T* bias, T* y) {
    kernels::cpu::linear_forward<T>(s, x, w, bias, y);
  }
  static void linear_backward_data(const kernels::LinearShape& s, const T* dy, const T* w, T* dx) {
    kernels::cpu::linear_backward_data<T>(s, dy, w, dx);
  }
  static void linear_backward_weight(const kernels::LinearShape& s, const T* x, const T* dy, T* dw, T* dbias,
                                     bool accumulate) {
    kernels::cpu::linear_backward_weight<T>(s, x, dy, dw, dbias, accumulate);
  }
  static void max_pool2d_forward(const kernels::Pool2dShape& s, const T* x, T* y, int32_t* argmax) {
    kernels::cpu::max_pool2d_forward<T>(s, x, y, argmax);
  }
  static void max_pool2d_backward(const kernels::Pool2dShape& s, const T* dy, const int32_t* argmax, T* dx) {
    kernels::cpu::max_pool2d_backward<T>(s, dy, argmax, dx);
  }
  static void max_pool2d_relu_backward(const kernels::Pool2dShape& s, const T* dy, const int32_t* argmax,
                                       const T* relu_y, T* dx) {
    kernels::cpu::max_pool2d_relu_backward<T>(s, dy, argmax, relu_y, dx);
  }
  static void batch_norm2d_stats(const kernels::BatchNorm2dShape& s, const T* x, T* mean, T* var) {
    kernels::cpu::batch_norm2d_stats<T>(s, x, mean, var);
  }
  static void batch_norm2d_combine_stats(const kernels::BatchNorm2dShape& s, int64_t replicas, const T* gathered,
                                         T* mean, T* var) {
    kernels::cpu::batch_norm2d_combine_stats<T>(s, replicas, gathered, mean, var);
  }
  static void batch_norm2d_finalize(const kernels::BatchNorm2dShape& s, const T* mean, const T* var, double eps,
                                    double momentum, T* invstd, T* running_mean, T* running_var) {
    kernels::cpu::batch_norm2d_finalize<T>(s, mean, var, eps, momentum, invstd, running_mean, running_var);
  }
  static void batch_norm2d_apply(const kernels::BatchNorm2dShape& s, const T* x, const T* mean, const T* invstd,
                                 const T* weight, const T* bias, T* y) {
    kernels::cpu::batch_norm2d_apply<T>(s, x, mean, invstd, weight, bias, y);
  }
  static void batch_norm2d_backward_reduce(const kernels::BatchNorm2dShape& s, const T* dy, const T* x, const T* mean,
                                           const T* invstd, T* sum_dy, T* sum_dy_xhat, T* dweight, T* dbias,
                                           bool accumulate) {
    kernels::cpu::batch_norm2d_backward_reduce<T>(s, dy, x, mean, invstd, sum_dy, sum_dy_xhat, dweight, dbias,
                                                  accumulate);
  }
  static void batch_norm2d_backward_apply(const kernels::BatchNorm2dShape& s, const T* dy, const T* x, const T* mean,
                                          const T* invstd, const T* weight, const T* sum_dy, const T* sum_dy_xhat,
                                          T* dx) {
    kernels::cpu::batch_norm2d_backward_apply<T>(s, dy, x, mean, invstd, weight, sum_dy, sum_dy_xhat, dx);
  }
  static void relu_forward(int64_t n, const T* x, T* y) { kernels::cpu::relu_forward<T>(n, x, y); }
  static void relu_backward(int64_t n, const T* dy, const T* y, T* dx) { kernels::cpu::relu_backward<T>(n, dy, y, dx); }
  static void avg_pool2d_forward(const kernels::Pool2dShape& s, bool count_include_pad, const T* x, T* y) {
    kernels::cpu::avg_pool2d_forward<T>(s, count_include_pad, x, y);
  }
  static void avg_pool2d_backward(const kernels::Pool2dShape& s, bool count_include_pad, const T* dy, T* dx) {
    kernels::cpu::avg_pool2d_backward<T>(s, count_include_pad, dy, dx);
  }
  static void global_avg_pool2d_forward(int64_t planes, int64_t plane_size, const T* x, T* y) {
    kernels::cpu::global_avg_pool2d_forward<T>(planes, plane_size, x, y);
  }
  static void global_avg_pool2d_backward(int64_t planes, int64_t plane_size, const T* dy, T* dx) {
    kernels::cpu::global_avg_pool2d_backward<T>(planes, plane_size, dy, dx);
  }
  static void log_softmax_forward(int64_t rows, int64_t cols, const T* x, T* y) {
    kernels::cpu::log_softmax_forward<T>(rows, cols, x, y);
  }
  static void log_softmax_backward(int64_t rows, int64_t cols, const T* dy, const T* y, T* dx) {
    kernels::cpu::log_softmax_backward<T>(rows, cols, dy, y, dx);
  }
  static void nll_loss_forward(int64_t rows, int64_t cols, const T* logp, const int64_t* target, T* loss_sum) {
    kernels::cpu::nll_loss_forward<T>(rows, cols, logp, target, loss_sum);
  }
  static void nll_loss_backward(int64_t rows, int64_t cols, T grad_per_row, const int64_t* target, T* dlogp) {
    kernels::cpu::nll_loss_backward<T>(rows, cols, grad_per_row, target, dlogp);
  }
  static void cross_entropy_forward_backward(int64_t rows, int64_t cols, const T* logits, const int64_t* target,
                                             T grad_scale, T* loss_sum, T* dlogits) {
    kernels::cpu::cross_entropy_forward_backward<T>(rows, cols, logits, target, kernels::kDefaultIgnoreIndex,
                                                    grad_scale, nullptr, loss_sum, dlogits);
  }
  static void fill(int64_t n, T value, T* y) { kernels::cpu::fill<T>(n, value, y); }
  static void add(int64_t n, const T* a, const T* b, T* y) { kernels::cpu::add<T>(n, a, b, y); }
  static void axpy(int64_t n, T alpha, const T* x, T* y) { kernels::cpu::axpy<T>(n, alpha, x, y); }
  static void scale(int64_t n, T alpha, const T* x, T* y) { kernels::cpu::scale<T>(n, alpha, x, y); }
  static void sum(int64_t n, const T* x, T* out) { kernels::cpu::sum<T>(n, x, out); }
  static void sum_of_squares(int64_t n, const T* x, T* out) { kernels::cpu::sum_of_squares<T>(n, x, out); }
  static void unscale_and_check_finite(int64_t n, T inv_scale, T* x, T* found_inf) {
    kernels::cpu::unscale_and_check_finite<T>(n, inv_scale, x, found_inf);
  }
  static void sgd_step(int64_t n, const kernels::SgdConfig& cfg, bool first_step, T* param, const T* grad,
                       T* momentum) {
    kernels::cpu::sgd_step<T>(n, cfg, first_step, param, grad, momentum);
  }
  static void adam_step(int64_t n, const kernels::AdamConfig& cfg, int64_t step, T* param, const T* grad, T* exp_avg,
                        T* exp_avg_sq, const uint32_t* decay_mask) {
    kernels::cpu::adam_step<T>(n, cfg, step, param, grad, exp_avg, exp_avg_sq, decay_mask);
  }
  // ---- gelu, tanh, dropout (issue 24) ----
  static void gelu_forward(kernels::GeluApproximate form, int64_t n, const T* x, T* y) {
    kernels::cpu::gelu_forward<T>(form, n, x, y);
  }
  static void gelu_backward(kernels::GeluApproximate form, int64_t n, const T* dy, const T* x, T* dx) {
    kernels::cpu::gelu_backward<T>(form, n, dy, x, dx);
  }
  static void tanh_forward(int64_t n, const T* x, T* y) { kernels::cpu::tanh_forward<T>(n, x, y); }
  static void tanh_backward(int64_t n, const T* dy, const T* y, T* dx) { kernels::cpu::tanh_backward<T>(n, dy, y, dx); }
  static void dropout(const kernels::DropoutConfig& cfg, int64_t samples, int64_t sample_size, const T* x, T* y) {
    kernels::cpu::dropout<T>(cfg, samples, sample_size, x, y);
  }
  // scaled_dot_product_attention; the backward's row_dot scratch is the test's, as the backend's is the op's
  static void attention_forward(const kernels::AttentionShape& s, const T* q, const T* k, const T* v,
                                const T* key_mask, T* o, T* lse) {
    kernels::cpu::attention_forward<T>(s, q, k, v, key_mask, o, lse);
  }
  static void attention_backward(const kernels::AttentionShape& s, const T* q, const T* k, const T* v,
                                 const T* key_mask, const T* o, const T* lse, const T* dout, T* dq, T* dk, T* dv) {
    std::vector<double> row_dot(size_t(s.rows()));
    kernels::cpu::attention_backward<T>(s, q, k, v, key_mask, o, lse, dout, row_dot.data(), dq, dk, dv);
  }
  // batched_matmul
  static void batched_matmul(const kernels::BatchedMatmulShape& s, const T* a, const T* b, T* c) {
    kernels::cpu::batched_matmul<T>(s, a, b, c);
  }
  // embedding
  static void embedding_forward(int64_t n, int64_t /*vocab: checked beforehand*/, int64_t dim, const int64_t* ids,
                                const T* weight, T* y) {
    kernels::cpu::embedding_forward<T>(n, dim, ids, weight, y);
  }
  static void embedding_backward(int64_t n, int64_t vocab, int64_t dim, const int64_t* ids, const T* dy,
                                 int64_t padding_idx, T* dweight, bool accumulate) {
    kernels::cpu::embedding_backward<T>(n, vocab, dim, ids, dy, padding_idx, dweight, accumulate);
  }
  // cross_entropy with ignore_index and the mean's divisor
  static void cross_entropy_forward_backward(int64_t rows, int64_t cols, const T* logits, const int64_t* target,
                                             int64_t ignore_index, const int64_t* divisor, T* loss, T* dlogits) {
    kernels::cpu::cross_entropy_forward_backward<T>(rows, cols, logits, target, ignore_index, T(1), divisor, loss,
                                                    dlogits);
  }
  static void count_targets(int64_t rows, const int64_t* target, int64_t ignore_index, int64_t* counted) {
    kernels::cpu::count_targets(rows, target, ignore_index, counted);
  }
  // layer_norm
  static void layer_norm_forward(int64_t rows, int64_t cols, const T* x, const T* weight, const T* bias, double eps,
                                 T* y, T* mean, T* rstd) {
    kernels::cpu::layer_norm_forward<T>(rows, cols, x, weight, bias, eps, y, mean, rstd);
  }
  static void layer_norm_backward(int64_t rows, int64_t cols, const T* dy, const T* x, const T* weight, const T* mean,
                                  const T* rstd, T* dx, T* dweight, T* dbias, bool accumulate) {
    kernels::cpu::layer_norm_backward<T>(rows, cols, dy, x, weight, mean, rstd, dx, dweight, dbias, accumulate);
  }
  // softmax
  static void softmax_forward(const kernels::SoftmaxShape& s, const T* x, const T* mask, T* y) {
    kernels::cpu::softmax_forward<T>(s, x, mask, y);
  }
  static void softmax_backward(int64_t rows, int64_t cols, const T* dy, const T* y, T* dx) {
    kernels::cpu::softmax_backward<T>(rows, cols, dy, y, dx);
  }  // transpose
  static void transpose(const kernels::TransposeShape& s, const T* x, T* y) { kernels::cpu::transpose<T>(s, x, y); }
};

#ifdef DPCORE_HAVE_CUDA
// The hand kernels, on the legacy default stream (DeviceArray::download synchronises).
struct CudaBackend {
  using Scalar = float;
  template <class U>
  using Array = DeviceArray<U>;
  static constexpr bool kCuda = true;
  // On the host execution layer: the same kernels, run on CPU threads (tests/host_exec).
#ifdef DPCORE_HOST_EXEC
  static std::string name() { return "CudaHost"; }
#else
  static std::string name() { return "CudaHand"; }
#endif
  static void set_up() {}
  // Cases left out for time (CaseLimits): on the host, whose fibers are cheap but not
  // free, the multi-million-element cases that exist to fill a GPU's grid; every tile
  // edge, grid shape, offset and split-K case is among the smaller ones. ThreadSanitizer
  // makes every access an order of magnitude dearer again; races live inside a block, and
  // the smaller cases still reach every kernel, tile size and edge.
#if defined(DPCORE_HOST_EXEC) && defined(DPCORE_SANITIZE_THREAD)
  static constexpr CaseLimits kLimits{int64_t(1) << 16, int64_t(1) << 20, "the host under ThreadSanitizer"};
#elif defined(DPCORE_HOST_EXEC)
  static constexpr CaseLimits kLimits{int64_t(1) << 20, int64_t(1) << 23, "the host"};
#else
  static constexpr CaseLimits kLimits{};
#endif
  static bool runs_elements(int64_t n) { return kLimits.runs(n, kLimits.elements, "elements"); }
  static bool runs_multiply_adds(int64_t m) { return kLimits.runs(m, kLimits.multiply_adds, "multiply-adds"); }
  static std::vector<int> thread_counts() { return {0}; }  // one run; the CPU thread count does not apply
  // FP32 kernels against the float64-accumulated references (cuda_test_util.h).
  static double tolerance() { return kFp32Tolerance; }
  // The CUDA softmax and loss kernels compute in float (expf/logf within 2 ulp, warp and
  // block tree sums): a few tens of float roundings, against the CPU's one.
  static double rounding_tolerance() { return 4e-6; }
  // The deterministic block-tree sum accumulates in float.
  static double sum_tolerance() { return kFp32Tolerance; }

  static void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                   int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
    kernels::cuda::sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, nullptr);
  }
  static void conv2d_forward(const kernels::Conv2dShape& s, const float* x, const float* w, const float* bias,
                             float* y) {
    kernels::cuda::conv2d_forward(s, x, w, bias, y, nullptr);
  }
  static void conv2d_relu_forward(const kernels::Conv2dShape& s, const float* x, const float* w, const float* bias,
                                  float* y) {
    kernels::cuda::conv2d_relu_forward(s, x, w, bias, y, nullptr);
  }
  static void conv2d_backward_data(const kernels::Conv2dShape& s, const float* dy, const float* w, float* dx) {
    kernels::cuda::conv2d_backward_data(s, dy, w, dx, nullptr);
  }
  static void conv2d_backward_weight(const kernels::Conv2dShape& s, const float* x, const float* dy, float* dw,
                                     float* dbias, bool accumulate) {
    kernels::cuda::conv2d_backward_weight(s, x, dy, dw, dbias, accumulate, nullptr);
  }
  static void linear_forward(const kernels::LinearShape& s, const float* x, const float* w, const float* bias,
                             float* y) {
    kernels::cuda::linear_forward(s, x, w, bias, y, nullptr, kernels::cuda::sgemm);
  }
  static void linear_backward_data(const kernels::LinearShape& s, const float* dy, const float* w, float* dx) {
    kernels::cuda::linear_backward_data(s, dy, w, dx, nullptr, kernels::cuda::sgemm);
  }
  static void linear_backward_weight(const kernels::LinearShape& s, const float* x, const float* dy, float* dw,
                                     float* dbias, bool accumulate) {
    kernels::cuda::linear_backward_weight(s, x, dy, dw, dbias, accumulate, nullptr, kernels::cuda::sgemm);
  }
  static void max_pool2d_forward(const kernels::Pool2dShape& s, const float* x, float* y, int32_t* argmax) {
    kernels::cuda::max_pool2d_forward(s, x, y, argmax, nullptr);
  }
  static void max_pool2d_backward(const kernels::Pool2dShape& s, const float* dy, const int32_t* argmax, float* dx) {
    kernels::cuda::max_pool2d_backward(s, dy, argmax, dx, nullptr);
  }
  static void max_pool2d_relu_backward(const kernels::Pool2dShape& s, const float* dy, const int32_t* argmax,
                                       const float* relu_y, float* dx) {
    kernels::cuda::max_pool2d_relu_backward(s, dy, argmax, relu_y, dx, nullptr);
  }
  static void batch_norm2d_stats(const kernels::BatchNorm2dShape& s, const float* x, float* mean, float* var) {
    kernels::cuda::batch_norm2d_stats(s, x, mean, var, nullptr);
  }
  static void batch_norm2d_combine_stats(const kernels::BatchNorm2dShape& s, int64_t replicas,
                                         const float* gathered, float* mean, float* var) {
    kernels::cuda::batch_norm2d_combine_stats(s, replicas, gathered, mean, var, nullptr);
  }
  static void batch_norm2d_finalize(const kernels::BatchNorm2dShape& s, const float* mean, const float* var,
                                    double eps, double momentum, float* invstd, float* running_mean,
                                    float* running_var) {
    kernels::cuda::batch_norm2d_finalize(s, mean, var, float(eps), float(momentum), invstd, running_mean, running_var,
                                         nullptr);
  }
  static void batch_norm2d_apply(const kernels::BatchNorm2dShape& s, const float* x, const float* mean,
                                 const float* invstd, const float* weight, const float* bias, float* y) {
    kernels::cuda::batch_norm2d_apply(s, x, mean, invstd, weight, bias, y, nullptr);
  }
  static void batch_norm2d_backward_reduce(const kernels::BatchNorm2dShape& s, const float* dy, const float* x,
                                           const float* mean, const float* invstd, float* sum_dy, float* sum_dy_xhat,
                                           float* dweight, float* dbias, bool accumulate) {
    kernels::cuda::batch_norm2d_backward_reduce(s, dy, x, mean, invstd, sum_dy, sum_dy_xhat, dweight, dbias,
                                                accumulate, nullptr);
  }
  static void batch_norm2d_backward_apply(const kernels::BatchNorm2dShape& s, const float* dy, const float* x,
                                          const float* mean, const float* invstd, const float* weight,
                                          const float* sum_dy, const float* sum_dy_xhat, float* dx) {
    kernels::cuda::batch_norm2d_backward_apply(s, dy, x, mean, invstd, weight, sum_dy, sum_dy_xhat, dx, nullptr);
  }
  static void relu_forward(int64_t n, const float* x, float* y) { kernels::cuda::relu_forward(n, x, y, nullptr); }
  static void relu_backward(int64_t n, const float* dy, const float* y, float* dx) {
    kernels::cuda::relu_backward(n, dy, y, dx, nullptr);
  }
  static void avg_pool2d_forward(const kernels::Pool2dShape& s, bool count_include_pad, const float* x, float* y) {
    kernels::cuda::avg_pool2d_forward(s, count_include_pad, x, y, nullptr);
  }
  static void avg_pool2d_backward(const kernels::Pool2dShape& s, bool count_include_pad, const float* dy, float* dx) {
    kernels::cuda::avg_pool2d_backward(s, count_include_pad, dy, dx, nullptr);
  }
  static void global_avg_pool2d_forward(int64_t planes, int64_t plane_size, const float* x, float* y) {
    kernels::cuda::global_avg_pool2d_forward(planes, plane_size, x, y, nullptr);
  }
  static void global_avg_pool2d_backward(int64_t planes, int64_t plane_size, const float* dy, float* dx) {
    kernels::cuda::global_avg_pool2d_backward(planes, plane_size, dy, dx, nullptr);
  }
  static void log_softmax_forward(int64_t rows, int64_t cols, const float* x, float* y) {
    kernels::cuda::log_softmax_forward(rows, cols, x, y, nullptr);
  }
  static void log_softmax_backward(int64_t rows, int64_t cols, const float* dy, const float* y, float* dx) {
    kernels::cuda::log_softmax_backward(rows, cols, dy, y, dx, nullptr);
  }
  static void nll_loss_forward(int64_t rows, int64_t cols, const float* logp, const int64_t* target,
                               float* loss_sum) {
    kernels::cuda::nll_loss_forward(rows, cols, logp, target, loss_sum, nullptr);
  }
  // The CUDA kernel reads grad_per_row from the device (a captured graph reads its current value).
  static void nll_loss_backward(int64_t rows, int64_t cols, float grad_per_row, const int64_t* target, float* dlogp) {
    DeviceArray<float> grad(std::vector<float>{grad_per_row});
    kernels::cuda::nll_loss_backward(rows, cols, grad.get(), target, dlogp, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  static void cross_entropy_forward_backward(int64_t rows, int64_t cols, const float* logits, const int64_t* target,
                                             float grad_scale, float* loss_sum, float* dlogits) {
    kernels::cuda::cross_entropy_forward_backward(rows, cols, logits, target, kernels::kDefaultIgnoreIndex, grad_scale,
                                                  nullptr, loss_sum, dlogits, nullptr);
  }
  static void fill(int64_t n, float value, float* y) { kernels::cuda::fill<float>(n, value, y, nullptr); }
  static void add(int64_t n, const float* a, const float* b, float* y) { kernels::cuda::add(n, a, b, y, nullptr); }
  static void axpy(int64_t n, float alpha, const float* x, float* y) { kernels::cuda::axpy(n, alpha, x, y, nullptr); }
  static void scale(int64_t n, float alpha, const float* x, float* y) {
    kernels::cuda::scale(n, alpha, x, y, nullptr);
  }
  static void sum(int64_t n, const float* x, float* out) { kernels::cuda::sum(n, x, out, nullptr); }
  static void sum_of_squares(int64_t n, const float* x, float* out) {
    kernels::cuda::sum_of_squares(n, x, out, nullptr);
  }
  static void unscale_and_check_finite(int64_t n, float inv_scale, float* x, float* found_inf) {
    kernels::cuda::unscale_and_check_finite(n, inv_scale, x, found_inf, nullptr);
  }
  static void sgd_step(int64_t n, const kernels::SgdConfig& cfg, bool first_step, float* param, const float* grad,
                       float* momentum) {
    kernels::cuda::sgd_step(n, cfg, first_step, param, grad, momentum, nullptr);
  }
  static void adam_step(int64_t n, const kernels::AdamConfig& cfg, int64_t step, float* param, const float* grad,
                        float* exp_avg, float* exp_avg_sq, const uint32_t* decay_mask) {
    kernels::cuda::adam_step(n, cfg, step, param, grad, exp_avg, exp_avg_sq, decay_mask, nullptr);
  }
  // ---- gelu, tanh, dropout (issue 24) ----
  static void gelu_forward(kernels::GeluApproximate form, int64_t n, const float* x, float* y) {
    kernels::cuda::gelu_forward(form, n, x, y, nullptr);
  }
  static void gelu_backward(kernels::GeluApproximate form, int64_t n, const float* dy, const float* x, float* dx) {
    kernels::cuda::gelu_backward(form, n, dy, x, dx, nullptr);
  }
  static void tanh_forward(int64_t n, const float* x, float* y) { kernels::cuda::tanh_forward(n, x, y, nullptr); }
  static void tanh_backward(int64_t n, const float* dy, const float* y, float* dx) {
    kernels::cuda::tanh_backward(n, dy, y, dx, nullptr);
  }
  static void dropout(const kernels::DropoutConfig& cfg, int64_t samples, int64_t sample_size, const float* x,
                      float* y) {
    kernels::cuda::dropout(cfg, samples, sample_size, x, y, nullptr);
  }
  // scaled_dot_product_attention; the backward's row_dot scratch is the test's, as the backend's is the op's
  static void attention_forward(const kernels::AttentionShape& s, const float* q, const float* k, const float* v,
                                const float* key_mask, float* o, float* lse) {
    kernels::cuda::attention_forward(s, q, k, v, key_mask, o, lse, nullptr);
  }
  static void attention_backward(const kernels::AttentionShape& s, const float* q, const float* k, const float* v,
                                 const float* key_mask, const float* o, const float* lse, const float* dout,
                                 float* dq, float* dk, float* dv) {
    DeviceArray<float> row_dot(size_t(s.rows()));
    kernels::cuda::attention_backward(s, q, k, v, key_mask, o, lse, dout, row_dot.get(), dq, dk, dv, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  // batched_matmul: the tiled sgemm with the matrix index in the grid's z
  static void batched_matmul(const kernels::BatchedMatmulShape& s, const float* a, const float* b, float* c) {
    kernels::cuda::batched_matmul(s, a, b, c, nullptr);
  }
  // embedding
  static void embedding_forward(int64_t n, int64_t vocab, int64_t dim, const int64_t* ids, const float* weight,
                                float* y) {
    kernels::cuda::embedding_forward(n, vocab, dim, ids, weight, y, nullptr);
  }
  static void embedding_backward(int64_t n, int64_t vocab, int64_t dim, const int64_t* ids, const float* dy,
                                 int64_t padding_idx, float* dweight, bool accumulate) {
    kernels::cuda::embedding_backward(n, vocab, dim, ids, dy, padding_idx, dweight, accumulate, nullptr);
  }
  // cross_entropy with ignore_index and the mean's divisor
  static void cross_entropy_forward_backward(int64_t rows, int64_t cols, const float* logits, const int64_t* target,
                                             int64_t ignore_index, const int64_t* divisor, float* loss,
                                             float* dlogits) {
    kernels::cuda::cross_entropy_forward_backward(rows, cols, logits, target, ignore_index, 1.f, divisor, loss, dlogits,
                                                  nullptr);
  }
  static void count_targets(int64_t rows, const int64_t* target, int64_t ignore_index, int64_t* counted) {
    kernels::cuda::count_targets(rows, target, ignore_index, counted, nullptr);
  }
  // layer_norm
  static void layer_norm_forward(int64_t rows, int64_t cols, const float* x, const float* weight, const float* bias,
                                 double eps, float* y, float* mean, float* rstd) {
    kernels::cuda::layer_norm_forward(rows, cols, x, weight, bias, float(eps), y, mean, rstd, nullptr);
  }
  static void layer_norm_backward(int64_t rows, int64_t cols, const float* dy, const float* x, const float* weight,
                                  const float* mean, const float* rstd, float* dx, float* dweight, float* dbias,
                                  bool accumulate) {
    kernels::cuda::layer_norm_backward(rows, cols, dy, x, weight, mean, rstd, dx, dweight, dbias, accumulate, nullptr);
  }
  // softmax
  static void softmax_forward(const kernels::SoftmaxShape& s, const float* x, const float* mask, float* y) {
    kernels::cuda::softmax_forward(s, x, mask, y, nullptr);
  }
  static void softmax_backward(int64_t rows, int64_t cols, const float* dy, const float* y, float* dx) {
    kernels::cuda::softmax_backward(rows, cols, dy, y, dx, nullptr);
  }  // transpose
  static void transpose(const kernels::TransposeShape& s, const float* x, float* y) {
    kernels::cuda::transpose(s, x, y, nullptr);
  }
};

#ifdef DPCORE_CUDA_LIBRARIES
// The library engines in FP32: cuDNN for conv2d (its bias, relu and bias gradient through
// the same helper kernels the engine dispatch uses), cuBLAS under the linear layers and for
// gemm. Everything else is the hand kernels. The engines come from their module
// (library_engines(): loaded by the first GPU test that asks, never on a machine without one).
inline const kernels::cuda_libraries::LibraryEngines& libraries() { return *kernels::cuda_libraries::library_engines(); }

struct CudaLibraryBackend : CudaBackend {
  static std::string name() { return "CudaLibrary"; }
  static void set_up() { kernels::cuda_libraries::set_engine_config(kernels::cuda_libraries::EngineConfig{}); }

  static void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                   int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
    libraries().sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, nullptr);
  }
  static void conv2d_forward(const kernels::Conv2dShape& s, const float* x, const float* w, const float* bias,
                             float* y) {
    libraries().conv.forward(s, x, w, y, false, nullptr);
    kernels::cuda::bias_activation(s.N, s.K, s.P * s.Q, bias, false, y, nullptr);
  }
  static void conv2d_relu_forward(const kernels::Conv2dShape& s, const float* x, const float* w, const float* bias,
                                  float* y) {
    libraries().conv.forward(s, x, w, y, false, nullptr);
    kernels::cuda::bias_activation(s.N, s.K, s.P * s.Q, bias, true, y, nullptr);
  }
  static void conv2d_backward_data(const kernels::Conv2dShape& s, const float* dy, const float* w, float* dx) {
    libraries().conv.backward_data(s, dy, w, dx, nullptr);
  }
  static void conv2d_backward_weight(const kernels::Conv2dShape& s, const float* x, const float* dy, float* dw,
                                     float* dbias, bool accumulate) {
    libraries().conv.backward_weight(s, x, dy, dw, accumulate, nullptr);
    if (dbias) kernels::cuda::channel_sum(s.N, s.K, s.P * s.Q, dy, dbias, accumulate, nullptr);
  }
  static void linear_forward(const kernels::LinearShape& s, const float* x, const float* w, const float* bias,
                             float* y) {
    kernels::cuda::linear_forward(s, x, w, bias, y, nullptr, libraries().sgemm);
  }
  static void linear_backward_data(const kernels::LinearShape& s, const float* dy, const float* w, float* dx) {
    kernels::cuda::linear_backward_data(s, dy, w, dx, nullptr, libraries().sgemm);
  }
  static void linear_backward_weight(const kernels::LinearShape& s, const float* x, const float* dy, float* dw,
                                     float* dbias, bool accumulate) {
    kernels::cuda::linear_backward_weight(s, x, dy, dw, dbias, accumulate, nullptr, libraries().sgemm);
  }
  // batched_matmul: cublasGemmStridedBatchedEx
  static void batched_matmul(const kernels::BatchedMatmulShape& s, const float* a, const float* b, float* c) {
    kernels::cuda::batched_matmul(s, a, b, c, nullptr, libraries().sgemm_strided_batched);
  }
};
#endif  // DPCORE_CUDA_LIBRARIES
#endif  // DPCORE_HAVE_CUDA

// Ops with only hand kernels; ops that also have a library engine (conv2d, linear, gemm).
#if defined(DPCORE_CUDA_LIBRARIES)
using KernelBackends = ::testing::Types<CpuBackend<float>, CpuBackend<double>, CudaBackend>;
using KernelAndLibraryBackends =
    ::testing::Types<CpuBackend<float>, CpuBackend<double>, CudaBackend, CudaLibraryBackend>;
#elif defined(DPCORE_HOST_OPS_TEST)
using KernelBackends = ::testing::Types<CudaBackend>;
using KernelAndLibraryBackends = ::testing::Types<CudaBackend>;
#elif defined(DPCORE_HAVE_CUDA)
using KernelBackends = ::testing::Types<CpuBackend<float>, CpuBackend<double>, CudaBackend>;
using KernelAndLibraryBackends = ::testing::Types<CpuBackend<float>, CpuBackend<double>, CudaBackend>;
#else
using KernelBackends = ::testing::Types<CpuBackend<float>, CpuBackend<double>>;
using KernelAndLibraryBackends = ::testing::Types<CpuBackend<float>, CpuBackend<double>>;
#endif

// Names the typed instances after their backend: Conv2dTest/CpuDouble.ForwardMatchesReference.
struct BackendName {
  template <class B>
  static std::string GetName(int) {
    return B::name();
  }
};

// The fixture of every op test: skips the CUDA backends on a machine without a GPU and
// puts the backend in its default state (FP32 library engines).
template <class B>
class OpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (B::kCuda && !cuda_available())
      GTEST_SKIP() << "no CUDA device: the " << B::name()
                   << " backend runs only on a GPU (this machine has none or no driver)";
    B::set_up();
  }
};

// Whether backend B runs a flat optimizer case of n elements (sgd_test, adam_test). The
// cases of millions of elements are the CUDA kernels': several waves of blocks over the
// grid. The CPU kernels' one size boundary, kMinParallelElements (kernels/cpu/parallel.h:
// serial below it, split among the threads above), is crossed by the 70001-element case,
// so a CPU backend leaves out the cases past 16 times it (seconds each), saying so.
template <class B>
bool runs_flat_optimizer_case(int64_t n) {
  constexpr int64_t kLargestCpuCase = 16 * kernels::cpu::kMinParallelElements;
  if (!B::kCuda && n > kLargestCpuCase) {
    std::printf("[ limit    ] a case of %lld elements is left out on %s: the CPU kernels' size boundary is %lld\n",
                static_cast<long long>(n), B::name().c_str(), static_cast<long long>(kernels::cpu::kMinParallelElements));
    return false;
  }
  return B::runs_elements(n);
}

// The backend's result against the reference, within its tolerance (scaled_error: relative
// to each element or to the rms of the reference, whichever is larger).
#define EXPECT_OP_CLOSE(B, got, want) EXPECT_LE(::dpcore::testing::scaled_error(got, want), B::tolerance())

// What a weight-gradient kernel (conv2d, linear) must give for one case, from the naive
// reference: written fresh (dw, db) and accumulated onto earlier contents (acc_dw, acc_db).
template <class T>
struct WeightGradWant {
  std::vector<T> dw_before, db_before, dw, db, acc_dw, acc_db;
};

// naive(dw, db, accumulate) runs the reference on the case's inputs.
template <class T, class Naive>
WeightGradWant<T> weight_grad_want(int64_t w_size, int64_t b_size, Naive naive) {
  WeightGradWant<T> want;
  want.dw_before = random_vector<T>(w_size, 8);
  want.db_before = random_vector<T>(b_size, 9);
  want.dw = nan_filled<T>(w_size);
  want.db = nan_filled<T>(b_size);
  naive(want.dw.data(), want.db.data(), false);
  want.acc_dw = want.dw_before;
  want.acc_db = want.db_before;
  naive(want.acc_dw.data(), want.acc_db.data(), true);
  return want;
}

// accumulate = false overwrites (the gradients start as NaN: nothing may be read);
// accumulate = true adds onto what is there: the reference's accumulated values, and the
// previous contents plus the overwritten result. The bias gradient may be left out (null).
// run(dw, db, accumulate) calls backend B's kernel on the case's inputs.
template <class B, class T, class Run>
void expect_weight_grads_overwrite_or_accumulate(const WeightGradWant<T>& want, Run run) {
  typename B::template Array<T> dw(int64_t(want.dw.size())), db(int64_t(want.db.size()));
  run(dw.get(), db.get(), false);
  const std::vector<T> fresh_dw = dw.download(), fresh_db = db.download();
  EXPECT_OP_CLOSE(B, fresh_dw, want.dw) << "overwrite";
  EXPECT_OP_CLOSE(B, fresh_db, want.db) << "overwrite";

  typename B::template Array<T> acc_dw(want.dw_before), acc_db(want.db_before);
  run(acc_dw.get(), acc_db.get(), true);
  const std::vector<T> got_dw = acc_dw.download(), got_db = acc_db.download();
  EXPECT_OP_CLOSE(B, got_dw, want.acc_dw) << "accumulate";
  EXPECT_OP_CLOSE(B, got_db, want.acc_db) << "accumulate";
  auto sum_dw = fresh_dw, sum_db = fresh_db;
  for (size_t i = 0; i < sum_dw.size(); ++i) sum_dw[i] += want.dw_before[i];
  for (size_t i = 0; i < sum_db.size(); ++i) sum_db[i] += want.db_before[i];
  EXPECT_OP_CLOSE(B, got_dw, sum_dw) << "accumulate = previous contents + overwritten result";
  EXPECT_OP_CLOSE(B, got_db, sum_db) << "accumulate = previous contents + overwritten result";

  // No bias gradient asked for, overwriting and accumulating.
  typename B::template Array<T> no_bias(int64_t(want.dw.size())), no_bias_acc(want.dw_before);
  run(no_bias.get(), static_cast<T*>(nullptr), false);
  run(no_bias_acc.get(), static_cast<T*>(nullptr), true);
  EXPECT_OP_CLOSE(B, no_bias.download(), want.dw) << "overwrite, no bias gradient";
  EXPECT_OP_CLOSE(B, no_bias_acc.download(), want.acc_dw) << "accumulate, no bias gradient";
}

}  // namespace dpcore::testing
