// gemm, the matrix product under linear (and, on the CPU, under conv2d's im2col): every
// backend (tests/support/op_backends.h: BLAS on the CPU, the hand SGEMM and cuBLAS on CUDA)
// against a float64 reference, on all transpose combinations, padded leading dimensions,
// alpha and beta, split-K and both CUDA tile sizes. Then what only the CUDA build has: the
// hand SGEMM against cuBLAS, cuBLAS in TF32, and the hand SGEMM's argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "support/op_backends.h"

namespace dpcore::testing {
namespace {

struct GemmCase {
  const char* name;
  int64_t M, N, K, pad;  // pad: extra elements per row of every matrix
  double alpha, beta;
};

const GemmCase kCases[] = {
    {"one", 1, 1, 1, 0, 1.0, 0.0},
    {"odd_small", 7, 13, 5, 0, 1.0, 0.0},
    {"padded_alpha", 33, 70, 300, 3, 0.5, 0.0},
    {"beta_partial_tiles", 130, 129, 17, 1, 1.0, 0.25},
    {"split_k_skinny", 20, 10, 5000, 0, 1.0, 0.0},
    {"split_k_beta", 64, 10, 4096, 0, 1.0, 1.0},
    // deeper than wide: the CPU's gemm_parallel cuts K into 3 chunks (kernels/cpu/gemm.cpp)
    {"depth_chunks_padded", 17, 30, 6200, 3, 0.5, 0.25},
    {"large_tiles", 2048, 2048, 64, 0, 1.0, 0.0},
    {"square_512", 512, 512, 512, 0, 1.0, 0.0},
};

std::string describe(const GemmCase& c, bool trans_a, bool trans_b, int threads) {
  std::ostringstream os;
  os << c.name << ": M " << c.M << ", N " << c.N << ", K " << c.K << ", pad " << c.pad << ", alpha " << c.alpha
     << ", beta " << c.beta << (trans_a ? ", A^T" : ", A") << (trans_b ? ", B^T" : ", B") << threads_label(threads);
  return os.str();
}

// alpha * op(A) op(B) + beta * C0 in double, rounded to T once; the padding columns of C
// keep C0's values (NaN when beta == 0).
template <class T>
std::vector<T> reference_gemm(const GemmCase& c, bool trans_a, bool trans_b, const std::vector<T>& a, int64_t lda,
                              const std::vector<T>& b, int64_t ldb, const std::vector<T>& c0, int64_t ldc) {
  // op(A) as rows of K and op(B) as columns of K, so each dot product reads contiguously.
  std::vector<double> rows(c.M * c.K), cols(c.N * c.K);
  for (int64_t m = 0; m < c.M; ++m)
    for (int64_t k = 0; k < c.K; ++k) rows[m * c.K + k] = double(trans_a ? a[k * lda + m] : a[m * lda + k]);
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t k = 0; k < c.K; ++k) cols[n * c.K + k] = double(trans_b ? b[n * ldb + k] : b[k * ldb + n]);
  std::vector<T> want = c0;
  for (int64_t m = 0; m < c.M; ++m)
    for (int64_t n = 0; n < c.N; ++n) {
      double sum = 0.0;
      const double* row = &rows[m * c.K];
      const double* col = &cols[n * c.K];
      for (int64_t k = 0; k < c.K; ++k) sum += row[k] * col[k];
      want[m * ldc + n] = T(c.alpha * sum + (c.beta != 0.0 ? c.beta * double(c0[m * ldc + n]) : 0.0));
    }
  return want;
}

template <class B>
class GemmTest : public OpTest<B> {};
TYPED_TEST_SUITE(GemmTest, KernelAndLibraryBackends, BackendName);

TYPED_TEST(GemmTest, MatchesFloat64Reference) {
  using B = TypeParam;
  using T = typename B::Scalar;
  for (const GemmCase& c : kCases) {
    if (!B::runs_multiply_adds(c.M * c.N * c.K)) continue;
    for (bool trans_a : {false, true}) {
      for (bool trans_b : {false, true}) {
        const int64_t lda = (trans_a ? c.M : c.K) + c.pad, ldb = (trans_b ? c.K : c.N) + c.pad, ldc = c.N + c.pad;
        const auto a = random_vector<T>((trans_a ? c.K : c.M) * lda, 1);
        const auto b = random_vector<T>((trans_b ? c.N : c.K) * ldb, 2);
        // beta == 0 must not read C: it starts as NaN then. Padding columns must stay untouched
        // (they keep their NaN, which scaled_error accepts where both sides have it).
        const auto c0 = c.beta != 0.0 ? random_vector<T>(c.M * ldc, 3) : nan_filled<T>(c.M * ldc);
        const std::vector<T> want = reference_gemm(c, trans_a, trans_b, a, lda, b, ldb, c0, ldc);
        typename B::template Array<T> dev_a(a), dev_b(b);
        for (int threads : B::thread_counts()) {
          SCOPED_TRACE(describe(c, trans_a, trans_b, threads));
          ScopedKernelThreads scope(threads);
          typename B::template Array<T> dev_c(c0);
          B::gemm(trans_a, trans_b, c.M, c.N, c.K, T(c.alpha), dev_a.get(), lda, dev_b.get(), ldb, T(c.beta),
                  dev_c.get(), ldc);
          EXPECT_OP_CLOSE(B, dev_c.download(), want);
        }
      }
    }
  }
}

// The error measure itself: NaN left in untouched padding on both sides neither fails the
// comparison nor turns its rms floor into NaN (which made every comparison pass or fail by
// accident), while a NaN on one side only, or a wrong value, still fails.
TEST(GemmErrorMeasure, NanPaddingIsLeftOutOfTheFloor) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> want = {1.f, -2.f, nan, 3.f, 0.5f, nan};
  EXPECT_EQ(scaled_error(want, want), 0.0);
  EXPECT_LE(scaled_error(std::vector<float>{1.f, -2.f, nan, 3.f, 0.5f + 1e-7f, nan}, want), 1e-6);
  EXPECT_GT(scaled_error(std::vector<float>{1.f, -2.f, nan, 3.f, 0.6f, nan}, want), 1e-2);
  EXPECT_EQ(scaled_error(std::vector<float>{1.f, -2.f, 0.f, 3.f, 0.5f, nan}, want), INFINITY);
  EXPECT_EQ(scaled_error(std::vector<float>{1.f, nan, nan, 3.f, 0.5f, nan}, want), INFINITY);
}

#ifdef DPCORE_CUDA_LIBRARIES
TEST(GemmEngines, HandMatchesCublas) {
  SKIP_WITHOUT_CUDA();
  kernels::cuda_libraries::set_engine_config(kernels::cuda_libraries::EngineConfig{});
  const int64_t n = 1024;
  DeviceArray<float> a(random_floats(n * n, 1)), b(random_floats(n * n, 2)), hand(n * n), library(n * n);
  kernels::cuda::sgemm(false, false, n, n, n, 1.f, a.get(), n, b.get(), n, 0.f, hand.get(), n, nullptr);
  libraries().sgemm(false, false, n, n, n, 1.f, a.get(), n, b.get(), n, 0.f, library.get(), n, nullptr);
  EXPECT_LE(scaled_error(hand.download(), library.download()), kFp32Tolerance);
}

// TF32 tensor cores round the inputs to a 10-bit mantissa: checked against 1e-2.
TEST(GemmEngines, CublasTf32WithinTf32Tolerance) {
  SKIP_WITHOUT_CUDA();
  const int64_t n = 512;
  DeviceArray<float> a(random_floats(n * n, 1)), b(random_floats(n * n, 2)), fp32(n * n), tf32(n * n);
  kernels::cuda_libraries::set_engine_config(kernels::cuda_libraries::EngineConfig{});
  libraries().sgemm(false, false, n, n, n, 1.f, a.get(), n, b.get(), n, 0.f, fp32.get(), n, nullptr);
  kernels::cuda_libraries::EngineConfig config;
  config.tf32 = true;
  kernels::cuda_libraries::set_engine_config(config);
  libraries().sgemm(false, false, n, n, n, 1.f, a.get(), n, b.get(), n, 0.f, tf32.get(), n, nullptr);
  const std::vector<float> got = tf32.download();
  kernels::cuda_libraries::set_engine_config(kernels::cuda_libraries::EngineConfig{});
  const double error = scaled_error(got, fp32.download());
  EXPECT_LE(error, kTf32Tolerance);
  EXPECT_GT(error, 0.0) << "TF32 gave exactly the FP32 result: tensor cores were not used";
}
#endif

#ifdef DPCORE_HAVE_CUDA
TEST(GemmEngines, HandRejectsTooSmallLeadingDimension) {
  SKIP_WITHOUT_CUDA();
  DeviceArray<float> a(16), b(16), c(16);
  try {
    kernels::cuda::sgemm(false, false, 4, 4, 4, 1.f, a.get(), 3, b.get(), 4, 0.f, c.get(), 4, nullptr);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sgemm: leading dimensions lda 3"), std::string::npos) << e.what();
  }
}
#endif

}  // namespace
}  // namespace dpcore::testing
