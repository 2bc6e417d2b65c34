// The Adam optimizer (engine/adam.h) against torch.optim.Adam and torch.optim.AdamW run by
// Debian's PyTorch 1.13 (tests/engine/torch_adam.py) over 100 steps of random gradients,
// with weight decay (left out for the bias, a PyTorch parameter group with weight_decay 0),
// bias correction and a learning-rate change; its restored state, and
// its checks of the hyper-parameters and of restored buffers.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "engine/adam.h"
#include "support/test_support.h"

namespace dpcore {
namespace {

using testing::TempDir;

struct TorchCase {
  std::string name;
  AdamConfig cfg;
};

// Two float32 tensors ("w" [5, 7] and "b" [7] without weight decay, as the script makes
// them), so that the flat buffer has padding between them that must stay zero.
FlatParameters torch_case_parameters() {
  return FlatParameters({{"w", {5, 7}}, {"b", {7}, false}}, DType::Float32, Device::cpu());
}

// values[entry.offset ...] = v, for each of the script's tensors.
void put(std::vector<float>& flat, const FlatEntry& entry, const nlohmann::json& v) {
  ASSERT_EQ(int64_t(v.size()), entry.numel) << entry.name;
  for (int64_t i = 0; i < entry.numel; ++i) flat[size_t(entry.offset + i)] = v[size_t(i)].get<float>();
}
std::vector<float> entry_values(const Tensor& flat, const FlatEntry& entry) {
  const auto all = flat.to_vector<float>();
  return std::vector<float>(all.begin() + entry.offset, all.begin() + entry.offset + entry.numel);
}

// Both sides run the same float32 operations in the same order (kernels/cpu/adam.cpp follows
// _single_tensor_adam), but PyTorch's vectorised CPU kernels may contract a multiply-add or
// divide by a scalar through its reciprocal: a few float roundings apart per step, and Adam
// does not amplify them (each step's move is bounded by about lr). Over these cases the
// worst difference is 1.9e-7 of the tensor's largest element (about 2 float32 ulps); 1e-6
// (8 ulps) leaves room, while eps inside the square root already differs by 2.4e-6 to 6e-3.
constexpr double kTorchTolerance = 1e-6;

TEST(Adam, MatchesTorchOptimAdamAndAdamWOver100Steps) {
  if (!testing::python_has_torch())
    GTEST_SKIP() << testing::kTorchPython << " cannot import torch (scripts/install-deps.sh installs python3-torch)";
  constexpr int kSteps = 100, kHalveLrAt = 50;
  const std::vector<TorchCase> cases = {
      {"adam_defaults", {1e-3, 0.9, 0.999, 1e-8, 0.0, false}},
      {"adam_l2", {1e-2, 0.9, 0.999, 1e-8, 0.1, false}},
      {"adamw", {1e-2, 0.9, 0.999, 1e-8, 0.1, true}},
      {"adamw_large_eps", {3e-2, 0.8, 0.95, 1e-3, 0.01, true}},
  };
  TempDir dir;
  const std::string out = dir.file("torch_adam.json");
  std::string args = "'" + out + "' " + std::to_string(kSteps) + " " + std::to_string(kHalveLrAt);
  for (const TorchCase& c : cases) {
    std::ostringstream os;
    os.precision(17);
    os << " " << c.name << ":" << c.cfg.lr << ":" << c.cfg.beta1 << ":" << c.cfg.beta2 << ":" << c.cfg.eps << ":"
       << c.cfg.weight_decay << ":" << (c.cfg.decoupled ? 1 : 0);
    args += os.str();
  }
  const testing::ScriptResult script = testing::run_python_script("tests/engine/torch_adam.py", args);
  ASSERT_EQ(script.status, 0) << script.output;
  std::ifstream f(out);
  const nlohmann::json torch = nlohmann::json::parse(f);

  for (const TorchCase& c : cases) {
    SCOPED_TRACE(c.name);
    const nlohmann::json& want = torch.at(c.name);
    FlatParameters params = torch_case_parameters();
    std::vector<float> values(size_t(params.total()), 0.f);
    for (const FlatEntry& e : params.entries()) put(values, e, want.at(e.name).at("init"));
    params.values().copy_(Tensor::from_vector(values, {params.total()}));
    Adam adam(params, c.cfg);
    for (int step = 1; step <= kSteps; ++step) {
      if (step == kHalveLrAt) adam.set_lr(c.cfg.lr / 2);
      std::vector<float> grads(size_t(params.total()), 0.f);
      for (const FlatEntry& e : params.entries()) put(grads, e, want.at(e.name).at("grads").at(size_t(step - 1)));
      params.grads().copy_(Tensor::from_vector(grads, {params.total()}));
      adam.step();
    }
    EXPECT_EQ(adam.steps_taken(), kSteps);
    for (const FlatEntry& e : params.entries()) {
      const nlohmann::json& t = want.at(e.name);
      const struct {
        const char* what;
        const Tensor& got;
      } checks[] = {{"final", params.values()}, {"exp_avg", adam.exp_avg()}, {"exp_avg_sq", adam.exp_avg_sq()}};
      for (const auto& check : checks) {
        const std::vector<float> got = entry_values(check.got, e), expected = t.at(check.what).get<std::vector<float>>();
        EXPECT_LE(testing::scaled_difference(got.data(), expected.data(), got.size()), kTorchTolerance)
            << e.name << " " << check.what;
      }
    }
    // The padding between the tensors stays zero in every buffer.
    const auto final_values = params.values().to_vector<float>(), m = adam.exp_avg().to_vector<float>(),
               v = adam.exp_avg_sq().to_vector<float>();
    const FlatEntry& w = params.entry("w");
    for (int64_t i = w.offset + w.numel; i < params.entry("b").offset; ++i) {
      EXPECT_EQ(final_values[size_t(i)], 0.f) << "padding element " << i;
      EXPECT_EQ(m[size_t(i)], 0.f) << "padding element " << i;
      EXPECT_EQ(v[size_t(i)], 0.f) << "padding element " << i;
    }
  }
}

TEST(Adam, RestoredStateContinuesIdentically) {
  const AdamConfig cfg{1e-2, 0.9, 0.999, 1e-8, 0.1, true};
  // Interrupted after 3 steps, continued from the state saved then (with its step count, or
  // with the count lost).
  enum Run { kStraight, kRestored, kRestoredWithoutCount };
  auto run = [&](Run how) {
    FlatParameters params({{"w", {5}}, {"b", {3}}}, DType::Float32, Device::cpu());
    params.values().copy_(Tensor::from_vector(testing::random_vector<float>(size_t(params.total()), 1),
                                              {params.total()}));
    auto adam = std::make_unique<Adam>(params, cfg);
    for (int step = 0; step < 6; ++step) {
      if (how != kStraight && step == 3) {
        const Tensor m = adam->exp_avg().clone(), v = adam->exp_avg_sq().clone();
        const int64_t steps = adam->steps_taken();
        adam = std::make_unique<Adam>(params, cfg);
        adam->restore({m, v}, how == kRestored ? steps : 0);
      }
      params.grads().copy_(Tensor::from_vector(testing::random_vector<float>(size_t(params.total()), 10 + step),
                                               {params.total()}));
      adam->step();
    }
    return params.values().to_vector<float>();
  };
  const auto straight = run(kStraight);
  EXPECT_EQ(straight, run(kRestored));
  // The step count is state too: from 0, the bias correction restarts (and the first step
  // ignores the moments), so the run differs.
  EXPECT_NE(straight, run(kRestoredWithoutCount));
}

TEST(Adam, RejectsInvalidConfigurationsAndState) {
  FlatParameters params({{"w", {5}}}, DType::Float32, Device::cpu());
  EXPECT_THROW(Adam(params, AdamConfig{-0.1, 0.9, 0.999, 1e-8, 0, false}), Error);   // negative lr
  EXPECT_THROW(Adam(params, AdamConfig{0.1, 1.0, 0.999, 1e-8, 0, false}), Error);    // beta1 1
  EXPECT_THROW(Adam(params, AdamConfig{0.1, 0.9, -0.1, 1e-8, 0, false}), Error);     // negative beta2
  EXPECT_THROW(Adam(params, AdamConfig{0.1, 0.9, 0.999, -1e-8, 0, false}), Error);   // negative eps
  EXPECT_THROW(Adam(params, AdamConfig{0.1, 0.9, 0.999, 1e-8, -0.1, true}), Error);  // negative weight decay
  Adam adam(params, AdamConfig{});
  EXPECT_THROW(adam.set_lr(std::nan("")), Error);
  const Tensor wrong = Tensor::zeros({3}, DType::Float32, Device::cpu());
  EXPECT_THROW(adam.restore({wrong, adam.exp_avg_sq()}, 1), Error);
  EXPECT_THROW(adam.restore({adam.exp_avg(), Tensor()}, 1), Error);
  EXPECT_THROW(adam.restore({adam.exp_avg(), adam.exp_avg_sq()}, -1), Error);
}

}  // namespace
}  // namespace dpcore
