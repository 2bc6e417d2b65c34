// The backends the 16-bit kernel tests (tests/ops/half_gemm_test.cpp) run each body
// against, as op_backends.h does for float32 and float64: one struct per implementation,
// the same static functions in each.
//
//   CpuConvertHalf     kernels/cpu/half, the Convert path (widen to float32, OpenBLAS)
//   CpuAvx512Bf16Half  kernels/cpu/half, the vdpbf16ps kernel (bfloat16; skipped, saying
//                      so, on a CPU without AVX512-BF16)
//   CudaHalf           kernels/cuda, the WMMA tensor-core kernel and the cast kernel
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/cpu/half/gemm_half.h"
#include "kernels/half_types.h"
#include "support/op_backends.h"

#ifdef DPCORE_HAVE_CUDA
#include "kernels/cuda/kernels.h"
#endif

namespace dpcore::testing {

// The CPU kernels under one bfloat16 path, restored to the default afterwards.
template <kernels::cpu::HalfGemmPath kPath>
struct CpuHalf {
  template <class U>
  using Array = HostArray<U>;
  static constexpr bool kCuda = false;
  // The AVX512-BF16 kernel multiplies bfloat16 only: float16 and the casts take the same
  // code on both paths, tested under CpuConvert.
  static constexpr bool kBfloat16Only = kPath == kernels::cpu::HalfGemmPath::Avx512Bf16;
  static std::string name() { return kPath == kernels::cpu::HalfGemmPath::Convert ? "CpuConvert" : "CpuAvx512Bf16"; }
  // Why the backend cannot run here, or empty.
  static std::string missing() {
    if (kPath == kernels::cpu::HalfGemmPath::Avx512Bf16 && !kernels::cpu::cpu_has_avx512_bf16())
      return "this CPU has no AVX512-BF16 (vdpbf16ps): its bfloat16 products take the convert path, tested as CpuConvert";
    return "";
  }
  static std::vector<int> thread_counts() { return kernel_thread_counts(); }
  template <class In, class Out>
  static void gemm_half(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const In* A, int64_t lda,
                        int64_t sa, const In* B, int64_t ldb, int64_t sb, float beta, Out* C, int64_t ldc, int64_t sc,
                        int64_t batch) {
    const kernels::cpu::HalfGemmPath before = kernels::cpu::half_gemm_path();
    kernels::cpu::set_half_gemm_path(kPath);
    kernels::cpu::gemm_half<In, Out>(ta, tb, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
    kernels::cpu::set_half_gemm_path(before);
  }
  template <class From, class To>
  static void cast(int64_t n, const From* x, To* y) {
    kernels::cpu::cast<From, To>(n, x, y);
  }
};
using CpuConvertHalf = CpuHalf<kernels::cpu::HalfGemmPath::Convert>;
using CpuAvx512Bf16Half = CpuHalf<kernels::cpu::HalfGemmPath::Avx512Bf16>;

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
};
#endif

#if defined(DPCORE_HOST_OPS_TEST)
using HalfBackends = ::testing::Types<CudaHalf>;
#elif defined(DPCORE_HAVE_CUDA)
using HalfBackends = ::testing::Types<CpuConvertHalf, CpuAvx512Bf16Half, CudaHalf>;
#else
using HalfBackends = ::testing::Types<CpuConvertHalf, CpuAvx512Bf16Half>;
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
