// The reference models, the layer-spec language and weight files.
#include <gtest/gtest.h>

#include "layers/weights.h"
#include "layers/zoo.h"
#include "support/error_of.h"
#include "support/test_support.h"

namespace dpcore::layers {
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

// The error a spec gives for inputs of `input_shape`, or "no error".
std::string spec_error(const std::string& spec, const Shape& input_shape) {
  try {
    parse_layer_spec(spec, input_shape);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

void expect_parts(const std::string& message, const std::vector<std::string>& parts) {
  for (const std::string& part : parts) EXPECT_NE(message.find(part), std::string::npos) << part << "\n" << message;
}

TEST(LayerSpec, ShapesThatCollapseAreRefusedNamingTheLayerAndShapes) {
  // Enough pooling to take 28x28 to nothing: 28 14 7 3 1, then a 2x2 window on 1x1. (C++'s
  // truncating division used to make that 1x1 again, and the model trained without a word.)
  expect_parts(spec_error("conv(8,3,p1) relu pool(2) pool(2) pool(2) pool(2) pool(2) flatten linear(3)", {1, 28, 28}),
               {"layer 6 'pool(2)'", "input [1, 8, 1, 1]", "empty output [1, 8, 0, 0]",
                "the 2x2 window is larger than the 1x1 input"});
  // A pool window larger than its input.
  expect_parts(spec_error("pool(29) flatten linear(3)", {1, 28, 28}),
               {"layer 0 'pool(29)'", "input [1, 1, 28, 28]", "empty output [1, 1, 0, 0]", "29x29 window"});
  // A conv kernel larger than its input, padded or not; with a stride too (truncation again).
  expect_parts(spec_error("conv(8,30) flatten linear(3)", {1, 28, 28}),
               {"layer 0 'conv(8,30)'", "input [1, 1, 28, 28]", "empty output [1, 8, 0, 0]", "30x30 kernel"});
  expect_parts(spec_error("relu conv(4,5,p1) flatten linear(3)", {2, 2, 2}),
               {"layer 1 'conv(4,5,p1)'", "input [1, 2, 2, 2]", "[1, 4, 0, 0]", "(4x4 with padding 1)"});
  expect_parts(spec_error("conv(4,3,s3) flatten linear(3)", {1, 1, 1}),
               {"layer 0 'conv(4,3,s3)'", "input [1, 1, 1, 1]", "empty output [1, 4, 0, 0]"});
  // Only one side too small still collapses.
  expect_parts(spec_error("pool(3) flatten linear(3)", {1, 2, 9}), {"layer 0 'pool(3)'", "[1, 1, 0, 3]"});
  // A view that does not fit names the layer too.
  expect_parts(spec_error("conv(4,3,p1) view(-1,100) linear(3)", {1, 8, 8}),
               {"layer 1 'view(-1,100)'", "[1, 4, 8, 8]", "[-1, 100]"});
  // Bad layer arguments name the layer as written.
  expect_parts(spec_error("conv(4,3) pool(0) flatten linear(3)", {1, 8, 8}), {"layer 1 'pool(0)'"});
  // An empty input.
  expect_parts(spec_error("flatten linear(3)", {1, 0, 8}), {"input shape [1, 0, 8] is empty"});
  // Shapes that just fit are fine: 2x2 pooled by 2 is 1x1.
  EXPECT_EQ(spec_error("pool(2) pool(2) flatten linear(3)", {1, 4, 4}), "no error");
}

// Networks built by hand (not from a spec, so nothing is inferred) are checked when the
// Model is built, naming the layer by index, name and description, and the shapes.
TEST(ModelShapes, LayersThatDoNotFitAreRefusedWhenTheModelIsBuilt) {
  auto message = [](std::unique_ptr<Sequential> net, const Shape& input) {
    try {
      Model m(std::move(net), input);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  {  // a linear whose in_features do not match: 4 x 8 x 8 = 256 features, not 100
    auto net = std::make_unique<Sequential>();
    net->add("c1", std::make_unique<Conv2d>(1, 4, 3, 1, 1)).add(std::make_unique<Flatten>());
    net->add("fc", std::make_unique<Linear>(100, 10));
    expect_parts(message(std::move(net), {1, 8, 8}),
                 {"layer 2 'fc' (linear(100->10))", "input [1, 256] has 256 features", "takes 100", "[1, 10]"});
  }
  {  // a conv kernel larger than what is left after pooling: 6 -> 4 -> 2, then 3x3
    auto net = std::make_unique<Sequential>();
    net->add("c1", std::make_unique<Conv2d>(1, 4, 3)).add(std::make_unique<ReLU>()).add(std::make_unique<MaxPool2d>(2));
    net->add("c2", std::make_unique<Conv2d>(4, 4, 3)).add(std::make_unique<Flatten>());
    net->add("fc", std::make_unique<Linear>(4, 10));
    expect_parts(message(std::move(net), {1, 6, 6}),
                 {"layer 3 'c2' (conv(4->4, k3, s1, p0))", "input [1, 4, 2, 2]", "empty output [1, 4, 0, 0]",
                  "3x3 kernel is larger than the 2x2 input"});
  }
  {  // channels that do not match
    auto net = std::make_unique<Sequential>();
    net->add("c1", std::make_unique<Conv2d>(3, 4, 3, 1, 1)).add(std::make_unique<Flatten>());
    expect_parts(message(std::move(net), {1, 8, 8}), {"layer 0 'c1'", "input [1, 1, 8, 8] has 1 channels", "takes 3"});
  }
  {  // a pool that collapses 1x1 (unnamed children are named by index, so just "layer 1")
    auto net = std::make_unique<Sequential>();
    net->add(std::make_unique<MaxPool2d>(2)).add(std::make_unique<MaxPool2d>(2)).add(std::make_unique<Flatten>());
    expect_parts(message(std::move(net), {1, 3, 3}), {"layer 1 (pool(k2, s2, p0))", "input [1, 1, 1, 1]",
                                                      "empty output [1, 1, 0, 0]"});
  }
  {  // an empty input shape
    auto net = std::make_unique<Sequential>();
    net->add(std::make_unique<Flatten>()).add(std::make_unique<Linear>(1, 2));
    expect_parts(message(std::move(net), {1, 0, 1}), {"input shape [1, 0, 1] is empty"});
  }
}

TEST(ModelShapes, AnyInputRankAndPerTokenOutputs) {
  // [N, 12] values viewed as 3 tokens of 4 classes: the model's output is per token.
  auto net = std::make_unique<Sequential>();
  net->add(std::make_unique<View>(Shape{-1, 3, 4})).add(std::make_unique<LogSoftmax>());
  Model m(std::move(net), {12});
  EXPECT_EQ(m.output_shape(), (Shape{3, 4}));
  EXPECT_EQ(m.num_classes(), 4);
  EXPECT_FALSE(m.takes_token_ids());
  const auto x = testing::random_vector<float>(2 * 12, 9);
  Tensor input = Tensor::from_vector(x, {2, 12});
  ASSERT_EQ(m.forward_logits(input).shape(), (Shape{2, 3, 4}));
  auto logp = m.forward(input).to_vector<float>();
  ASSERT_EQ(logp.size(), x.size());
  for (size_t row = 0; row < 6; ++row) {  // log_softmax over the LAST dim: each token's 4 classes
    double max = x[row * 4], total = 0;
    for (size_t c = 1; c < 4; ++c) max = std::max(max, double(x[row * 4 + c]));
    for (size_t c = 0; c < 4; ++c) total += std::exp(double(x[row * 4 + c]) - max);
    for (size_t c = 0; c < 4; ++c) {
      EXPECT_NEAR(logp[row * 4 + c], double(x[row * 4 + c]) - max - std::log(total), 1e-6) << row << " " << c;
    }
  }
}

TEST(ModelShapes, LinearActsOnTheLastDimensionOfAnyLeadingOnes) {
  Linear fc(4, 3);
  EXPECT_EQ(fc.output_shape({2, 5, 4}), (Shape{2, 5, 3}));
  EXPECT_EQ(fc.output_shape({2, 6, 5, 4}), (Shape{2, 6, 5, 3}));
  expect_parts(testing::error_of([&] { fc.output_shape({2, 5, 7}); }),
               {"input [2, 5, 7] has 7 features", "takes 4", "output [2, 5, 3]"});
  // A layer spec gives per-token logits from per-token features: [N, T, F] -> [N, T, C].
  Model m(parse_layer_spec("linear(8) relu linear(3)", {5, 4}), {5, 4});
  EXPECT_EQ(m.output_shape(), (Shape{5, 3}));
  EXPECT_EQ(m.num_classes(), 3);
  Tensor x = Tensor::from_vector(testing::random_vector<float>(2 * 5 * 4, 3), {2, 5, 4});
  EXPECT_EQ(m.forward(x).shape(), (Shape{2, 5, 3}));
  // Token by token, the model is the same network on [N * T, F] rows.
  const FlatParameters& p = m.parameters();
  Tensor rows = x.view({10, 4});
  Tensor hidden = ops::relu(ops::linear(rows, p.param(0), p.param(1)));
  EXPECT_EQ(m.forward_logits(x).to_vector<float>(), ops::linear(hidden, p.param(2), p.param(3)).to_vector<float>());
  // An image-shaped input to a spec's linear is still the forgotten flatten.
  EXPECT_NE(spec_error("conv(4,3) linear(10)", {3, 8, 8}).find("add flatten before it"), std::string::npos);
}

// Records the positions it is given (what dropout keys its masks with).
class PositionProbe : public Module {
 public:
  explicit PositionProbe(std::vector<BatchPosition>* seen) : seen_(seen) {}
  Tensor forward(const Tensor& x) override { return x; }
  Shape output_shape(const Shape& input) const override { return input; }
  std::string describe() const override { return "probe"; }
  std::unique_ptr<Module> clone() const override { return std::make_unique<PositionProbe>(seen_); }
  void set_batch_position(const BatchPosition& position) override { seen_->push_back(position); }

 private:
  std::vector<BatchPosition>* seen_;
};

TEST(ModelRandomStreams, EveryModuleHasItsOwnKeyAndAReplicaTheSameKeys) {
  std::vector<BatchPosition> seen;
  auto make = [&](uint64_t seed) {
    auto net = std::make_unique<Sequential>();
    net->add(std::make_unique<PositionProbe>(&seen)).add(std::make_unique<Linear>(4, 3));
    net->add(std::make_unique<PositionProbe>(&seen));
    return std::make_unique<Model>(std::move(net), Shape{4}, Device::cpu(), DType::Float32, seed);
  };
  auto model = make(5);
  model->set_batch_position(7, 96);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_NE(seen[0].seed, seen[1].seed);  // two dropouts never share a mask
  for (const BatchPosition& p : seen) {
    EXPECT_EQ(p.step, 7u);
    EXPECT_EQ(p.first_sample, 96);
  }
  model->replicate(Device::cpu())->set_batch_position(7, 96);
  make(6)->set_batch_position(7, 96);
  ASSERT_EQ(seen.size(), 6u);
  EXPECT_EQ(seen[2].seed, seen[0].seed);  // a replica draws what the root would
  EXPECT_EQ(seen[3].seed, seen[1].seed);
  EXPECT_NE(seen[4].seed, seen[0].seed);  // another --seed, other masks
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
}  // namespace dpcore::layers
