// DDP (and local SGD) over the mpi backend, run under mpiexec with 2 and 3 processes: each
// process holds one replica; after 5 steps every process's parameters must equal single-replica
// training on the whole batch (computed locally by each process as the reference).
#include <gtest/gtest.h>

#include "bert_batches.h"
#include "equivalence.h"

namespace dpcore::train {

using namespace dpcore::layers;

namespace {

using testing::kSgd;

void expect_equivalent(int64_t accum, const std::string& split) {
  const int64_t n = 13;
  train::ParallelOptions options;
  options.mode = "ddp", options.backend = "mpi", options.split = split, options.timeout_s = 120;
  auto runner = train::make_runner(testing::simplenet(), kSgd, accum, options);
  auto got = testing::train_with(*runner, n, 5);
  double diff = testing::relative_difference(got, testing::reference_params(n, 5));
  EXPECT_LE(diff, 1e-5) << runner->describe();
}

// --batchnorm sync over MPI: the processes' batch norms combine their statistics, so every
// process ends with one replica's parameters and running statistics (float32 rounding).
void expect_sync_batch_norm_equivalent(int64_t accum, const std::string& split) {
  train::ParallelOptions options;
  options.mode = "ddp", options.backend = "mpi", options.split = split, options.batchnorm = "sync";
  options.timeout_s = 120;
  auto runner = train::make_runner(testing::batch_norm_net(), kSgd, accum, options);
  testing::BatchNormState got = testing::train_batch_norm_net(*runner);
  testing::BatchNormState want = testing::single_replica_batch_norm(accum);
  EXPECT_LE(testing::relative_difference(got.params, want.params), 1e-5) << runner->describe();
  EXPECT_LE(testing::relative_difference(got.buffers, want.buffers), 1e-5) << runner->describe();
}

// --sync local:1 across processes: each rank's own step on its own share, averaged with
// weights share/N, is the full step (train/sync/local_sgd.h), here over MPI's allreduce.
TEST(MpiLocalSgd, OneStepPeriodEqualsSingleReplicaTraining) {
  train::ParallelOptions options;
  options.backend = "mpi", options.sync = "local:1", options.timeout_s = 120;
  auto runner = train::make_runner(testing::simplenet(), kSgd, 1, options);
  auto got = testing::train_with(*runner, 13, 5);
  EXPECT_LE(testing::relative_difference(got, testing::reference_params(13, 5)), 1e-5) << runner->describe();
}

// Per-token labels with uneven counted tokens per sample: each process counts the targets of
// the whole batch it holds, so every rank's 1/M is the global one and ddp, with uneven
// shares and accumulation, and local:1 (averaging weighted by counted tokens) equal the
// one-device full-batch step.
TEST(MpiTokens, UnevenCountedTokensEqualTheOneDeviceStep) {
  for (const std::string& sync : {"full", "local:1"}) {
    train::ParallelOptions options;
    options.mode = "ddp", options.backend = "mpi", options.sync = sync, options.timeout_s = 120;
    // Uneven shares: weights 5,1,2,... one per process.
    const int world = comm::mpirun_launch() ? comm::mpirun_launch()->size : 1;
    options.replicas = world, options.split = "weights:5";
    for (int k = 1; k < world; ++k) options.split += "," + std::to_string(k);
    auto runner = train::make_runner(testing::token_net(), kSgd, sync == "full" ? 2 : 1, options);
    auto got = testing::train_tokens_with(*runner, 13, 3);
    EXPECT_LE(testing::relative_difference(got, testing::token_reference_params(13, 3)), 1e-5) << runner->describe();
  }
}

// BERT with dropout on and padded batches (tests/train/bert_batches.h), both heads: ddp with
// uneven shares and accumulation (float64, AdamW) and local:1 (float32, SGD) across the
// processes equal the one-device full-batch training each process computes, within the bounds
// of tests/train/bert_equivalence_test.cpp (1e-12 and 1e-6).
TEST(MpiBert, UnevenTokensEqualTheOneDeviceStep) {
  const int world = comm::mpirun_launch() ? comm::mpirun_launch()->size : 1;
  for (bool masked_lm : {false, true}) {
    for (const std::string& sync : {"full", "local:1"}) {
      const DType dtype = sync == "full" ? DType::Float64 : DType::Float32;
      const OptimizerConfig optimizer = sync == "full" ? OptimizerConfig(testing::kBertAdamW) : OptimizerConfig(kSgd);
      train::ParallelOptions options;
      options.mode = "ddp", options.backend = "mpi", options.sync = sync, options.timeout_s = 120;
      options.replicas = world, options.split = "weights:5";
      for (int k = 1; k < world; ++k) options.split += "," + std::to_string(k);
      auto runner = train::make_runner(testing::bert_net(masked_lm, dtype), optimizer, sync == "full" ? 2 : 1, options);
      const auto got = testing::train_bert_with(*runner, masked_lm, 13, 3);
      train::SingleDeviceRunner single(testing::bert_net(masked_lm, dtype), optimizer, 1);
      const auto want = testing::train_bert_with(single, masked_lm, 13, 3);
      EXPECT_LE(testing::scaled_difference(got.data(), want.data(), want.size()), dtype == DType::Float64 ? 1e-12 : 1e-6)
          << runner->describe() << (masked_lm ? ", masked LM" : ", classification");
    }
  }
}

TEST(MpiDdp, EvenSplit) { expect_equivalent(1, "even"); }
TEST(MpiDdp, SyncBatchNorm) { expect_sync_batch_norm_equivalent(1, "even"); }
// (Micro-batches of 7 share out 4,3 over 2 processes and 3,3,1 over 3: uneven.)
TEST(MpiDdp, SyncBatchNormWithAccumulationAndUnevenShares) { expect_sync_batch_norm_equivalent(2, "even"); }
TEST(MpiDdp, EvenSplitWithAccumulation) { expect_equivalent(3, "even"); }
TEST(MpiDdp, AdaptiveSplitWithAccumulation) { expect_equivalent(3, "adaptive"); }

}  // namespace
}  // namespace dpcore::train
