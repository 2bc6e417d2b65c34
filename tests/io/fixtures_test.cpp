// The PyTorch parity fixtures written by scripts/make_fixtures.py load with dpcore's reader,
// hold the tensors the parity tests rely on, and agree with the C++ twin of the script's
// deterministic parts (tests/support/fixture_weights.h) bit for bit. The batch-norm model
// (resnet8) also holds its buffers (buffers1/after3/accum3.<buffer>) and eval_logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/io/safetensors.h"
#include "support/fixture_weights.h"
#include "support/test_support.h"

namespace dpcore::io {
namespace {

using namespace dpcore::testing;

const char* const kPrefixes[] = {"params", "grad", "after3", "accum3"};
// The prefixes under which a batch-norm model stores its buffers, and num_batches_tracked there.
const std::pair<const char*, int64_t> kBufferPrefixes[] = {{"buffers1", 1}, {"after3", 3}, {"accum3", 3}};

class Fixture : public ::testing::TestWithParam<std::string> {
 protected:
  Fixture() : model(fixture_model(GetParam())), file(load_safetensors(fixture_path())) {}
  std::string fixture_path() const { return source_dir() + "/tests/fixtures/" + GetParam() + ".safetensors"; }
  std::vector<float> floats(const std::string& name) const {
    const TensorRecord& t = file.at(name);
    return std::vector<float>(t.values<float>(), t.values<float>() + t.numel());
  }
  int64_t batch() const { return std::stoll(file.metadata().at("batch")); }

  FixtureModel model;
  SafetensorsFile file;
};

TEST_P(Fixture, HoldsTheDocumentedTensorsInOrder) {
  std::vector<std::string> expected = {"input", "target", "logits", "loss"};
  if (model.batch_norm()) expected.push_back("eval_logits");
  auto add = [&](const std::string& prefix, bool with_buffers) {
    for (const FixtureParam& p : model.params) expected.push_back(prefix + "." + p.name);
    if (with_buffers)
      for (const FixtureBuffer& b : model.buffers) expected.push_back(prefix + "." + b.name);
  };
  add("params", false);
  add("grad", false);
  if (model.batch_norm())
    for (const FixtureBuffer& b : model.buffers) expected.push_back("buffers1." + b.name);
  add("after3", model.batch_norm());
  add("accum3", model.batch_norm());
  EXPECT_EQ(file.names(), expected);

  const int64_t b = batch();
  EXPECT_EQ(b, 6);
  EXPECT_EQ(file.at("input").shape, (std::vector<int64_t>{b, model.channels, model.height, model.width}));
  EXPECT_EQ(file.at("target").dtype, DType::Int64);
  EXPECT_EQ(file.at("target").shape, std::vector<int64_t>{b});
  EXPECT_EQ(file.at("logits").shape, (std::vector<int64_t>{b, 10}));
  EXPECT_EQ(file.at("loss").shape, std::vector<int64_t>{});
  for (const char* prefix : kPrefixes)
    for (const FixtureParam& p : model.params) {
      const TensorRecord& t = file.at(std::string(prefix) + "." + p.name);
      EXPECT_EQ(t.dtype, DType::Float32) << t.name;
      EXPECT_EQ(t.shape, fixture_stored_shape(p.shape)) << t.name;
    }
  if (model.batch_norm()) EXPECT_EQ(file.at("eval_logits").shape, (std::vector<int64_t>{b, 10}));
}

// The buffers: names (above), shapes and dtypes as PyTorch's state_dict has them, never
// sampled; num_batches_tracked counts the train-mode forward passes (1, 3 steps, 3 micro-batches);
// the running statistics moved away from PyTorch's defaults, the variances stay positive.
TEST_P(Fixture, BatchNormBuffersHaveTheirShapesDtypesAndCounts) {
  if (!model.batch_norm()) {  // no buffers, nothing that needs them
    for (const std::string& name : file.names())
      EXPECT_TRUE(name.rfind("buffers1.", 0) != 0 && name != "eval_logits") << name;
    return;
  }
  const auto norms = std::count_if(model.params.begin(), model.params.end(),
                                   [](const FixtureParam& p) { return p.init == FixtureInit::BatchNormWeight; });
  EXPECT_EQ(model.buffers.size(), size_t(3 * norms));  // running_mean, running_var, num_batches_tracked each
  for (const auto& [prefix, count] : kBufferPrefixes)
    for (const FixtureBuffer& b : model.buffers) {
      const std::string name = std::string(prefix) + "." + b.name;
      const TensorRecord& t = file.at(name);
      EXPECT_EQ(t.dtype, b.is_int64 ? DType::Int64 : DType::Float32) << name;
      EXPECT_EQ(t.shape, b.shape) << name;
      if (b.is_int64) {
        ASSERT_EQ(t.numel(), 1) << name;
        EXPECT_EQ(t.values<int64_t>()[0], count) << name;
        continue;
      }
      const std::vector<float> v = floats(name);
      ASSERT_EQ(int64_t(v.size()), fixture_numel(b.shape)) << name;
      const float initial = float(fixture_buffer_default(b));
      EXPECT_TRUE(std::any_of(v.begin(), v.end(), [&](float x) { return x != initial; })) << name << " never moved";
      if (initial == 1.0f)
        for (float x : v) EXPECT_GT(x, 0.0f) << name;
    }
}

TEST_P(Fixture, MetadataRecordsHyperparametersAndSampling) {
  const auto& meta = file.metadata();
  EXPECT_EQ(meta.at("model"), GetParam());
  EXPECT_EQ(meta.at("accum"), "3");
  EXPECT_EQ(meta.at("init_seed"), std::to_string(kFixtureInitSeed));
  EXPECT_EQ(meta.at("sample_limit"), std::to_string(kFixtureFullLimit));
  EXPECT_EQ(meta.at("after3.lr"), "0.1");
  EXPECT_EQ(meta.at("after3.momentum"), "0.9");
  EXPECT_EQ(meta.at("after3.nesterov"), "true");
  EXPECT_EQ(meta.at("after3.weight_decay"), "0.01");
  EXPECT_EQ(meta.at("accum3.lr"), "0.1");
  EXPECT_EQ(meta.at("accum3.nesterov"), "false");
  for (const FixtureParam& p : model.params) {
    int64_t stride = fixture_sample_stride(fixture_numel(p.shape));
    auto it = meta.find("sample_stride." + p.name);
    if (stride == 1)
      EXPECT_EQ(it, meta.end()) << p.name << " is stored whole but the file says it is sampled";
    else
      EXPECT_TRUE(it != meta.end() && it->second == std::to_string(stride)) << p.name << " stride " << stride;
  }
}

TEST_P(Fixture, InitialWeightsMatchTheFormulaBitForBit) {
  std::vector<std::vector<float>> init = fixture_initial_params(model);
  for (size_t t = 0; t < model.params.size(); ++t) {
    const FixtureParam& p = model.params[t];
    std::vector<float> want = fixture_sample(init[t].data(), fixture_numel(p.shape));
    std::vector<float> got = floats("params." + p.name);
    ASSERT_EQ(got.size(), want.size()) << p.name;
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0) << p.name;
    if (p.init == FixtureInit::Uniform) {
      // PyTorch's default range: |w| < 1/sqrt(fan_in).
      float bound = float(1.0 / std::sqrt(double(p.fan_in)));
      for (float w : init[t]) ASSERT_LE(std::abs(w), bound) << p.name;
    } else {
      // Batch norm: weight in 1 +- 0.1, bias in +-0.1, neither constant.
      const float centre = p.init == FixtureInit::BatchNormWeight ? 1.0f : 0.0f;
      for (float w : init[t]) ASSERT_LE(std::abs(w - centre), float(kFixtureBatchNormSpread)) << p.name;
      EXPECT_NE(*std::min_element(init[t].begin(), init[t].end()), *std::max_element(init[t].begin(), init[t].end()))
          << p.name;
    }
  }
}

// The batch-norm rule, spelled out for one element: 1 + 0.1 * (2u - 1) computed in double
// with the product rounded before the sum, then rounded to float32 once.
TEST(FixtureWeights, BatchNormInitIsComputedInDoubleAndRoundedOnce) {
  const uint64_t stream = splitmix64(splitmix64(kFixtureInitSeed) ^ 5);
  std::vector<float> w = fixture_init(kFixtureInitSeed, 5, 4, 0, FixtureInit::BatchNormWeight);
  std::vector<float> b = fixture_init(kFixtureInitSeed, 5, 4, 0, FixtureInit::BatchNormBias);
  for (uint64_t i = 0; i < 4; ++i) {
    const double u = double(splitmix64(stream + i) >> 11) * 0x1p-53;
    volatile double scaled = 0.1 * (2.0 * u - 1.0);
    EXPECT_EQ(w[i], float(1.0 + scaled)) << i;
    EXPECT_EQ(b[i], float(double(scaled))) << i;
  }
}

TEST_P(Fixture, LogitsAreLogProbabilitiesAndLossIsTheirMeanNll) {
  const std::vector<float> logits = floats("logits");
  const int64_t* target = file.at("target").values<int64_t>();
  double nll = 0;
  for (int64_t n = 0; n < batch(); ++n) {
    ASSERT_GE(target[n], 0);
    ASSERT_LT(target[n], 10);
    double sum = 0;
    for (int64_t c = 0; c < 10; ++c) sum += std::exp(double(logits[size_t(n * 10 + c)]));
    EXPECT_NEAR(sum, 1.0, 1e-5) << "row " << n;
    nll -= logits[size_t(n * 10 + target[n])];
  }
  EXPECT_NEAR(file.at("loss").values<float>()[0], nll / double(batch()), 1e-6);
  if (!model.batch_norm()) return;
  const std::vector<float> eval = floats("eval_logits");
  for (int64_t n = 0; n < batch(); ++n) {
    double sum = 0;
    for (int64_t c = 0; c < 10; ++c) sum += std::exp(double(eval[size_t(n * 10 + c)]));
    EXPECT_NEAR(sum, 1.0, 1e-5) << "eval row " << n;
  }
  EXPECT_NE(eval, logits);  // running statistics after 3 steps, not the batch's at the start
}

// With momentum, SGD's first step is p - lr * g (the buffer starts as g): without batch norm
// the accumulated step must equal that step with the whole batch's gradient. With batch norm
// each micro-batch is normalised with its own statistics, so accumulating 3 micro-batches is
// NOT that step: somewhere they differ by more than 1e-4 (the script checks the same against
// PyTorch's whole-batch step).
TEST_P(Fixture, AccumulatedStepIsOnePlainStepWithTheBatchGradientUnlessBatchNorm) {
  const float lr = std::stof(file.metadata().at("accum3.lr"));
  double worst_of_all = 0;
  for (const FixtureParam& p : model.params) {
    std::vector<float> w = floats("params." + p.name), g = floats("grad." + p.name), a = floats("accum3." + p.name);
    double worst = 0;
    for (size_t i = 0; i < w.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - (w[i] - lr * g[i])));
    if (!model.batch_norm()) EXPECT_LE(worst, 1e-6) << p.name;
    worst_of_all = std::max(worst_of_all, worst);
  }
  if (model.batch_norm()) EXPECT_GT(worst_of_all, 1e-4);
}

// Three steps on the same batch move every parameter tensor (a fixture of unchanged weights
// could not catch an optimizer that does nothing).
TEST_P(Fixture, AfterThreeStepsEveryParameterMoved) {
  for (const FixtureParam& p : model.params) {
    std::vector<float> w = floats("params." + p.name), a = floats("after3." + p.name);
    EXPECT_NE(w, a) << p.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, Fixture, ::testing::Values("simplenet", "fashioncnn", "vggs", "resnet8"));

// The twin's ResNets: torchvision's names in state_dict order and He et al.'s parameter counts.
TEST(FixtureWeights, ResNetParameterListsFollowTorchvision) {
  auto count = [](const FixtureModel& m) {
    int64_t n = 0;
    for (const FixtureParam& p : m.params) n += fixture_numel(p.shape);
    return n;
  };
  const FixtureModel r8 = fixture_model("resnet8"), r20 = fixture_model("resnet20");
  EXPECT_EQ(count(r8), 77754);
  EXPECT_EQ(count(r20), 272186);
  EXPECT_EQ(count(fixture_resnet("resnet20", 3, 3, 32, 32)), 272474);  // CIFAR-10: the paper's 0.27M
  ASSERT_EQ(r8.params.size(), size_t(3 + 6 + 9 + 9 + 2));  // stem, layer1.0, layer2.0, layer3.0, fc
  EXPECT_EQ(r8.params[0].name, "conv1.weight");
  EXPECT_EQ(r8.params[1].name, "bn1.weight");
  EXPECT_EQ(r8.params[3].name, "layer1.0.conv1.weight");
  EXPECT_EQ(r8.params[15].name, "layer2.0.downsample.0.weight");
  EXPECT_EQ(r8.params[15].shape, (std::vector<int64_t>{32, 16, 1, 1}));
  EXPECT_EQ(r8.params[15].fan_in, 16);
  EXPECT_EQ(r8.params[16].name, "layer2.0.downsample.1.weight");
  EXPECT_EQ(r8.params.back().name, "fc.bias");
  ASSERT_EQ(r8.buffers.size(), size_t(3 * 9));
  EXPECT_EQ(r8.buffers[0].name, "bn1.running_mean");
  EXPECT_EQ(r8.buffers[2].name, "bn1.num_batches_tracked");
  EXPECT_TRUE(r8.buffers[2].is_int64);
  EXPECT_EQ(r8.buffers[2].shape, std::vector<int64_t>{});
  EXPECT_EQ(fixture_buffer_default(r8.buffers[1]), 1.0);
  EXPECT_EQ(fixture_buffer_default(r8.buffers[0]), 0.0);
  EXPECT_FALSE(fixture_model("fashioncnn").batch_norm());
}

TEST(FixtureWeights, SampleStrideSharesNoFactorWithTheSize) {
  EXPECT_EQ(fixture_sample_stride(kFixtureFullLimit), 1);
  EXPECT_EQ(fixture_sample_stride(40960), 7);   // 5 and 6 share factors with 2^13 * 5
  EXPECT_EQ(fixture_sample_stride(401408), 51); // 49 and 50 share factors with 2^13 * 7^2
  std::vector<float> full(40960);
  for (size_t i = 0; i < full.size(); ++i) full[i] = float(i);
  std::vector<float> s = fixture_sample(full.data(), int64_t(full.size()));
  ASSERT_EQ(s.size(), size_t((40960 + 6) / 7));
  EXPECT_EQ(s[1], 7.0f);
  EXPECT_EQ(s.back(), float(7 * (s.size() - 1)));
}

}  // namespace
}  // namespace dpcore::io
