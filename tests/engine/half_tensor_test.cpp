// bfloat16 and float16 tensors: two bytes an element, named as PyTorch names them, filled
// through float32 as PyTorch converts a scalar, cast by ops::to, and refused, naming the op
// and the dtype, by ops that compute only in float32 and float64 (all but linear and
// batched_matmul so far: tests/engine/half_matmul_test.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "engine/backend.h"
#include "engine/ops.h"
#include "tests/support/error_of.h"

namespace dpcore {
namespace {

bool contains(const std::string& s, const std::string& piece) { return s.find(piece) != std::string::npos; }

TEST(HalfTensor, StorageNamesAndFill) {
  EXPECT_EQ(dtype_size(DType::BFloat16), 2u);
  EXPECT_EQ(dtype_size(DType::Float16), 2u);
  EXPECT_STREQ(dtype_name(DType::BFloat16), "bfloat16");
  EXPECT_STREQ(dtype_name(DType::Float16), "float16");
  Tensor b = Tensor::full({2, 3}, 1.0 / 3.0, DType::BFloat16), h = Tensor::full({5}, -70000.0, DType::Float16);
  EXPECT_EQ(b.nbytes(), 12u);
  EXPECT_EQ(b.str(), "bfloat16[2, 3] on cpu");
  for (kernels::BFloat16 v : b.to_vector<kernels::BFloat16>()) EXPECT_EQ(v.bits, 0x3eabu);  // 0.333984375
  EXPECT_EQ(b.view({6}).narrow0(4, 5).item(), 0.333984375);
  for (kernels::Float16 v : h.to_vector<kernels::Float16>()) EXPECT_EQ(v.bits, 0xfc00u);  // overflow: -inf
  const std::vector<kernels::Float16> bits = {{0x3c00}, {0x0001}, {0xc000}};
  Tensor from = Tensor::from_vector(bits, {3});
  EXPECT_EQ(from.dtype(), DType::Float16);
  EXPECT_EQ(from.clone().narrow0(1, 2).item(), 5.9604644775390625e-08);  // 2^-24
}

TEST(HalfTensor, OpsWithoutAHalfPathRefuseNamingOpAndDtype) {
  Tensor x = Tensor::zeros({4, 3}, DType::BFloat16);
  std::string msg = testing::error_of([&] { ops::sum(x); });
  EXPECT_TRUE(contains(msg, "sum") && contains(msg, "bfloat16[4, 3]")) << msg;
  msg = testing::error_of([&] { ops::mean(Tensor::zeros({4, 3}, DType::Float16)); });
  EXPECT_TRUE(contains(msg, "mean") && contains(msg, "float16[4, 3]")) << msg;
  msg = testing::error_of([&] { Tensor::zeros({2}, DType::Int64).set_requires_grad(true); });
  EXPECT_TRUE(contains(msg, "requires_grad on a int64 tensor")) << msg;
}

// A 16-bit leaf takes a gradient (what a pipeline stage receives under autocast is one:
// train/pipeline): its own dtype, and a second backward adds to it rounded once, as
// PyTorch accumulates a bfloat16 leaf's .grad.
TEST(HalfTensor, ASixteenBitLeafTakesItsGradientAndAddsTheNextRoundedOnce) {
  for (DType half : {DType::BFloat16, DType::Float16}) {
    SCOPED_TRACE(dtype_name(half));
    Tensor leaf = ops::to(Tensor::from_vector(std::vector<float>{1.f, -2.f, 3.f}, {3}), half);
    leaf.set_requires_grad(true);
    const Tensor first = ops::to(Tensor::from_vector(std::vector<float>{1.f / 3, 256.f, -0.75f}, {3}), half);
    const Tensor second = ops::to(Tensor::from_vector(std::vector<float>{1.f / 3, 1.25f, 0.25f}, {3}), half);
    ops::to(leaf, DType::Float32).backward(ops::to(first, DType::Float32));
    ASSERT_EQ(leaf.grad().dtype(), half);
    EXPECT_EQ(ops::to(leaf.grad(), DType::Float32).to_vector<float>(), ops::to(first, DType::Float32).to_vector<float>());
    ops::to(leaf, DType::Float32).backward(ops::to(second, DType::Float32));
    const std::vector<float> a = ops::to(first, DType::Float32).to_vector<float>();
    const std::vector<float> b = ops::to(second, DType::Float32).to_vector<float>();
    std::vector<float> want;
    for (size_t i = 0; i < a.size(); ++i) want.push_back(a[i] + b[i]);  // exact in float32, then rounded
    EXPECT_EQ(ops::to(leaf.grad(), DType::Float32).to_vector<float>(),
              ops::to(ops::to(Tensor::from_vector(want, {3}), half), DType::Float32).to_vector<float>());
  }
}

// ops::to, Tensor.to(dtype): the bits of kernels/half_types.h's rounding each way, the
// tensor itself for its own dtype, other pairs refused by name; the backward casts the
// gradient back, so a float32 leaf behind a bfloat16 copy gets the bfloat16-rounded one.
TEST(HalfTensor, ToCastsAndItsBackwardCastsTheGradientBack) {
  const std::vector<float> values = {1.f / 3, -2.5f, 1e-40f, 70000.f, -0.f, 65520.f, 3.0e38f};
  Tensor x = Tensor::from_vector(values, {7});
  const auto b = ops::to(x, DType::BFloat16).to_vector<kernels::BFloat16>();
  const auto h = ops::to(x, DType::Float16).to_vector<kernels::Float16>();
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(b[i].bits, kernels::float_to_bfloat16(values[i]).bits) << values[i];
    EXPECT_EQ(h[i].bits, kernels::float_to_float16(values[i]).bits) << values[i];
  }
  const auto back = ops::to(ops::to(x, DType::Float16), DType::Float32).to_vector<float>();
  for (size_t i = 0; i < values.size(); ++i)
    EXPECT_EQ(kernels::float32_bits(back[i]), kernels::float32_bits(kernels::float16_to_float(h[i]))) << values[i];
  EXPECT_EQ(ops::to(x, DType::Float32).raw_data(), x.raw_data()) << "its own dtype: the tensor itself";

  std::string msg = testing::error_of([&] { ops::to(Tensor::zeros({2}, DType::Float64), DType::BFloat16); });
  EXPECT_TRUE(contains(msg, "to: float64[2]") && contains(msg, "to bfloat16")) << msg;
  msg = testing::error_of([&] { ops::to(Tensor::zeros({2}, DType::Int64), DType::Float16); });
  EXPECT_TRUE(contains(msg, "int64[2]") && contains(msg, "float16")) << msg;

  // loss = sum(to(to(w, bfloat16), float32) / 3): dloss/dw = bfloat16(1/3) = 0.333984375.
  Tensor w = Tensor::from_vector(std::vector<float>{0.5f, -1.25f, 2.f}, {3});
  w.set_requires_grad(true);
  Tensor loss = ops::sum(ops::scale(ops::to(ops::to(w, DType::BFloat16), DType::Float32), 1.0 / 3));
  loss.backward();
  for (float g : w.grad().to_vector<float>()) EXPECT_EQ(g, 0.333984375f);
}

// The backend's add of two 16-bit tensors (a 16-bit allreduce's reduction step, --grad-dtype
// bf16): the 16-bit value nearest the exact sum. The inputs lie within a factor 2^8 of each
// other, so their float32 sum is exact and one rounding gives the nearest value; an
// infinity and a NaN carry through, other dtypes are refused. The output starts as NaN.
TEST(HalfTensor, AddIsTheNearest16BitValueToTheExactSum) {
  std::vector<float> a_values, b_values;
  for (int i = 0; i < 1000; ++i) {
    a_values.push_back(std::ldexp(1.0f + float(i % 97) / 97, i % 9) * (i % 3 ? 1.f : -1.f));
    b_values.push_back(std::ldexp(1.0f + float(i % 89) / 89, (i * 5) % 7) * (i % 5 ? 1.f : -1.f));
  }
  a_values[0] = INFINITY, a_values[1] = NAN, b_values[2] = -INFINITY;
  const Tensor a32 = Tensor::from_vector(a_values, {1000}), b32 = Tensor::from_vector(b_values, {1000});
  for (DType half : {DType::BFloat16, DType::Float16}) {
    SCOPED_TRACE(dtype_name(half));
    Tensor a = ops::to(a32, half), b = ops::to(b32, half), y = Tensor::full({1000}, NAN, half);
    backend_for(Device::cpu()).add(a, b, y);
    const std::vector<float> wa = ops::to(a, DType::Float32).to_vector<float>(), wb = ops::to(b, DType::Float32).to_vector<float>();
    const std::vector<float> got = ops::to(y, DType::Float32).to_vector<float>();
    for (size_t i = 0; i < got.size(); ++i) {
      const double exact = double(wa[i]) + double(wb[i]);
      const Tensor nearest = ops::to(Tensor::from_vector(std::vector<float>{float(exact)}, {1}), half);
      const float want = ops::to(nearest, DType::Float32).item();
      if (std::isnan(want)) EXPECT_TRUE(std::isnan(got[i])) << "element " << i;
      else EXPECT_EQ(got[i], want) << "element " << i << ": " << wa[i] << " + " << wb[i];
    }
    Tensor in_place = a.clone();
    backend_for(Device::cpu()).add(in_place, b, in_place);  // y aliasing a
    EXPECT_EQ(std::memcmp(in_place.raw_data(), y.raw_data(), y.nbytes()), 0);
  }
  Tensor bf = ops::to(a32, DType::BFloat16), f16 = ops::to(b32, DType::Float16), out = Tensor::empty({1000}, DType::BFloat16);
  const std::string msg = testing::error_of([&] { backend_for(Device::cpu()).add(bf, f16, out); });
  EXPECT_TRUE(contains(msg, "add: float16[1000] on cpu is not of bfloat16[1000] on cpu's dtype")) << msg;
}

}  // namespace
}  // namespace dpcore
