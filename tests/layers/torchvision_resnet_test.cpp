// dpcore's resnet18, resnet34 and resnet50 against torchvision's (Debian's python3-torchvision
// 0.14), one Python process for every case (tests/layers/torchvision_resnet.py):
//   * parity: the same weights (dpcore's initialisation, loaded strictly into torchvision)
//     and a batch of 2, one train-mode step: the logits, the cross-entropy loss, every
//     parameter's gradient, the running statistics and batch counts after it, then the
//     eval-mode logits with those statistics. resnet18 and resnet50 in float64 on 48x48
//     inputs to 1e-10; resnet50 in float32 once, on 64x64, against the float64 reference,
//     to the bounds said below. A smaller image than ImageNet's 224x224 runs the same code:
//     the same layers, kernels, strides and paddings, only over fewer positions (at 48 and
//     64 layer4 still sees a 2x2 map, so every 3x3 convolution has border positions and,
//     up to layer3, interior ones; 224 adds only more interior ones). Not 32x32: there
//     layer4's maps are 1x1, its batch norms normalise 2 values per channel, and the
//     problem is so ill-conditioned that two float64 runs of PyTorch itself (contiguous and
//     channels_last) differ by 1e-5 in resnet50's gradients; at 48x48 by 1.6e-12.
//   * weights both ways, for all three: dpcore's state after a train-mode pass loads into
//     torchvision.models.X() with load_state_dict(strict=True) and gives dpcore's eval-mode
//     log-probabilities; torchvision.models.X().state_dict() (1000 classes, its own
//     initialisation, running statistics moved by one batch) loads into dpcore with no
//     renaming and gives torchvision's.
// The suite's name keeps it out of the sanitizer stage (scripts/test.sh), as the other
// PyTorch interop tests: its time goes to the PyTorch process and to 25M-parameter models.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <memory>

#include "engine/autograd.h"
#include "engine/io/safetensors.h"
#include "engine/ops.h"
#include "layers/weights.h"
#include "layers/zoo.h"
#include "support/test_support.h"

namespace dpcore::layers {
namespace {

using namespace dpcore::testing;

constexpr int64_t kClasses = 10;
constexpr double kFloat64Tolerance = 1e-10;
// dpcore's float32 against the float64 reference: each tensor within 4 times the error
// PyTorch's own float32 makes on it (both sum the same products in different orders and
// blockings, so their rounding errors are of one size; how much the network amplifies
// them is the same for both and is what PyTorch's error measures), and never less than
// 64 float32 unit roundoffs (where PyTorch happened to round almost exactly).
double float32_bound(double pytorch_float32_error) {
  return std::max(4 * pytorch_float32_error, 64 * double(std::numeric_limits<float>::epsilon() / 2));
}
// Eval-mode log-probabilities of the weights moved either way, in float32, summed in
// different orders: relative to the largest, a few float32 roundings per layer over ~50
// layers stay well under 1e-5 (and a wrong weight or statistic moves them by whole units).
constexpr double kExportTolerance = 1e-5;

struct ParityCase {
  std::string model;
  DType dtype;
  int64_t size;  // the images are 3 x size x size
  std::string file() const { return model + (dtype == DType::Float64 ? "_f64" : "_f32"); }
};
const ParityCase kParityCases[] = {{"resnet18", DType::Float64, 48},
                                   {"resnet50", DType::Float64, 48},
                                   {"resnet50", DType::Float32, 64}};
const char* const kExportModels[] = {"resnet18", "resnet34", "resnet50"};

std::unique_ptr<Model> build(const std::string& name, DType dtype, int64_t size, int64_t classes, uint64_t seed) {
  ModelDef def = reference_model(name, {3, size, size}, classes);
  return std::make_unique<Model>(std::move(def.net), def.input_shape, Device::cpu(), dtype, seed);
}

Tensor images(DType dtype, int64_t size, uint64_t seed) {
  const Shape shape{2, 3, size, size};
  const size_t n = size_t(shape_numel(shape));
  if (dtype == DType::Float64) return Tensor::from_vector(random_vector<double>(n, seed), shape);
  return Tensor::from_vector(random_vector<float>(n, seed), shape);
}

const Tensor kTarget = Tensor::from_vector<int64_t>({3, 8}, {2});

// A float32 or float64 tensor's elements as doubles.
std::vector<double> as_doubles(const Tensor& t) {
  if (t.dtype() == DType::Float64) return t.to_vector<double>();
  const auto f = t.to_vector<float>();
  return {f.begin(), f.end()};
}

// One entry of a flat buffer already copied out.
template <class Entry>
std::vector<double> slice(const std::vector<double>& flat, const Entry& e) {
  return {flat.begin() + e.offset, flat.begin() + e.offset + e.numel};
}

std::vector<double> record_values(const io::TensorRecord& r) {
  if (r.dtype == DType::Float64) return {r.values<double>(), r.values<double>() + r.numel()};
  return {r.values<float>(), r.values<float>() + r.numel()};
}

// Writes every case's input file and returns the script's arguments for them.
std::string write_cases(const TempDir& dir) {
  std::string args;
  for (const ParityCase& c : kParityCases) {
    auto m = build(c.model, c.dtype, c.size, kClasses, 7);
    const Tensor x = images(c.dtype, c.size, 1);
    HostState state(*m);
    std::vector<io::TensorView> views = state.views();
    views.push_back({"input", c.dtype, x.shape(), x.raw_data(), size_t(x.numel()) * dtype_size(c.dtype)});
    views.push_back({"target", DType::Int64, kTarget.shape(), kTarget.raw_data(), 2 * sizeof(int64_t)});
    io::save_safetensors(dir.file(c.file() + ".in.safetensors"), views, {});
    args += " parity:" + c.model + ":" + dir.file(c.file() + ".in.safetensors") + ":" +
            dir.file(c.file() + ".torch.safetensors");
  }
  for (const char* name : kExportModels) {
    auto m = build(name, DType::Float32, 32, 1000, 11);
    {
      autograd::NoGradGuard no_grad;
      m->forward(images(DType::Float32, 32, 2));  // train mode: the running statistics move
      m->eval();
    }
    const Tensor x = images(DType::Float32, 32, 3);
    Tensor logp;
    {
      autograd::NoGradGuard no_grad;
      logp = m->forward(x);
    }
    HostState state(*m);
    std::vector<io::TensorView> views = state.views();
    views.push_back({"input", DType::Float32, x.shape(), x.raw_data(), size_t(x.numel()) * sizeof(float)});
    views.push_back({"logits", DType::Float32, logp.shape(), logp.raw_data(), size_t(logp.numel()) * sizeof(float)});
    const std::string base = dir.file(std::string(name));
    io::save_safetensors(base + ".dpcore.safetensors", views, {});
    args += std::string(" export:") + name + ":" + base + ".dpcore.safetensors:" + base + ".torchvision.safetensors";
  }
  return args;
}

// One parity case: dpcore's train-mode step and eval logits against the script's.
void expect_parity(const TempDir& dir, const ParityCase& c) {
  const io::SafetensorsFile ref = io::load_safetensors(dir.file(c.file() + ".torch.safetensors"));
  const bool f32 = c.dtype == DType::Float32;
  auto report = [&](const std::string& name, double err, double bound) {
    if (err > bound / 2 || name == "loss" || name == "logits" || name == "gradient")
      std::cout << c.file() << " " << name << ": relative error " << err << " (" << err / bound << " of the bound "
                << bound << ")\n";
    EXPECT_LE(err, bound) << c.file() << " " << name;
  };
  // A forward value (per tensor): to 1e-10 in float64, to float32_bound in float32.
  auto check = [&](const std::string& name, const std::vector<double>& got) {
    const std::vector<double> want = record_values(ref.at(name));
    ASSERT_EQ(got.size(), want.size()) << name;
    const std::vector<double> torch32 = f32 ? record_values(ref.at("float32." + name)) : std::vector<double>{};
    report(name, scaled_difference(got.data(), want.data(), got.size()),
           f32 ? float32_bound(scaled_difference(torch32.data(), want.data(), want.size())) : kFloat64Tolerance);
  };
  auto m = build(c.model, c.dtype, c.size, kClasses, 7);
  const Tensor x = images(c.dtype, c.size, 1);
  m->zero_grad();
  const Tensor logits = m->forward_logits(x);
  const Tensor loss = ops::cross_entropy(logits, kTarget);
  loss.backward();
  const std::vector<double> got_logits = as_doubles(logits), want_logits = record_values(ref.at("logits"));
  check("logits", got_logits);
  const double got_loss = as_doubles(loss)[0], want_loss = record_values(ref.at("loss"))[0];
  if (f32) {
    // The loss from the logits: d loss / d z_i = (softmax(z_i) - onehot(y_i)) / N has an
    // L1 norm of at most 2 / N, so |loss error| <= 2 max |logits error| (to first order),
    // plus float32's own rounding of the loss.
    double logits_error = 0;
    for (size_t i = 0; i < got_logits.size(); ++i)
      logits_error = std::max(logits_error, std::abs(got_logits[i] - want_logits[i]));
    const double u = std::numeric_limits<float>::epsilon() / 2;
    report("loss", std::abs(got_loss - want_loss) / std::abs(want_loss),
           (2 * logits_error + 64 * u * std::abs(want_loss)) / std::abs(want_loss));
  } else {
    report("loss", std::abs(got_loss - want_loss) / std::abs(want_loss), kFloat64Tolerance);
  }
  const std::vector<double> grads = as_doubles(m->parameters().grads());
  if (!f32) {
    for (const auto& e : m->parameters().entries()) check("grad." + e.name, slice(grads, e));
  } else {
    // In float32 a ReLU input or a max-pool window's two largest values within a few
    // roundings of each other decide differently in either framework, routing that
    // element's gradient elsewhere: an O(1) change of a few elements, which a per-tensor
    // largest error measures instead of the arithmetic (PyTorch's own float32 gradients
    // are up to 35% off the float64 ones per tensor on these inputs). So the gradient is
    // compared as a whole: ||g - g64|| / ||g64|| over every parameter, within 4 times
    // PyTorch's own float32 (the same decisions flip as often in either).
    double diff = 0, torch_diff = 0, norm = 0;
    for (const auto& e : m->parameters().entries()) {
      const std::vector<double> got = slice(grads, e), want = record_values(ref.at("grad." + e.name)),
                                torch32 = record_values(ref.at("float32.grad." + e.name));
      for (size_t i = 0; i < want.size(); ++i) {
        diff += (got[i] - want[i]) * (got[i] - want[i]);
        torch_diff += (torch32[i] - want[i]) * (torch32[i] - want[i]);
        norm += want[i] * want[i];
      }
    }
    report("gradient", std::sqrt(diff / norm), float32_bound(std::sqrt(torch_diff / norm)));
  }
  const std::vector<double> buffers = as_doubles(m->buffers().values());
  for (const auto& e : m->buffers().entries()) {
    const std::vector<double> got = slice(buffers, e);
    if (!e.counter) {
      check(e.name, got);
      continue;
    }
    const io::TensorRecord& count = ref.at(e.name);
    ASSERT_EQ(count.dtype, DType::Int64) << e.name;
    EXPECT_EQ(got[0], double(*count.values<int64_t>())) << e.name;
    EXPECT_EQ(got[0], 1.0) << e.name;
  }
  m->eval();
  autograd::NoGradGuard no_grad;
  check("eval_logits", as_doubles(m->forward_logits(x)));
}

// One test, so that one Python process serves every case (ctest runs each test of an
// executable in a process of its own).
TEST(TorchvisionResNet, TrainStepParityAndWeightsBothWays) {
  if (!python_has_torch()) GTEST_SKIP() << kTorchPython << " cannot import torch (scripts/install-deps.sh installs python3-torch)";
  TempDir dir;
  const ScriptResult script = run_python_script("tests/layers/torchvision_resnet.py", write_cases(dir));
  std::cout << script.output;
  ASSERT_EQ(script.status, 0) << script.output;
  for (const ParityCase& c : kParityCases) {
    SCOPED_TRACE(c.file());
    expect_parity(dir, c);
  }

  // dpcore's state loaded into torchvision strictly, with dpcore's eval-mode output.
  for (const char* name : kExportModels) {
    EXPECT_NE(script.output.find(std::string("loads into torchvision.models.") + name + " (strict)"), std::string::npos)
        << name << "\n" << script.output;
  }

  // torchvision's state_dict into dpcore, unrenamed, with torchvision's eval-mode output.
  for (const char* name : kExportModels) {
    SCOPED_TRACE(name);
    const io::SafetensorsFile file = io::load_safetensors(dir.file(std::string(name) + ".torchvision.safetensors"));
    auto m = build(name, DType::Float32, 32, 1000, 0);
    // Every tensor of the state_dict is one of the model's, by its own name.
    EXPECT_EQ(file.tensors().size(), m->parameters().entries().size() + m->buffers().entries().size() + 2);
    load_weights(*m, file, "");
    const auto buffers = as_doubles(m->buffers().values());
    for (const auto& e : m->buffers().entries()) {
      if (e.counter) EXPECT_EQ(buffers[size_t(e.offset)], 1.0) << e.name;
    }
    m->eval();
    const io::TensorRecord& input = file.at("input");
    const Tensor x =
        Tensor::from_vector(std::vector<float>(input.values<float>(), input.values<float>() + input.numel()), input.shape);
    autograd::NoGradGuard no_grad;
    const std::vector<double> got = as_doubles(m->forward(x)), want = record_values(file.at("logits"));
    ASSERT_EQ(got.size(), want.size());
    const double err = scaled_difference(got.data(), want.data(), got.size());
    std::cout << name << " torchvision -> dpcore eval log-probabilities: relative error " << err << "\n";
    EXPECT_LE(err, kExportTolerance);
  }
}

}  // namespace
}  // namespace dpcore::layers
