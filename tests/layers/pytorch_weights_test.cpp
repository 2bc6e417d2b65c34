// ResNet weights move both ways between dpcore and PyTorch (issue 10), batch norm's buffers
// included, checked with Debian's /usr/bin/python3 and its python3-torch:
//   * dpcore -> PyTorch: resnet8 trained a few SGD steps by dpcore in training mode (so the
//     running statistics and batch counts have moved), saved with its eval-mode
//     log-probabilities; `scripts/make_fixtures.py --check-load` loads the file with strict
//     load_state_dict and reproduces them in eval mode to 1e-5;
//   * PyTorch -> dpcore: `scripts/make_fixtures.py --write-state` trains the PyTorch module
//     3 SGD steps and saves its state_dict with an input and its eval-mode log-probabilities;
//     dpcore loads it and reproduces them to 1e-5.
// Both for 1x28x28 inputs (Fashion-MNIST, the default) and 3x32x32 (CIFAR-10).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <sstream>

#include "engine/sgd.h"
#include "engine/autograd.h"
#include "engine/io/safetensors.h"
#include "layers/weights.h"
#include "layers/zoo.h"
#include "support/test_support.h"
#include "train/step/step.h"

namespace dpcore::layers {
namespace {

using namespace dpcore::testing;

constexpr double kTolerance = 1e-5;
constexpr int64_t kBatch = 6;

Tensor images(const Shape& sample, uint64_t seed) {
  Shape shape{kBatch};
  shape.insert(shape.end(), sample.begin(), sample.end());
  return Tensor::from_vector(random_vector<float>(size_t(shape_numel(shape)), seed), shape);
}

Tensor labels(uint64_t seed) {
  std::vector<int64_t> y(kBatch);
  for (size_t i = 0; i < y.size(); ++i) y[i] = int64_t(i * 7 + seed) % 10;
  return Tensor::from_vector(y, {kBatch});
}

// max |got - ref| / max |ref|, as the parity tests measure.
double relative_error(const std::vector<float>& got, const io::TensorRecord& ref) {
  return scaled_difference(got.data(), ref.values<float>(), got.size());
}

std::string shape_text(const Shape& s) {
  std::string out;
  for (int64_t d : s) out += (out.empty() ? "" : "x") + std::to_string(d);
  return out;
}

class PyTorchWeights : public ::testing::TestWithParam<Shape> {
 protected:
  void SetUp() override {
    if (!python_has_torch()) GTEST_SKIP() << kTorchPython << " cannot import torch (scripts/install-deps.sh installs python3-torch)";
  }

  std::unique_ptr<Model> resnet8(uint64_t seed) {
    ModelDef def = reference_model("resnet8", GetParam());
    return std::make_unique<Model>(std::move(def.net), def.input_shape, Device::cpu(), DType::Float32, seed);
  }

  // Runs scripts/make_fixtures.py with `args` and this input shape; returns its exit status
  // and keeps its output for messages.
  int run_script(const std::string& args) {
    const Shape& s = GetParam();
    ScriptResult r = run_python_script("scripts/make_fixtures.py", args + " --input-shape " + std::to_string(s[0]) +
                                                                      "," + std::to_string(s[1]) + "," +
                                                                      std::to_string(s[2]));
    output = r.output;
    std::cout << output;
    return r.status;
  }

  // resnet8 trained 3 SGD steps by dpcore in training mode, then in eval mode: its state,
  // `input` and the eval-mode log-probabilities `logits` on it, in one file. `edit` may
  // change the tensor list before saving.
  std::string write_trained_resnet8(const std::function<void(std::vector<io::TensorView>&)>& edit = nullptr) {
    auto m = resnet8(7);
    Sgd sgd(m->parameters(), SgdConfig{0.1, 0.9, 0.0, 0.01, true});
    Tensor x = images(GetParam(), 1), y = labels(2);
    for (int step = 0; step < 3; ++step) train::train_step(*m, sgd, x, y, 1);
    // Every running statistic has left its default, and every batch count is 3.
    const auto buffers = m->buffers().values().to_vector<float>();
    for (const auto& e : m->buffers().entries()) {
      bool moved = false;
      for (int64_t i = 0; i < e.numel; ++i) moved = moved || buffers[size_t(e.offset + i)] != float(e.initial);
      EXPECT_TRUE(moved) << e.name << " is still at its default after 3 training steps";
      if (e.counter) EXPECT_EQ(buffers[size_t(e.offset)], 3.0f) << e.name;
    }

    m->eval();
    Tensor input = images(GetParam(), 3);
    autograd::NoGradGuard no_grad;
    input_values = input.to_vector<float>();
    logit_values = m->forward(input).to_vector<float>();

    HostState state(*m);
    std::vector<io::TensorView> views = state.views();
    views.push_back({"input", DType::Float32, input.shape(), input_values.data(), input_values.size() * sizeof(float)});
    views.push_back({"logits", DType::Float32, Shape{kBatch, 10}, logit_values.data(), logit_values.size() * sizeof(float)});
    if (edit) edit(views);
    const std::string path = dir.file("dpcore_resnet8.safetensors");
    io::save_safetensors(path, views, {{"written_by", "dpcore"}});
    return path;
  }

  TempDir dir;
  std::string output;
  std::vector<float> input_values, logit_values;
};

TEST_P(PyTorchWeights, DpcoreTrainedResnet8LoadsStrictlyIntoPyTorchWithTheSameEvalLogits) {
  const std::string path = write_trained_resnet8();
  EXPECT_EQ(run_script("--check-load '" + path + "' resnet8"), 0) << output;
  EXPECT_NE(output.find("loads into resnet8 (strict)"), std::string::npos) << output;
  EXPECT_NE(output.find("matches logits (eval mode)"), std::string::npos) << output;
}

TEST_P(PyTorchWeights, RunningStatisticsResetToTheDefaultsDoNotReproduceTheLogits) {
  // bn1's running mean and variance back to 0 and 1 (PyTorch's defaults): the file still
  // loads, but PyTorch's eval-mode output must differ, as it would if dpcore did not save
  // the running statistics or did not use them in eval mode.
  std::vector<float> zeros(16, 0.0f), ones(16, 1.0f);
  const std::string path = write_trained_resnet8([&](std::vector<io::TensorView>& views) {
    int reset = 0;
    for (auto& v : views) {
      if (v.name == "bn1.running_mean") v.data = zeros.data(), ++reset;
      if (v.name == "bn1.running_var") v.data = ones.data(), ++reset;
    }
    ASSERT_EQ(reset, 2);
  });
  EXPECT_NE(run_script("--check-load '" + path + "' resnet8"), 0) << output;
  EXPECT_NE(output.find("PyTorch's forward pass differs from the file's logits"), std::string::npos) << output;
}

TEST_P(PyTorchWeights, PyTorchTrainedResnet8LoadsIntoDpcoreWithTheSameEvalLogits) {
  const std::string path = dir.file("pytorch_resnet8.safetensors");
  ASSERT_EQ(run_script("--write-state '" + path + "' resnet8 --seed 3"), 0) << output;
  const io::SafetensorsFile file = io::load_safetensors(path);
  auto m = resnet8(0);

  // The path overload loads strictly: the file's extra tensors are refused, by name.
  try {
    load_weights(*m, path);
    ADD_FAILURE() << "load_weights(model, path) accepted a file with the extra tensor 'input'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unexpected tensor 'input'"), std::string::npos) << e.what();
  }

  load_weights(*m, file, "");
  // The buffers arrive exactly: running statistics bit for bit, batch counts 3 (int64 in
  // the file).
  const auto buffers = m->buffers().values().to_vector<float>();
  for (const auto& e : m->buffers().entries()) {
    const io::TensorRecord& t = file.at(e.name);
    if (e.counter) {
      ASSERT_EQ(t.dtype, DType::Int64) << e.name;
      EXPECT_EQ(*t.values<int64_t>(), 3) << e.name;
      EXPECT_EQ(buffers[size_t(e.offset)], 3.0f) << e.name;
      continue;
    }
    for (int64_t i = 0; i < e.numel; ++i) ASSERT_EQ(buffers[size_t(e.offset + i)], t.values<float>()[i]) << e.name << "[" << i << "]";
  }

  m->eval();
  const io::TensorRecord& input = file.at("input");
  ASSERT_EQ(input.shape, (Shape{kBatch, GetParam()[0], GetParam()[1], GetParam()[2]}));
  Tensor x = Tensor::from_vector(std::vector<float>(input.values<float>(), input.values<float>() + input.numel()), input.shape);
  autograd::NoGradGuard no_grad;
  const std::vector<float> got = m->forward(x).to_vector<float>();
  const io::TensorRecord& logits = file.at("logits");
  ASSERT_EQ(int64_t(got.size()), logits.numel());
  const double err = relative_error(got, logits);
  std::cout << "resnet8 " << shape_text(GetParam()) << " PyTorch -> dpcore eval logits: relative error " << err << " ("
            << err / kTolerance << " of the threshold)\n";
  EXPECT_LE(err, kTolerance);
}

INSTANTIATE_TEST_SUITE_P(Resnet8, PyTorchWeights, ::testing::Values(Shape{1, 28, 28}, Shape{3, 32, 32}),
                         [](const ::testing::TestParamInfo<Shape>& info) { return "Input" + shape_text(info.param); });

}  // namespace
}  // namespace dpcore::layers
