// LowPrecisionParameters: the 16-bit copy of the float32 master weights is one buffer in
// the master's layout, refreshed by one cast (the round-to-nearest-even bits of every
// element, padding included), and a parameter taken from it sends its gradient, widened,
// into the master's float32 gradient buffer. On the CPU, and on the first CUDA device
// where one exists (the host build's emulated devices in CI).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "engine/backend.h"
#include "engine/low_precision_parameters.h"
#include "engine/ops.h"
#include "tests/support/error_of.h"
#include "tests/support/test_devices.h"

namespace dpcore {
namespace {

uint16_t half_bits(float v, DType dtype) {
  return dtype == DType::BFloat16 ? kernels::float_to_bfloat16(v).bits : kernels::float_to_float16(v).bits;
}

TEST(LowPrecisionParameters, OneCastGivesEveryElementsBitsAndGradientsReachTheMaster) {
  for (Device device : testing::cpu_and_first_cuda_device()) {
    for (DType dtype : {DType::BFloat16, DType::Float16}) {
      SCOPED_TRACE(device.str() + ", " + dtype_name(dtype));
      FlatParameters master({{"w", {3, 5}}, {"b", {3}}}, DType::Float32, device);
      std::vector<float> values(size_t(master.total()), 0.f);
      for (const auto& e : master.entries())
        for (int64_t k = 0; k < e.numel; ++k) values[size_t(e.offset + k)] = 0.1f * float(k + 1) - 0.77f + 1e3f * float(k % 3);
      master.values().copy_(Tensor::from_vector(values, {master.total()}));
      LowPrecisionParameters low(master, dtype);
      low.refresh();
      ASSERT_EQ(low.values().numel(), master.total());
      const Tensor copy = low.values().to(Device::cpu());
      std::vector<uint16_t> bits(values.size());
      std::memcpy(bits.data(), copy.raw_data(), bits.size() * 2);
      for (size_t k = 0; k < values.size(); ++k) ASSERT_EQ(bits[k], half_bits(values[k], dtype)) << "element " << k;

      // The uses are views into the one copy, at the master's offsets.
      const Tensor w = low.param(0), b = low.param(1);
      EXPECT_EQ(w.shape(), (Shape{3, 5}));
      EXPECT_EQ(static_cast<char*>(b.raw_data()) - static_cast<char*>(low.values().raw_data()),
                master.entries()[1].offset * 2);
      // loss = sum(to(w, float32)) / 3 + sum(to(b, float32)) * 2: the gradients come back
      // through the 16-bit casts, rounded there (1/3 is not a 16-bit value), into the master's buffer.
      Tensor loss = ops::add(ops::scale(ops::sum(ops::to(w, DType::Float32)), 1.0 / 3),
                             ops::scale(ops::sum(ops::to(b, DType::Float32)), 2.0));
      loss.backward();
      const float third = dtype == DType::BFloat16 ? kernels::bfloat16_to_float(kernels::float_to_bfloat16(1.f / 3))
                                                   : kernels::float16_to_float(kernels::float_to_float16(1.f / 3));
      for (float g : master.param(0).grad().to(Device::cpu()).to_vector<float>()) EXPECT_EQ(g, third);
      for (float g : master.param(1).grad().to(Device::cpu()).to_vector<float>()) EXPECT_EQ(g, 2.f);
      // A second forward takes new views of the same copy; the master's gradients add up.
      ops::sum(ops::to(low.param(1), DType::Float32)).backward();
      for (float g : master.param(1).grad().to(Device::cpu()).to_vector<float>()) EXPECT_EQ(g, 3.f);
    }
  }
}

TEST(LowPrecisionParameters, RefusesAFloat64MasterOrAWideCopy) {
  FlatParameters f64({{"w", {2}}}, DType::Float64, Device::cpu()), f32({{"w", {2}}}, DType::Float32, Device::cpu());
  std::string msg = testing::error_of([&] { LowPrecisionParameters(f64, DType::BFloat16); });
  EXPECT_NE(msg.find("master weights must be float32, got float64"), std::string::npos) << msg;
  msg = testing::error_of([&] { LowPrecisionParameters(f32, DType::Float32); });
  EXPECT_NE(msg.find("bfloat16 or float16, not float32"), std::string::npos) << msg;
}

}  // namespace
}  // namespace dpcore
