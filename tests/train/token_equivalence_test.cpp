// Token inputs and the weighting of a step by counted targets (train/step/step.h): per-token labels
// with ignore_index in uneven numbers per sample, so that micro-batches and replicas hold
// different numbers of counted tokens. Every runner must give PyTorch's mean over the counted
// tokens of the whole global batch, and hand the model the global position of every
// micro-batch it computes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <mutex>

#include "engine/autograd.h"
#include "engine/ops.h"
#include "train/sync/async_sgd.h"
#include "train/runners/data_parallel.h"
#include "train/step/step.h"
#include "equivalence.h"

namespace dpcore::train {
namespace {

using testing::kSgd;
using testing::kTokens;
using testing::TokenBatch;
using testing::TokenCase;
using testing::options_for;
using testing::runner_for;
using testing::token_case_name;
using testing::token_cases;

class TokenEquivalence : public ::testing::TestWithParam<TokenCase> {};

// Three steps of 13 samples whose counted tokens run from 0 to 5 each: the runner's
// parameters equal the one-device full-batch step's within the CNN tests' tolerance.
TEST_P(TokenEquivalence, ThreeStepsEqualTheOneDeviceFullBatchStep) {
  const TokenCase c = GetParam();
  const int64_t n = 13;
  auto runner = runner_for(c, testing::token_net());
  auto got = testing::train_tokens_with(*runner, n, 3);
  runner->settle();
  got = runner->model().parameters().values().to_vector<float>();
  EXPECT_LE(testing::relative_difference(got, testing::token_reference_params(n, 3)), 1e-5) << runner->describe();
}

INSTANTIATE_TEST_SUITE_P(Runners, TokenEquivalence, ::testing::ValuesIn(token_cases()),
                         [](const ::testing::TestParamInfo<TokenCase>& info) { return token_case_name(info.param); });

// The float64 gradient of PyTorch's cross_entropy(reduction="mean") over the whole batch,
// with the float32 model's parameters, and that mean.
struct DirectGradient {
  std::vector<double> grads;
  double loss = 0;
};

DirectGradient direct_mean_gradient(const layers::Model& model, const TokenBatch& b) {
  const Shape input{kTokens, testing::kTokenFeatures};
  layers::Model wide(layers::parse_layer_spec("linear(8) relu linear(" + std::to_string(testing::kTokenClasses) + ")",
                                              input),
                     input, Device::cpu(), DType::Float64);
  const auto values = model.parameters().values().to_vector<float>();
  wide.parameters().values().copy_(Tensor::from_vector(std::vector<double>(values.begin(), values.end()),
                                                        {int64_t(values.size())}));
  Tensor x = Tensor::from_vector(std::vector<double>(b.values.begin(), b.values.end()),
                                 {b.batch.size, kTokens, testing::kTokenFeatures});
  Tensor y = Tensor::from_vector(b.labels, {b.batch.size, kTokens});
  wide.zero_grad();
  Tensor loss = ops::cross_entropy(wide.forward_logits(x), y, ops::Reduction::Mean);
  loss.backward();
  return {wide.parameters().grads().to_vector<double>(), loss.item()};
}

// max |got - want| / max |want|
double relative_to(const std::vector<float>& got, const std::vector<double>& want) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, std::fabs(double(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(want[i]));
  }
  return diff / scale;
}

// The counted tokens of consecutive shares of a batch.
std::vector<int64_t> counted_per_share(const data::Batch& batch, const std::vector<int64_t>& shares) {
  std::vector<int64_t> counted;
  int64_t row = 0;
  for (int64_t share : shares) {
    counted.push_back(counted_targets(batch_rows(batch, row, row + share)));
    row += share;
  }
  return counted;
}

// One step's reduced gradient (the runner's flat gradient buffer after the step: the mean
// over the global batch's counted tokens, on every replica) against the float64 direct
// computation. float32 sums at most 65 token terms and 8 hidden units per element: a
// relative error of about 73 * 2^-24 = 4.4e-6 of the gradient's scale; 1e-5 allows that,
// while dividing by the 13 samples instead of the 30 counted tokens, or averaging the
// replicas' own means, misses by tens of percent.
TEST(TokenWeighting, TheGradientIsTheMeanOverTheGlobalBatchsCountedTokens) {
  const TokenBatch b = testing::make_token_batch(13, 4);
  ASSERT_EQ(counted_targets(b.batch), 30);
  // The shares hold different counts (the test would not tell the weightings apart otherwise).
  EXPECT_EQ(counted_per_share(b.batch, {7, 2, 4}), (std::vector<int64_t>{17, 1, 12}));
  const OptimizerConfig plain_sgd = SgdConfig{0.1, 0.0, 0.0, 0.0, false};
  for (const TokenCase& c : {TokenCase{"ddp", "full", 1, 3, "even"}, TokenCase{"dp", "full", 3, 2, "weights:5,1,2"},
                             TokenCase{"ddp", "full", 3, 2, "weights:5,1,2"}, TokenCase{"ddp", "full", 3, 1, "weights:7,2,4"}}) {
    auto runner = runner_for(c, testing::token_net(), plain_sgd);
    const DirectGradient want = direct_mean_gradient(runner->model(), b);
    runner->set_step_number(1);
    const StepStats stats = runner->step(b.batch);
    EXPECT_EQ(stats.targets, 30) << token_case_name(c);
    EXPECT_NEAR(stats.loss_sum.item() / double(stats.targets), want.loss, 1e-5 * want.loss) << token_case_name(c);
    const auto grads = runner->model().parameters().grads().to_vector<float>();
    EXPECT_LE(relative_to(grads, want.grads), 1e-5) << runner->describe();
  }
}

// No counted target at all: PyTorch's mean is 0/0 = NaN and its gradient zero (ignored
// targets add nothing); the step is a zero-gradient step, and evaluation counts nothing.
TEST(TokenWeighting, ABatchWithoutCountedTargetsHasANaNLossAndAZeroGradient) {
  TokenBatch b = testing::make_token_batch(4, 1);
  std::fill(b.labels.begin(), b.labels.end(), kernels::kDefaultIgnoreIndex);
  for (const TokenCase& c : {TokenCase{"ddp", "full", 1, 2, "even"}, TokenCase{"dp", "full", 2, 1, "even"},
                             TokenCase{"ddp", "full", 2, 2, "even"}}) {
    auto runner = runner_for(c, testing::token_net(), SgdConfig{0.1, 0.0, 0.0, 0.0, false});
    const auto before = runner->model().parameters().values().to_vector<float>();
    const StepStats stats = runner->step(b.batch);
    EXPECT_EQ(stats.targets, 0);
    EXPECT_TRUE(std::isnan(stats.loss_sum.item() / double(stats.targets))) << token_case_name(c);
    for (float g : runner->model().parameters().grads().to_vector<float>()) ASSERT_EQ(g, 0.0f) << token_case_name(c);
    EXPECT_EQ(runner->model().parameters().values().to_vector<float>(), before) << token_case_name(c);
  }
  auto net = testing::token_net();
  layers::Model& model = *net;
  auto [x, y] = batch_tensors(b.batch, Device::cpu());
  EXPECT_TRUE(std::isnan(train_step(model, *make_optimizer(model.parameters(), kSgd), x, y)));
  const EvalResult r = evaluate_batch(model, x, y);
  EXPECT_EQ(r.targets, 0);
  EXPECT_EQ(r.loss_sum, 0);
  EXPECT_EQ(r.correct, 0);
}

// Local SGD: a replica whose share holds no counted token takes no step (weight decay and
// momentum would move it on data it never saw), while the other steps; at the averaging it
// weighs nothing.
TEST(TokenWeighting, ALocalSgdShareWithoutCountedTokensTakesNoStep) {
  TokenBatch b = testing::make_token_batch(8, 1);
  std::fill(b.labels.begin() + 4 * kTokens, b.labels.end(), kernels::kDefaultIgnoreIndex);  // replica 1's share
  auto runner = make_runner(testing::token_net(), kSgd, 1, options_for("ddp", "local:3", 2, "even"));
  const auto& replicas = dynamic_cast<const ReplicatedRunner&>(*runner);
  const auto before = replicas.replica_model(1).parameters().values().to_vector<float>();
  runner->set_step_number(1);
  const StepStats stats = runner->step(b.batch);
  EXPECT_EQ(stats.targets, counted_targets(batch_rows(b.batch, 0, 4)));
  EXPECT_EQ(replicas.replica_model(1).parameters().values().to_vector<float>(), before);
  EXPECT_NE(replicas.replica_model(0).parameters().values().to_vector<float>(), before);
}

// Evaluation counts tokens too: the summed loss and the hits over the counted tokens only.
TEST(TokenWeighting, EvaluationSumsOverTheCountedTokens) {
  const TokenBatch b = testing::make_token_batch(13, 4);
  auto model = testing::token_net();
  auto [x, y] = batch_tensors(b.batch, Device::cpu());
  const EvalResult r = evaluate_batch(*model, x, y);
  autograd::NoGradGuard no_grad;
  const auto logp = model->forward(x).to_vector<float>();
  double loss = 0;
  int64_t correct = 0, counted = 0;
  for (size_t t = 0; t < b.labels.size(); ++t) {
    if (b.labels[t] == kernels::kDefaultIgnoreIndex) continue;
    const float* row = logp.data() + t * size_t(testing::kTokenClasses);
    loss -= double(row[b.labels[t]]);
    correct += std::max_element(row, row + testing::kTokenClasses) - row == b.labels[t];
    ++counted;
  }
  EXPECT_EQ(r.targets, 30);
  EXPECT_EQ(r.targets, counted);
  EXPECT_EQ(r.samples, 13);
  EXPECT_EQ(r.loss_sum, loss);
  EXPECT_EQ(r.correct, correct);
}

// ---- token ids: a first layer that takes int64 ids ------------------------------------

// A test-only lookup of rows of its own weight [vocab, features] through ops::embedding
// (N(0, 1) as torch.nn.Embedding starts), so that the model takes token ids [N, T].
class Lookup : public layers::Module {
 public:
  Lookup(int64_t vocab, int64_t features) : vocab_(vocab), features_(features) {}
  Tensor forward(const Tensor& ids) override { return ops::embedding(ids, weight_); }
  Shape output_shape(const Shape& input) const override {
    Shape out = input;
    out.push_back(features_);
    return out;
  }
  std::string describe() const override { return "lookup"; }
  std::unique_ptr<Module> clone() const override { return std::make_unique<Lookup>(vocab_, features_); }
  void collect_parameters(const std::string& prefix, std::vector<layers::ParamSlot>& out) override {
    out.push_back({layers::qualified_name(prefix, "weight"), {vocab_, features_},
                   {layers::ParamInit::Kind::Normal, 1.0}, &weight_});
  }
  bool takes_token_ids() const override { return true; }

 private:
  int64_t vocab_, features_;
  Tensor weight_;
};

constexpr int64_t kVocab = 11;

std::unique_ptr<layers::Model> id_net() {
  auto net = std::make_unique<layers::Sequential>();
  net->add("lookup", std::make_unique<Lookup>(kVocab, testing::kTokenFeatures));
  net->add("fc", std::make_unique<layers::Linear>(testing::kTokenFeatures, testing::kTokenClasses));
  net->add(std::make_unique<layers::LogSoftmax>());
  return std::make_unique<layers::Model>(std::move(net), Shape{kTokens}, Device::cpu(), DType::Float32, 5);
}

// make_token_batch's labels over token ids [n, kTokens] instead of float values.
struct IdBatch {
  std::vector<int64_t> ids, labels;
  data::Batch batch;
};

IdBatch make_id_batch(int64_t n, uint64_t seed) {
  const TokenBatch tokens = testing::make_token_batch(n, seed);
  IdBatch b;
  b.labels = tokens.labels;
  for (int64_t i = 0; i < n * kTokens; ++i) b.ids.push_back((i * 5 + int64_t(seed)) % kVocab);
  b.batch = tokens.batch;
  b.batch.sample = {kTokens};
  b.batch.images = nullptr, b.batch.ids = b.ids.data(), b.batch.labels = b.labels.data();
  return b;
}

std::vector<float> train_ids_with(StepRunner& runner, int64_t n, int steps) {
  return testing::train_on(runner, steps, [n](int s) { return make_id_batch(n, uint64_t(100 + s)); });
}

TEST(TokenIds, AModelThatTakesIdsTrainsAlikeUnderEveryRunner) {
  ASSERT_TRUE(id_net()->takes_token_ids());
  const int64_t n = 13;
  SingleDeviceRunner single(id_net(), kSgd, 1);
  const auto want = train_ids_with(single, n, 3);
  for (const TokenCase& c : {TokenCase{"ddp", "full", 1, 3, "even"}, TokenCase{"dp", "full", 2, 2, "weights:5,1"},
                             TokenCase{"ddp", "full", 3, 2, "weights:5,1,2"}, TokenCase{"ddp", "local:1", 3, 1, "even"},
                             TokenCase{"ddp", "async", 1, 2, "even"}}) {
    auto runner = runner_for(c, id_net());
    train_ids_with(*runner, n, 3);
    runner->settle();
    const auto got = runner->model().parameters().values().to_vector<float>();
    EXPECT_LE(testing::relative_difference(got, want), 1e-5) << runner->describe();
  }
}

// ---- batch positions ------------------------------------------------------------------

// What one forward saw: the position the runner gave the model before it, and its rows.
struct SeenRows {
  uint64_t step = 0;
  int64_t first_sample = 0, rows = 0;
};

// Shared by a probe and its clones on the replicas' threads.
struct RowsSeen {
  std::mutex mutex;
  std::vector<SeenRows> all;
};

// Passes its input on and records (position, rows) at every forward.
class RowsProbe : public layers::Module {
 public:
  explicit RowsProbe(std::shared_ptr<RowsSeen> seen) : seen_(std::move(seen)) {}
  Tensor forward(const Tensor& x) override {
    std::lock_guard<std::mutex> lock(seen_->mutex);
    seen_->all.push_back({position_.step, position_.first_sample, x.size(0)});
    return x;
  }
  Shape output_shape(const Shape& input) const override { return input; }
  std::string describe() const override { return "probe"; }
  std::unique_ptr<Module> clone() const override { return std::make_unique<RowsProbe>(seen_); }
  void set_batch_position(const layers::BatchPosition& position) override { position_ = position; }

 private:
  std::shared_ptr<RowsSeen> seen_;
  layers::BatchPosition position_;
};

std::unique_ptr<layers::Model> probed_token_net(std::shared_ptr<RowsSeen> seen) {
  auto net = std::make_unique<layers::Sequential>();
  net->add(std::make_unique<RowsProbe>(std::move(seen)));
  net->add(std::make_unique<layers::Linear>(testing::kTokenFeatures, testing::kTokenClasses));
  net->add(std::make_unique<layers::LogSoftmax>());
  const Shape input{kTokens, testing::kTokenFeatures};
  return std::make_unique<layers::Model>(std::move(net), input, Device::cpu(), DType::Float32, 5);
}

// The micro-batches and replicas' forwards of every step cover the global batch exactly
// once, each told the step and the global index of its first sample: dropout masks then
// depend on neither the split nor the runner.
TEST(BatchPositions, EveryRunnerTellsEachForwardTheStepAndItsFirstGlobalSample) {
  const int64_t n = 13;
  std::vector<TokenCase> cases = token_cases();
  cases.push_back({"ddp", "local:3", 3, 2, "weights:5,1,2"});
  cases.push_back({"ddp", "async", 3, 2, "even"});
  for (const TokenCase& c : cases) {
    auto seen = std::make_shared<RowsSeen>();
    auto runner = runner_for(c, probed_token_net(seen));
    testing::train_tokens_with(*runner, n, 2);
    runner->settle();
    std::vector<SeenRows> all = seen->all;
    std::sort(all.begin(), all.end(), [](const SeenRows& a, const SeenRows& b) {
      return std::make_pair(a.step, a.first_sample) < std::make_pair(b.step, b.first_sample);
    });
    std::string got;
    for (const SeenRows& r : all) {
      got += " " + std::to_string(r.step) + ":" + std::to_string(r.first_sample) + "+" + std::to_string(r.rows);
    }
    size_t i = 0;
    for (uint64_t step = 1; step <= 2; ++step) {
      int64_t next = 0;  // the first sample not covered yet
      for (; i < all.size() && all[i].step == step; ++i) {
        EXPECT_EQ(all[i].first_sample, next) << runner->describe() << ":" << got;
        next = all[i].first_sample + all[i].rows;
      }
      EXPECT_EQ(next, n) << runner->describe() << ", step " << step << ":" << got;
    }
    EXPECT_EQ(i, all.size()) << runner->describe() << ":" << got;
  }
}

}  // namespace
}  // namespace dpcore::train
