// --lr-schedule and --warmup-steps (train/schedule/lr_schedule.h): the rates of every step against
// the ones Debian's PyTorch 1.13 schedulers give (tests/fixtures/lr_schedules.json, written
// by scripts/make_lr_schedule_fixture.py), and the errors for bad flag values.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kernels/error.h"
#include "support/test_support.h"
#include "train/schedule/lr_schedule.h"

namespace dpcore::train {
namespace {

// dpcore evaluates each rate in closed form; PyTorch's StepLR and CosineAnnealingLR update
// the previous lr recursively (lr * gamma; lr times a ratio of cosines), so the two drift
// apart by a few roundings per step. Over the fixture's runs (up to 100 steps) the worst
// relative difference is 1.2e-15 (the tail of a cosine, where 1 + cos x cancels); 1e-12
// relative leaves a factor of ~1000 to spare. (The test prints the worst it saw.)
double error_of(double dpcore, double torch) {
  if (torch == 0) return dpcore == 0 ? 0 : HUGE_VAL;  // momentum 0: exactly
  return std::abs(dpcore - torch) / std::abs(torch);
}
constexpr double kTolerance = 1e-12;

nlohmann::json fixture() {
  std::ifstream f(testing::source_dir() + "/tests/fixtures/lr_schedules.json");
  EXPECT_TRUE(f.good()) << "tests/fixtures/lr_schedules.json: run /usr/bin/python3 scripts/make_lr_schedule_fixture.py";
  return nlohmann::json::parse(f);
}

TEST(LrSchedule, EveryStepMatchesPyTorch) {
  nlohmann::json cases = fixture()["cases"];
  ASSERT_GE(cases.size(), 10u);
  double worst = 0;
  for (const nlohmann::json& c : cases) {
    const std::string spec = c["schedule"];
    const int64_t total = c["total_steps"], warmup = c["warmup_steps"];
    SgdConfig sgd;
    sgd.lr = c["lr"], sgd.momentum = c["momentum"];
    LrSchedule schedule(spec, sgd, warmup, total, c["steps_per_epoch"]);
    const std::string name = spec + " warm-up " + std::to_string(warmup) + " over " + std::to_string(total);
    ASSERT_EQ(int64_t(c["lrs"].size()), total) << name;
    for (int64_t t = 0; t < total; ++t) {
      Rates r = schedule.at(t);
      const double lr = c["lrs"][t], momentum = c["momenta"][t];
      EXPECT_LE(error_of(r.lr, lr), kTolerance) << name << ", step " << t << ": " << r.lr << " vs " << lr;
      EXPECT_LE(error_of(r.momentum, momentum), kTolerance) << name << ", step " << t << ": momentum "
                                                                   << r.momentum << " vs " << momentum;
      worst = std::max({worst, error_of(r.lr, lr), error_of(r.momentum, momentum)});
    }
  }
  std::cout << "worst error against PyTorch: " << worst << "\n";
}

TEST(LrSchedule, TheFormulasAtTheirTurningPoints) {
  SgdConfig sgd{0.1, 0.9, 0, 0, false};
  // step:2:0.5 with 5 steps per epoch after 3 warm-up steps: halves at steps 3+10, 3+20.
  LrSchedule step("step:2:0.5", sgd, 3, 40, 5);
  EXPECT_DOUBLE_EQ(step.at(0).lr, 0.1 / 3);
  EXPECT_DOUBLE_EQ(step.at(2).lr, 0.1);
  EXPECT_DOUBLE_EQ(step.at(12).lr, 0.1);
  EXPECT_DOUBLE_EQ(step.at(13).lr, 0.05);
  EXPECT_DOUBLE_EQ(step.at(23).lr, 0.025);
  EXPECT_EQ(step.at(23).momentum, 0.9);
  // cosine after warm-up: lr at its first step, half way through, just above 0 at the end.
  LrSchedule cosine("cosine", sgd, 4, 104, 10);
  EXPECT_DOUBLE_EQ(cosine.at(4).lr, 0.1);
  EXPECT_DOUBLE_EQ(cosine.at(54).lr, 0.05);
  EXPECT_GT(cosine.at(103).lr, 0);
  EXPECT_LT(cosine.at(103).lr, 1e-4);
  // onecycle: lr/25 and momentum 0.95 first, lr and 0.85 at the end of the rise, lr/25/1e4 last.
  LrSchedule one("onecycle", sgd, 10, 100, 10);
  EXPECT_DOUBLE_EQ(one.at(0).lr, 0.1 / 25);
  EXPECT_DOUBLE_EQ(one.at(0).momentum, 0.95);
  EXPECT_DOUBLE_EQ(one.at(9).lr, 0.1);
  EXPECT_DOUBLE_EQ(one.at(9).momentum, 0.85);
  EXPECT_DOUBLE_EQ(one.at(99).lr, 0.1 / 25 / 1e4);
  EXPECT_DOUBLE_EQ(one.at(99).momentum, 0.95);
  // Without momentum there is nothing to cycle.
  LrSchedule plain("onecycle", SgdConfig{0.1, 0, 0, 0, false}, 0, 100, 10);
  for (int64_t t : {0, 29, 50, 99}) EXPECT_EQ(plain.at(t).momentum, 0) << t;
  // linear (get_linear_schedule_with_warmup): 0 at step 0, lr at the end of the warm-up,
  // lr/(T-W) at the last step; the momentum untouched.
  LrSchedule linear("linear", sgd, 10, 110, 10);
  EXPECT_EQ(linear.at(0).lr, 0.0);
  EXPECT_DOUBLE_EQ(linear.at(5).lr, 0.05);
  EXPECT_DOUBLE_EQ(linear.at(10).lr, 0.1);
  EXPECT_DOUBLE_EQ(linear.at(60).lr, 0.05);
  EXPECT_DOUBLE_EQ(linear.at(109).lr, 0.1 / 100);
  EXPECT_EQ(linear.at(109).momentum, 0.9);
  LrSchedule no_warmup("linear", sgd, 0, 50, 10);
  EXPECT_DOUBLE_EQ(no_warmup.at(0).lr, 0.1);
  EXPECT_DOUBLE_EQ(no_warmup.at(49).lr, 0.1 / 50);
}

TEST(LrSchedule, DescribeSaysWhatItDoes) {
  SgdConfig sgd{0.1, 0.9, 0, 0, false};
  EXPECT_EQ(LrSchedule("constant", sgd, 0, 10, 5).describe(), "constant 0.1");
  EXPECT_EQ(LrSchedule("constant", sgd, 3, 10, 5).describe(), "constant 0.1 after 3 warm-up steps");
  EXPECT_EQ(LrSchedule("step:30:0.1", sgd, 0, 10, 5).describe(), "step 0.1 x0.1 every 30 epochs");
  EXPECT_EQ(LrSchedule("cosine", sgd, 2, 10, 5).describe(), "cosine from 0.1 to 0 over 8 steps after 2 warm-up steps");
  EXPECT_EQ(LrSchedule("onecycle", sgd, 0, 10, 5).describe(), "onecycle to 0.1 (30% warm-up, momentum 0.95-0.85)");
  EXPECT_EQ(LrSchedule("onecycle", SgdConfig{0.1, 0, 0, 0, false}, 5, 20, 5).describe(),
            "onecycle to 0.1 (25% warm-up, momentum not cycled)");
  EXPECT_EQ(LrSchedule("linear", sgd, 5, 30, 5).describe(), "linear from 0.1 to 0 over 30 steps (warm-up from 0 over 5 steps)");
  EXPECT_EQ(LrSchedule("linear", sgd, 0, 30, 5).describe(), "linear from 0.1 to 0 over 30 steps");
}

std::string error_of_schedule(const std::string& spec, int64_t warmup = 0, int64_t total = 100) {
  try {
    LrSchedule(spec, SgdConfig{0.1, 0.9, 0, 0, false}, warmup, total, 10);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(LrSchedule, BadTextIsRefusedNamingTheFlagAndTheText) {
  for (const char* bad : {"exponential", "", "Cosine", "step", "step:", "step:2", "step:0:0.5", "step:-1:0.5",
                          "step:x:0.5", "step:1.5:0.5", "step:2:0", "step:2:-0.5", "step:2:nan", "step:2:inf",
                          "step:2:", "step:2:0.5x", "step:2: 0.5", "step:2:0.5:1"}) {
    std::string message = error_of_schedule(bad);
    EXPECT_NE(message.find(std::string("--lr-schedule ") + bad + ": must be"), std::string::npos)
        << "'" << bad << "': " << message;
    EXPECT_EQ(lr_schedule_needs(bad).empty(), false) << bad;
  }
  EXPECT_NE(error_of_schedule("step:0:0.5").find("EPOCHS a whole number of at least 1 (got '0')"), std::string::npos);
  EXPECT_NE(error_of_schedule("step:2:-0.5").find("GAMMA a finite number > 0 (got '-0.5')"), std::string::npos);
  for (const char* good : {"constant", "cosine", "onecycle", "step:1:1", "step:30:0.1", "step:2:1e-1"}) {
    EXPECT_EQ(lr_schedule_needs(good), "") << good;
    EXPECT_EQ(error_of_schedule(good), "") << good;
  }
}

TEST(LrSchedule, TheWarmUpMustEndBeforeTheRunDoes) {
  for (const char* spec : {"constant", "step:1:0.5", "cosine", "onecycle"}) {
    std::string message = error_of_schedule(spec, 100, 100);
    EXPECT_NE(message.find("--warmup-steps 100 must be less than the run's 100 steps"), std::string::npos)
        << spec << ": " << message;
    EXPECT_EQ(error_of_schedule(spec, 99, 100), "") << spec;
  }
  // onecycle's rise would end at step 0, where PyTorch's OneCycleLR divides 0 by 0.
  std::string message = error_of_schedule("onecycle", 1, 100);
  EXPECT_NE(message.find("--lr-schedule onecycle with --warmup-steps 1"), std::string::npos) << message;
  EXPECT_EQ(error_of_schedule("onecycle", 2, 100), "");
}

}  // namespace
}  // namespace dpcore::train
