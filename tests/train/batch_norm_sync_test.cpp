// Batch norm under data parallelism (--batchnorm local|sync), for both runners.
//
// What is equal, exactly: with --batchnorm sync, R replicas running A micro-batches per
// step end with the parameters AND running statistics of ONE replica running the same A
// micro-batches (each micro-batch is cut first, then shared among the replicas, so
// micro-batch m is the same samples either way), whatever the shares. It is NOT equal to
// one replica on one batch of A times the size: each micro-batch normalises with its own
// statistics. With --batchnorm local each replica normalises with its share's statistics,
// which is not single-replica training: the tests assert that difference exists, so a
// sync mode that silently ran local would fail.
#include <gtest/gtest.h>

#include "layers/zoo.h"
#include "train/runners/data_parallel.h"
#include "equivalence.h"

namespace dpcore::train {
namespace {

using testing::BatchNormState;
using testing::kBatchNormBatch;

using Case = testing::RunnerCase;

std::unique_ptr<StepRunner> runner_for(const Case& c, const std::string& batchnorm) {
  ParallelOptions options;
  options.replicas = c.replicas, options.mode = c.mode, options.split = c.split, options.batchnorm = batchnorm;
  options.timeout_s = 60;
  return make_runner(testing::batch_norm_net(), testing::kSgd, c.accum, options);
}

class SyncBatchNorm : public ::testing::TestWithParam<Case> {};

// Float32 rounding: the group's statistics are combined from per-replica ones (Chan's
// formula) instead of one two-pass sum, and the gradient sums are added in another order;
// each is within a few float32 ulps, and three steps keep the parameters within 1e-5
// relative (measured: at most 6e-8).
constexpr double kTolerance = 1e-5;

TEST_P(SyncBatchNorm, ReplicasEqualOneReplicaWithTheSameMicroBatches) {
  const Case c = GetParam();
  auto runner = runner_for(c, "sync");
  BatchNormState got = testing::train_batch_norm_net(*runner);
  BatchNormState want = testing::single_replica_batch_norm(c.accum);
  const double params = testing::relative_difference(got.params, want.params);
  const double buffers = testing::relative_difference(got.buffers, want.buffers);
  EXPECT_LE(params, kTolerance) << runner->describe();
  EXPECT_LE(buffers, kTolerance) << runner->describe();
  // Every replica combined the same gathered statistics in the same order: their running
  // statistics are the same bits (before any broadcast).
  auto& replicated = dynamic_cast<ReplicatedRunner&>(*runner);
  for (size_t r = 1; r < replicated.local_replicas(); ++r) {
    EXPECT_EQ(replicated.replica_model(r).buffers().values().to_vector<float>(), got.buffers) << "replica " << r;
  }
  std::cout << runner->describe() << ": parameters " << params << ", running statistics " << buffers << "\n";
}

INSTANTIATE_TEST_SUITE_P(AllModes, SyncBatchNorm, ::testing::ValuesIn(testing::runner_cases({2, 3, 4}, {1, 2})),
                         [](const ::testing::TestParamInfo<Case>& info) { return testing::case_name(info.param); });

class LocalBatchNorm : public ::testing::TestWithParam<std::string> {};

TEST_P(LocalBatchNorm, DiffersFromOneReplica) {
  auto runner = runner_for({GetParam(), 2, 1, "even"}, "local");
  BatchNormState got = testing::train_batch_norm_net(*runner);
  BatchNormState want = testing::single_replica_batch_norm(1);
  const double params = testing::relative_difference(got.params, want.params);
  const double buffers = testing::relative_difference(got.buffers, want.buffers);
  // Each replica normalised with the statistics of 7 samples instead of 14: far more than
  // rounding apart (measured: 2.5e-3).
  EXPECT_GT(params, 100 * kTolerance);
  EXPECT_GT(buffers, 100 * kTolerance);
  std::cout << runner->describe() << ": parameters " << params << ", running statistics " << buffers << "\n";
}

TEST_P(LocalBatchNorm, AccumulatedMicroBatchesAreNotOneBigBatch) {
  // Two micro-batches of 7 normalise with their own statistics, on one replica as on two
  // in this mode whose statistics are synchronised: neither is one batch of 14.
  const BatchNormState whole = testing::single_replica_batch_norm(1);
  auto runner = runner_for({GetParam(), 2, 2, "even"}, "sync");
  const BatchNormState replicated = testing::train_batch_norm_net(*runner);
  EXPECT_GT(testing::relative_difference(replicated.params, whole.params), 100 * kTolerance) << runner->describe();
  EXPECT_GT(testing::relative_difference(replicated.buffers, whole.buffers), 100 * kTolerance) << runner->describe();
  const BatchNormState accumulated = testing::single_replica_batch_norm(2);
  EXPECT_GT(testing::relative_difference(accumulated.params, whole.params), 100 * kTolerance);
}

TEST_P(LocalBatchNorm, SyncNeedsSamplesOnEveryReplica) {
  auto runner = runner_for({GetParam(), 4, 1, "weights:1,1,1,100"}, "sync");
  testing::HostBatch b = testing::make_batch(kBatchNormBatch, 1);
  try {
    runner->step(b.batch);
    FAIL() << "a replica without samples joined a synchronised batch norm";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--batchnorm sync: replica 0 gets no samples"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(BothModes, LocalBatchNorm, ::testing::Values("dp", "ddp"));

}  // namespace
}  // namespace dpcore::train
