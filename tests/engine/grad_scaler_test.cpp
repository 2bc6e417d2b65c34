// GradScaler against torch.amp.GradScaler("cpu"): on scripted series of overflows
// (tests/engine/torch_grad_scaler.py) the scale before every step, the unscaled gradient
// bit for bit, which steps are skipped, and the scale and growth tracker after every
// update() are PyTorch's. Debian's PyTorch 1.13 cannot run the update on CPU tensors
// (_amp_update_scale_ exists there for CUDA only), so the comparison is with
// tests/fixtures/grad_scaler_torch.json, recorded from PyTorch 2.15.0 by that script, and
// again with the script run live when bench/.venv (scripts: bench/install-torch.sh) is
// there. Then a skipped step, the scaled loss, and the state a checkpoint keeps; the
// unscale kernels on their own are in tests/ops/elementwise_test.cpp (every backend).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "engine/grad_scaler.h"
#include "engine/ops.h"
#include "engine/sgd.h"
#include "support/error_of.h"
#include "support/test_support.h"

namespace dpcore {
namespace {

using testing::error_of;

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// One parameter of 4 under SGD(lr=0.5), its gradient x * scale as PyTorch's backward of
// scale * (w * x).sum() computes it, then scaler.step() and scaler.update(), step by step.
void expect_torch_sequence(const nlohmann::json& scenario) {
  const std::string name = scenario.at("name");
  SCOPED_TRACE(name);
  GradScaler scaler({scenario.at("init_scale").get<double>(), scenario.at("growth_factor").get<double>(),
                     scenario.at("backoff_factor").get<double>(), scenario.at("growth_interval").get<int64_t>()});
  FlatParameters params({{"w", {4}}}, DType::Float32, Device::cpu());
  params.values().zero_();
  params.grads().zero_();  // the padding after w stays 0
  Sgd sgd(params, SgdConfig{0.5, 0.0, 0.0, 0.0, false});
  const Tensor w = params.values().narrow0(0, 4), grad_of_w = params.grads().narrow0(0, 4);
  int step = 0;
  for (const nlohmann::json& s : scenario.at("steps")) {
    SCOPED_TRACE("step " + std::to_string(step++));
    ASSERT_EQ(scaler.get_scale(), s.at("scale").get<float>());
    std::vector<float> grad;
    for (uint32_t b : s.at("x_bits").get<std::vector<uint32_t>>()) grad.push_back(from_bits(b) * scaler.get_scale());
    grad_of_w.copy_(Tensor::from_vector(grad, {4}));
    const std::vector<float> before = w.to_vector<float>();
    const bool stepped = scaler.step(sgd, params.grads());
    EXPECT_EQ(stepped, s.at("stepped").get<bool>());
    if (!stepped) EXPECT_EQ(w.to_vector<float>(), before) << "a skipped step changed the parameters";
    const std::vector<float> unscaled = grad_of_w.to_vector<float>();
    const auto torch_grad = s.at("grad_bits").get<std::vector<uint32_t>>();
    for (size_t i = 0; i < 4; ++i) {
      const float want = from_bits(torch_grad[i]);
      EXPECT_TRUE(std::isnan(want) ? std::isnan(unscaled[i]) : bits_of(unscaled[i]) == torch_grad[i])
          << "gradient " << i << ": " << unscaled[i] << ", PyTorch " << want;
    }
    scaler.update();
    EXPECT_EQ(scaler.state().scale, s.at("scale_after").get<float>());
    EXPECT_EQ(scaler.state().growth_tracker, s.at("growth_tracker").get<int32_t>());
  }
}

void expect_torch_sequences(const std::string& path) {
  std::ifstream f(path);
  ASSERT_TRUE(f) << "cannot open " << path;
  const nlohmann::json torch = nlohmann::json::parse(f);
  ASSERT_EQ(torch.at("scenarios").size(), 3u);
  for (const nlohmann::json& scenario : torch.at("scenarios")) expect_torch_sequence(scenario);
}

TEST(GradScaler, ScaleSequenceIsRecordedPyTorch) {
  expect_torch_sequences(testing::source_dir() + "/tests/fixtures/grad_scaler_torch.json");
}

TEST(GradScaler, ScaleSequenceIsLivePyTorch) {
  const std::string python = testing::source_dir() + "/bench/.venv/bin/python";
  struct stat st;
  if (stat(python.c_str(), &st) != 0)
    GTEST_SKIP() << python << " is absent (bench/install-torch.sh); Debian's 1.13 has no CPU _amp_update_scale_";
  testing::TempDir dir;
  const std::string out = dir.file("grad_scaler.json");
  const testing::ScriptResult script =
      testing::run_python_script("tests/engine/torch_grad_scaler.py", "'" + out + "'", python);
  ASSERT_EQ(script.status, 0) << script.output;
  expect_torch_sequences(out);
}

TEST(GradScaler, SkipsTheStepWithAnInfAndBacksOff) {
  FlatParameters params({{"w", {3}}}, DType::Float32, Device::cpu());
  params.values().zero_();
  params.grads().zero_();
  const Tensor w = params.values().narrow0(0, 3), grad_of_w = params.grads().narrow0(0, 3);
  w.copy_(Tensor::from_vector(std::vector<float>{1, 2, 3}, {3}));
  Sgd sgd(params, SgdConfig{0.5, 0.0, 0.0, 0.0, false});
  GradScaler scaler;
  EXPECT_EQ(scaler.get_scale(), 65536.0f);
  grad_of_w.copy_(Tensor::from_vector(std::vector<float>{65536, std::numeric_limits<float>::infinity(), 0}, {3}));
  EXPECT_TRUE(scaler.unscale(params.grads()));
  EXPECT_FALSE(scaler.step(sgd, params.grads()));
  EXPECT_EQ(sgd.steps_taken(), 0);
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 32768.0f);
  grad_of_w.copy_(Tensor::from_vector(std::vector<float>{32768, -65536, 0}, {3}));
  EXPECT_TRUE(scaler.step(sgd, params.grads()));
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{0.5f, 3, 3}));
  scaler.update();
  EXPECT_EQ(scaler.state().growth_tracker, 1);
}

// Pipeline stages in processes of their own each unscale their part of the gradients:
// an Inf or NaN another process found (set_found_inf_anywhere(true)) skips this process's
// step too and backs off its scale, though its own part was finite; an `any` that misses
// this process's own finding is refused.
TEST(GradScaler, AnInfFoundInAnotherProcesssPartSkipsTheStepHereToo) {
  FlatParameters params({{"w", {2}}}, DType::Float32, Device::cpu());
  params.values().zero_();
  params.grads().zero_();
  const Tensor w = params.values().narrow0(0, 2), grad_of_w = params.grads().narrow0(0, 2);
  w.copy_(Tensor::from_vector(std::vector<float>{1, 2}, {2}));
  grad_of_w.copy_(Tensor::from_vector(std::vector<float>{65536, 0}, {2}));
  Sgd sgd(params, SgdConfig{0.5, 0.0, 0.0, 0.0, false});
  GradScaler scaler;
  EXPECT_FALSE(scaler.unscale(params.grads()));
  scaler.set_found_inf_anywhere(true);
  EXPECT_FALSE(scaler.step(sgd, params.grads()));
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{1, 2}));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 32768.0f);
  // Nobody found one: the step is taken.
  grad_of_w.copy_(Tensor::from_vector(std::vector<float>{32768, 0}, {2}));
  EXPECT_FALSE(scaler.unscale(params.grads()));
  scaler.set_found_inf_anywhere(false);
  EXPECT_TRUE(scaler.step(sgd, params.grads()));
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{0.5f, 2}));
  scaler.update();
  // This process found one, and the processes together did not: refused.
  grad_of_w.copy_(Tensor::from_vector(std::vector<float>{std::numeric_limits<float>::quiet_NaN(), 0}, {2}));
  EXPECT_TRUE(scaler.unscale(params.grads()));
  EXPECT_NE(error_of([&] { scaler.set_found_inf_anywhere(false); }).find("this process found an Inf or NaN"),
            std::string::npos);
  scaler.update();
  EXPECT_NE(error_of([&] { scaler.set_found_inf_anywhere(true); }).find("before unscale()"), std::string::npos);
}

TEST(GradScaler, ScaledLossCarriesTheScaleIntoBackward) {
  GradScaler scaler({1024.0, 2.0, 0.5, 10});
  Tensor w = Tensor::from_vector(std::vector<float>{0.5f}, {1});
  w.set_requires_grad(true);
  Tensor loss = ops::sum(ops::scale(w, 3.0));
  Tensor scaled = scaler.scale(loss);
  EXPECT_EQ(scaled.item(), 1536.0);
  scaled.backward();
  EXPECT_EQ(w.grad().item(), 3072.0);
}

TEST(GradScaler, StateRoundTripsAndBadStateOrOrderIsRefused) {
  GradScaler scaler({8.0, 2.0, 0.5, 4});
  scaler.load_state({512.0f, 3});
  EXPECT_EQ(scaler.state().scale, 512.0f);
  EXPECT_EQ(scaler.state().growth_tracker, 3);
  Tensor g = Tensor::zeros({2});
  EXPECT_FALSE(scaler.unscale(g));
  scaler.update();  // the fourth clean step in a row: growth
  EXPECT_EQ(scaler.state().scale, 1024.0f);
  EXPECT_EQ(scaler.state().growth_tracker, 0);

  EXPECT_NE(error_of([&] { scaler.load_state({std::numeric_limits<float>::infinity(), 0}); }).find("saved scale of inf"),
            std::string::npos);
  EXPECT_NE(error_of([&] { scaler.load_state({2.0f, 4}); }).find("growth tracker of 4"), std::string::npos);
  EXPECT_NE(error_of([&] { scaler.update(); }).find("update() without an unscale()"), std::string::npos);
  scaler.unscale(g);
  EXPECT_NE(error_of([&] { scaler.unscale(g); }).find("unscale() has already been called"), std::string::npos);
  EXPECT_NE(error_of([] { GradScaler({8.0, 1.0, 0.5, 4}); }).find("growth_factor must be > 1, got 1"),
            std::string::npos);
  EXPECT_NE(error_of([] { GradScaler({8.0, 2.0, 0.5, 0}); }).find("growth_interval must be a positive"),
            std::string::npos);
}

}  // namespace
}  // namespace dpcore
