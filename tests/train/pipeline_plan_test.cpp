// Pipeline stage placement: --stages parsed into stages in layer order, every way it can be
// wrong refused with the value named, and --pipeline's balanced split (its slowest stage
// against every possible split, enumerated).
#include <algorithm>
#include <functional>
#include <limits>
#include <numeric>
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

// Calls fn(split) for every way to cut n layers into `stages` contiguous non-empty stages,
// split[s] = (first, last) layer of stage s.
void for_each_split(int n, int stages, const std::function<void(const std::vector<std::pair<int, int>>&)>& fn) {
  // A split is a choice of stages-1 cut points among the n-1 gaps.
  std::vector<int> gaps(n - 1, 0);
  std::fill(gaps.end() - (stages - 1), gaps.end(), 1);
  do {
    std::vector<std::pair<int, int>> split;
    int first = 0;
    for (int i = 0; i < n; ++i)
      if (i == n - 1 || gaps[i]) split.emplace_back(first, i), first = i + 1;
    fn(split);
  } while (std::next_permutation(gaps.begin(), gaps.end()));
}

double stage_cost(const std::vector<double>& costs, int first, int last) {
  return std::accumulate(costs.begin() + first, costs.begin() + last + 1, 0.0);
}

// The smallest possible cost of the slowest stage, over every way to cut `costs` into
// `stages` contiguous non-empty stages whose every stage `fits` (all of them, by default).
double slowest_stage_by_enumeration(const std::vector<double>& costs, int stages,
                                    const std::function<bool(int, int, int)>& fits = {}) {
  double best = 1e300;
  for_each_split(int(costs.size()), stages, [&](const std::vector<std::pair<int, int>>& split) {
    double slowest = 0;
    for (size_t s = 0; s < split.size(); ++s) {
      if (fits && !fits(int(s), split[s].first, split[s].second)) return;
      slowest = std::max(slowest, stage_cost(costs, split[s].first, split[s].second));
    }
    best = std::min(best, slowest);
  });
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

// Random layers (times, held and backward bytes, inputs), 1f1b's live micro-batches (P - s),
// and a limit between the least any split needs and what the fastest split needs: the
// split chosen fits, and its slowest stage is as fast as any split that fits allows.
TEST(BalanceStages, UnderAMemoryLimitTheSlowestStageIsAsFastAsAnySplitThatFitsAllows) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> cost(0.1, 5.0);
  std::uniform_int_distribution<int64_t> bytes(1, 1 << 20);
  int constrained = 0;
  for (int n = 2; n <= 9; ++n)
    for (int p = 2; p <= std::min(n, 4); ++p) {
      std::vector<double> costs(n);
      for (double& c : costs) c = cost(rng);
      StageMemory memory;
      for (int i = 0; i < n; ++i) {
        memory.ops.push_back({OpBytes{bytes(rng), i == 0 ? 0 : bytes(rng) / 4, bytes(rng)}});
        if (i % 3 == 0 && i + 1 < n) memory.ops.back().push_back(OpBytes{bytes(rng), 0, bytes(rng)});  // fused with i + 1
        memory.input_bytes.push_back(bytes(rng));
      }
      for (int s = 0; s < p; ++s) memory.live.push_back(p - s);
      std::vector<StageDevice> devices(size_t(p), cpu_team(0));
      // The fastest split's largest stage, and the least largest stage any split has.
      int64_t fastest_needs = 0, least = std::numeric_limits<int64_t>::max();
      const std::vector<Stage> fastest = balance_stages(costs, p, devices);
      for (size_t s = 0; s < fastest.size(); ++s)
        fastest_needs = std::max(fastest_needs, memory.stage_bytes(int(s), fastest[s].first_layer, fastest[s].last_layer));
      for_each_split(n, p, [&](const std::vector<std::pair<int, int>>& split) {
        int64_t largest = 0;
        for (size_t s = 0; s < split.size(); ++s)
          largest = std::max(largest, memory.stage_bytes(int(s), split[s].first, split[s].second));
        least = std::min(least, largest);
      });
      memory.limit_mb = double(least + fastest_needs) / 2 / (1 << 20);
      constrained += least < fastest_needs;
      const auto fits = [&](int s, int first, int last) {
        return double(memory.stage_bytes(s, first, last)) <= memory.limit_mb * (1 << 20);
      };
      const std::vector<Stage> stages = balance_stages(costs, p, devices, &memory);
      ASSERT_EQ(int(stages.size()), p);
      double slowest = 0;
      for (int s = 0; s < p; ++s) {
        EXPECT_EQ(stages[s].first_layer, s == 0 ? 0 : stages[s - 1].last_layer + 1) << "n " << n << " p " << p;
        EXPECT_TRUE(fits(s, stages[s].first_layer, stages[s].last_layer)) << "n " << n << " p " << p << " stage " << s;
        slowest = std::max(slowest, stage_cost(costs, stages[s].first_layer, stages[s].last_layer));
      }
      EXPECT_EQ(stages.back().last_layer, n - 1);
      EXPECT_DOUBLE_EQ(slowest, slowest_stage_by_enumeration(costs, p, fits)) << "n " << n << " p " << p;
    }
  EXPECT_GT(constrained, 10) << "cases where the limit ruled out the fastest split";
}

// Stage s of layers first..last: live[s] x (its input, above layer 0, + its activations:
// its ops' held bytes and the input its first op let go of), the gradient from above
// (layer last + 1's input) and its largest backward; with --recompute live[s] inputs and
// the activations once. Layers 0-1 as one fused op count as the op when a stage holds both.
TEST(StageMemory, AStageHoldsItsLiveMicroBatchesTheGradientFromAboveAndOneBackward) {
  StageMemory m;
  m.ops = {{OpBytes{100, 0, 7}, OpBytes{90, 0, 9}}, {OpBytes{20, 5, 50}}, {OpBytes{3, 0, 1}}};
  m.input_bytes = {1000, 400, 30};
  m.live = {3, 2, 1};
  EXPECT_EQ(m.stage_bytes(0, 0, 0), 3 * 100 + 400 + 7);                // stage 0's input is the batch's: a view
  EXPECT_EQ(m.stage_bytes(1, 1, 2), 2 * (400 + 5 + 20 + 3) + 0 + 50);   // the last stage receives no gradient
  EXPECT_EQ(m.stage_bytes(0, 0, 1), 3 * 90 + 30 + 9);                  // the fused op, not its layers
  EXPECT_EQ(m.stage_bytes(0, 0, 2), 3 * (90 + 3) + 0 + 9);
  m.recompute = true;
  EXPECT_EQ(m.stage_bytes(1, 1, 2), 2 * 400 + (5 + 20 + 3) + 50);
}

// Held bytes of 4, 1, 1 and 4 MiB, equal times, two stages live 2 and 1 (1f1b's): the
// fastest split, 0-1 | 2-3, needs 2 x 5 MiB on stage 0; the least any split needs is 8 MiB,
// 0 | 1-3 (2 x 4, and 6). 7 MiB is refused, naming the limit, the least and its split; 8
// takes 0 | 1-3.
TEST(BalanceStages, AMemoryLimitNoSplitKeepsIsRefusedNamingTheLeastNeeded) {
  const int64_t mib = 1 << 20;
  StageMemory m;
  m.ops = {{OpBytes{4 * mib, 0, 0}}, {OpBytes{mib, 0, 0}}, {OpBytes{mib, 0, 0}}, {OpBytes{4 * mib, 0, 0}}};
  m.input_bytes = {0, 0, 0, 0};
  m.live = {2, 1};
  const std::vector<StageDevice> devices = {cpu_team(0), cpu_team(1)};
  EXPECT_EQ(stages_text(balance_stages({1, 1, 1, 1}, 2, devices, &m)), "0-1@cpu:0,2-3@cpu:1");  // no limit
  m.limit_mb = 7;
  EXPECT_EQ(error_of([&] { balance_stages({1, 1, 1, 1}, 2, devices, &m); }),
            "--stage-memory-mb 7: no split of the 4 layers into 2 stages holds at most that on every stage; the least "
            "any split needs is 8.000 MiB (layers 0,1-3)");
  m.limit_mb = 8;
  EXPECT_EQ(stages_text(balance_stages({1, 1, 1, 1}, 2, devices, &m)), "0@cpu:0,1-3@cpu:1");
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
