// BERT under every runner that claims exactness (tests/train/equivalence.h, token_cases: one
// device with accumulation, dp and ddp over 2 and 3 replica threads with even and uneven
// shares, local SGD with K = 1, async with one replica): a small bert(...) spec with dropout
// on, padded batches whose samples hold different numbers of real tokens, three steps.
// The parameters equal one device's full-batch training: float64 within 1e-12, float32
// within 1e-6. The classification head counts one target per sample; the masked-LM head
// counts the tokens that are not ignore_index, so the runners must weight by counted tokens
// (train/step/step.h) to give PyTorch's mean over the global batch.
#include <gtest/gtest.h>

#include <map>
#include <tuple>

#include "bert_batches.h"
#include "equivalence.h"

namespace dpcore::train {
namespace {

using testing::kBertAdamW;
using testing::TokenCase;

constexpr int64_t kSamples = 13;
constexpr int kSteps = 3;

// The bound on max |got - want| / max |want| after kSteps steps: the runners sum the same
// terms in other orders (micro-batches, replicas, the reduction), at most about 10^3 terms per
// gradient element at one rounding each, and local SGD rounds once more when it averages the
// parameters (whose scale is the LayerNorm weights' 1). float64: 10^3 * 2^-53 = 1e-13 of the
// gradient's scale, times lr and steps, well under 1e-12 (measured 3e-15). float32 with SGD:
// 2^-23 = 1.2e-7 for the averaging, below 1e-6 (measured 2.4e-7 for local SGD, 1e-8 otherwise).
double tolerance(DType dtype) { return dtype == DType::Float64 ? 1e-12 : 1e-6; }

// float64: AdamW, BERT's optimizer. float32: SGD with momentum and weight decay, whose update
// is linear in the gradient, so that the float32 rounding of the gradient's sums bounds the
// difference (AdamW divides each element by its own scale: an element whose terms cancel
// keeps a relative error of its own, which no bound on the sums controls). Local SGD too:
// its averaging of the replicas' own steps is the full step only for an update linear in
// the gradient.
OptimizerConfig optimizer_for(const TokenCase& c, DType dtype) {
  const bool linear = dtype == DType::Float32 || c.sync.rfind("local:", 0) == 0;
  return linear ? OptimizerConfig(testing::kSgd) : OptimizerConfig(kBertAdamW);
}

std::vector<double> one_device(bool masked_lm, DType dtype, const OptimizerConfig& optimizer) {
  SingleDeviceRunner single(testing::bert_net(masked_lm, dtype), optimizer, 1);
  return testing::train_bert_with(single, masked_lm, kSamples, kSteps);
}

struct BertCase {
  TokenCase runner;
  bool masked_lm;
  DType dtype;
};

std::string bert_case_name(const BertCase& c) {
  return std::string(c.masked_lm ? "mlm_" : "classification_") + (c.dtype == DType::Float64 ? "f64_" : "f32_") +
         testing::token_case_name(c.runner);
}
void PrintTo(const BertCase& c, std::ostream* os) { *os << bert_case_name(c); }

std::vector<BertCase> bert_cases() {
  std::vector<BertCase> out;
  for (bool masked_lm : {false, true}) {
    for (DType dtype : {DType::Float64, DType::Float32}) {
      for (const TokenCase& runner : testing::token_cases()) out.push_back({runner, masked_lm, dtype});
    }
  }
  return out;
}

class BertEquivalence : public ::testing::TestWithParam<BertCase> {};

TEST_P(BertEquivalence, ThreeAdamWStepsEqualTheOneDeviceFullBatchStep) {
  const BertCase c = GetParam();
  const OptimizerConfig optimizer = optimizer_for(c.runner, c.dtype);
  static std::map<std::tuple<bool, DType, bool>, std::vector<double>> references;
  auto& want = references[{c.masked_lm, c.dtype, optimizer.kind == OptimizerConfig::Kind::Sgd}];
  if (want.empty()) want = one_device(c.masked_lm, c.dtype, optimizer);
  auto runner = testing::runner_for(c.runner, testing::bert_net(c.masked_lm, c.dtype), optimizer);
  const std::vector<double> got = testing::train_bert_with(*runner, c.masked_lm, kSamples, kSteps);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_LE(testing::scaled_difference(got.data(), want.data(), want.size()), tolerance(c.dtype)) << runner->describe();
}

INSTANTIATE_TEST_SUITE_P(Runners, BertEquivalence, ::testing::ValuesIn(bert_cases()),
                         [](const ::testing::TestParamInfo<BertCase>& info) { return bert_case_name(info.param); });

// The batches are what the tests above need: shares of 13 samples over 3 replicas hold
// different numbers of real tokens and of counted masked-LM targets, some samples none; and
// dropout draws by batch position (a model told another position trains differently, so
// the equivalence above would catch a runner that gave a wrong one).
TEST(BertBatches, SharesHoldUnevenTokensAndDropoutDependsOnThePosition) {
  const testing::BertBatch mlm = testing::make_bert_batch(true, kSamples, 100);
  std::vector<int64_t> real(3), counted(3);
  int64_t silent_samples = 0;
  for (int64_t i = 0; i < kSamples; ++i) {
    const int64_t share = i < 5 ? 0 : i < 9 ? 1 : 2;  // 5, 4, 4
    int64_t counted_here = 0;
    for (int64_t k = 0; k < testing::kBertTokens; ++k) {
      real[share] += mlm.ids[i * testing::kBertTokens + k] != 0;
      counted_here += mlm.labels[i * testing::kBertTokens + k] != kernels::kDefaultIgnoreIndex;
    }
    counted[share] += counted_here;
    silent_samples += counted_here == 0;
  }
  EXPECT_NE(real[1], real[2]);  // the two shares of 4 samples: padded differently
  EXPECT_NE(counted[0] * 4, counted[1] * 5);
  EXPECT_NE(counted[1], counted[2]);
  EXPECT_GT(silent_samples, 0);

  auto model = testing::bert_net(true, DType::Float64);
  Tensor ids = Tensor::from_vector(mlm.ids, {kSamples, testing::kBertTokens});
  auto logits_at = [&](int64_t first_sample) {
    model->set_batch_position(1, first_sample);
    return model->forward_logits(ids).to_vector<double>();
  };
  EXPECT_EQ(logits_at(0), logits_at(0));
  EXPECT_NE(logits_at(0), logits_at(5));
}

}  // namespace
}  // namespace dpcore::train
