// Autocast (engine/autocast.h): inside an AutocastScope the ops autocast runs in 16 bits
// (linear, batched_matmul, conv2d and its fused forms, scaled_dot_product_attention) take
// float32 operands, compute on their 16-bit values with float32 accumulation and return a
// 16-bit result (as torch.autocast); their backward, from a 16-bit gradient, gives the
// float32 leaves float32 gradients holding 16-bit values. On the CPU and on the first CUDA device where there is
// one (the host build's emulated devices in CI), in bfloat16 and float16.
//
// Each op is checked for the properties that define it, not against a copy of its code:
//   * it uses only the 16-bit values of its operands: raw float32 operands give the same
//     bits as the same operands rounded to 16 bits first;
//   * its result is 16-bit and its leaves' gradients are float32, each value exact in the
//     16-bit type;
//   * both are within an error bound of the float64 op on the rounded operands (the
//     gradient seed rounded as well): (terms + 2) 2^-24 sum |products| for the float32
//     accumulation (sum |products| is the float64 op on |operands|; attention, not
//     bilinear, gets 64 float32 ulps of its output's scale), plus the final rounding to 16
//     bits, half an ulp: u16 |reference| with u16 = 2^-8 (bfloat16) or 2^-11 (float16),
//     twice for a gradient that passes the op's 16-bit output rounding and its own; and
//     for attention's dq and dk what reading its 16-bit output in the backward moves them
//     by (attention_gradient_slack).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "engine/autocast.h"
#include "engine/ops.h"
#include "tests/support/half_values.h"
#include "tests/support/test_devices.h"
#include "tests/support/test_support.h"

namespace dpcore {
namespace {

TEST(AutocastScope, NestsAndRestoresAndRefusesOtherTypes) {
  EXPECT_EQ(autocast_dtype(), DType::Float32);
  {
    AutocastScope outer(DType::BFloat16);
    EXPECT_EQ(autocast_dtype(), DType::BFloat16);
    {
      AutocastScope off(DType::Float32);
      EXPECT_EQ(autocast_dtype(), DType::Float32);
    }
    EXPECT_EQ(autocast_dtype(), DType::BFloat16);
  }
  EXPECT_EQ(autocast_dtype(), DType::Float32);
  try {
    AutocastScope bad(DType::Float64);
    FAIL() << "float64 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("float64"), std::string::npos) << e.what();
  }
  EXPECT_EQ(autocast_dtype(), DType::Float32);
}

using testing::rounded_to;
using testing::unit_roundoff;

// Per operand, per element: what an op's gradients may be off by beyond the bound at the
// top, given the 16-bit operands, the float64 output and the gradient seed (empty: nothing).
using GradientSlack = std::function<std::vector<std::vector<double>>(
    const std::vector<std::vector<float>>& operands, const std::vector<double>& y, const std::vector<float>& seed,
    double u16)>;

struct OpCase {
  std::string name;
  std::vector<Shape> shapes;  // the operands'
  // The op on its operands (float32 or float64 tensors of those shapes).
  std::function<Tensor(const std::vector<Tensor>&)> op;
  double terms;          // an upper bound on the terms of every sum in forward and backward
  bool bilinear = true;  // sum |products| is the op on |operands|
  GradientSlack gradient_slack = nullptr;
};

// Attention's backward reads its stored 16-bit output in D_i = sum_c dO_ic O_ic, as
// FlashAttention's kernels do, so D is off by up to dD_i = u16 sum_c |dO_ic O_ic|. D enters
// dS_ij = P_ij (dP_ij - D_i): dq_i moves by at most scale dD_i max_j |k_j| (sum_j P_ij = 1)
// and dk_j by at most scale sum_i dD_i |q_i| (P_ij <= 1); dv does not read D. q, k, v are
// [B, H, T, d] with one T.
std::vector<std::vector<double>> attention_gradient_slack(const std::vector<std::vector<float>>& qkv,
                                                          const std::vector<double>& o, const std::vector<float>& dout,
                                                          int64_t heads, int64_t T, int64_t d, double u16) {
  const double scale = 1.0 / std::sqrt(double(d));
  const std::vector<float>&q = qkv[0], &k = qkv[1];
  std::vector<std::vector<double>> slack(3, std::vector<double>(q.size(), 0.0));
  for (int64_t bh = 0; bh < heads; ++bh) {
    std::vector<double> dD(size_t(T), 0.0);
    for (int64_t i = 0; i < T; ++i)
      for (int64_t c = 0; c < d; ++c) {
        const size_t e = size_t((bh * T + i) * d + c);
        dD[size_t(i)] += u16 * std::fabs(double(dout[e]) * o[e]);
      }
    for (int64_t c = 0; c < d; ++c) {
      double k_max = 0;
      for (int64_t j = 0; j < T; ++j) k_max = std::max(k_max, std::fabs(double(k[size_t((bh * T + j) * d + c)])));
      for (int64_t i = 0; i < T; ++i) slack[0][size_t((bh * T + i) * d + c)] = scale * dD[size_t(i)] * k_max;
      double q_weighted = 0;
      for (int64_t i = 0; i < T; ++i) q_weighted += dD[size_t(i)] * std::fabs(double(q[size_t((bh * T + i) * d + c)]));
      for (int64_t j = 0; j < T; ++j) slack[1][size_t((bh * T + j) * d + c)] = scale * q_weighted;
    }
  }
  return slack;
}

std::vector<OpCase> cases() {
  const ops::Conv2dOptions same{1, 1, 1, 1};
  return {
      {"linear", {{3, 4, 7}, {5, 7}, {5}}, [](const auto& t) { return ops::linear(t[0], t[1], t[2]); }, 12},
      {"batched_matmul", {{2, 3, 4, 6}, {2, 3, 6, 5}}, [](const auto& t) { return ops::batched_matmul(t[0], t[1]); },
       6},
      {"batched_matmul_bt", {{2, 4, 6}, {2, 5, 6}},
       [](const auto& t) { return ops::batched_matmul(t[0], t[1], false, true); }, 6},
      {"conv2d", {{2, 3, 6, 6}, {4, 3, 3, 3}, {4}}, [same](const auto& t) { return ops::conv2d(t[0], t[1], t[2], same); },
       80},
      {"conv2d_relu", {{2, 3, 6, 6}, {4, 3, 3, 3}, {4}},
       [same](const auto& t) { return ops::conv2d_relu(t[0], t[1], t[2], same); }, 80},
      {"conv2d_relu_max_pool2d", {{2, 3, 6, 6}, {4, 3, 3, 3}, {4}},
       [same](const auto& t) { return ops::conv2d_relu_max_pool2d(t[0], t[1], t[2], same, {}); }, 80},
      {"attention", {{2, 2, 5, 4}, {2, 2, 5, 4}, {2, 2, 5, 4}},
       [](const auto& t) { return ops::scaled_dot_product_attention(t[0], t[1], t[2]); }, 8, false,
       [](const auto& qkv, const auto& o, const auto& dout, double u16) {
         return attention_gradient_slack(qkv, o, dout, 4, 5, 4, u16);
       }},
  };
}

struct AutocastRun {
  std::vector<float> y;
  std::vector<std::vector<float>> grads;
};

// The op under autocast on float32 leaves holding `values`, backward from `seed`.
AutocastRun autocast_run(const OpCase& c, const std::vector<std::vector<float>>& values, const std::vector<float>& seed,
                 DType half, Device device) {
  std::vector<Tensor> leaves;
  for (size_t i = 0; i < values.size(); ++i) {
    leaves.push_back(Tensor::from_vector(values[i], c.shapes[i]).to(device));
    leaves.back().set_requires_grad(true);
  }
  Tensor y;
  {
    AutocastScope autocast(half);
    y = c.op(leaves);
  }
  EXPECT_EQ(y.dtype(), half) << c.name;
  y.backward(ops::to(Tensor::from_vector(seed, y.shape()), half).to(device));  // seed: 16-bit values
  AutocastRun r;
  r.y = ops::to(y.detach(), DType::Float32).to(Device::cpu()).to_vector<float>();
  for (const Tensor& l : leaves) {
    EXPECT_EQ(l.grad().dtype(), DType::Float32) << c.name;
    r.grads.push_back(l.grad().to(Device::cpu()).to_vector<float>());
  }
  return r;
}

struct Reference {
  std::vector<double> y;
  std::vector<std::vector<double>> grads;
};

// The op in float64 on the CPU (no autocast), on `values` (their absolute values when
// `absolute`), backward from `seed` (likewise).
Reference float64_run(const OpCase& c, const std::vector<std::vector<float>>& values, const std::vector<float>& seed,
                      bool absolute) {
  auto widen = [&](const std::vector<float>& v) {
    std::vector<double> d(v.begin(), v.end());
    if (absolute)
      for (double& x : d) x = std::fabs(x);
    return d;
  };
  std::vector<Tensor> leaves;
  for (size_t i = 0; i < values.size(); ++i) {
    leaves.push_back(Tensor::from_vector(widen(values[i]), c.shapes[i]));
    leaves.back().set_requires_grad(true);
  }
  Tensor y = c.op(leaves);
  y.backward(Tensor::from_vector(widen(seed), y.shape()));
  Reference r;
  r.y = y.to_vector<double>();
  for (const Tensor& l : leaves) r.grads.push_back(l.grad().to_vector<double>());
  return r;
}

// Each value exact in `half`, and within the bound of the top of this file.
void expect_within_bound(const std::string& what, const std::vector<float>& got, const std::vector<double>& ref,
                         const std::vector<double>& abs_ref, const OpCase& c, DType half, int roundings,
                         const std::vector<double>& slack = {}) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  const std::vector<float> exact = rounded_to(got, half);
  double scale = 0;
  for (double r : ref) scale = std::max(scale, std::fabs(r));
  const double u32 = std::ldexp(1.0, -24), u16 = unit_roundoff(half);
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i], exact[i]) << what << " element " << i << " is not a 16-bit value";
    const double accumulation = c.bilinear ? (c.terms + 2) * u32 * abs_ref[i] : 64 * u32 * scale;
    const double bound = accumulation + roundings * u16 * std::fabs(ref[i]) + (slack.empty() ? 0.0 : slack[i]) + 1e-30;
    ASSERT_LE(std::fabs(double(got[i]) - ref[i]), bound) << what << " element " << i << ": " << got[i] << " against "
                                                          << ref[i];
  }
}

TEST(Autocast, EachOpComputesOnTheSixteenBitValuesWithinTheFloat32AccumulationBound) {
  for (Device device : testing::cpu_and_first_cuda_device()) {
    for (DType half : {DType::BFloat16, DType::Float16}) {
      for (const OpCase& c : cases()) {
        SCOPED_TRACE(c.name + " on " + device.str() + " in " + dtype_name(half));
        std::vector<std::vector<float>> raw, rounded;
        uint64_t seed = 7;
        for (const Shape& s : c.shapes) {
          raw.push_back(testing::random_vector<float>(size_t(shape_numel(s)), seed++));
          rounded.push_back(rounded_to(raw.back(), half));
        }
        std::vector<Tensor> operands;
        for (size_t i = 0; i < raw.size(); ++i) operands.push_back(Tensor::from_vector(raw[i], c.shapes[i]));
        const size_t outputs = size_t(c.op(operands).numel());
        const std::vector<float> dy = rounded_to(testing::random_vector<float>(outputs, 99), half);

        const AutocastRun from_raw = autocast_run(c, raw, dy, half, device);
        const AutocastRun from_rounded = autocast_run(c, rounded, dy, half, device);
        EXPECT_EQ(from_raw.y, from_rounded.y) << "the op read more than its operands' 16-bit values";
        for (size_t i = 0; i < raw.size(); ++i) EXPECT_EQ(from_raw.grads[i], from_rounded.grads[i]) << "operand " << i;

        const Reference ref = float64_run(c, rounded, dy, false), abs_ref = float64_run(c, rounded, dy, true);
        expect_within_bound("output", from_raw.y, ref.y, abs_ref.y, c, half, 1);
        const std::vector<std::vector<double>> slack =
            c.gradient_slack ? c.gradient_slack(rounded, ref.y, dy, unit_roundoff(half)) : std::vector<std::vector<double>>();
        for (size_t i = 0; i < raw.size(); ++i)
          expect_within_bound("gradient of operand " + std::to_string(i), from_raw.grads[i], ref.grads[i],
                              abs_ref.grads[i], c, half, 2, slack.empty() ? std::vector<double>() : slack[i]);
      }
    }
  }
}

TEST(Autocast, LeavesFloat64AndSixteenBitOperandsAsTheyAre) {
  AutocastScope autocast(DType::BFloat16);
  const Tensor x = Tensor::from_vector(std::vector<double>{0.1, 0.2, 0.3}, {1, 3});
  const Tensor w = Tensor::from_vector(std::vector<double>{1.0 / 3, 0.7, -0.9}, {1, 3});
  const Tensor y = ops::linear(x, w, Tensor());
  EXPECT_EQ(y.dtype(), DType::Float64);
  EXPECT_DOUBLE_EQ(y.to_vector<double>()[0], 0.1 / 3 + 0.2 * 0.7 - 0.3 * 0.9);
  // Operands that are all 16-bit already run as they are: the op's 16-bit output.
  const Tensor xh = ops::to(Tensor::from_vector(std::vector<float>{0.5f, 0.25f}, {1, 2}), DType::BFloat16);
  EXPECT_EQ(ops::linear(xh, xh, Tensor()).dtype(), DType::BFloat16);
}

// Under autocast the ops after a 16-bit op get 16-bit operands; a float32 operand beside
// them (attention's key-padding mask, built from the token ids) is lowered to match, as
// torch.autocast casts every floating operand of an op on its list.
TEST(Autocast, AttentionOnSixteenBitHeadsLowersAFloat32Mask) {
  const Shape heads{2, 1, 3, 4};
  auto values = [&](uint64_t seed) {
    return Tensor::from_vector(testing::random_vector<float>(size_t(shape_numel(heads)), seed), heads);
  };
  const Tensor q = values(1), k = values(2), v = values(3);
  const Tensor mask = Tensor::from_vector(std::vector<float>{1, 1, 0, 1, 1, 1}, {2, 3});
  AutocastScope autocast(DType::BFloat16);
  const Tensor from_float32 = ops::scaled_dot_product_attention(q, k, v, mask);
  const Tensor from_half = ops::scaled_dot_product_attention(ops::to(q, DType::BFloat16), ops::to(k, DType::BFloat16),
                                                             ops::to(v, DType::BFloat16), mask);
  ASSERT_EQ(from_half.dtype(), DType::BFloat16);
  EXPECT_EQ(ops::to(from_half, DType::Float32).to_vector<float>(),
            ops::to(from_float32, DType::Float32).to_vector<float>());
}

}  // namespace
}  // namespace dpcore
