// The reference models, the layer-spec language and weight files.
#include <gtest/gtest.h>

#include "layers/weights.h"
#include "layers/zoo.h"
#include "support/test_support.h"

namespace dpcore::nn {
namespace {

std::vector<std::pair<std::string, Shape>> names_and_shapes(const Model& m) {
  std::vector<std::pair<std::string, Shape>> out;
  for (const auto& e : m.parameters().entries()) out.emplace_back(e.name, e.shape);
  return out;
}

Model build(const std::string& name, uint64_t seed = 0) {
  ModelDef def = reference_model(name);
  return Model(std::move(def.net), def.input_shape, Device::cpu(), DType::Float32, seed);
}

TEST(ReferenceModels, ParameterNamesAndShapesArePyTorchs) {
  using V = std::vector<std::pair<std::string, Shape>>;
  EXPECT_EQ(names_and_shapes(build("simplenet")),
            (V{{"conv.weight", {16, 3, 3, 3}}, {"conv.bias", {16}}, {"fc.weight", {10, 4096}}, {"fc.bias", {10}}}));
  EXPECT_EQ(names_and_shapes(build("fashioncnn")),
            (V{{"c1.weight", {32, 1, 3, 3}}, {"c1.bias", {32}}, {"c2.weight", {64, 32, 3, 3}}, {"c2.bias", {64}},
               {"f1.weight", {128, 3136}}, {"f1.bias", {128}}, {"f2.weight", {10, 128}}, {"f2.bias", {10}}}));
  EXPECT_EQ(names_and_shapes(build("vggs")),
            (V{{"c1.weight", {64, 3, 3, 3}}, {"c1.bias", {64}}, {"c2.weight", {128, 64, 3, 3}}, {"c2.bias", {128}},
               {"c3.weight", {256, 128, 3, 3}}, {"c3.bias", {256}}, {"fc.weight", {10, 4096}}, {"fc.bias", {10}}}));
}

TEST(ReferenceModels, ForwardGivesLogProbabilities) {
  Model m = build("fashioncnn", 3);
  auto x = testing::random_vector<float>(2 * 28 * 28, 4);
  Tensor logp = m.forward(Tensor::from_vector(x, {2, 1, 28, 28}));
  ASSERT_EQ(logp.shape(), (Shape{2, 10}));
  auto v = logp.to_vector<float>();
  for (int row = 0; row < 2; ++row) {
    double total = 0;
    for (int c = 0; c < 10; ++c) total += std::exp(double(v[size_t(row * 10 + c)]));
    EXPECT_NEAR(total, 1.0, 1e-5);
  }
}

TEST(ReferenceModels, InitialisationFollowsPyTorchBoundsAndSeed) {
  Model a = build("simplenet", 7), b = build("simplenet", 7), c = build("simplenet", 8);
  EXPECT_EQ(a.parameters().values().to_vector<float>(), b.parameters().values().to_vector<float>());
  EXPECT_NE(a.parameters().values().to_vector<float>(), c.parameters().values().to_vector<float>());
  auto v = a.parameters().values().to_vector<float>();
  const auto& fc = a.parameters().entry("fc.weight");
  float bound = 1.0f / std::sqrt(4096.0f), largest = 0;
  for (int64_t i = 0; i < fc.numel; ++i) largest = std::max(largest, std::abs(v[size_t(fc.offset + i)]));
  EXPECT_LE(largest, bound);
  EXPECT_GT(largest, 0.9f * bound);  // the whole range is used
}

TEST(ReferenceModels, UnknownNameIsAnError) { EXPECT_THROW(reference_model("resnet"), Error); }

TEST(LayerSpec, BuildsTheNetworkWithInferredSizes) {
  auto net = parse_layer_spec("conv(16,3,p1) relu pool(2) flatten linear(10)", {3, 32, 32});
  Model m(std::move(net), {3, 32, 32});
  EXPECT_EQ(m.num_classes(), 10);
  EXPECT_TRUE(m.ends_in_log_softmax());  // appended
  using V = std::vector<std::pair<std::string, Shape>>;
  EXPECT_EQ(names_and_shapes(m), (V{{"0.weight", {16, 3, 3, 3}}, {"0.bias", {16}}, {"4.weight", {10, 4096}},
                                    {"4.bias", {10}}}));
  EXPECT_NE(m.summary().find("[1, 16, 16, 16]"), std::string::npos) << m.summary();
}

TEST(LayerSpec, StrideAndPadding) {
  auto net = parse_layer_spec("conv(8,3,s2,p1) pool(3,s1,p1) flatten linear(4)", {1, 9, 9});
  EXPECT_EQ(net->output_shape({2, 1, 9, 9}), (Shape{2, 4}));
  Model m(std::move(net), {1, 9, 9});
  EXPECT_EQ(m.parameters().entry("3.weight").shape, (Shape{4, 8 * 5 * 5}));
}

TEST(LayerSpec, ErrorsNameTheProblem) {
  auto message = [](const std::string& spec) {
    try {
      parse_layer_spec(spec, {3, 32, 32});
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("conv(16,3) bogus").find("unknown layer 'bogus'"), std::string::npos);
  EXPECT_NE(message("conv(16,x)").find("bad number 'x'"), std::string::npos);
  EXPECT_NE(message("conv(16,3) linear(10)").find("flatten"), std::string::npos);
  EXPECT_NE(message("conv(16,3").find("never closed"), std::string::npos);
  // The article's flatten mistake, caught when the model is built: 16x16x16 per sample.
  std::string m = message("conv(16,3,p1) relu pool(2) view(-1,1024) linear(10)");
  EXPECT_NE(m.find("4096"), std::string::npos) << m;
  EXPECT_NE(m.find("1024"), std::string::npos) << m;
}

TEST(Weights, SaveLoadRoundTripAndStrictness) {
  testing::TempDir dir;
  Model a = build("simplenet", 1), b = build("simplenet", 2);
  save_weights(a, dir.file("w.safetensors"));
  load_weights(b, dir.file("w.safetensors"));
  EXPECT_EQ(a.parameters().values().to_vector<float>(), b.parameters().values().to_vector<float>());
  Model other = build("fashioncnn");
  try {
    load_weights(other, dir.file("w.safetensors"));
    FAIL() << "loading simplenet weights into fashioncnn must fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("w.safetensors"), std::string::npos) << e.what();
  }
}

TEST(Weights, ReplicateCopiesTheParameters) {
  Model a = build("simplenet", 5);
  auto r = a.replicate(Device::cpu());
  EXPECT_EQ(a.parameters().values().to_vector<float>(), r->parameters().values().to_vector<float>());
  EXPECT_FALSE(a.parameters().values().same_data(r->parameters().values()));
}

}  // namespace
}  // namespace dpcore::nn
