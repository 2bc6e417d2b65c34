// dpcore against real PyTorch (fixtures written by scripts/make_fixtures.py with Debian's
// PyTorch 1.13): logits, loss, every gradient, parameters after 3 SGD steps (momentum,
// nesterov, weight decay) and after one step with 3 accumulation micro-batches, all in
// float32, to a relative error of 1e-5. For the ResNet (batch norm in training mode) also
// the running statistics and batch counts after each of these, and the eval-mode logits
// after the 3 steps. Each check prints its error as a fraction of the
// threshold (llm.c's report), so the margin is visible in the test log.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>

#include "engine/sgd.h"
#include "engine/autograd.h"
#include "engine/io/safetensors.h"
#include "engine/ops.h"
#include "train/step/step.h"
#include "layers/zoo.h"
#include "support/fixture_weights.h"
#include "support/test_support.h"

namespace dpcore::layers {
namespace {

constexpr double kTolerance = 1e-5;

class Parity : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string path = testing::source_dir() + "/tests/fixtures/" + GetParam() + ".safetensors";
    file_ = std::make_unique<io::SafetensorsFile>(io::load_safetensors(path));
    meta_ = file_->metadata();
  }

  // A fresh model at the fixture's initial weights (the formula of fixture_weights.h).
  std::unique_ptr<Model> model() {
    ModelDef def = reference_model(GetParam());
    auto m = std::make_unique<Model>(std::move(def.net), def.input_shape);
    auto init = testing::fixture_initial_params(testing::fixture_model(GetParam()));
    std::vector<float> flat(size_t(m->parameters().total()), 0.0f);
    const auto& entries = m->parameters().entries();
    for (size_t i = 0; i < entries.size(); ++i) std::copy(init[i].begin(), init[i].end(), flat.begin() + entries[i].offset);
    m->parameters().values().copy_(Tensor::from_vector(flat, {m->parameters().total()}));
    return m;  // (buffers start at PyTorch's defaults, as the fixture's do)
  }

  // The model's buffers against the fixture's `prefix.<name>`: the running statistics to
  // the tolerance, the batch counts exactly. Nothing for a model without batch norm.
  void expect_buffers(const std::string& prefix, const Model& m) {
    const auto all = m.buffers().values().to_vector<float>();
    for (const auto& e : m.buffers().entries()) {
      std::vector<float> got(all.begin() + e.offset, all.begin() + e.offset + e.numel);
      if (!e.counter) {
        expect_close(prefix + "." + e.name, got);
        continue;
      }
      const io::TensorRecord& ref = file_->at(prefix + "." + e.name);
      ASSERT_EQ(ref.dtype, DType::Int64) << ref.name;
      EXPECT_EQ(double(got[0]), double(*ref.values<int64_t>())) << ref.name;
    }
  }

  Tensor tensor(const std::string& name) {
    const io::TensorRecord& t = file_->at(name);
    if (t.dtype == DType::Int64) return Tensor::from_vector(std::vector<int64_t>(t.values<int64_t>(), t.values<int64_t>() + t.numel()), t.shape);
    return Tensor::from_vector(std::vector<float>(t.values<float>(), t.values<float>() + t.numel()), t.shape);
  }

  // Compares a full tensor against the fixture, which may hold only a sample of it.
  void expect_close(const std::string& name, const std::vector<float>& full) {
    const io::TensorRecord& ref = file_->at(name);
    std::vector<float> got = ref.numel() == int64_t(full.size()) ? full : testing::fixture_sample(full.data(), int64_t(full.size()));
    ASSERT_EQ(int64_t(got.size()), ref.numel()) << name;
    double err = testing::scaled_difference(got.data(), ref.values<float>(), got.size());
    std::cout << GetParam() << " " << name << ": relative error " << err << " (" << err / kTolerance
              << " of the threshold)\n";
    EXPECT_LE(err, kTolerance) << name;
  }

  std::vector<float> param(Model& m, const FlatParameters::Entry& e, const Tensor& buffer) {
    auto all = buffer.to_vector<float>();
    return std::vector<float>(all.begin() + e.offset, all.begin() + e.offset + e.numel);
  }

  SgdConfig sgd_config(const std::string& prefix) {
    return {std::stod(meta_.at(prefix + ".lr")), std::stod(meta_.at(prefix + ".momentum")),
            std::stod(meta_.at(prefix + ".dampening")), std::stod(meta_.at(prefix + ".weight_decay")),
            meta_.at(prefix + ".nesterov") == "true"};
  }

  std::unique_ptr<io::SafetensorsFile> file_;
  std::map<std::string, std::string> meta_;
};

TEST_P(Parity, InitialWeightsMatchTheFormula) {
  auto m = model();
  for (const auto& e : m->parameters().entries()) expect_close("params." + e.name, param(*m, e, m->parameters().values()));
}

TEST_P(Parity, LogitsLossAndGradients) {
  auto m = model();
  Tensor x = tensor("input"), y = tensor("target");
  m->zero_grad();
  Tensor logits = m->forward(x);
  Tensor loss = ops::nll_loss(logits, y);
  loss.backward();
  expect_close("logits", logits.to_vector<float>());
  expect_close("loss", loss.to_vector<float>());
  for (const auto& e : m->parameters().entries()) expect_close("grad." + e.name, param(*m, e, m->parameters().grads()));
  if (m->has_batch_norm()) expect_buffers("buffers1", *m);
}

TEST_P(Parity, FusedCrossEntropyStepGivesTheSameGradients) {
  auto m = model();
  Tensor x = tensor("input"), y = tensor("target");
  m->zero_grad();
  Tensor loss_sum = train::forward_backward(*m, x, y, 1.0 / double(x.size(0)));
  expect_close("loss", {float(loss_sum.item() / double(x.size(0)))});
  for (const auto& e : m->parameters().entries()) expect_close("grad." + e.name, param(*m, e, m->parameters().grads()));
}

TEST_P(Parity, ThreeSgdStepsWithMomentumNesterovAndWeightDecay) {
  auto m = model();
  Sgd sgd(m->parameters(), sgd_config("after3"));
  Tensor x = tensor("input"), y = tensor("target");
  for (int i = 0; i < std::stoi(meta_.at("after3.steps")); ++i) train::train_step(*m, sgd, x, y, 1);
  for (const auto& e : m->parameters().entries()) expect_close("after3." + e.name, param(*m, e, m->parameters().values()));
  if (!m->has_batch_norm()) return;
  expect_buffers("after3", *m);
  // Eval mode: normalised with the running statistics of the three steps.
  m->eval();
  autograd::NoGradGuard no_grad;
  expect_close("eval_logits", m->forward(x).to_vector<float>());
}

TEST_P(Parity, OneStepWithThreeAccumulationMicroBatches) {
  auto m = model();
  Sgd sgd(m->parameters(), sgd_config("accum3"));
  Tensor x = tensor("input"), y = tensor("target");
  train::train_step(*m, sgd, x, y, std::stoi(meta_.at("accum")));
  for (const auto& e : m->parameters().entries()) expect_close("accum3." + e.name, param(*m, e, m->parameters().values()));
  // With batch norm, each micro-batch normalised with its own statistics (the fixture
  // script checks that this differs from one step on the whole batch).
  if (m->has_batch_norm()) expect_buffers("accum3", *m);
}

INSTANTIATE_TEST_SUITE_P(ReferenceModels, Parity, ::testing::Values("simplenet", "fashioncnn", "vggs", "resnet8"));

}  // namespace
}  // namespace dpcore::layers
