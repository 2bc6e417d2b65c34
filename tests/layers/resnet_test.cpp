// Batch norm as a layer, the residual block and the CIFAR ResNets: torchvision's names and
// shapes, initialisation, train and eval modes, buffers in weight files, the layer spec.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "engine/autograd.h"
#include "layers/resnet.h"
#include "layers/weights.h"
#include "layers/zoo.h"
#include "support/test_support.h"
#include "train/step/step.h"

namespace dpcore::layers {
namespace {

Model build(const std::string& name, const Shape& input = {}, uint64_t seed = 0, DType dtype = DType::Float32,
            int64_t classes = 10) {
  ModelDef def = reference_model(name, input, classes);
  return Model(std::move(def.net), def.input_shape, Device::cpu(), dtype, seed);
}

template <class Entries>
int64_t count(const Entries& entries) {
  int64_t n = 0;
  for (const auto& e : entries) n += e.numel;
  return n;
}

template <class Entries>
std::vector<std::string> names(const Entries& entries) {
  std::vector<std::string> out;
  for (const auto& e : entries) out.push_back(e.name);
  return out;
}

Tensor images(int64_t n, const Shape& sample, uint64_t seed) {
  auto x = testing::random_vector<float>(size_t(n * shape_numel(sample)), seed);
  Shape shape{n};
  shape.insert(shape.end(), sample.begin(), sample.end());
  return Tensor::from_vector(x, shape);
}

std::vector<float> buffer_values(const Model& m, const std::string& name) {
  const auto& e = m.buffers().entry(name);
  auto all = m.buffers().values().to_vector<float>();
  return {all.begin() + e.offset, all.begin() + e.offset + e.numel};
}

TEST(ResNet, Resnet8HasTorchvisionsNamesAndPyTorchsParameterCount) {
  Model m = build("resnet8");
  // He et al.'s resnet8 with projection shortcuts on 1-channel images: 77,754 parameters,
  // the count of the equivalent PyTorch module (bench/torch_models.py).
  EXPECT_EQ(count(m.parameters().entries()), 77754);
  std::vector<std::string> expected = {"conv1.weight", "bn1.weight", "bn1.bias"};
  auto block = [&](const std::string& b, bool projection) {
    for (const char* p : {".conv1.weight", ".bn1.weight", ".bn1.bias", ".conv2.weight", ".bn2.weight", ".bn2.bias"})
      expected.push_back(b + p);
    if (projection)
      for (const char* p : {".downsample.0.weight", ".downsample.1.weight", ".downsample.1.bias"}) expected.push_back(b + p);
  };
  block("layer1.0", false), block("layer2.0", true), block("layer3.0", true);
  expected.push_back("fc.weight"), expected.push_back("fc.bias");
  EXPECT_EQ(names(m.parameters().entries()), expected);
  EXPECT_EQ(m.parameters().entry("layer2.0.downsample.0.weight").shape, (Shape{32, 16, 1, 1}));
  EXPECT_EQ(m.parameters().entry("layer3.0.conv1.weight").shape, (Shape{64, 32, 3, 3}));

  // Three buffers per batch norm, in PyTorch's order; num_batches_tracked is a scalar.
  EXPECT_EQ(m.buffers().entries().size(), 3u * 9u);
  EXPECT_EQ(m.buffers().entries()[0].name, "bn1.running_mean");
  EXPECT_EQ(m.buffers().entries()[1].name, "bn1.running_var");
  EXPECT_EQ(m.buffers().entries()[2].name, "bn1.num_batches_tracked");
  EXPECT_EQ(m.buffers().entry("bn1.num_batches_tracked").shape, Shape{});
  EXPECT_TRUE(m.buffers().entry("layer3.0.downsample.1.num_batches_tracked").counter);
  EXPECT_EQ(m.buffers().entry("layer3.0.downsample.1.running_var").shape, Shape{64});
}

TEST(ResNet, StagesHaveTheBlocksAndWidthsOfTheName) {
  Model r20 = build("resnet20");
  EXPECT_NO_THROW(r20.parameters().entry("layer3.2.bn2.weight"));
  EXPECT_THROW(r20.parameters().entry("layer3.3.bn2.weight"), Error);
  EXPECT_THROW(r20.parameters().entry("layer1.0.downsample.0.weight"), Error);  // identity: same shape
  EXPECT_THROW(r20.parameters().entry("layer2.1.downsample.0.weight"), Error);  // only the first block projects
  // 3-channel 32x32 images (CIFAR-10): only conv1 changes, and the output is still [N, 10].
  Model cifar = build("resnet8", {3, 32, 32});
  EXPECT_EQ(cifar.parameters().entry("conv1.weight").shape, (Shape{16, 3, 3, 3}));
  Tensor logp = cifar.forward(images(2, {3, 32, 32}, 1));
  EXPECT_EQ(logp.shape(), (Shape{2, 10}));
  EXPECT_THROW(build("resnet8", {1, 28}), Error);
}

TEST(ResNet, InitialisationIsTorchvisions) {
  Model a = build("resnet8", {}, 5), b = build("resnet8", {}, 5), c = build("resnet8", {}, 6);
  EXPECT_EQ(a.parameters().values().to_vector<float>(), b.parameters().values().to_vector<float>());
  EXPECT_NE(a.parameters().values().to_vector<float>(), c.parameters().values().to_vector<float>());
  auto v = a.parameters().values().to_vector<float>();
  // kaiming_normal_(mode="fan_out"): N(0, 2 / (64 * 3 * 3)) for layer3's 36,864 weights.
  // The sample standard deviation of n normal draws is within 5 standard errors
  // (sigma / sqrt(2n), 0.37% of sigma here) of sigma but for a one-in-a-million draw.
  const auto& w = a.parameters().entry("layer3.0.conv2.weight");
  double sum = 0, squares = 0;
  for (int64_t i = 0; i < w.numel; ++i) sum += v[size_t(w.offset + i)], squares += double(v[size_t(w.offset + i)]) * v[size_t(w.offset + i)];
  const double sigma = std::sqrt(2.0 / (64 * 9)), n = double(w.numel);
  const double mean = sum / n, sd = std::sqrt(squares / n - mean * mean);
  EXPECT_NEAR(sd, sigma, 5 * sigma / std::sqrt(2 * n));
  EXPECT_NEAR(mean, 0.0, 5 * sigma / std::sqrt(n));
  // Batch norm: weight 1, bias 0; running mean 0, variance 1, no batches counted.
  const auto& bn_w = a.parameters().entry("layer2.0.bn1.weight");
  const auto& bn_b = a.parameters().entry("layer2.0.bn1.bias");
  for (int64_t i = 0; i < 32; ++i) {
    EXPECT_EQ(v[size_t(bn_w.offset + i)], 1.0f);
    EXPECT_EQ(v[size_t(bn_b.offset + i)], 0.0f);
  }
  EXPECT_EQ(buffer_values(a, "layer2.0.bn1.running_var"), std::vector<float>(32, 1.0f));
  EXPECT_EQ(buffer_values(a, "layer2.0.bn1.running_mean"), std::vector<float>(32, 0.0f));
  EXPECT_EQ(buffer_values(a, "bn1.num_batches_tracked"), std::vector<float>{0.0f});
}

TEST(ResNet, TrainingModeUpdatesRunningStatisticsAndEvalModeUsesThem) {
  Model m = build("resnet8", {1, 12, 12}, 3);
  Tensor x = images(4, {1, 12, 12}, 7);
  ASSERT_TRUE(m.is_training());
  Tensor train_out = m.forward(x);
  EXPECT_EQ(buffer_values(m, "bn1.num_batches_tracked"), std::vector<float>{1.0f});
  EXPECT_NE(buffer_values(m, "bn1.running_mean"), std::vector<float>(16, 0.0f));
  m.forward(x);
  EXPECT_EQ(buffer_values(m, "layer3.0.bn2.num_batches_tracked"), std::vector<float>{2.0f});

  // Eval: the running statistics, nothing updated; the same input gives other outputs.
  m.eval();
  EXPECT_FALSE(m.is_training());
  auto before = m.buffers().values().to_vector<float>();
  Tensor eval_out = m.forward(x);
  EXPECT_EQ(m.buffers().values().to_vector<float>(), before);
  EXPECT_NE(eval_out.to_vector<float>(), train_out.to_vector<float>());
  // In eval mode each sample's output does not depend on the others in the batch.
  Tensor first = m.forward(x.narrow0(0, 1));
  auto whole = eval_out.to_vector<float>(), alone = first.to_vector<float>();
  for (size_t i = 0; i < alone.size(); ++i) EXPECT_NEAR(alone[i], whole[i], 1e-5) << i;
  m.train();
  EXPECT_TRUE(m.is_training());
}

TEST(ResNet, EvaluationRunsInEvalModeAndRestoresTheMode) {
  Model m = build("resnet8", {1, 12, 12}, 3);
  Tensor x = images(4, {1, 12, 12}, 9);
  Tensor y = Tensor::from_vector<int64_t>({1, 2, 3, 4}, {4});
  auto before = m.buffers().values().to_vector<float>();
  train::EvalResult r = train::evaluate_batch(m, x, y);
  EXPECT_EQ(m.buffers().values().to_vector<float>(), before);  // eval mode: nothing counted
  EXPECT_TRUE(m.is_training());
  m.eval();
  // The summed NLL in float64 over the float32 log-probabilities, sample by sample.
  double expected = 0;
  {
    autograd::NoGradGuard no_grad;
    const auto logp = m.forward(x).to_vector<float>();
    const auto targets = y.to_vector<int64_t>();
    for (size_t i = 0; i < targets.size(); ++i) expected -= double(logp[i * size_t(m.num_classes()) + size_t(targets[i])]);
  }
  EXPECT_EQ(r.loss_sum, expected);
  EXPECT_EQ(r.targets, 4);
}

TEST(ResNet, ReplicaCopiesBuffersAndMode) {
  Model m = build("resnet8", {1, 12, 12}, 3);
  m.forward(images(4, {1, 12, 12}, 7));
  m.eval();
  auto copy = m.replicate(Device::cpu());
  EXPECT_EQ(copy->buffers().values().to_vector<float>(), m.buffers().values().to_vector<float>());
  EXPECT_EQ(copy->parameters().values().to_vector<float>(), m.parameters().values().to_vector<float>());
  EXPECT_FALSE(copy->is_training());
}

TEST(ResNet, WeightsFilesHoldBuffersUnderPyTorchsNames) {
  Model m = build("resnet8", {1, 12, 12}, 3);
  for (int i = 0; i < 3; ++i) m.forward(images(4, {1, 12, 12}, uint64_t(i)));
  testing::TempDir dir;
  const std::string path = dir.path() + "/r8.safetensors";
  save_weights(m, path);
  io::SafetensorsFile file = io::load_safetensors(path);
  EXPECT_EQ(file.at("layer1.0.bn2.num_batches_tracked").dtype, DType::Int64);
  EXPECT_EQ(*file.at("layer1.0.bn2.num_batches_tracked").values<int64_t>(), 3);
  EXPECT_EQ(file.at("layer1.0.bn2.running_var").dtype, DType::Float32);
  EXPECT_EQ(file.tensors().size(), m.parameters().entries().size() + m.buffers().entries().size());

  Model back = build("resnet8", {1, 12, 12}, 99);
  load_weights(back, path);
  EXPECT_EQ(back.parameters().values().to_vector<float>(), m.parameters().values().to_vector<float>());
  EXPECT_EQ(back.buffers().values().to_vector<float>(), m.buffers().values().to_vector<float>());

  // Strict: a file without the buffers (weights of a model without batch norm state) fails,
  // naming the missing tensor.
  std::vector<io::TensorView> params_only;
  HostState state(m);
  for (const auto& v : state.views()) {
    if (v.name.find("running_mean") == std::string::npos) params_only.push_back(v);
  }
  io::save_safetensors(path, params_only, {});
  try {
    load_weights(back, path);
    FAIL() << "a file without running_mean loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no tensor 'bn1.running_mean' for the model's buffer"), std::string::npos)
        << e.what();
  }
}

// torchvision.models.resnet18/34/50 with 1000 classes: the parameter counts torchvision
// reports (sum(p.numel() for p in model.parameters())), its names and shapes; the names'
// full list is checked against torchvision itself in torchvision_resnet_test.cpp.
TEST(ImageNetResNet, ParameterCountsNamesAndShapesAreTorchvisions) {
  const struct {
    const char* name;
    int64_t parameters, batch_norms;
  } cases[] = {{"resnet18", 11689512, 20}, {"resnet34", 21797672, 36}, {"resnet50", 25557032, 53}};
  std::vector<std::unique_ptr<Model>> models;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    ModelDef def = reference_model(c.name, {3, 32, 32}, 1000);
    models.push_back(std::make_unique<Model>(std::move(def.net), def.input_shape));
    const Model& m = *models.back();
    EXPECT_EQ(count(m.parameters().entries()), c.parameters);
    EXPECT_EQ(int64_t(m.buffers().entries().size()), 3 * c.batch_norms);
    EXPECT_EQ(m.parameters().entries()[0].name, "conv1.weight");
    EXPECT_EQ(m.parameters().entry("conv1.weight").shape, (Shape{64, 3, 7, 7}));
    EXPECT_EQ(m.parameters().entries().back().name, "fc.bias");
    EXPECT_TRUE(m.buffers().entry("layer4.1.bn2.num_batches_tracked").counter);
    EXPECT_NO_THROW(m.parameters().entry("layer2.0.downsample.1.weight"));
    EXPECT_THROW(m.parameters().entry("layer2.1.downsample.0.weight"), Error);
  }
  const Model& r18 = *models[0];
  EXPECT_THROW(r18.parameters().entry("layer1.0.downsample.0.weight"), Error);  // 64 -> 64, stride 1
  EXPECT_THROW(r18.parameters().entry("layer1.0.conv3.weight"), Error);
  EXPECT_EQ(r18.parameters().entry("layer4.1.conv2.weight").shape, (Shape{512, 512, 3, 3}));
  EXPECT_EQ(r18.parameters().entry("fc.weight").shape, (Shape{1000, 512}));

  const Model& r50 = *models[2];
  const std::vector<std::string> block = {"layer2.0.conv1.weight", "layer2.0.bn1.weight", "layer2.0.bn1.bias",
                                          "layer2.0.conv2.weight", "layer2.0.bn2.weight", "layer2.0.bn2.bias",
                                          "layer2.0.conv3.weight", "layer2.0.bn3.weight", "layer2.0.bn3.bias",
                                          "layer2.0.downsample.0.weight", "layer2.0.downsample.1.weight",
                                          "layer2.0.downsample.1.bias"};
  const auto all = names(r50.parameters().entries());
  auto first = std::find(all.begin(), all.end(), block[0]);
  ASSERT_NE(first, all.end());
  EXPECT_EQ(std::vector<std::string>(first, first + ptrdiff_t(block.size())), block);
  // The bottleneck: 1x1 down to the width, 3x3 at the width, 1x1 up to 4x the width.
  EXPECT_EQ(r50.parameters().entry("layer2.0.conv1.weight").shape, (Shape{128, 256, 1, 1}));
  EXPECT_EQ(r50.parameters().entry("layer2.0.conv2.weight").shape, (Shape{128, 128, 3, 3}));
  EXPECT_EQ(r50.parameters().entry("layer2.0.conv3.weight").shape, (Shape{512, 128, 1, 1}));
  EXPECT_EQ(r50.parameters().entry("layer1.0.downsample.0.weight").shape, (Shape{256, 64, 1, 1}));
  EXPECT_EQ(r50.parameters().entry("fc.weight").shape, (Shape{1000, 2048}));
  EXPECT_EQ(r50.buffers().entry("layer4.2.bn3.running_mean").shape, Shape{2048});
}

TEST(ImageNetResNet, ChannelsAndClassesComeFromTheDataAndAnyImageSizeWorks) {
  // 1-channel 32x32 images in 7 classes: conv1 and fc follow, the output is [N, 7].
  Model m = build("resnet18", {1, 32, 32}, 0, DType::Float32, 7);
  EXPECT_EQ(m.parameters().entry("conv1.weight").shape, (Shape{64, 1, 7, 7}));
  EXPECT_EQ(m.parameters().entry("fc.weight").shape, (Shape{7, 512}));
  EXPECT_EQ(m.num_classes(), 7);
  EXPECT_EQ(m.forward(images(2, {1, 32, 32}, 1)).shape(), (Shape{2, 7}));
  // Without a shape: torchvision's 3x224x224.
  EXPECT_EQ(reference_model("resnet50").input_shape, (Shape{3, 224, 224}));
  // Strided down to 1x1 from layer3 on: still [N, classes] (the paddings keep every map
  // at least 1x1, as in PyTorch).
  EXPECT_EQ(build("resnet50", {3, 17, 9}).forward(images(2, {3, 17, 9}, 2)).shape(), (Shape{2, 10}));
  EXPECT_THROW(build("resnet50", {3, 32}), Error);
  EXPECT_THROW(torchvision_resnet(101), Error);
}

TEST(ImageNetResNet, InitialisationIsTorchvisions) {
  Model m = build("resnet50", {3, 32, 32}, 5, DType::Float32, 1000);
  const auto v = m.parameters().values().to_vector<float>();
  // kaiming_normal_(fan_out, relu) on conv1: N(0, 2 / (64 * 7 * 7)); the sample standard
  // deviation of n draws is within 5 standard errors (sigma / sqrt(2n)) but for a
  // one-in-a-million draw.
  const auto& w = m.parameters().entry("conv1.weight");
  double squares = 0;
  for (int64_t i = 0; i < w.numel; ++i) squares += double(v[size_t(w.offset + i)]) * v[size_t(w.offset + i)];
  const double sigma = std::sqrt(2.0 / (64 * 49)), n = double(w.numel);
  EXPECT_NEAR(std::sqrt(squares / n), sigma, 5 * sigma / std::sqrt(2 * n));
  // fc as nn.Linear: U(-1/sqrt(2048), 1/sqrt(2048)) for weight and bias; over 2M draws the
  // largest |w| is within 1e-5 of the bound.
  const auto& fc = m.parameters().entry("fc.weight");
  float largest = 0;
  for (int64_t i = 0; i < fc.numel; ++i) largest = std::max(largest, std::abs(v[size_t(fc.offset + i)]));
  const float bound = float(1 / std::sqrt(2048.0));  // rounding to float32 keeps |w| <= it
  EXPECT_LE(largest, bound);
  EXPECT_GE(largest, bound - 1e-5f);
  // Batch norm weight 1 and bias 0, also the last of each block (zero_init_residual False).
  const auto& bn3 = m.parameters().entry("layer3.5.bn3.weight");
  for (int64_t i = 0; i < bn3.numel; ++i) ASSERT_EQ(v[size_t(bn3.offset + i)], 1.0f);
  const auto& bias = m.parameters().entry("layer3.5.bn3.bias");
  for (int64_t i = 0; i < bias.numel; ++i) ASSERT_EQ(v[size_t(bias.offset + i)], 0.0f);
}

TEST(ResNet, LayerSpecBuildsTheSameNetwork) {
  const std::string spec = "conv(16,3,p1,nobias) bn relu res(16) res(32,s2) res(64,s2) gap flatten linear(10)";
  auto net = parse_layer_spec(spec, {1, 12, 12});
  Model from_spec(std::move(net), {1, 12, 12});
  Model zoo = build("resnet8", {1, 12, 12}, 4);
  // Same layout, index names instead of torchvision's: copying the flat buffers makes them
  // the same model.
  ASSERT_EQ(from_spec.parameters().total(), zoo.parameters().total());
  ASSERT_EQ(from_spec.buffers().total(), zoo.buffers().total());
  EXPECT_EQ(from_spec.parameters().entries()[0].name, "0.weight");
  EXPECT_EQ(from_spec.parameters().entry("4.downsample.0.weight").shape, (Shape{32, 16, 1, 1}));
  from_spec.parameters().values().copy_(zoo.parameters().values());
  Tensor x = images(3, {1, 12, 12}, 5);
  EXPECT_EQ(from_spec.forward(x).to_vector<float>(), zoo.forward(x).to_vector<float>());
  EXPECT_EQ(from_spec.buffers().values().to_vector<float>(), zoo.buffers().values().to_vector<float>());
}

TEST(ResNet, LayerSpecErrorsNameTheLayer) {
  auto message = [](const std::string& spec) {
    try {
      parse_layer_spec(spec, {1, 12, 12});
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("conv(8,3) flatten bn linear(10)").find("bn needs an image-shaped input"), std::string::npos);
  EXPECT_NE(message("res(16,p1) gap flatten linear(10)").find("res takes res(OUT[,sS])"), std::string::npos);
  EXPECT_NE(message("bn(3) flatten linear(10)").find("bn takes no arguments"), std::string::npos);
  EXPECT_NE(message("pool(2,nobias) flatten linear(10)").find("bad number 'nobias'"), std::string::npos);
  EXPECT_NE(message("flatten res(8) linear(10)").find("layer 1 'res(8)': res takes"), std::string::npos)
      << message("flatten res(8) linear(10)");
}

}  // namespace
}  // namespace dpcore::layers
