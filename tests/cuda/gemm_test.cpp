// The hand SGEMM (all transpose combinations, padded leading dimensions, split-K, both
// tile sizes) against a double-precision reference, the linear layers on both engines
// against the CPU reference, and the hand SGEMM against cuBLAS.
#include <gtest/gtest.h>

#include <ostream>

#include "cuda_test_util.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cuda/cublas_linear.h"
#include "kernels/cuda/engine_select.h"
#include "kernels/cuda/kernels.h"

namespace dpcore::testing {
namespace {

struct GemmCase {
  const char* name;
  int64_t M, N, K, pad;  // pad: extra elements per row of every matrix
  float alpha, beta;
};
std::ostream& operator<<(std::ostream& os, const GemmCase& c) { return os << c.name; }

const GemmCase kGemmCases[] = {
    {"one", 1, 1, 1, 0, 1.f, 0.f},
    {"odd_small", 7, 13, 5, 0, 1.f, 0.f},
    {"padded_alpha", 33, 70, 300, 3, 0.5f, 0.f},
    {"beta_partial_tiles", 130, 129, 17, 1, 1.f, 0.25f},
    {"split_k_skinny", 20, 10, 5000, 0, 1.f, 0.f},
    {"split_k_beta", 64, 10, 4096, 0, 1.f, 1.f},
    {"large_tiles", 2048, 2048, 64, 0, 1.f, 0.f},
    {"square_512", 512, 512, 512, 0, 1.f, 0.f},
};

class SgemmTest : public ::testing::TestWithParam<std::tuple<GemmCase, bool, bool>> {
 protected:
  void SetUp() override { SKIP_WITHOUT_CUDA(); }
};

TEST_P(SgemmTest, MatchesDoubleReference) {
  const auto& [c, trans_a, trans_b] = GetParam();
  const int64_t lda = (trans_a ? c.M : c.K) + c.pad, ldb = (trans_b ? c.K : c.N) + c.pad, ldc = c.N + c.pad;
  const std::vector<float> a = random_floats((trans_a ? c.K : c.M) * lda, 1);
  const std::vector<float> b = random_floats((trans_b ? c.N : c.K) * ldb, 2);
  // beta == 0 must not read C: start from NaN then. Padding columns must stay untouched.
  std::vector<float> c0 = c.beta != 0.f ? random_floats(c.M * ldc, 3) : std::vector<float>(c.M * ldc, NAN);
  std::vector<float> want = c0;
  for (int64_t m = 0; m < c.M; ++m)
    for (int64_t n = 0; n < c.N; ++n) {
      double sum = 0.0;
      for (int64_t k = 0; k < c.K; ++k)
        sum += double(trans_a ? a[k * lda + m] : a[m * lda + k]) * double(trans_b ? b[n * ldb + k] : b[k * ldb + n]);
      want[m * ldc + n] = float(c.alpha * sum + (c.beta != 0.f ? c.beta * double(c0[m * ldc + n]) : 0.0));
    }
  DeviceArray<float> da(a), db(b), dc(c0);
  kernels::cuda::sgemm(trans_a, trans_b, c.M, c.N, c.K, c.alpha, da.get(), lda, db.get(), ldb, c.beta, dc.get(), ldc,
                       nullptr);
  EXPECT_LE(scaled_error(dc.download(), want), kFp32Tolerance);
}

INSTANTIATE_TEST_SUITE_P(Shapes, SgemmTest,
                         ::testing::Combine(::testing::ValuesIn(kGemmCases), ::testing::Bool(), ::testing::Bool()),
                         [](const ::testing::TestParamInfo<std::tuple<GemmCase, bool, bool>>& info) {
                           return std::string(std::get<0>(info.param).name) + (std::get<1>(info.param) ? "_At" : "_A") +
                                  (std::get<2>(info.param) ? "_Bt" : "_B");
                         });

struct LinearCase {
  const char* name;
  int64_t N, in, out;
};
std::ostream& operator<<(std::ostream& os, const LinearCase& c) { return os << c.name; }

const LinearCase kLinearCases[] = {
    {"tiny", 5, 7, 3},
    {"batch1", 1, 33, 17},
    {"simplenet_fc", 64, 4096, 10},
    {"fashioncnn_f1", 512, 3136, 128},
    {"fashioncnn_f2", 512, 128, 10},
    {"wide", 130, 129, 140},
};

// The two engines of the linear layers, as SgemmFn values.
const kernels::cuda::SgemmFn kEngines[] = {kernels::cuda::sgemm, cuda::cublas::sgemm};

class LinearTest : public ::testing::TestWithParam<std::tuple<LinearCase, int>> {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_CUDA();
    cuda::set_engine_config(cuda::EngineConfig{});  // FP32 cuBLAS
  }
};

TEST_P(LinearTest, MatchesCpu) {
  const auto& [c, engine] = GetParam();
  const kernels::cuda::SgemmFn gemm = kEngines[engine];
  kernels::LinearShape s;
  s.N = c.N, s.in = c.in, s.out = c.out;
  const auto x = random_floats(s.N * s.in, 1), w = random_floats(s.out * s.in, 2), bias = random_floats(s.out, 3);
  const auto dy = random_floats(s.N * s.out, 4);
  DeviceArray<float> dx_in(x), dw_in(w), dbias_in(bias), ddy(dy);

  DeviceArray<float> y(s.N * s.out);
  kernels::cuda::linear_forward(s, dx_in.get(), dw_in.get(), dbias_in.get(), y.get(), nullptr, gemm);
  std::vector<float> want_y(s.N * s.out);
  kernels::cpu::linear_forward<float>(s, x.data(), w.data(), bias.data(), want_y.data());
  EXPECT_LE(scaled_error(y.download(), want_y), kFp32Tolerance);

  DeviceArray<float> dx(s.N * s.in);
  kernels::cuda::linear_backward_data(s, ddy.get(), dw_in.get(), dx.get(), nullptr, gemm);
  std::vector<float> want_dx(s.N * s.in);
  kernels::cpu::linear_backward_data<float>(s, dy.data(), w.data(), want_dx.data());
  EXPECT_LE(scaled_error(dx.download(), want_dx), kFp32Tolerance);

  for (bool accumulate : {false, true}) {
    SCOPED_TRACE(accumulate ? "accumulate" : "overwrite");
    std::vector<float> dw0 = accumulate ? random_floats(s.out * s.in, 5) : std::vector<float>(s.out * s.in, NAN);
    std::vector<float> db0 = accumulate ? random_floats(s.out, 6) : std::vector<float>(s.out, NAN);
    DeviceArray<float> dw(dw0), db(db0);
    kernels::cuda::linear_backward_weight(s, dx_in.get(), ddy.get(), dw.get(), db.get(), accumulate, nullptr, gemm);
    kernels::cpu::linear_backward_weight<float>(s, x.data(), dy.data(), dw0.data(), db0.data(), accumulate);
    EXPECT_LE(scaled_error(dw.download(), dw0), kFp32Tolerance);
    EXPECT_LE(scaled_error(db.download(), db0), kFp32Tolerance);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, LinearTest, ::testing::Combine(::testing::ValuesIn(kLinearCases), ::testing::Values(0, 1)),
                         [](const ::testing::TestParamInfo<std::tuple<LinearCase, int>>& info) {
                           return std::string(std::get<0>(info.param).name) +
                                  (std::get<1>(info.param) == 0 ? "_hand" : "_cublas");
                         });

TEST(SgemmEngines, HandMatchesCublas) {
  SKIP_WITHOUT_CUDA();
  cuda::set_engine_config(cuda::EngineConfig{});
  const int64_t n = 1024;
  DeviceArray<float> a(random_floats(n * n, 1)), b(random_floats(n * n, 2)), hand(n * n), library(n * n);
  kernels::cuda::sgemm(false, false, n, n, n, 1.f, a.get(), n, b.get(), n, 0.f, hand.get(), n, nullptr);
  cuda::cublas::sgemm(false, false, n, n, n, 1.f, a.get(), n, b.get(), n, 0.f, library.get(), n, nullptr);
  EXPECT_LE(scaled_error(hand.download(), library.download()), kFp32Tolerance);
}

// TF32 tensor cores round the inputs to a 10-bit mantissa: checked against 1e-2.
TEST(SgemmEngines, CublasTf32WithinTf32Tolerance) {
  SKIP_WITHOUT_CUDA();
  const int64_t n = 512;
  DeviceArray<float> a(random_floats(n * n, 1)), b(random_floats(n * n, 2)), fp32(n * n), tf32(n * n);
  cuda::set_engine_config(cuda::EngineConfig{});
  cuda::cublas::sgemm(false, false, n, n, n, 1.f, a.get(), n, b.get(), n, 0.f, fp32.get(), n, nullptr);
  cuda::EngineConfig config;
  config.tf32 = true;
  cuda::set_engine_config(config);
  cuda::cublas::sgemm(false, false, n, n, n, 1.f, a.get(), n, b.get(), n, 0.f, tf32.get(), n, nullptr);
  const std::vector<float> got = tf32.download();
  cuda::set_engine_config(cuda::EngineConfig{});
  const double error = scaled_error(got, fp32.download());
  EXPECT_LE(error, kTf32Tolerance);
  EXPECT_GT(error, 0.0) << "TF32 gave exactly the FP32 result: tensor cores were not used";
}

TEST(Sgemm, RejectsTooSmallLeadingDimension) {
  SKIP_WITHOUT_CUDA();
  DeviceArray<float> a(16), b(16), c(16);
  try {
    kernels::cuda::sgemm(false, false, 4, 4, 4, 1.f, a.get(), 3, b.get(), 4, 0.f, c.get(), 4, nullptr);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sgemm: leading dimensions lda 3"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dpcore::testing
