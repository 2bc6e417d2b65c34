// The pipeline's step-time model (train/predict/pipeline_model.h) on profiles worked out by
// hand: P equal stages and free messages give the schedule's formula, (M+P-1) ticks and a
// bubble of (P-1)/(M+P-1); messages cost both their ends; each stage's reduction among its
// replicas starts at its own last backward; the compute factor scales the compute only.
#include <gtest/gtest.h>

#include "train/predict/pipeline_model.h"

namespace dpcore::train::scaling {
namespace {

using pipeline::Schedule;

// `layers` layers of forward 1 s and backward 2 s, each output `bytes`, parameters 1 MB each.
PipelineProfile equal_layers(int layers, int64_t bytes) {
  PipelineProfile p;
  for (int i = 0; i < layers; ++i) {
    p.layers.push_back({1.0, 2.0});
    p.output_bytes.push_back(bytes);
    p.param_bytes.push_back(1000000);
  }
  p.optimizer_s = 0.5;
  return p;
}

const Link kFree{0.0, 1e300};
const Cluster kCluster{"test", 8, {1e-3, 1e9}, {1e-3, 1e9}, 0};

TEST(PipelineModel, EqualStagesAndFreeMessagesGiveTheFormula) {
  for (Schedule schedule : {Schedule::GPipe, Schedule::OneFOneB}) {
    for (int M : {1, 4, 8}) {
      const auto stages = pipeline::parse_stages("0-1@cpu:0,2-3@cpu:1,4-5@cpu:2,6-7@cpu:3", 8, {4, 0});
      const PipelinePrediction p = predict_pipeline(equal_layers(8, 100), stages, schedule, M, 1, kFree, kCluster,
                                                    Algorithm::Ring);
      // A stage: forward 2 s, backward 4 s; M + P - 1 of each.
      EXPECT_DOUBLE_EQ(p.pipeline_s, (M + 3) * 6.0) << M;
      EXPECT_NEAR(p.bubble, 3.0 / (M + 3), 1e-12) << M;
      EXPECT_DOUBLE_EQ(p.step_s, p.pipeline_s + 0.5) << M;
      EXPECT_EQ(p.p2p_bytes, 3 * 2 * M * 100) << M;
      EXPECT_DOUBLE_EQ(p.exposed_allreduce_s, 0.0);
    }
  }
}

TEST(PipelineModel, MessagesCostBothEnds) {
  const Link link{0.25, 100.0};  // 0.25 s + bytes / 100 per end
  const auto stages = pipeline::parse_stages("0@cpu:0,1@cpu:1,2@cpu:2", 3, {3, 0});
  const PipelinePrediction p = predict_pipeline(equal_layers(3, 50), stages, Schedule::GPipe, 2, 1, link, kCluster,
                                                Algorithm::Ring);
  ASSERT_EQ(p.stage_forward_s.size(), 3u);
  EXPECT_DOUBLE_EQ(p.stage_forward_s[0], 1.0 + 0.75);        // sends up
  EXPECT_DOUBLE_EQ(p.stage_forward_s[1], 1.0 + 2 * 0.75);    // receives and sends
  EXPECT_DOUBLE_EQ(p.stage_backward_s[2], 2.0 + 0.75);       // receives from below in forward, sends down here
  EXPECT_DOUBLE_EQ(p.transfer_s, 1.5);
}

TEST(PipelineModel, EachStagesReductionStartsAtItsLastBackward) {
  const auto stages = pipeline::parse_stages("0-1@cpu:0,2-3@cpu:1", 4, {2, 0});
  const PipelineProfile profile = equal_layers(4, 100);
  const PipelinePrediction one = predict_pipeline(profile, stages, Schedule::GPipe, 4, 1, kFree, kCluster, Algorithm::Ring);
  const PipelinePrediction two = predict_pipeline(profile, stages, Schedule::GPipe, 4, 2, kFree, kCluster, Algorithm::Ring);
  // Stage 1 ends its backwards one stage-backward (4 s) before stage 0: its reduction of
  // 2 MB over 2 replicas (2 x (1 ms + 1 MB / 1 GB/s) = 4 ms) is hidden; stage 0's is not.
  const double reduction = allreduce_seconds(2e6, 2, kCluster, Algorithm::Ring);
  EXPECT_DOUBLE_EQ(two.pipeline_s, one.pipeline_s);
  EXPECT_NEAR(two.exposed_allreduce_s, reduction, 1e-12);
  EXPECT_NEAR(two.step_s, one.step_s + reduction, 1e-12);
}

TEST(PipelineModel, TheComputeFactorScalesComputeNotMessages) {
  const Link link{0.25, 1e300};
  const auto stages = pipeline::parse_stages("0@cpu:0,1@cpu:1", 2, {2, 0});
  const PipelinePrediction p = predict_pipeline(equal_layers(2, 8), stages, Schedule::OneFOneB, 3, 1, link, kCluster,
                                                Algorithm::Ring, 1.5);
  EXPECT_DOUBLE_EQ(p.stage_forward_s[0], 1.5 + 0.25);
  EXPECT_DOUBLE_EQ(p.stage_backward_s[1], 3.0 + 0.25);
  EXPECT_GT(p.step_s, p.pipeline_s + 0.5 * 1.5 - 1e-12);
}

TEST(PipelineModel, ProfilesAndStagesThatDisagreeAreRefused) {
  PipelineProfile p = equal_layers(4, 8);
  p.output_bytes.pop_back();
  const auto stages = pipeline::parse_stages("0-1@cpu:0,2-3@cpu:1", 4, {2, 0});
  EXPECT_THROW(predict_pipeline(p, stages, Schedule::GPipe, 2, 1, kFree, kCluster, Algorithm::Ring), Error);
  const auto short_stages = pipeline::parse_stages("0-1@cpu:0,2@cpu:1", 3, {2, 0});
  EXPECT_THROW(predict_pipeline(equal_layers(4, 8), short_stages, Schedule::GPipe, 2, 1, kFree, kCluster, Algorithm::Ring),
               Error);
}

}  // namespace
}  // namespace dpcore::train::scaling
