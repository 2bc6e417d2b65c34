// measure_step_profile (train/predict/step_profile.h): what it measures must follow from the order
// in which a step runs, whatever the machine's speed.
#include "train/predict/step_profile.h"

#include <gtest/gtest.h>

#include "layers/zoo.h"
#include "support/test_support.h"

namespace dpcore::train {
namespace {

using layers::Model;
using layers::ModelDef;
using layers::reference_model;

TEST(StepProfile, ReadyTimesFollowTheBackwardOrderAndFitInsideBackward) {
  ModelDef def = reference_model("simplenet");
  Model model(std::move(def.net), def.input_shape, Device::cpu(), DType::Float32, 3);
  const int64_t batch = 8;
  const Tensor x = Tensor::from_vector(testing::random_vector<float>(size_t(batch * 3 * 32 * 32), 4), {batch, 3, 32, 32});
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < batch; ++i) labels.push_back(i % 10);
  const Tensor y = Tensor::from_vector(labels, {batch});
  const scaling::StepProfile p = measure_step_profile(model, x, y, SgdConfig{0.01, 0.9, 0.0, 0.0, false}, 1, 3);

  EXPECT_GT(p.forward_s, 0.0);
  EXPECT_GT(p.backward_s, 0.0);
  EXPECT_GT(p.optimizer_s, 0.0);
  const auto& entries = model.parameters().entries();
  ASSERT_EQ(p.param_bytes.size(), entries.size());
  ASSERT_EQ(p.grad_ready_s.size(), entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    SCOPED_TRACE(entries[i].name);
    EXPECT_EQ(p.param_bytes[i], entries[i].numel * 4);
    // In every step a gradient is final after backward began and before it returned, so
    // the medians keep that order.
    EXPECT_GE(p.grad_ready_s[i], 0.0);
    EXPECT_LE(p.grad_ready_s[i], p.backward_s);
  }
  // Backward reaches the first layer last: its weight is ready after the output layer's.
  EXPECT_GE(p.grad_ready_s.front(), p.grad_ready_s.back());
  EXPECT_EQ(p.input_bytes, batch * 3 * 32 * 32 * 4);
  EXPECT_EQ(p.output_bytes, batch * 10 * 4);
}

TEST(StepProfile, RefusesNoTimedSteps) {
  ModelDef def = reference_model("simplenet");
  Model model(std::move(def.net), def.input_shape, Device::cpu(), DType::Float32, 3);
  const Tensor x = Tensor::zeros({2, 3, 32, 32}, DType::Float32, Device::cpu());
  const Tensor y = Tensor::from_vector(std::vector<int64_t>{0, 1}, {2});
  EXPECT_THROW(measure_step_profile(model, x, y, SgdConfig{}, 0, 0), Error);
}

}  // namespace
}  // namespace dpcore::train
