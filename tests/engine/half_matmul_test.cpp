// linear and batched_matmul on bfloat16 and float16 tensors through the ops (issue 27),
// forward and backward, on the CPU and on the first CUDA device where there is one (the
// host build's emulated devices in CI): every output against a float64 reference on the
// same 16-bit inputs, within the bound of tests/ops/half_gemm_test.cpp: (terms + 2) u32
// sum |products| for the float32 accumulation, plus half an ulp of the 16-bit output.
// The inputs come from float32 leaves through ops::to, as the low-precision parameters'
// views do, so the gradients reach float32: there, the 16-bit gradient widened exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/ops.h"
#include "kernels/cpu/half/gemm_half.h"
#include "tests/support/error_of.h"
#include "tests/support/half_values.h"
#include "tests/support/test_devices.h"
#include "tests/support/test_support.h"

namespace dpcore {
namespace {

// A float32 leaf holding values exactly representable in `half`, and its 16-bit use.
struct Input {
  Tensor leaf, half;
  std::vector<double> values;  // the 16-bit values, widened
};
Input make_input(const Shape& shape, uint64_t seed, DType half, Device device) {
  const auto raw = testing::random_vector<float>(size_t(shape_numel(shape)), seed);
  const std::vector<float> rounded = testing::rounded_to(raw, half);
  Input in;
  in.values.assign(rounded.begin(), rounded.end());
  in.leaf = Tensor::from_vector(rounded, shape).to(device);
  in.leaf.set_requires_grad(true);
  in.half = ops::to(in.leaf, half);
  return in;
}

// got (any float dtype, any device) against want within (terms + 2) u32 magnitude + u16 |want|.
void expect_within(const Tensor& got_tensor, const std::vector<double>& want, const std::vector<double>& magnitude,
                   int64_t terms, DType half, const std::string& what) {
  const std::vector<float> got = ops::to(got_tensor, DType::Float32).to(Device::cpu()).to_vector<float>();
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double bound = double(terms + 2) * std::ldexp(1.0, -24) * magnitude[i] + testing::unit_roundoff(half) * std::fabs(want[i]);
    if (!(std::fabs(got[i] - want[i]) <= bound) && ++bad <= 3)
      ADD_FAILURE() << what << "[" << i << "] = " << got[i] << ", want " << want[i] << " (bound " << bound << ")";
  }
  EXPECT_EQ(bad, 0) << what;
}

// c[b] = op(a[b]) op(b[b]) in double, and sum |products|, over row-major stored operands.
void reference_product(int64_t batch, int64_t M, int64_t N, int64_t K, bool ta, bool tb, const std::vector<double>& a,
                       const std::vector<double>& b, std::vector<double>& c, std::vector<double>& mag) {
  c.assign(size_t(batch * M * N), 0.0), mag.assign(c.size(), 0.0);
  for (int64_t i = 0; i < batch; ++i)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k) {
          const double x = ta ? a[size_t(i * K * M + k * M + m)] : a[size_t(i * M * K + m * K + k)];
          const double y = tb ? b[size_t(i * N * K + n * K + k)] : b[size_t(i * K * N + k * N + n)];
          c[size_t(i * M * N + m * N + n)] += x * y, mag[size_t(i * M * N + m * N + n)] += std::fabs(x * y);
        }
}

TEST(HalfMatmul, LinearForwardAndBackwardAreWithinTheFloat32AccumulationBound) {
  const int64_t rows = 2 * 19, in = 45, out = 70;  // x [2, 19, 45]: leading dimensions
  for (Device device : testing::cpu_and_first_cuda_device())
    for (DType half : {DType::BFloat16, DType::Float16}) {
      SCOPED_TRACE(device.str() + ", " + dtype_name(half));
      Input x = make_input({2, 19, in}, 1, half, device), w = make_input({out, in}, 2, half, device),
            b = make_input({out}, 3, half, device);
      Tensor y = ops::linear(x.half, w.half, b.half);
      ASSERT_EQ(y.dtype(), half);
      ASSERT_EQ(y.shape(), (Shape{2, 19, out}));
      std::vector<double> want, mag;
      reference_product(1, rows, out, in, false, true, x.values, w.values, want, mag);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < out; ++j)
          want[size_t(r * out + j)] += b.values[size_t(j)], mag[size_t(r * out + j)] += std::fabs(b.values[size_t(j)]);
      expect_within(y, want, mag, in + 1, half, "y");

      // backward from a 16-bit seed dy: dx = dy W, dW = dy^T x, db = column sums of dy.
      Input dy = make_input({2, 19, out}, 4, half, device);
      y.backward(dy.half.detach());
      std::vector<double> dx, dx_mag, dw, dw_mag;
      reference_product(1, rows, in, out, false, false, dy.values, w.values, dx, dx_mag);
      reference_product(1, out, in, rows, true, false, dy.values, x.values, dw, dw_mag);
      std::vector<double> db(size_t(out), 0.0), db_mag(size_t(out), 0.0);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < out; ++j)
          db[size_t(j)] += dy.values[size_t(r * out + j)], db_mag[size_t(j)] += std::fabs(dy.values[size_t(r * out + j)]);
      ASSERT_EQ(x.leaf.grad().dtype(), DType::Float32);
      expect_within(x.leaf.grad(), dx, dx_mag, out, half, "dx");
      expect_within(w.leaf.grad(), dw, dw_mag, rows, half, "dW");
      expect_within(b.leaf.grad(), db, db_mag, rows, half, "db");
    }
}

TEST(HalfMatmul, BatchedMatmulForwardAndBackwardAreWithinTheFloat32AccumulationBound) {
  const int64_t B = 3, M = 21, N = 34, K = 40;
  for (Device device : testing::cpu_and_first_cuda_device())
    for (DType half : {DType::BFloat16, DType::Float16})
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          SCOPED_TRACE(device.str() + ", " + dtype_name(half) + (ta ? ", a^T" : "") + (tb ? ", b^T" : ""));
          Input a = make_input(ta ? Shape{B, K, M} : Shape{B, M, K}, 5, half, device);
          Input b = make_input(tb ? Shape{B, N, K} : Shape{B, K, N}, 6, half, device);
          Tensor c = ops::batched_matmul(a.half, b.half, ta, tb);
          ASSERT_EQ(c.dtype(), half);
          std::vector<double> want, mag;
          reference_product(B, M, N, K, ta, tb, a.values, b.values, want, mag);
          expect_within(c, want, mag, K, half, "c");
          // da = dc op(b)^T (stored as a is), db = op(a)^T dc (stored as b is).
          Input dc = make_input({B, M, N}, 7, half, device);
          c.backward(dc.half.detach());
          std::vector<double> da, da_mag, db, db_mag;
          if (ta) reference_product(B, K, M, N, tb, true, b.values, dc.values, da, da_mag);
          else reference_product(B, M, K, N, false, !tb, dc.values, b.values, da, da_mag);
          if (tb) reference_product(B, N, K, M, true, ta, dc.values, a.values, db, db_mag);
          else reference_product(B, K, N, M, !ta, false, a.values, dc.values, db, db_mag);
          expect_within(a.leaf.grad(), da, da_mag, N, half, "da");
          expect_within(b.leaf.grad(), db, db_mag, M, half, "db");
        }
}

TEST(HalfMatmul, MixedDtypesAreRefusedNamingBoth) {
  Tensor x = Tensor::zeros({4, 3}, DType::BFloat16), w = Tensor::zeros({2, 3}, DType::Float32);
  std::string msg = testing::error_of([&] { ops::linear(x, w, Tensor()); });
  EXPECT_NE(msg.find("linear: mixed dtypes: bfloat16[4, 3] on cpu and float32[2, 3] on cpu"), std::string::npos) << msg;
  msg = testing::error_of([&] {
    ops::batched_matmul(Tensor::zeros({1, 2, 2}, DType::Float16), Tensor::zeros({1, 2, 2}, DType::BFloat16));
  });
  EXPECT_NE(msg.find("mixed dtypes: float16[1, 2, 2]"), std::string::npos) << msg;
}

// The CPU backend's option bf16-gemm picks the path of kernels/cpu/half/gemm_half.h.
TEST(HalfMatmul, TheCpuBackendsBf16GemmOptionPicksThePath) {
  Backend& cpu = backend_for(Device::cpu());
  const kernels::cpu::HalfGemmPath before = kernels::cpu::half_gemm_path();
  cpu.set_option("bf16-gemm", "convert");
  EXPECT_EQ(kernels::cpu::half_gemm_path(), kernels::cpu::HalfGemmPath::Convert);
  cpu.set_option("bf16-gemm", "auto");
  EXPECT_EQ(kernels::cpu::half_gemm_path(), kernels::cpu::cpu_has_amx_bf16()      ? kernels::cpu::HalfGemmPath::AmxBf16
                                            : kernels::cpu::cpu_has_avx512_bf16() ? kernels::cpu::HalfGemmPath::Avx512Bf16
                                                                                  : kernels::cpu::HalfGemmPath::Convert);
  if (kernels::cpu::cpu_has_avx512_bf16()) {
    cpu.set_option("bf16-gemm", "avx512-bf16");
    EXPECT_EQ(kernels::cpu::half_gemm_path(), kernels::cpu::HalfGemmPath::Avx512Bf16);
  } else {
    const std::string msg = testing::error_of([&] { cpu.set_option("bf16-gemm", "avx512-bf16"); });
    EXPECT_NE(msg.find("needs a CPU with AVX512-BF16"), std::string::npos) << msg;
  }
  if (kernels::cpu::cpu_has_amx_bf16()) {
    cpu.set_option("bf16-gemm", "amx-bf16");
    EXPECT_EQ(kernels::cpu::half_gemm_path(), kernels::cpu::HalfGemmPath::AmxBf16);
  } else {
    const std::string msg = testing::error_of([&] { cpu.set_option("bf16-gemm", "amx-bf16"); });
    EXPECT_NE(msg.find("needs a CPU with AMX tiles"), std::string::npos) << msg;
  }
  std::string msg = testing::error_of([&] { cpu.set_option("bf16-gemm", "fast"); });
  EXPECT_NE(msg.find("bf16-gemm is amx-bf16, avx512-bf16, convert or auto, not 'fast'"), std::string::npos) << msg;
  msg = testing::error_of([&] { cpu.set_option("tf32", "on"); });
  EXPECT_NE(msg.find("the cpu backend has no option 'tf32' (it has bf16-gemm)"), std::string::npos) << msg;
  kernels::cpu::set_half_gemm_path(before);
}

}  // namespace
}  // namespace dpcore
