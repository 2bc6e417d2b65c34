// Finite-difference check, in float64, of each reference model's loss with respect to
// every parameter tensor. Checking every element of vggs would take millions of forward
// passes, so each tensor is checked at a seeded random sample of its elements (all of
// them for small tensors).
#include <gtest/gtest.h>

#include "engine/ops.h"
#include "layers/zoo.h"
#include "support/gradcheck.h"
#include "support/test_support.h"

namespace dpcore::layers {
namespace {

class ModelGradcheck : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelGradcheck, LossWithRespectToEveryParameter) {
  // The ResNet works at any input size: a small one keeps the check short. It runs in
  // training mode, so this also checks batch norm's gradient through the batch statistics
  // and the residual sums.
  ModelDef def = GetParam() == "resnet8" ? reference_model("resnet8", {2, 12, 12}) : reference_model(GetParam());
  Shape in = def.input_shape;
  Model model(std::move(def.net), in, Device::cpu(), DType::Float64, 11);
  const int64_t batch = 2;
  auto x = testing::random_vector<double>(size_t(batch * in[0] * in[1] * in[2]), 12);
  Tensor input = Tensor::from_vector(x, {batch, in[0], in[1], in[2]});
  Tensor target = Tensor::from_vector<int64_t>({3, 7}, {batch});

  model.zero_grad();
  testing::GradcheckOptions opt;
  opt.samples_per_input = 40;
  opt.threshold = 1e-5;
  opt.step = 1e-7;  // small, so few of the many relu/max kinks fall inside [x - e, x + e]
  auto r = testing::gradcheck(
      [&](const std::vector<Tensor>&) { return ops::nll_loss(model.forward(input), target); },
      model.parameters().params(), opt);
  EXPECT_TRUE(r.failures.empty()) << r.failures.size() << " mismatches, worst " << r.worst_where;
  int64_t tensors = int64_t(model.parameters().params().size());
  EXPECT_GE(r.checked, tensors * 25) << r.skipped_near_kink << " skipped near kinks";
  std::cout << GetParam() << ": " << r.checked << " points, worst relative error " << r.worst_error << "\n";
}

INSTANTIATE_TEST_SUITE_P(ReferenceModels, ModelGradcheck, ::testing::Values("simplenet", "fashioncnn", "vggs", "resnet8"));

}  // namespace
}  // namespace dpcore::layers
