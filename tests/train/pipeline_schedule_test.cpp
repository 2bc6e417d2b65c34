// Pipeline schedules: each stage's order of forwards and backwards under naive, gpipe and
// 1f1b, the simulated run's waits (every op after its input, no stage running two ops at
// once), the bubble against (P-1)/(M+P-1), 1f1b's memory bound, and the refusals.
#include <gtest/gtest.h>

#include "support/error_of.h"
#include "train/pipeline/pipeline_schedule.h"

namespace dpcore::train::pipeline {
namespace {

using dpcore::testing::error_of;
using Kind = PipelineOp::Kind;

PipelineOp F(int m) { return {Kind::Forward, m}; }
PipelineOp B(int m) { return {Kind::Backward, m}; }

PipelineTimeline unit_run(Schedule schedule, int stages, int micro_batches) {
  return simulate(stage_orders(schedule, stages, micro_batches), micro_batches, std::vector<double>(stages, 1.0),
                  std::vector<double>(stages, 1.0));
}

const TimedOp& find(const PipelineTimeline& t, int stage, PipelineOp op) {
  for (const TimedOp& x : t.stages[stage])
    if (x.op == op) return x;
  throw std::runtime_error("stage " + std::to_string(stage) + " never ran " + op.str());
}

TEST(PipelineSchedule, NamesParseBackAndUnknownOnesAreRefused) {
  for (Schedule s : {Schedule::Naive, Schedule::GPipe, Schedule::OneFOneB}) EXPECT_EQ(parse_schedule(schedule_name(s)), s);
  EXPECT_EQ(error_of([] { parse_schedule("pipedream"); }),
            "--schedule 'pipedream': unknown pipeline schedule (expected naive, gpipe or 1f1b)");
}

TEST(PipelineSchedule, GPipeRunsEveryForwardThenEveryBackward) {
  EXPECT_EQ(stage_order(Schedule::GPipe, 1, 3, 3), (std::vector<PipelineOp>{F(0), F(1), F(2), B(0), B(1), B(2)}));
  EXPECT_EQ(stage_order(Schedule::Naive, 0, 4, 1), (std::vector<PipelineOp>{F(0), B(0)}));
}

TEST(PipelineSchedule, OneFOneBWarmsUpByTheStagesBelowThenAlternates) {
  // 4 stages, 6 micro-batches: stage 0 runs 3 forwards ahead, the last stage none.
  EXPECT_EQ(stage_order(Schedule::OneFOneB, 0, 4, 6),
            (std::vector<PipelineOp>{F(0), F(1), F(2), F(3), B(0), F(4), B(1), F(5), B(2), B(3), B(4), B(5)}));
  EXPECT_EQ(stage_order(Schedule::OneFOneB, 3, 4, 6),
            (std::vector<PipelineOp>{F(0), B(0), F(1), B(1), F(2), B(2), F(3), B(3), F(4), B(4), F(5), B(5)}));
  // Fewer micro-batches than the warm-up wants: all forwards, then all backwards.
  EXPECT_EQ(stage_order(Schedule::OneFOneB, 0, 4, 2), (std::vector<PipelineOp>{F(0), F(1), B(0), B(1)}));
}

TEST(PipelineSchedule, EveryStageRunsEachOpOnceAndTheRunRespectsEveryWait) {
  for (Schedule schedule : {Schedule::GPipe, Schedule::OneFOneB})
    for (int p = 1; p <= 4; ++p)
      for (int m = 1; m <= 8; ++m) {
        // Uneven stages: stage s twice as slow as stage 0 in its backward, transfers cost.
        std::vector<double> fwd, bwd;
        for (int s = 0; s < p; ++s) fwd.push_back(1.0 + 0.25 * s), bwd.push_back(2.0 + 0.5 * s);
        const auto t = simulate(stage_orders(schedule, p, m), m, fwd, bwd, 0.125);
        const std::string where = schedule_name(schedule) + " P " + std::to_string(p) + " M " + std::to_string(m);
        for (int s = 0; s < p; ++s) {
          ASSERT_EQ(int(t.stages[s].size()), 2 * m) << where;
          for (size_t i = 1; i < t.stages[s].size(); ++i)
            EXPECT_GE(t.stages[s][i].start, t.stages[s][i - 1].end) << where << ": stage " << s << " overlaps";
          for (int mb = 0; mb < m; ++mb) {
            const TimedOp& f = find(t, s, F(mb));
            const TimedOp& b = find(t, s, B(mb));
            EXPECT_GE(b.start, f.end) << where;
            if (s > 0) EXPECT_GE(f.start, find(t, s - 1, F(mb)).end + 0.125) << where;
            if (s + 1 < p) EXPECT_GE(b.start, find(t, s + 1, B(mb)).end + 0.125) << where;
            EXPECT_DOUBLE_EQ(f.end - f.start, fwd[s]);
            EXPECT_DOUBLE_EQ(b.end - b.start, bwd[s]);
          }
        }
      }
}

TEST(PipelineSchedule, UnitTicksGiveTheBubbleOfTheFormula) {
  // With every op one tick, each stage works 2M of 2(M+P-1) ticks.
  for (Schedule schedule : {Schedule::GPipe, Schedule::OneFOneB})
    for (int p = 1; p <= 4; ++p)
      for (int m = 1; m <= 8; ++m) {
        const auto t = unit_run(schedule, p, m);
        EXPECT_DOUBLE_EQ(t.makespan, 2.0 * (m + p - 1)) << schedule_name(schedule) << " P " << p << " M " << m;
        EXPECT_NEAR(t.bubble_fraction(), double(p - 1) / (m + p - 1), 1e-12) << schedule_name(schedule);
      }
  EXPECT_NEAR(unit_run(Schedule::Naive, 4, 1).bubble_fraction(), 3.0 / 4.0, 1e-12);
}

TEST(PipelineSchedule, GPipeMakespanWithEqualStagesIsTheFillPlusTheWork) {
  // Equal stages of forward f and backward b: the last forward leaves stage 0 at M f, reaches
  // the last stage after (P-1) f more, and the backwards return in (P-1) b + M b.
  const int p = 3, m = 5;
  const auto t = simulate(stage_orders(Schedule::GPipe, p, m), m, {1.5, 1.5, 1.5}, {2.5, 2.5, 2.5});
  EXPECT_DOUBLE_EQ(t.makespan, (m + p - 1) * (1.5 + 2.5));
}

TEST(PipelineSchedule, OneFOneBKeepsAtMostTheStagesBelowAliveAndGPipeKeepsAll) {
  for (int p = 1; p <= 4; ++p)
    for (int m = 1; m <= 8; ++m)
      for (int s = 0; s < p; ++s) {
        EXPECT_EQ(peak_live_activations(stage_order(Schedule::GPipe, s, p, m)), m);
        const int live = peak_live_activations(stage_order(Schedule::OneFOneB, s, p, m));
        EXPECT_EQ(live, std::min(p - s, m)) << "P " << p << " M " << m << " stage " << s;
        EXPECT_LE(live, p);
      }
}

TEST(PipelineSchedule, AnOrderThatCannotFinishNamesWhereEachStageIsStuck) {
  // Stage 1 wants micro-batch 1 first; stage 0 sends it only after micro-batch 0's
  // backward, which needs stage 1's.
  const std::vector<std::vector<PipelineOp>> orders = {{F(0), B(0), F(1), B(1)}, {F(1), F(0), B(0), B(1)}};
  EXPECT_EQ(error_of([&] { simulate(orders, 2, {1, 1}, {1, 1}); }),
            "pipeline schedule cannot finish: every stage waits on another (stage 0 at B0, stage 1 at F1)");
}

TEST(PipelineSchedule, OrdersThatRepeatOrLeaveOutOpsAreRefused) {
  EXPECT_EQ(error_of([] { simulate({{F(0), F(0), B(0)}}, 1, {1}, {1}); }), "pipeline stage 0: runs F0 twice");
  EXPECT_EQ(error_of([] { simulate({{F(0), B(0)}}, 2, {1}, {1}); }), "pipeline stage 0: never runs F1");
  EXPECT_EQ(error_of([] { simulate({{B(0), F(0)}}, 1, {1}, {1}); }), "pipeline stage 0: runs B0 before its forward");
  EXPECT_EQ(error_of([] { stage_order(Schedule::Naive, 0, 2, 4); }),
            "--schedule naive runs the batch whole: --micro-batches 4 needs --schedule gpipe or 1f1b");
}

TEST(MicroBatches, SplitAsTensorSplitDoes) {
  EXPECT_EQ(micro_batch_sizes(10, 4), (std::vector<int64_t>{3, 3, 2, 2}));
  EXPECT_EQ(micro_batch_sizes(8, 8), (std::vector<int64_t>(8, 1)));
  EXPECT_EQ(micro_batch_sizes(7, 1), (std::vector<int64_t>{7}));
  EXPECT_EQ(error_of([] { micro_batch_sizes(6, 8); }),
            "--micro-batches 8 is larger than the batch (6 samples): a micro-batch would be empty");
  EXPECT_EQ(error_of([] { micro_batch_sizes(6, 0); }), "--micro-batches 0: needs at least 1");
}

TEST(TickTable, GPipeOfTwoStagesAndTwoMicroBatches) {
  // Worked by hand from the rules: stage 1 starts a tick late, each backward waits for the
  // stage above.
  EXPECT_EQ(tick_table(Schedule::GPipe, 2, 2),
            "pipeline gpipe: 2 stages, 2 micro-batches, one tick per forward or backward\n"
            "tick  stage 0  stage 1  \n"
            "0     F0       .        \n"
            "1     F1       F0       \n"
            "2     .        F1       \n"
            "3     .        B0       \n"
            "4     B0       B1       \n"
            "5     B1       .        \n"
            "bubble 0.333 of stage time ((P-1)/(M+P-1) = 1/3 = 0.333); live activations per stage at most: 2 2\n");
}

}  // namespace
}  // namespace dpcore::train::pipeline
