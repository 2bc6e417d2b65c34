// The optimizer against torch.optim.SGD's algorithm written out per element.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/sgd.h"
#include "support/test_support.h"

namespace dpcore {
namespace {

// torch.optim.SGD, one parameter element, as documented in ../shared/reference/semantics.md.
struct ReferenceSgd {
  SgdConfig cfg;
  double buf = 0;
  bool has_buf = false;
  double step(double p, double g) {
    g += cfg.weight_decay * p;
    if (cfg.momentum != 0) {
      buf = has_buf ? cfg.momentum * buf + (1 - cfg.dampening) * g : g;
      has_buf = true;
      g = cfg.nesterov ? g + cfg.momentum * buf : buf;
    }
    return p - cfg.lr * g;
  }
};

TEST(Sgd, MatchesPyTorchAlgorithmOverSeveralSteps) {
  std::vector<SgdConfig> configs = {
      {0.1, 0.0, 0.0, 0.0, false}, {0.1, 0.9, 0.0, 0.0, false}, {0.05, 0.9, 0.3, 0.0, false},
      {0.1, 0.9, 0.0, 0.01, true}, {0.2, 0.5, 0.0, 0.1, false}};
  for (const SgdConfig& cfg : configs) {
    FlatParameters params({{"w", {7}}, {"b", {3}}}, DType::Float64, Device::cpu());
    auto init = testing::random_vector<double>(size_t(params.total()), 1);
    params.values().copy_(Tensor::from_vector(init, {params.total()}));
    Sgd sgd(params, cfg);
    std::vector<ReferenceSgd> ref(size_t(params.total()), ReferenceSgd{cfg});
    std::vector<double> expected = init;
    for (int step = 0; step < 4; ++step) {
      auto grads = testing::random_vector<double>(size_t(params.total()), 10 + step);
      params.grads().copy_(Tensor::from_vector(grads, {params.total()}));
      sgd.step();
      for (size_t i = 0; i < expected.size(); ++i) expected[i] = ref[i].step(expected[i], grads[i]);
      // The gradient buffer itself is left alone (weight decay is not written back).
      EXPECT_EQ(params.grads().to_vector<double>(), grads);
    }
    auto got = params.values().to_vector<double>();
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], expected[i], 1e-13) << "lr " << cfg.lr << " momentum " << cfg.momentum << " element " << i;
    }
    EXPECT_EQ(sgd.steps_taken(), 4);
  }
}

TEST(Sgd, RestoredStateContinuesIdentically) {
  SgdConfig cfg{0.1, 0.9, 0.0, 0.0, false};
  auto run = [&](bool interrupt) {
    FlatParameters params({{"w", {5}}}, DType::Float32, Device::cpu());
    params.values().fill_(1.0);
    auto sgd = std::make_unique<Sgd>(params, cfg);
    for (int step = 0; step < 6; ++step) {
      if (interrupt && step == 3) {
        Tensor momentum = sgd->momentum().clone();
        int64_t steps = sgd->steps_taken();
        sgd = std::make_unique<Sgd>(params, cfg);
        sgd->restore({momentum}, steps);
      }
      params.grads().fill_(0.5 + step);
      sgd->step();
    }
    return params.values().to_vector<float>();
  };
  EXPECT_EQ(run(false), run(true));
}

TEST(Sgd, RejectsInvalidConfigurations) {
  FlatParameters params({{"w", {5}}}, DType::Float32, Device::cpu());
  EXPECT_THROW(Sgd(params, SgdConfig{-0.1, 0, 0, 0, false}), Error);
  EXPECT_THROW(Sgd(params, SgdConfig{0.1, 0, 0, 0, true}), Error);  // nesterov without momentum
  EXPECT_THROW(Sgd(params, SgdConfig{0.1, 0.9, 0.5, 0, true}), Error);  // nesterov with dampening
}

}  // namespace
}  // namespace dpcore
