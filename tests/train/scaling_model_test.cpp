// The step-time model of train/predict/scaling_model.h: its formulas on cases small enough to work
// out by hand, and the properties any such model must have.
#include "train/predict/scaling_model.h"

#include <gtest/gtest.h>

#include "kernels/error.h"

namespace dpcore::train::scaling {
namespace {

// Two replicas per node; 1 us and 1 GB/s inside, 10 us and 0.1 GB/s between nodes.
Cluster toy_cluster() { return {"toy", 2, {1e-6, 1e9}, {10e-6, 1e8}}; }

TEST(ScalingModel, RingAllreduceIsTwoRMinusOneStepsOfAnRthOfTheMessage) {
  const Cluster c = toy_cluster();
  // 2 replicas, one node: 2 steps of (1 us + 0.5 MB / 1 GB/s = 500 us).
  EXPECT_DOUBLE_EQ(allreduce_seconds(1e6, 2, c, Algorithm::Ring), 2 * (1e-6 + 0.5e-3));
  // 4 replicas cross nodes: 6 steps at the inter-node link's pace.
  EXPECT_DOUBLE_EQ(allreduce_seconds(1e6, 4, c, Algorithm::Ring), 6 * (10e-6 + 0.25e6 / 1e8));
  EXPECT_EQ(allreduce_seconds(1e6, 1, c, Algorithm::Ring), 0.0);
  EXPECT_EQ(allreduce_seconds(0, 4, c, Algorithm::Ring), 0.0);
}

TEST(ScalingModel, TreeAllreducePaysLogRLatenciesAndTwoPassesOfTheMessage) {
  const Cluster c = toy_cluster();
  // 8 replicas: depth 3, up and down.
  EXPECT_DOUBLE_EQ(allreduce_seconds(1e6, 8, c, Algorithm::Tree), 2 * (3 * 10e-6 + 1e6 / 1e8));
  // 5 replicas still need depth 3.
  EXPECT_DOUBLE_EQ(allreduce_seconds(1e6, 5, c, Algorithm::Tree), 2 * (3 * 10e-6 + 1e6 / 1e8));
}

TEST(ScalingModel, RingWinsLargeMessagesOnFewReplicasAndTreeWinsAtScale) {
  const Cluster& c = preset("h200x8-nvlink-ib400");
  EXPECT_LT(allreduce_seconds(1e9, 8, c, Algorithm::Ring), allreduce_seconds(1e9, 8, c, Algorithm::Tree));
  EXPECT_LT(allreduce_seconds(4096, 8, c, Algorithm::Tree), allreduce_seconds(4096, 8, c, Algorithm::Ring));
  EXPECT_LT(allreduce_seconds(1e9, 1024, c, Algorithm::Tree), allreduce_seconds(1e9, 1024, c, Algorithm::Ring));
}

// Three parameters of 1 MB; backward takes 10 ms and finalises them at 2, 5 and 9 ms.
StepProfile toy_profile() {
  StepProfile p;
  p.forward_s = 4e-3, p.backward_s = 10e-3, p.optimizer_s = 1e-3;
  p.param_bytes = {1000000, 1000000, 1000000};
  p.grad_ready_s = {9e-3, 5e-3, 2e-3};  // parameter 2 is the last layer's: ready first
  p.input_bytes = 100000, p.output_bytes = 1000;
  return p;
}

// Every DDP step also reduces its loss (one float32) before the optimizer step: latency.
double loss_allreduce(int replicas, const Cluster& c) { return allreduce_seconds(4, replicas, c, Algorithm::Ring); }

TEST(ScalingModel, DdpHidesBucketsThatFinishBeforeBackwardEnds) {
  const StepProfile p = toy_profile();
  const Cluster c = toy_cluster();
  // One bucket per parameter, in the order backward finalises them: 2 at 2 ms, 1 at 5 ms,
  // 0 at 9 ms. On 2 replicas each allreduce takes 2 * (1 us + 0.5 ms) = 1.002 ms: the
  // first two end before 9 ms, the last at 10.002 ms, 0.002 ms after backward.
  const Prediction d = predict_ddp(p, {{2}, {1}, {0}}, 2, c, Algorithm::Ring);
  EXPECT_NEAR(d.exposed_comm_s, 9e-3 + 1.002e-3 - 10e-3 + loss_allreduce(2, c), 1e-12);
  EXPECT_NEAR(d.step_s, 15e-3 + d.exposed_comm_s, 1e-12);
  EXPECT_NEAR(d.efficiency, 15e-3 / d.step_s, 1e-12);
  // One bucket of everything waits for the last gradient: nothing hidden but what
  // overlaps nothing.
  const Prediction whole = predict_ddp(p, {{2, 1, 0}}, 2, c, Algorithm::Ring);
  EXPECT_NEAR(whole.exposed_comm_s, 9e-3 + allreduce_seconds(3e6, 2, c, Algorithm::Ring) - 10e-3 + loss_allreduce(2, c),
              1e-12);
  EXPECT_GT(whole.exposed_comm_s, d.exposed_comm_s);
}

TEST(ScalingModel, DdpBucketsQueueOnOneStream) {
  StepProfile p = toy_profile();
  p.grad_ready_s = {1e-3, 1e-3, 1e-3};  // all ready at once: the allreduces run one after another
  const Cluster c = toy_cluster();
  const double each = allreduce_seconds(1e6, 4, c, Algorithm::Ring);
  const Prediction d = predict_ddp(p, {{2}, {1}, {0}}, 4, c, Algorithm::Ring);
  EXPECT_NEAR(d.exposed_comm_s, std::max(0.0, 1e-3 + 3 * each - 10e-3) + loss_allreduce(4, c), 1e-12);
}

// A CPU node of 2 cores holding 2 replicas of one thread each (cores_per_node = 2).
Cluster cpu_node() {
  Cluster c = toy_cluster();
  c.cores_per_node = 2;
  return c;
}

// The same 2 cores holding up to 8 replicas, and a profile whose replicas slow each other
// by 1.25 with both cores busy.
Cluster crowded_cpu_node() {
  Cluster c = cpu_node();
  c.replicas_per_node = 8;
  return c;
}
StepProfile busy_profile() {
  StepProfile p = toy_profile();
  p.busy_slowdown = 1.25;
  return p;
}

TEST(ScalingModel, CpuReplicasShareTheCoresAndSlowEachOtherByTheBusySlowdown) {
  StepProfile p = busy_profile();
  Cluster node = crowded_cpu_node();
  EXPECT_DOUBLE_EQ(compute_factor(p, node, 1), 1.0);         // the profile itself
  EXPECT_DOUBLE_EQ(compute_factor(p, node, 2), 1.25);        // both cores busy
  EXPECT_DOUBLE_EQ(compute_factor(p, node, 4), 2 * 1.25);    // 2 threads on each core
  // Two kernel threads per replica fill both cores already alone.
  p.threads = 2;
  EXPECT_DOUBLE_EQ(compute_factor(p, node, 1), 1.0);
  EXPECT_DOUBLE_EQ(compute_factor(p, node, 2), 2.0);
  // A GPU node (no cores given) gives every replica its own processor.
  EXPECT_DOUBLE_EQ(compute_factor(p, toy_cluster(), 8), 1.0);
  // The step: compute scaled, efficiency against the profile's own step.
  p.threads = 1;
  const Prediction d = predict_dp(p, 4, node, Algorithm::Ring);
  EXPECT_NEAR(d.compute_s, 15e-3 * 2 * 1.25, 1e-12);
  EXPECT_NEAR(d.efficiency, 15e-3 / d.step_s, 1e-12);
}

TEST(ScalingModel, ThreadsThatDoNotFillTheCoresEvenlyCostBetweenAFairShareAndStayingPut) {
  StepProfile p = busy_profile();
  Cluster node = crowded_cpu_node();
  // 3 threads on 2 cores: a fair share is 1.5 cores' worth of work with both cores busy;
  // staying put, one core runs 2 threads' work: 1 with its neighbour busy, 1 alone.
  const CoreSharing three = core_sharing(p, node, 3);
  EXPECT_DOUBLE_EQ(three.fair, 1.5 * 1.25);
  EXPECT_DOUBLE_EQ(three.placed, 1.25 + 1.0);
  EXPECT_DOUBLE_EQ(compute_factor(p, node, 3), (1.5 * 1.25 + 2.25) / 2);
  // Filled evenly (or not filled), the bounds meet.
  for (int r : {1, 2, 4, 6}) {
    const CoreSharing s = core_sharing(p, node, r);
    EXPECT_DOUBLE_EQ(s.fair, s.placed) << r << " replicas";
  }
  // 7 threads on 4 cores: the 3 cores with a second thread finish it with 3 of 4 busy.
  node.cores_per_node = 4;
  const CoreSharing seven = core_sharing(p, node, 7);
  EXPECT_DOUBLE_EQ(seven.fair, 7.0 / 4 * 1.25);
  EXPECT_DOUBLE_EQ(seven.placed, 1.25 + (1 + 0.25 * 2.0 / 3.0));
  // GPU nodes have no cores to share.
  const CoreSharing gpu = core_sharing(p, toy_cluster(), 7);
  EXPECT_DOUBLE_EQ(gpu.fair, 1.0);
  EXPECT_DOUBLE_EQ(gpu.placed, 1.0);
}

TEST(ScalingModel, OnACpuNodeWithItsCoresFullDdpHidesNothing) {
  const StepProfile p = toy_profile();
  // With a core to spare the buckets overlap backward as on a GPU...
  Cluster spare = cpu_node();
  spare.cores_per_node = 4;
  const Prediction overlapped = predict_ddp(p, {{2}, {1}, {0}}, 2, spare, Algorithm::Ring);
  EXPECT_NEAR(overlapped.exposed_comm_s, 9e-3 + 1.002e-3 - 10e-3 + loss_allreduce(2, spare), 1e-12);
  // ...with every core computing, the whole of every allreduce adds to the step.
  const Prediction full = predict_ddp(p, {{2}, {1}, {0}}, 2, cpu_node(), Algorithm::Ring);
  EXPECT_NEAR(full.exposed_comm_s, 3 * 1.002e-3 + loss_allreduce(2, cpu_node()), 1e-12);
}

TEST(ScalingModel, ClusterFlagsTakeTheCoresOfACpuNode) {
  const Preset cpu = cluster_from_flag("2,90,6,90,6,2", "--cluster");
  EXPECT_EQ(cpu.cluster.replicas_per_node, 2);
  EXPECT_EQ(cpu.cluster.cores_per_node, 2);
  EXPECT_DOUBLE_EQ(cpu.cluster.intra.latency_s, 90e-6);
  EXPECT_DOUBLE_EQ(cpu.cluster.intra.bytes_per_s, 6e9);
  EXPECT_NE(cpu.assumptions.find("2 cores"), std::string::npos) << cpu.assumptions;
  EXPECT_EQ(cluster_from_flag("8,2,370,5,45", "--cluster").cluster.cores_per_node, 0);
  for (const char* bad : {"2,90,6,90,6,2.5", "2,90,6,90", "2,90,6,90,6,2,1", "2,90,x,90,6"}) {
    try {
      cluster_from_flag(bad, "--cluster");
      FAIL() << bad << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("--cluster '") + bad + "'"), std::string::npos) << e.what();
    }
  }
}

TEST(ScalingModel, DpExposesTheCopiesAndTheWholeAllreduce) {
  const StepProfile p = toy_profile();
  const Cluster c = toy_cluster();
  const Prediction d = predict_dp(p, 2, c, Algorithm::Ring);
  const double copies = (1e-6 + 1e5 / 1e9) + 2 * (1e-6 + 1e3 / 1e9);
  EXPECT_NEAR(d.exposed_comm_s, copies + allreduce_seconds(3e6, 2, c, Algorithm::Ring), 1e-12);
  EXPECT_GT(d.step_s, predict_ddp(p, {{2}, {1}, {0}}, 2, c, Algorithm::Ring).step_s);
}

TEST(ScalingModel, LocalSgdSpreadsOneAveragingOfParametersAndMomentumOverKSteps) {
  const StepProfile p = toy_profile();
  const Cluster c = toy_cluster();
  const double averaging = allreduce_seconds(6e6, 4, c, Algorithm::Ring);
  EXPECT_NEAR(predict_local_sgd(p, 1, 4, c, Algorithm::Ring).exposed_comm_s, averaging, 1e-12);
  EXPECT_NEAR(predict_local_sgd(p, 16, 4, c, Algorithm::Ring).exposed_comm_s, averaging / 16, 1e-12);
  EXPECT_THROW(predict_local_sgd(p, 0, 4, c, Algorithm::Ring), Error);
}

TEST(ScalingModel, OneReplicaIsFullyEfficientAndEfficiencyNeverGrowsWithReplicas) {
  const StepProfile p = toy_profile();
  const Cluster& c = preset("h200x8-nvlink-ib400");
  for (Algorithm a : {Algorithm::Ring, Algorithm::Tree}) {
    EXPECT_DOUBLE_EQ(predict_ddp(p, {{2}, {1}, {0}}, 1, c, a).efficiency, 1.0);
    EXPECT_DOUBLE_EQ(predict_dp(p, 1, c, a).efficiency, 1.0);
    EXPECT_DOUBLE_EQ(predict_local_sgd(p, 4, 1, c, a).efficiency, 1.0);
    double previous = 1.0;
    for (int r = 2; r <= 1024; r *= 2) {
      SCOPED_TRACE(std::string(algorithm_name(a)) + ", " + std::to_string(r) + " replicas");
      const double e = predict_dp(p, r, c, a).efficiency;
      EXPECT_LE(e, previous + 1e-15);
      EXPECT_GT(e, 0.0);
      previous = e;
    }
  }
}

TEST(ScalingModel, AnUnknownPresetIsRefusedNamingItAndTheKnownOnes) {
  try {
    preset("dgx-a100");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'dgx-a100'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("h200x8-nvlink-ib400"), std::string::npos) << e.what();
  }
}

TEST(ScalingModel, MismatchedProfilesAndBucketsAreRefused) {
  StepProfile p = toy_profile();
  const Cluster c = toy_cluster();
  EXPECT_THROW(predict_ddp(p, {{3}}, 2, c, Algorithm::Ring), Error);  // no parameter 3
  p.grad_ready_s.pop_back();
  EXPECT_THROW(predict_ddp(p, {{0}}, 2, c, Algorithm::Ring), Error);
}

}  // namespace
}  // namespace dpcore::train::scaling
