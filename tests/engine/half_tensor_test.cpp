// bfloat16 and float16 tensors: two bytes an element, named as PyTorch names them, filled
// through float32 as PyTorch converts a scalar, and refused, naming the op and the dtype,
// by ops that compute only in float32 and float64.
#include <gtest/gtest.h>

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
  Tensor x = Tensor::zeros({4, 3}, DType::BFloat16), w = Tensor::zeros({2, 3}, DType::Float16);
  std::string msg = testing::error_of([&] { ops::relu(x); });
  EXPECT_TRUE(contains(msg, "relu") && contains(msg, "bfloat16[4, 3]")) << msg;
  msg = testing::error_of([&] { ops::linear(Tensor::zeros({4, 3}, DType::Float16), w, Tensor()); });
  EXPECT_TRUE(contains(msg, "linear") && contains(msg, "float16[4, 3]")) << msg;
  msg = testing::error_of([&] { x.set_requires_grad(true); });
  EXPECT_TRUE(contains(msg, "requires_grad on a bfloat16 tensor")) << msg;
}

}  // namespace
}  // namespace dpcore
