// Pipeline x data parallel in one process (train/pipeline/hybrid_runner.h): P stages x D
// replicas train ddp's parameters with --accum M (the same bits for D = 2, where a sum of
// two replicas has one order; within float32's 1e-6 for D = 3) and one device's with --accum
// M within 1e-6; batch norm's running statistics are ddp's, with --batchnorm local and with
// sync (each stage's batch norms synchronised over its replicas); a short batch that leaves
// a replica without rows trains on (and is refused, naming the replica, under sync); each
// stage reduces its own part of the flat gradient buffer, the parts covering it; a failing
// stage ends every replica's step at once, naming itself; what the runner cannot take is
// refused naming the flags.
#include <chrono>
#include <functional>

#include <gtest/gtest.h>

#include "layers/zoo.h"
#include "support/error_of.h"
#include "train/bert_batches.h"
#include "train/equivalence.h"
#include "train/pipeline/hybrid_runner.h"

namespace dpcore::train::pipeline {
namespace {

using dpcore::testing::error_of;
using dpcore::testing::HostBatch;
using dpcore::testing::make_batch;

// 8 layers: conv relu pool flatten linear relu linear logsoftmax. No batch norm: ddp's
// replicas normalise with their pieces, one device with whole micro-batches.
std::unique_ptr<Model> plain_net() {
  auto net = layers::parse_layer_spec("conv(6,3,s2,p1) relu pool(2) flatten linear(16) relu linear(10)", {3, 32, 32});
  return std::make_unique<Model>(std::move(net), Shape{3, 32, 32}, Device::cpu(), DType::Float32, 5);
}

ParallelOptions hybrid_options(const std::string& stages, const std::string& schedule, int micro_batches,
                               int replicas, const std::string& split = "even") {
  ParallelOptions o;
  o.replicas = replicas, o.split = split, o.timeout_s = 60;
  o.pipeline.stages = stages, o.pipeline.schedule = schedule, o.pipeline.micro_batches = micro_batches;
  return o;
}

ParallelOptions ddp_options(int replicas, const std::string& split = "even", const std::string& batchnorm = "local") {
  ParallelOptions o;
  o.replicas = replicas, o.split = split, o.batchnorm = batchnorm, o.timeout_s = 60;
  return o;
}

// Parameters then buffers of the root after `steps` steps on batches of n.
std::vector<float> trained(StepRunner& runner, int64_t n, int steps) {
  std::vector<float> out = testing::train_with(runner, n, steps);
  const std::vector<float> buffers = runner.model().buffers().values().to_vector<float>();
  out.insert(out.end(), buffers.begin(), buffers.end());
  return out;
}

struct HybridCase {
  const char* stages;
  const char* schedule;
  int micro_batches, replicas;
  const char* split;
  bool recompute = false;
};

const HybridCase kCases[] = {
    {"0-2@cpu:0,3-7@cpu:1", "gpipe", 2, 2, "even"},
    {"0@cpu:0,1-4@cpu:1,5-7@cpu:0", "1f1b", 3, 2, "weights:5,1"},  // P 3, uneven stages and shares
    {"0-3@cpu:0,4@cpu:1,5@cpu:0,6-7@cpu:1", "1f1b", 4, 2, "even"},  // P 4 (stages share the teams of 2 cores)
    {"0-2@cpu:0,3-7@cpu:1", "naive", 1, 3, "even"},
    {"0-4@cpu:0,5-7@cpu:1", "gpipe", 3, 3, "weights:5,1,2"},
};

TEST(Hybrid, StagesTimesReplicasTrainDdpsAndOneDevicesParameters) {
  constexpr int64_t kBatch = 14;
  constexpr int kSteps = 3;
  for (const HybridCase& c : kCases) {
    SCOPED_TRACE(std::string(c.stages) + " " + c.schedule + " M " + std::to_string(c.micro_batches) + " D " +
                 std::to_string(c.replicas) + " " + c.split);
    auto hybrid = make_runner(plain_net(), testing::kSgd, 1,
                              hybrid_options(c.stages, c.schedule, c.micro_batches, c.replicas, c.split));
    ASSERT_NE(dynamic_cast<HybridRunner*>(hybrid.get()), nullptr) << hybrid->describe();
    auto ddp = make_runner(plain_net(), testing::kSgd, c.micro_batches, ddp_options(c.replicas, c.split));
    SingleDeviceRunner one(plain_net(), testing::kSgd, c.micro_batches);
    const std::vector<float> got = trained(*hybrid, kBatch, kSteps);
    const std::vector<float> want = trained(*ddp, kBatch, kSteps);
    if (c.replicas == 2)
      EXPECT_EQ(got, want);
    else
      EXPECT_LE(testing::relative_difference(got, want), 1e-6);
    EXPECT_LE(testing::relative_difference(got, trained(one, kBatch, kSteps)), 1e-6);
  }
}

TEST(Hybrid, BatchNormsRunningStatisticsAreDdps) {
  auto hybrid = make_runner(testing::batch_norm_net(), testing::kSgd, 1,
                            hybrid_options("0-3@cpu:0,4-7@cpu:1", "1f1b", 2, 2));
  auto ddp = make_runner(testing::batch_norm_net(), testing::kSgd, 2, ddp_options(2));
  const testing::BatchNormState got = testing::train_batch_norm_net(*hybrid);
  const testing::BatchNormState want = testing::train_batch_norm_net(*ddp);
  EXPECT_EQ(got.params, want.params);
  ASSERT_FALSE(want.buffers.empty());
  EXPECT_EQ(got.buffers, want.buffers);
  // Replica 1 starts every step from rank 0's statistics (DDP's broadcast_buffers) and adds
  // its own pieces', as ddp's replica 1 does.
  auto replica_buffers = [](StepRunner& r) {
    return dynamic_cast<ReplicatedRunner&>(r).replica_model(1).buffers().values().to_vector<float>();
  };
  EXPECT_EQ(replica_buffers(*hybrid), replica_buffers(*ddp));
}

// batch_norm_net's 8 layers: conv bn relu res gap flatten linear logsoftmax, the res block
// holding two batch norms and its projection's; every case puts batch norms on two stages.
const HybridCase kSyncCases[] = {
    {"0-2@cpu:0,3-7@cpu:1", "gpipe", 2, 2, "even", false},
    {"0-1@cpu:0,2-3@cpu:1,4-7@cpu:0", "1f1b", 2, 2, "weights:5,2", false},  // P 3, uneven shares
    {"0-2@cpu:0,3-7@cpu:1", "1f1b", 2, 2, "even", true},  // the backward's forward joins the group again
    {"0-2@cpu:0,3-7@cpu:1", "gpipe", 2, 3, "even", false},
};

// --batchnorm sync: a stage's batch norms combine their statistics over the stage's
// replicas, so each normalises with the whole micro-batch m, as ddp's sync does: its
// parameters and running statistics (bits for D = 2; within 1e-6 for D = 3, whose sums
// over three replicas ddp and the stage groups may add in other orders), and not those of
// --batchnorm local (which would be what a group that never synchronised trains).
TEST(Hybrid, BatchNormSyncOverEachStagesReplicasTrainsDdpsSyncParameters) {
  for (const HybridCase& c : kSyncCases) {
    SCOPED_TRACE(std::string(c.stages) + " " + c.schedule + " M " + std::to_string(c.micro_batches) + " D " +
                 std::to_string(c.replicas) + " " + c.split + (c.recompute ? " --recompute" : ""));
    ParallelOptions o = hybrid_options(c.stages, c.schedule, c.micro_batches, c.replicas, c.split);
    o.batchnorm = "sync", o.pipeline.recompute = c.recompute;
    auto hybrid = make_runner(testing::batch_norm_net(), testing::kSgd, 1, o);
    ASSERT_NE(dynamic_cast<HybridRunner*>(hybrid.get()), nullptr) << hybrid->describe();
    auto ddp = make_runner(testing::batch_norm_net(), testing::kSgd, c.micro_batches,
                           ddp_options(c.replicas, c.split, "sync"));
    auto ddp_local = make_runner(testing::batch_norm_net(), testing::kSgd, c.micro_batches,
                                 ddp_options(c.replicas, c.split, "local"));
    const testing::BatchNormState got = testing::train_batch_norm_net(*hybrid);
    const testing::BatchNormState want = testing::train_batch_norm_net(*ddp);
    if (c.replicas == 2) {
      EXPECT_EQ(got.params, want.params);
      EXPECT_EQ(got.buffers, want.buffers);
    } else {
      EXPECT_LE(testing::relative_difference(got.params, want.params), 1e-6);
      EXPECT_LE(testing::relative_difference(got.buffers, want.buffers), 1e-6);
    }
    const testing::BatchNormState local = testing::train_batch_norm_net(*ddp_local);
    EXPECT_GT(testing::relative_difference(got.params, local.params), 1e-4);
  }
}

// Under sync every replica's stages must join every micro-batch's batch norms: 3 samples in
// 2 micro-batches over 2 replicas give replica 1 no piece of the second. Refused before any
// stage waits in its group, naming the replica, the shares and the flag to lower.
TEST(Hybrid, BatchNormSyncRefusesABatchThatLeavesAReplicaWithoutAPiece) {
  ParallelOptions o = hybrid_options("0-2@cpu:0,3-7@cpu:1", "gpipe", 2, 2);
  o.batchnorm = "sync";
  auto hybrid = make_runner(testing::batch_norm_net(), testing::kSgd, 1, o);
  HostBatch b = make_batch(3, 3);
  const auto began = std::chrono::steady_clock::now();
  const std::string error = error_of([&] { hybrid->step(b.batch); });
  EXPECT_NE(error.find("--batchnorm sync: replica 1 gets no samples of a micro-batch of 1 (shares 1,0)"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("fewer --micro-batches or --replicas"), std::string::npos) << error;
  EXPECT_LT(std::chrono::steady_clock::now() - began, std::chrono::seconds(20));
  // The runner is still whole: a batch every replica has pieces of trains.
  HostBatch whole = make_batch(8, 4);
  EXPECT_NO_THROW(hybrid->step(whole.batch));
}

// 3 samples in 2 micro-batches over 2 replicas: pieces 1,1 then 1,0; 1 sample: 1,0 then
// none, so replica 1 has no rows at all and its stages only reduce.
TEST(Hybrid, AShortBatchThatLeavesAReplicaWithoutRowsTrainsOn) {
  for (int64_t n : {3, 1}) {
    SCOPED_TRACE(n);
    auto hybrid = make_runner(plain_net(), testing::kSgd, 1, hybrid_options("0-2@cpu:0,3-7@cpu:1", "gpipe", 2, 2));
    auto ddp = make_runner(plain_net(), testing::kSgd, 2, ddp_options(2));
    EXPECT_EQ(trained(*hybrid, n, 2), trained(*ddp, n, 2));
  }
}

TEST(Hybrid, EachStageReducesItsOwnPartOfTheGradientBuffer) {
  auto model = plain_net();
  // conv (weight, bias) | relu pool flatten (none) | linear linear: the middle stage is empty.
  const auto stages = parse_stages("0@cpu:0,1-3@cpu:1,4-7@cpu:2", 8, {3, 0});  // (parsed only: no teams needed)
  const std::vector<FlatRange> ranges = stage_parameter_ranges(*model, stages);
  ASSERT_EQ(ranges.size(), 3u);
  const auto& entries = model->parameters().entries();
  EXPECT_EQ(ranges[0].first, 0);
  EXPECT_EQ(ranges[0].size, entries[2].offset);  // up to the first linear's weight
  EXPECT_EQ(ranges[1].size, 0);
  EXPECT_EQ(ranges[2].first, entries[2].offset);
  EXPECT_EQ(ranges[2].first + ranges[2].size, model->parameters().total());
}

TEST(Hybrid, AWeightTiedAcrossStagesIsRefusedNamingIt) {
  // BERT's masked-LM decoder is the word embedding matrix: the embeddings on one stage and
  // the head on another would leave that gradient to two stages.
  auto bert = testing::bert_net(true, DType::Float32);
  const int layers = int(bert->net().size());
  const auto stages = parse_stages("0@cpu:0,1-" + std::to_string(layers - 1) + "@cpu:1", layers, {2, 0});
  const std::string error = error_of([&] { stage_parameter_ranges(*bert, stages); });
  EXPECT_NE(error.find("word_embeddings.weight"), std::string::npos) << error;
  EXPECT_NE(error.find("(a tied weight)"), std::string::npos) << error;
}

TEST(Hybrid, APipelineOfOneReplicaRefusesAWeightTiedAcrossStagesToo) {
  // One replica's stages share one model, so they had no gradient ranges to find the tie
  // in: the stage threads accumulated into the tied gradient at once, and two runs of
  // bert-tiny-mlm on "0@cpu:0,1-2@cpu:1" saved different weights.
  auto bert = testing::bert_net(true, DType::Float32);
  const int layers = int(bert->net().size());
  const std::string error = error_of([&] {
    make_runner(std::move(bert), testing::kSgd, 1,
                hybrid_options("0@cpu:0,1-" + std::to_string(layers - 1) + "@cpu:1", "gpipe", 2, 1));
  });
  EXPECT_NE(error.find("word_embeddings.weight"), std::string::npos) << error;
  EXPECT_NE(error.find("(a tied weight)"), std::string::npos) << error;
}

TEST(Hybrid, AFailingStageEndsEveryReplicasStepAtOnceNamingItself) {
  auto hybrid = make_runner(plain_net(), testing::kSgd, 1, hybrid_options("0-3@cpu:0,4-7@cpu:1", "gpipe", 2, 2));
  HostBatch b = make_batch(8, 3);
  b.labels[7] = 42;  // replica 1's last row (micro-batch 1, rows 6-7): class 42 of 10
  const auto began = std::chrono::steady_clock::now();
  const std::string error = error_of([&] { hybrid->step(b.batch); });
  EXPECT_EQ(error.rfind("replica 1 failed: pipeline stage 1 failed: ", 0), 0u) << error;
  EXPECT_NE(error.find("42"), std::string::npos) << error;
  // Replica 0's stages waited in their reductions: the abort released them, long before the 60 s timeout.
  EXPECT_LT(std::chrono::steady_clock::now() - began, std::chrono::seconds(20));
}

TEST(Hybrid, WhatTheRunnerCannotTakeIsRefusedNamingIt) {
  struct Case {
    std::function<void(ParallelOptions&)> set;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {[](ParallelOptions& o) { o.mode = "dp"; }, "--stages 0-3@cpu:0,4-7@cpu:1 with --replicas 2 --mode dp"},
      {[](ParallelOptions& o) { o.split = "adaptive"; }, "with --replicas 2 --split adaptive"},
      {[](ParallelOptions& o) { o.failure.on_failure = "shrink"; }, "with --replicas 2 --on-replica-failure shrink"},
      {[](ParallelOptions& o) { o.backend = "nccl"; }, "with --backend nccl"},
  };
  for (const Case& c : cases) {
    ParallelOptions o = hybrid_options("0-3@cpu:0,4-7@cpu:1", "gpipe", 2, 2);
    c.set(o);
    const std::string error = error_of([&] { make_runner(plain_net(), testing::kSgd, 1, o); });
    EXPECT_NE(error.find(c.expected), std::string::npos) << error;
  }
}

}  // namespace
}  // namespace dpcore::train::pipeline
