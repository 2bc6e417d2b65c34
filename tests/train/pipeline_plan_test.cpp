// Pipeline stage placement: --stages parsed into stages in layer order, every way it can be
// wrong refused with the value named, and --pipeline's balanced split (its slowest stage
// against every possible split, enumerated).
#include <algorithm>
#include <random>

#include <gtest/gtest.h>

#include "support/error_of.h"
#include "train/pipeline/stage_plan.h"

namespace dpcore::train::pipeline {
namespace {

using dpcore::testing::error_of;

const AvailableDevices kTwoTeamsOneGpu{2, 1};

StageDevice cpu_team(int team) { return {Device::cpu(), team}; }

TEST(StagePlan, ParsesRangesAndDevicesInLayerOrder) {
  const auto stages = parse_stages("6-11@cpu:1,0-5@cpu:0", 12, kTwoTeamsOneGpu);
  ASSERT_EQ(stages.size(), 2u);
  EXPECT_EQ(stages[0], (Stage{0, 5, cpu_team(0)}));
  EXPECT_EQ(stages[1], (Stage{6, 11, cpu_team(1)}));
  EXPECT_EQ(stages_text(stages), "0-5@cpu:0,6-11@cpu:1");
}

TEST(StagePlan, OneLayerStagesAndAGpu) {
  const auto stages = parse_stages("0@cuda:0,1-2@cpu,3@cuda", 4, kTwoTeamsOneGpu);
  ASSERT_EQ(stages.size(), 3u);
  EXPECT_EQ(stages[0], (Stage{0, 0, {Device::cuda(0), 0}}));
  EXPECT_EQ(stages[1], (Stage{1, 2, cpu_team(0)}));
  EXPECT_EQ(stages[2].layers(), 1);
  EXPECT_EQ(stages_text(stages), "0@cuda:0,1-2@cpu:0,3@cuda:0");
}

TEST(StagePlan, TextRoundTrips) {
  const std::vector<std::pair<std::string, int>> cases = {
      {"0-3@cpu:0", 4}, {"0@cpu:1,1-7@cpu:0", 8}, {"0-1@cuda:0,2@cpu:1,3-9@cpu:0", 10}};
  for (const auto& [text, layers] : cases) {
    const auto stages = parse_stages(text, layers, kTwoTeamsOneGpu);
    EXPECT_EQ(stages_text(stages), text);
    EXPECT_EQ(parse_stages(stages_text(stages), layers, kTwoTeamsOneGpu), stages) << text;
  }
}

TEST(StagePlan, OverlappingStagesNameTheLayerAndBothRanges) {
  EXPECT_EQ(error_of([] { parse_stages("0-5@cpu:0,5-11@cpu:1", 12, kTwoTeamsOneGpu); }),
            "--stages '0-5@cpu:0,5-11@cpu:1': layer 5 is in two stages (0-5 and 5-11)");
}

TEST(StagePlan, LayersLeftOutAreNamed) {
  EXPECT_EQ(error_of([] { parse_stages("0-4@cpu:0,7-11@cpu:1", 12, kTwoTeamsOneGpu); }),
            "--stages '0-4@cpu:0,7-11@cpu:1': layers 5-6 in no stage");
  EXPECT_EQ(error_of([] { parse_stages("1-11@cpu:0", 12, kTwoTeamsOneGpu); }),
            "--stages '1-11@cpu:0': layer 0 in no stage");
  EXPECT_EQ(error_of([] { parse_stages("0-9@cpu:0", 12, kTwoTeamsOneGpu); }),
            "--stages '0-9@cpu:0': layers 10-11 in no stage (the model has 12 layers)");
}

TEST(StagePlan, ALayerThatDoesNotExistIsNamed) {
  EXPECT_EQ(error_of([] { parse_stages("0-5@cpu:0,6-12@cpu:1", 12, kTwoTeamsOneGpu); }),
            "--stages '0-5@cpu:0,6-12@cpu:1': layer 12 does not exist (the model has 12 layers, 0-11)");
}

TEST(StagePlan, ADeviceThatDoesNotExistIsNamed) {
  EXPECT_EQ(error_of([] { parse_stages("0-5@cpu:0,6-11@cuda:1", 12, kTwoTeamsOneGpu); }),
            "--stages '0-5@cpu:0,6-11@cuda:1': cuda:1 does not exist (this machine has 1 GPU)");
  EXPECT_EQ(error_of([] { parse_stages("0-5@cpu:0,6-11@cpu:2", 12, kTwoTeamsOneGpu); }),
            "--stages '0-5@cpu:0,6-11@cpu:2': cpu:2 does not exist (this machine has 2 CPU teams, cpu:0-1)");
  EXPECT_EQ(error_of([] { parse_stages("0-11@gpu:0", 12, kTwoTeamsOneGpu); }),
            "--stages '0-11@gpu:0': unknown stage device 'gpu:0' (expected cpu:N, a team of CPU threads, or cuda:N, "
            "a GPU)");
  EXPECT_EQ(error_of([] { parse_stages("0-11@cpu:x", 12, kTwoTeamsOneGpu); }),
            "--stages '0-11@cpu:x': unknown stage device 'cpu:x' (expected cpu:N, a team of CPU threads, or cuda:N, "
            "a GPU)");
}

TEST(StagePlan, MalformedPartsAreNamed) {
  EXPECT_EQ(error_of([] { parse_stages("0-5", 12, kTwoTeamsOneGpu); }),
            "--stages '0-5': '0-5' is not LAYERS@DEVICE (for example 0-5@cpu:0)");
  EXPECT_EQ(error_of([] { parse_stages("0-11@cpu:0,", 12, kTwoTeamsOneGpu); }),
            "--stages '0-11@cpu:0,': '' is not LAYERS@DEVICE (for example 0-5@cpu:0)");
  EXPECT_EQ(error_of([] { parse_stages("5-0@cpu:0", 12, kTwoTeamsOneGpu); }),
            "--stages '5-0@cpu:0': the range 5-0 runs backwards");
  EXPECT_EQ(error_of([] { parse_stages("a-3@cpu:0", 12, kTwoTeamsOneGpu); }),
            "--stages 'a-3@cpu:0': 'a-3' is not a layer range (expected A-B or A, layer numbers from 0)");
  EXPECT_EQ(error_of([] { parse_stages("", 12, kTwoTeamsOneGpu); }),
            "--stages: empty (expected stages such as 0-5@cpu:0,6-11@cpu:1)");
}

// The smallest possible cost of the slowest stage, over every way to cut `costs` into
// `stages` contiguous non-empty stages.
double slowest_stage_by_enumeration(const std::vector<double>& costs, int stages) {
  const int n = int(costs.size());
  double best = 1e300;
  // A split is a choice of stages-1 cut points among the n-1 gaps.
  std::vector<int> gaps(n - 1, 0);
  std::fill(gaps.end() - (stages - 1), gaps.end(), 1);
  do {
    double stage = 0, slowest = 0;
    for (int i = 0; i < n; ++i) {
      stage += costs[i];
      if (i == n - 1 || gaps[i]) slowest = std::max(slowest, stage), stage = 0;
    }
    best = std::min(best, slowest);
  } while (std::next_permutation(gaps.begin(), gaps.end()));
  return best;
}

TEST(BalanceStages, TheSlowestStageIsAsFastAsAnySplitAllows) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> cost(0.1, 5.0);
  for (int n = 1; n <= 9; ++n)
    for (int p = 1; p <= std::min(n, 4); ++p) {
      std::vector<double> costs(n);
      for (double& c : costs) c = cost(rng);
      std::vector<StageDevice> devices;
      for (int s = 0; s < p; ++s) devices.push_back(cpu_team(s));
      const auto stages = balance_stages(costs, p, devices);
      ASSERT_EQ(int(stages.size()), p);
      // Contiguous, non-empty, covering every layer, each on its device.
      double slowest = 0;
      for (int s = 0; s < p; ++s) {
        EXPECT_EQ(stages[s].first_layer, s == 0 ? 0 : stages[s - 1].last_layer + 1) << "n " << n << " p " << p;
        EXPECT_GE(stages[s].layers(), 1);
        EXPECT_EQ(stages[s].device, devices[s]);
        double sum = 0;
        for (int i = stages[s].first_layer; i <= stages[s].last_layer; ++i) sum += costs[i];
        slowest = std::max(slowest, sum);
      }
      EXPECT_EQ(stages.back().last_layer, n - 1);
      EXPECT_DOUBLE_EQ(slowest, slowest_stage_by_enumeration(costs, p)) << "n " << n << " p " << p;
    }
}

TEST(BalanceStages, AnExpensiveLayerGetsAStageOfItsOwn) {
  const auto stages = balance_stages({1, 1, 10, 1, 1}, 3, {cpu_team(0), cpu_team(1), cpu_team(0)});
  EXPECT_EQ(stages_text(stages), "0-1@cpu:0,2@cpu:1,3-4@cpu:0");
}

TEST(BalanceStages, MoreStagesThanLayersIsRefused) {
  EXPECT_EQ(error_of([] { balance_stages({1, 2, 3}, 4, std::vector<StageDevice>(4)); }),
            "--pipeline 4: more stages than the model has layers (3; a layer is a top-level child of the model, a "
            "residual block one layer)");
  EXPECT_EQ(error_of([] { balance_stages({1, 2, 3}, 0, {}); }), "--pipeline 0: needs at least 1 stage");
  EXPECT_EQ(error_of([] { balance_stages({1, 2, 3}, 2, {cpu_team(0)}); }),
            "--pipeline 2: 1 devices given for 2 stages");
}

// cpu:N is the Nth of N+1 teams (the highest N named): the same cores whichever teams the
// other stages use; stages on one team share its cores.
TEST(StageCpuTeams, EachStageGetsTheCoresOfItsTeam) {
  const std::vector<int> eight = {0, 1, 2, 3, 4, 5, 6, 7};
  const auto shared = stage_cpu_teams(parse_stages("0@cpu:0,1-2@cpu:1,3@cpu:1", 4, {8, 0}), eight, 64);
  ASSERT_EQ(shared.size(), 3u);
  EXPECT_EQ(shared[0].cpus, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(shared[1].cpus, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(shared[2].cpus, shared[1].cpus);
  const auto third = stage_cpu_teams(parse_stages("0-3@cpu:2", 4, {8, 0}), eight, 64);
  EXPECT_EQ(third[0].cpus, (std::vector<int>{6, 7}));
  EXPECT_EQ(stage_cpu_teams(parse_stages("0-1@cpu:0,2-3@cpu:1", 4, {8, 0}), eight, 2)[1].threads, 2);
  EXPECT_EQ(error_of([&] { stage_cpu_teams({{0, 3, StageDevice::parse("cuda:0")}}, eight, 64); }),
            "CPU teams: the stage of layers 0-3 is on cuda:0");
}

}  // namespace
}  // namespace dpcore::train::pipeline
