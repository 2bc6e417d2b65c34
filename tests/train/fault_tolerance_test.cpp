// Fault injection (train/faults/fault_injection.h) and the guards (train/faults/guards.h) on every runner:
// --skip-nonfinite leaves the state bit for bit as before a NaN step and training goes on;
// --check-replicas catches a flipped bit at the step it happens, naming the replica and the
// tensor; injected throws and hangs fail the step naming the replica, never hanging.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <tuple>

#include "engine/sgd.h"
#include "tiny_job.h"
#include "train/faults/guards.h"
#include "train/runners/data_parallel.h"

namespace dpcore::train {
namespace {

using namespace tiny_job;

// ------------------------------------------------------------------------- parsing

TEST(FaultSpec, ParsesEveryKindAndReadsBack) {
  std::vector<Fault> f = parse_faults("nan:replica=1,step=3;slow:replica=2,factor=2.5;bitflip:step=4,replica=0");
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f[0].kind, Fault::Kind::NanGradients);
  EXPECT_EQ(f[0].replica, 1);
  EXPECT_EQ(f[0].step, 3);
  EXPECT_EQ(f[1].kind, Fault::Kind::Slow);
  EXPECT_EQ(f[1].step, 1);  // slow from the first step unless told
  EXPECT_EQ(f[1].factor, 2.5);
  EXPECT_EQ(describe(f[2]), "bitflip:replica=0,step=4");
  for (const char* kind : {"throw", "throw-after-step", "hang", "exit", "nan", "bitflip"}) {
    std::string spec = std::string(kind) + ":replica=0,step=2";
    EXPECT_EQ(describe(parse_faults(spec)[0]), spec);
  }
  EXPECT_TRUE(parse_faults("", "DPCORE_INJECT").empty());  // an empty variable injects nothing
}

TEST(FaultSpec, RefusesBadSpecsNamingTheSpecAndTheProblem) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"boom:replica=0,step=1", "unknown kind 'boom'"},
      {"nan:step=3", "replica=R is required"},
      {"nan:replica=1", "step=S is required for nan"},
      {"nan:replica=1,step=0", "step=0: must be a step number"},
      {"nan:replica=-1,step=2", "replica=-1: must be a replica index"},
      {"nan:replica=x,step=2", "replica=x"},
      {"nan:replica=1,step=2,factor=2", "factor= is for slow only"},
      {"slow:replica=1", "factor=F is required for slow"},
      {"slow:replica=1,factor=0.5", "factor=0.5: must be a finite number >= 1"},
      {"throw:replica=1,step=2,when=now", "unknown key 'when'"},
      {"throw:replica=1,replica=2,step=2", "replica= given twice"},
      {"throw:replica", "'replica' is not KEY=VALUE"},
  };
  for (const auto& [spec, problem] : cases) {
    std::string e = error_of([&] { parse_faults(spec); });
    EXPECT_NE(e.find("--inject '" + spec + "'"), std::string::npos) << e;
    EXPECT_NE(e.find(problem), std::string::npos) << spec << ": " << e;
  }
  EXPECT_NE(error_of([] { parse_faults("nan", "DPCORE_INJECT"); }).find("DPCORE_INJECT 'nan'"), std::string::npos);
}

TEST(FaultSpec, RefusesWhatTheRunCannotCarryOut) {
  FaultInjector nan(parse_faults("nan:replica=2,step=3"));
  std::string e = error_of([&] { nan.check(2, "--replicas 2"); });
  EXPECT_NE(e.find("nan:replica=2,step=3"), std::string::npos) << e;
  EXPECT_NE(e.find("replica 2 does not exist with --replicas 2"), std::string::npos) << e;
  EXPECT_NO_THROW(nan.check(3, "--replicas 3"));
  // A hang nobody would notice is refused rather than hanging the process.
  FaultInjector hang(parse_faults("hang:replica=0,step=2"));
  EXPECT_NE(error_of([&] { hang.check(1, "one replica"); }).find("with one replica nothing would notice"),
            std::string::npos);
  // With a peer, on every backend: its --replica-timeout notices (mpi too, docs/fault-tolerance.md).
  EXPECT_NO_THROW(hang.check(2, "2 processes (mpirun -np)"));
  // And through a runner: the replica count is the runner's.
  EXPECT_NE(error_of([] { runner(2, "ddp", "throw:replica=2,step=1"); }).find("does not exist with --replicas 2"),
            std::string::npos);
}

// ------------------------------------------------------------------------- --skip-nonfinite

// NaN gradients at step 3 on replica `faulty`: with --skip-nonfinite the step is skipped
// and every replica's parameters and momentum are bit for bit those after step 2; step 4
// then trains again.
void expect_nan_step_skipped(int replicas, const std::string& mode, int faulty, const std::string& batchnorm = "") {
  SCOPED_TRACE(mode + " over " + std::to_string(replicas) + (batchnorm.empty() ? "" : ", --batchnorm " + batchnorm));
  ParallelOptions o = parallel(replicas, mode, "nan:replica=" + std::to_string(faulty) + ",step=3", 10);
  o.guards.skip_nonfinite = true;
  if (!batchnorm.empty()) o.batchnorm = batchnorm;
  o.first_bucket_mb = o.bucket_mb = 1e-4;  // a bucket per parameter: some are ready before batch norm's backward
  // (With batch norm the step's forward moves the running statistics even when the step is
  // skipped; the parameters and momentum stay.)
  auto r = runner(o, batchnorm.empty() ? kNet : kBatchNormNet);
  EXPECT_FALSE(step(*r, 1).skipped);
  EXPECT_FALSE(step(*r, 2).skipped);
  const std::vector<float> p2 = params(*r), m2 = momentum(*r);
  StepStats s3 = step(*r, 3);
  EXPECT_TRUE(s3.skipped);
  EXPECT_TRUE(bit_equal(params(*r), p2)) << "parameters changed by a skipped step";
  EXPECT_TRUE(bit_equal(momentum(*r), m2)) << "momentum changed by a skipped step";
  EXPECT_EQ(r->optimizer().steps_taken(), 2);
  StepStats s4 = step(*r, 4);
  EXPECT_FALSE(s4.skipped);
  EXPECT_TRUE(std::isfinite(s4.loss_sum.item()));
  const std::vector<float> p4 = params(*r);
  EXPECT_FALSE(bit_equal(p4, p2)) << "the run did not go on after the skipped step";
  for (float v : p4) ASSERT_TRUE(std::isfinite(v));
  EXPECT_EQ(r->optimizer().steps_taken(), 3);
}

TEST(SkipNonfinite, OneDeviceSkipsTheNanStepBitForBit) { expect_nan_step_skipped(1, "ddp", 0); }
TEST(SkipNonfinite, DdpSkipsOnEveryReplica) { expect_nan_step_skipped(2, "ddp", 1); }
TEST(SkipNonfinite, DpSkipsOnEveryReplica) { expect_nan_step_skipped(2, "dp", 1); }
// Synchronised batch norm runs collectives inside forward and backward, between ddp's bucket
// allreduces: the replica with the injected NaN must issue them in the same order as its
// peers (it used to hold its buckets back until after backward, so the ring paired one
// replica's bucket with another's batch norm sums).
TEST(SkipNonfinite, DdpWithSyncBatchNormSkipsOnEveryReplica) {
  expect_nan_step_skipped(2, "ddp", 1, "sync");
  expect_nan_step_skipped(3, "ddp", 0, "sync");
}

TEST(SkipNonfinite, OtherReplicasSkipAlike) {
  // Replica 0 computed good gradients; replica 1's NaN reached it through the reduction.
  GuardOptions guards;
  guards.skip_nonfinite = true;
  for (const char* mode : {"ddp", "dp"}) {
    auto r = runner(3, mode, "nan:replica=2,step=1", guards);
    auto& replicated = dynamic_cast<ReplicatedRunner&>(*r);
    const std::vector<float> before = replicated.replica_model(1).parameters().values().to_vector<float>();
    EXPECT_TRUE(step(*r, 1).skipped) << mode;
    for (size_t k = 0; k < 3; ++k) {
      EXPECT_TRUE(bit_equal(replicated.replica_model(k).parameters().values().to_vector<float>(), before))
          << mode << " replica " << k;
    }
  }
}

TEST(SkipNonfinite, DdpReducesAnInjectedNanOnlyAfterItIsWritten) {
  // ddp reduces a bucket as soon as backward has finished it; the NaN is written after
  // compute, so that replica's buckets must wait for it. The slow replica sleeps between
  // its backward and the NaN: an allreduce launched during backward would be over by then,
  // and only replica 1 would see the NaN (and skip alone).
  GuardOptions guards;
  guards.skip_nonfinite = true;
  auto r = runner(2, "ddp", "slow:replica=1,factor=50;nan:replica=1,step=2", guards);
  step(*r, 1);
  const std::vector<float> before = params(*r);
  EXPECT_TRUE(step(*r, 2).skipped);
  EXPECT_TRUE(bit_equal(params(*r), before));
}

TEST(SkipNonfinite, WithoutTheFlagANanPropagatesAsInPyTorch) {
  auto r = runner(2, "ddp", "nan:replica=1,step=1");
  EXPECT_FALSE(step(*r, 1).skipped);
  bool any_nan = false;
  for (float v : params(*r)) any_nan |= std::isnan(v);
  EXPECT_TRUE(any_nan);
}

TEST(SkipNonfinite, FiniteChecksReadTheBits) {
  EXPECT_TRUE(all_finite(Tensor::from_vector<float>({1.f, -3e38f, 1e-45f, 0.f}, {4})));
  EXPECT_FALSE(all_finite(Tensor::from_vector<float>({1.f, INFINITY}, {2})));
  EXPECT_FALSE(all_finite(Tensor::from_vector<float>({-INFINITY, 1.f}, {2})));
  EXPECT_FALSE(all_finite(Tensor::from_vector<double>({0.0, 2.0, std::nan("")}, {3})));
  EXPECT_TRUE(step_is_nonfinite(Tensor::full({}, NAN), Tensor::zeros({3})));
  EXPECT_FALSE(step_is_nonfinite(Tensor::full({}, 2.0), Tensor::zeros({3})));
}

// ------------------------------------------------------------------------- --check-replicas

void expect_bit_flip_caught(int replicas, const std::string& mode, int faulty) {
  SCOPED_TRACE(mode + " over " + std::to_string(replicas) + ", replica " + std::to_string(faulty) + " flipped");
  GuardOptions guards;
  guards.check_replicas = 1;
  auto r = runner(replicas, mode, "bitflip:replica=" + std::to_string(faulty) + ",step=2", guards);
  step(*r, 1);
  const std::string first = r->model().parameters().entries()[0].name;
  std::string e = error_of([&] { step(*r, 2); });
  EXPECT_NE(e.find("after step 2, replica " + std::to_string(faulty) + " differs"), std::string::npos) << e;
  EXPECT_NE(e.find("first in " + first + " "), std::string::npos) << e;
}

TEST(CheckReplicas, CatchesAFlippedBitAtItsStepNamingReplicaAndTensor) {
  expect_bit_flip_caught(2, "ddp", 1);
  expect_bit_flip_caught(2, "dp", 1);
  // With three replicas the majority tells which one is wrong, replica 0 included.
  expect_bit_flip_caught(3, "ddp", 0);
  expect_bit_flip_caught(3, "dp", 2);
}

TEST(CheckReplicas, WithoutTheCheckTheDivergenceGoesUnnoticed) {
  auto r = runner(2, "ddp", "bitflip:replica=1,step=1");
  step(*r, 1);
  step(*r, 2);
  auto& replicated = dynamic_cast<ReplicatedRunner&>(*r);
  EXPECT_FALSE(bit_equal(replicated.replica_model(0).parameters().values().to_vector<float>(),
                         replicated.replica_model(1).parameters().values().to_vector<float>()));
}

TEST(CheckReplicas, EqualReplicasPassEveryCheck) {
  GuardOptions guards;
  guards.check_replicas = 2;
  auto r = runner(3, "ddp", "slow:replica=1,factor=1.5", guards);
  for (int64_t s = 1; s <= 4; ++s) EXPECT_NO_THROW(step(*r, s));
}

TEST(CheckReplicas, EveryFlippedBitChangesTheChecksum) {
  auto model = tiny_model();
  Sgd sgd(model->parameters(), kSgd);
  const std::vector<uint64_t> base = replica_checksums(*model, sgd);
  const auto& entries = model->parameters().entries();
  ASSERT_EQ(base.size(), 2 * entries.size());  // parameters, then momentum
  const std::vector<std::string> names = checked_tensor_names(*model, sgd);
  EXPECT_EQ(names[0], entries[0].name);
  EXPECT_EQ(names[entries.size()], "momentum of " + entries[0].name);
  // Every bit of the last parameter's last element, one at a time.
  auto* p = static_cast<unsigned char*>(model->parameters().values().raw_data());
  const FlatEntry& last = entries.back();
  const size_t byte0 = size_t(last.offset + shape_numel(last.shape) - 1) * 4;
  for (int bit = 0; bit < 32; ++bit) {
    p[byte0 + size_t(bit / 8)] ^= uint8_t(1u << (bit % 8));
    std::vector<uint64_t> flipped = replica_checksums(*model, sgd);
    EXPECT_NE(flipped[entries.size() - 1], base[entries.size() - 1]) << "bit " << bit;
    for (size_t t = 0; t + 1 < entries.size(); ++t) EXPECT_EQ(flipped[t], base[t]);
    p[byte0 + size_t(bit / 8)] ^= uint8_t(1u << (bit % 8));
  }
  EXPECT_EQ(replica_checksums(*model, sgd), base);
}

TEST(CheckReplicas, NamesTheMinorityAndTheMomentum) {
  const std::vector<std::string> names = {"a.weight", "a.bias", "momentum of a.weight", "momentum of a.bias"};
  EXPECT_EQ(compare_checksums({{1, 2, 3, 4}, {1, 2, 3, 4}}, names, 7), "");
  std::string e = compare_checksums({{1, 2, 3, 4}, {1, 2, 3, 9}, {1, 2, 3, 4}, {1, 2, 3, 4}}, names, 7);
  EXPECT_NE(e.find("after step 7, replica 1 differs from replicas 0, 2 and 3: first in momentum of a.bias"),
            std::string::npos)
      << e;
  e = compare_checksums({{1, 5, 3, 4}, {1, 2, 3, 4}}, names, 2);
  EXPECT_NE(e.find("replica 1 differs from replica 0: first in a.bias"), std::string::npos) << e;
  EXPECT_NE(e.find("which of them is wrong cannot be told"), std::string::npos) << e;
}

// ------------------------------------------------------------------------- failures

TEST(InjectedFailures, AThrowFailsTheStepNamingTheReplica) {
  for (auto [replicas, mode] : {std::pair<int, const char*>{1, "ddp"}, {2, "ddp"}, {2, "dp"}}) {
    const int faulty = replicas - 1;
    auto r = runner(replicas, mode, "throw:replica=" + std::to_string(faulty) + ",step=2");
    EXPECT_NO_THROW(step(*r, 1));
    std::string e = error_of([&] { step(*r, 2); });
    EXPECT_NE(e.find("replica " + std::to_string(faulty) + ": injected throw at step 2"), std::string::npos)
        << mode << ": " << e;
  }
}

// throw-after-step fails the step after the replica's optimizer step, which it has applied
// (as a failure there leaves it; without --on-replica-failure shrink the run stops): on one
// device, under dp and ddp, and under --sync local:2.
TEST(InjectedFailures, AThrowAfterTheStepFailsItNamingTheReplicaOnceItStepped) {
  for (auto [replicas, mode, sync] : {std::tuple<int, const char*, const char*>{1, "ddp", "full"},
                                      {2, "ddp", "full"}, {2, "dp", "full"}, {2, "ddp", "local:2"}}) {
    SCOPED_TRACE(std::to_string(replicas) + " " + mode + " " + sync);
    const int faulty = replicas - 1;
    ParallelOptions o = parallel(replicas, mode, "throw-after-step:replica=" + std::to_string(faulty) + ",step=2");
    o.sync = sync;
    auto r = runner(o);
    EXPECT_NO_THROW(step(*r, 1));
    const std::vector<float> before = params(*r);
    std::string e = error_of([&] { step(*r, 2); });
    EXPECT_NE(e.find("replica " + std::to_string(faulty) + ": injected throw-after-step at step 2"), std::string::npos)
        << e;
    EXPECT_FALSE(bit_equal(params(*r), before)) << "the failure came before the step";
  }
}

TEST(InjectedFailures, AHangIsCaughtByTheReplicaTimeoutNamingTheReplica) {
  for (const char* mode : {"ddp", "dp"}) {
    auto r = runner(2, mode, "hang:replica=1,step=2", {}, /*timeout_s=*/0.2);
    step(*r, 1);
    const auto t0 = std::chrono::steady_clock::now();
    std::string e = error_of([&] { step(*r, 2); });
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_NE(e.find("replica 1 did not arrive within 0.2 s"), std::string::npos) << mode << ": " << e;
    EXPECT_LT(seconds, 10.0) << mode;
  }
}

TEST(InjectedFailures, ASlowReplicaChangesNoArithmetic) {
  auto plain = runner(2, "ddp", "");
  auto slow = runner(2, "ddp", "slow:replica=1,factor=2");
  for (int64_t s = 1; s <= 3; ++s) step(*plain, s), step(*slow, s);
  EXPECT_TRUE(bit_equal(params(*plain), params(*slow)));
}

}  // namespace
}  // namespace dpcore::train
