// The PyTorch parity fixtures written by scripts/make_fixtures.py load with dpcore's reader,
// hold the tensors the parity tests rely on, and agree with the C++ twin of the script's
// deterministic parts (tests/support/fixture_weights.h) bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "engine/io/safetensors.h"
#include "support/fixture_weights.h"
#include "support/test_support.h"

namespace dpcore::io {
namespace {

using namespace dpcore::testing;

const char* const kPrefixes[] = {"params", "grad", "after3", "accum3"};

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
  for (const char* prefix : kPrefixes)
    for (const FixtureParam& p : model.params) expected.push_back(std::string(prefix) + "." + p.name);
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
    // PyTorch's default range: |w| < 1/sqrt(fan_in).
    float bound = float(1.0 / std::sqrt(double(p.fan_in)));
    for (float w : init[t]) ASSERT_LE(std::abs(w), bound) << p.name;
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
}

// With momentum, SGD's first step is p - lr * g (the buffer starts as g): the accumulated
// step must equal that step with the whole batch's gradient.
TEST_P(Fixture, AccumulatedStepIsOnePlainStepWithTheBatchGradient) {
  const float lr = std::stof(file.metadata().at("accum3.lr"));
  for (const FixtureParam& p : model.params) {
    std::vector<float> w = floats("params." + p.name), g = floats("grad." + p.name), a = floats("accum3." + p.name);
    double worst = 0;
    for (size_t i = 0; i < w.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - (w[i] - lr * g[i])));
    EXPECT_LE(worst, 1e-6) << p.name;
  }
}

// Three steps on the same batch move every parameter tensor (a fixture of unchanged weights
// could not catch an optimizer that does nothing).
TEST_P(Fixture, AfterThreeStepsEveryParameterMoved) {
  for (const FixtureParam& p : model.params) {
    std::vector<float> w = floats("params." + p.name), a = floats("after3." + p.name);
    EXPECT_NE(w, a) << p.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, Fixture, ::testing::Values("simplenet", "fashioncnn", "vggs"));

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
