// --on-replica-failure shrink (train/faults/replica_failure.h): a replica that throws or hangs in a
// step is dropped and the step runs again over the same batch on the survivors, with the
// maths of a run that used the survivors from that step on (a 4-replica run taken to the
// step before, its state carried to 3 replicas as a checkpoint would be), no partial update
// of the failed step, faults and logs addressed by the replicas' first numbers; below
// --min-replicas the run stops with the state from before the step; what cannot shrink is
// refused naming the flags.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <iterator>

#include "engine/trace.h"
#include "equivalence.h"
#include "tiny_job.h"
#include "train/runners/data_parallel.h"
#include "train/step/split.h"

namespace dpcore::train {
namespace {

using namespace tiny_job;

// Samples per step: every replica gets some, from 4 replicas down to 2 (sync batch norm
// needs it).
constexpr int64_t kShrinkBatch = 12;

ParallelOptions shrinking(ParallelOptions o, int min_replicas = 1) {
  o.failure.on_failure = "shrink";
  o.failure.min_replicas = min_replicas;
  return o;
}

// The state of `from` (parameters, batch norm buffers, the optimizer's state tensors and
// step count) on `to`'s root, then on all of `to`'s replicas: what resuming `from`'s
// checkpoint on `to` does.
void copy_state(StepRunner& from, StepRunner& to) {
  to.model().parameters().values().copy_(from.model().parameters().values());
  if (from.model().has_batch_norm()) to.model().buffers().values().copy_(from.model().buffers().values());
  std::vector<Tensor> state;
  for (const OptimizerState& s : from.optimizer().state()) state.push_back(s.tensor);
  to.optimizer().restore(state, from.optimizer().steps_taken());
  to.sync_replicas();
}

std::vector<float> buffers(StepRunner& r) {
  return r.model().has_batch_norm() ? r.model().buffers().values().to_vector<float>() : std::vector<float>{};
}

// The root's parameters, optimizer state (SGD's momentum, Adam's moments) and batch norm
// buffers agree with the reference's to 1e-5 relative, each.
void expect_same_state(StepRunner& got, StepRunner& want, int64_t step) {
  SCOPED_TRACE("after step " + std::to_string(step));
  EXPECT_LE(testing::relative_difference(params(got), params(want)), 1e-5);
  const std::vector<OptimizerState> got_state = got.optimizer().state(), want_state = want.optimizer().state();
  ASSERT_EQ(got_state.size(), want_state.size());
  for (size_t i = 0; i < got_state.size(); ++i) {
    EXPECT_LE(testing::relative_difference(got_state[i].tensor.to_vector<float>(), want_state[i].tensor.to_vector<float>()),
              1e-5)
        << got_state[i].name;
  }
  EXPECT_LE(testing::relative_difference(buffers(got), buffers(want)), 1e-5);
  EXPECT_EQ(got.optimizer().steps_taken(), want.optimizer().steps_taken());
}

// A reference run that changes its replica count: `plan[s]` replicas at step s (from 1).
// At each change, a new runner of the new count gets the old one's state.
class ChangingReference {
 public:
  ChangingReference(std::function<ParallelOptions(int)> options, std::string model, int64_t accum = 1,
                    OptimizerConfig optimizer = kSgd)
      : options_(std::move(options)), model_(std::move(model)), accum_(accum), optimizer_(optimizer) {}
  StepRunner& at(int replicas) {
    if (!runner_ || replicas != replicas_) {
      std::unique_ptr<StepRunner> next = runner(options_(replicas), model_, accum_, optimizer_);
      if (runner_) copy_state(*runner_, *next);
      runner_ = std::move(next), replicas_ = replicas;
    }
    return *runner_;
  }

 private:
  std::function<ParallelOptions(int)> options_;
  std::string model_;
  int64_t accum_;
  OptimizerConfig optimizer_;
  std::unique_ptr<StepRunner> runner_;
  int replicas_ = 0;
};

// Runs `faulty` and the reference side by side for `steps` steps, the reference on
// `plan(step)` replicas, comparing their state after every step (the failed steps
// included: a partial update would show there). Returns the replicas dropped, in order.
std::vector<ReplicaDropped> run_against_reference(StepRunner& faulty, ChangingReference& reference,
                                                  const std::function<int(int64_t)>& plan, int64_t steps) {
  std::vector<ReplicaDropped> dropped;
  for (int64_t s = 1; s <= steps; ++s) {
    StepRunner& want = reference.at(plan(s));
    StepStats got = step(faulty, s, kShrinkBatch);
    StepStats expected = step(want, s, kShrinkBatch);
    EXPECT_NEAR(got.loss_sum.item(), expected.loss_sum.item(), 1e-5 * std::fabs(expected.loss_sum.item()))
        << "step " << s;
    expect_same_state(faulty, want, s);
    for (ReplicaDropped& d : got.dropped) dropped.push_back(std::move(d));
  }
  return dropped;
}

// Replica 2 of 4 fails at step 5 (`kind`: throw, before its compute; throw-after-step, after
// its optimizer step): the run goes on to step 7 on 3 replicas, equal at every step to 4
// replicas for steps 1-4 and 3 from step 5 on.
void expect_shrunk_past(const std::string& kind, const std::string& mode, const std::string& model,
                        const std::string& batchnorm, int64_t accum = 1, const OptimizerConfig& optimizer = kSgd) {
  SCOPED_TRACE(kind + ", " + mode + ", " + model + ", --batchnorm " + batchnorm + ", --accum " +
               std::to_string(accum));
  auto options = [&](int replicas) {
    ParallelOptions o = parallel(replicas, mode);
    o.batchnorm = batchnorm;
    return o;
  };
  ParallelOptions o = shrinking(options(4));
  o.faults = FaultInjector(parse_faults(kind + ":replica=2,step=5"));
  auto faulty = runner(o, model, accum, optimizer);
  ChangingReference reference(options, model, accum, optimizer);
  std::vector<ReplicaDropped> dropped =
      run_against_reference(*faulty, reference, [](int64_t s) { return s < 5 ? 4 : 3; }, 7);
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_EQ(dropped[0].step, 5);
  EXPECT_EQ(dropped[0].replica, 2);
  EXPECT_EQ(dropped[0].rank, 2);
  EXPECT_NE(dropped[0].reason.find("replica 2: injected " + kind + " at step 5"), std::string::npos)
      << dropped[0].reason;
  EXPECT_EQ(dropped[0].survivors, (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(shrink_log_line(dropped[0]),
            "replica 2 failed at step 5: " + dropped[0].reason +
                "; dropped it: step 5 runs again over the same batch on 3 replicas (replicas 0, 1 and 3 are ranks "
                "0, 1 and 2 now)");
  EXPECT_NE(faulty->describe().find("over 3 replicas"), std::string::npos) << faulty->describe();
}

TEST(Shrink, DdpGoesOnWithoutAReplicaThatThrowsWithTheMathsOfThreeReplicas) {
  expect_shrunk_past("throw", "ddp", kNet, "local");
}
TEST(Shrink, DpGoesOnWithoutAReplicaThatThrowsWithTheMathsOfThreeReplicas) {
  expect_shrunk_past("throw", "dp", kNet, "local");
}
// Batch norm: the failed step's forward had already updated the survivors' running
// statistics (the root's among them), which must be undone; under sync, the groups that
// combine statistics are rebuilt over the survivors.
TEST(Shrink, BatchNormStatisticsOfTheFailedStepAreUndone) {
  expect_shrunk_past("throw", "dp", kBatchNormNet, "local");
  expect_shrunk_past("throw", "ddp", kBatchNormNet, "local");
  expect_shrunk_past("throw", "ddp", kBatchNormNet, "sync");
}
// With --accum 2 (DDP communicates in the last micro-batch only, through the survivors'
// bucket reducers, which the shrink moved to their new places).
TEST(Shrink, DdpWithAccumulationShrinksWithTheSameMaths) {
  expect_shrunk_past("throw", "ddp", kNet, "local", /*accum=*/2);
}

TEST(Shrink, AHangIsCaughtByTheTimeoutAndShrunkPast) {
  for (const char* mode : {"ddp", "dp"}) {
    SCOPED_TRACE(mode);
    auto faulty = runner(shrinking(parallel(3, mode, "hang:replica=1,step=3", /*timeout_s=*/0.3)));
    ChangingReference reference([&](int replicas) { return parallel(replicas, mode); }, kNet);
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<ReplicaDropped> dropped =
        run_against_reference(*faulty, reference, [](int64_t s) { return s < 3 ? 3 : 2; }, 4);
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
    ASSERT_EQ(dropped.size(), 1u);
    // The hung replica is dropped, not the replica that waited for it and timed out.
    EXPECT_EQ(dropped[0].replica, 1);
    EXPECT_EQ(dropped[0].step, 3);
    EXPECT_NE(dropped[0].reason.find("replica 1 did not arrive within 0.3 s"), std::string::npos)
        << dropped[0].reason;
    EXPECT_EQ(dropped[0].survivors, (std::vector<int>{0, 2}));
  }
}

// Replica 2 fails after its optimizer step, when every survivor has applied its own (once
// the loss is reduced a replica needs nothing more from the others): the survivors' updates
// of step 5 are undone before it runs again, with batch norm statistics and accumulation
// too; and where the root is the one that fails, replica 1 takes over with the state from
// before the step.
TEST(Shrink, AReplicaFailingAfterTheOthersSteppedLeavesNoneOfTheStep) {
  for (const char* mode : {"dp", "ddp"}) expect_shrunk_past("throw-after-step", mode, kNet, "local");
  expect_shrunk_past("throw-after-step", "dp", kBatchNormNet, "local");
  expect_shrunk_past("throw-after-step", "ddp", kBatchNormNet, "sync");
  expect_shrunk_past("throw-after-step", "ddp", kNet, "local", /*accum=*/2);
  for (const char* mode : {"dp", "ddp"}) {
    SCOPED_TRACE(std::string(mode) + ", the root");
    auto faulty = runner(shrinking(parallel(3, mode, "throw-after-step:replica=0,step=2")));
    ChangingReference reference([&](int replicas) { return parallel(replicas, mode); }, kNet);
    std::vector<ReplicaDropped> dropped =
        run_against_reference(*faulty, reference, [](int64_t s) { return s < 2 ? 3 : 2; }, 3);
    ASSERT_EQ(dropped.size(), 1u);
    EXPECT_EQ(dropped[0].survivors, (std::vector<int>{1, 2}));
  }
}

// AdamW: the snapshot before the step holds both moments and the step count (the bias
// correction's), so survivors that had stepped are put back exactly and the step runs
// again on them with the maths of 3 replicas.
TEST(Shrink, AdamWsMomentsAndStepCountOfTheFailedStepAreUndone) {
  const AdamConfig adamw{0.01, 0.9, 0.999, 1e-8, 0.01, true};
  for (const char* mode : {"dp", "ddp"}) {
    expect_shrunk_past("throw-after-step", mode, kNet, "local", 1, adamw);
    expect_shrunk_past("throw", mode, kNet, "local", 1, adamw);
  }
}

// Faults name replicas by their first numbers: after replica 2 is dropped at step 3,
// replica 3 (rank 2 now) hangs at step 5, which hangs again (not released by the first
// failure) and is dropped in turn; the run ends on replicas 0 and 1.
TEST(Shrink, LaterFaultsFollowTheRenumberedReplicasAndShrinkAgain) {
  auto faulty = runner(shrinking(parallel(4, "ddp", "throw:replica=2,step=3;hang:replica=3,step=5", 0.3)));
  ChangingReference reference([](int replicas) { return parallel(replicas, "ddp"); }, kNet);
  std::vector<ReplicaDropped> dropped =
      run_against_reference(*faulty, reference, [](int64_t s) { return s < 3 ? 4 : s < 5 ? 3 : 2; }, 6);
  ASSERT_EQ(dropped.size(), 2u);
  EXPECT_EQ(dropped[1].replica, 3);
  EXPECT_EQ(dropped[1].rank, 2);
  EXPECT_EQ(dropped[1].step, 5);
  EXPECT_NE(dropped[1].reason.find("did not arrive within 0.3 s"), std::string::npos) << dropped[1].reason;
  EXPECT_EQ(dropped[1].survivors, (std::vector<int>{0, 1}));
  EXPECT_NE(shrink_log_line(dropped[1]).find("replica 3 (rank 2) failed at step 5"), std::string::npos);
  // (Replicas 0 and 1 kept their ranks: no renumbering to tell.)
  const std::string line = shrink_log_line(dropped[1]);
  EXPECT_EQ(line.substr(line.size() - std::string("on 2 replicas").size()), "on 2 replicas") << line;
}

// Two replicas that fail in the same step are both dropped before it succeeds; the root
// failing leaves replica 1 as the new root, which gets the state from before the step.
TEST(Shrink, TwoFailuresInOneStepAndTheRootFailing) {
  auto faulty = runner(shrinking(parallel(4, "dp", "throw:replica=0,step=2;throw:replica=2,step=2")));
  ChangingReference reference([](int replicas) { return parallel(replicas, "dp"); }, kNet);
  std::vector<ReplicaDropped> dropped =
      run_against_reference(*faulty, reference, [](int64_t s) { return s < 2 ? 4 : 2; }, 3);
  ASSERT_EQ(dropped.size(), 2u);
  EXPECT_EQ(dropped[0].step, 2);
  EXPECT_EQ(dropped[1].step, 2);
  EXPECT_EQ(dropped[1].survivors, (std::vector<int>{1, 3}));
  const auto* replicated = dynamic_cast<ReplicatedRunner*>(faulty.get());
  ASSERT_NE(replicated, nullptr);
  EXPECT_EQ(replicated->replica(0).id, 1);
  EXPECT_EQ(replicated->replica(0).rank(), 0);
}

// --split weights:1,2,3,4 without replica 2 shares by 1, 2, 4, as a run started on those
// three would.
TEST(Shrink, WeightedSharesLoseTheDroppedReplicasWeight) {
  auto options = [](const std::string& split) {
    ParallelOptions o = parallel(split == "weights:1,2,3,4" ? 4 : 3, "ddp");
    o.split = split;
    return o;
  };
  ParallelOptions o = shrinking(options("weights:1,2,3,4"));
  o.faults = FaultInjector(parse_faults("throw:replica=2,step=2"));
  auto faulty = runner(o);
  ChangingReference reference(
      [&](int replicas) { return options(replicas == 4 ? "weights:1,2,3,4" : "weights:1,2,4"); }, kNet);
  run_against_reference(*faulty, reference, [](int64_t s) { return s < 2 ? 4 : 3; }, 3);
  const auto& replicated = dynamic_cast<ReplicatedRunner&>(*faulty);
  EXPECT_EQ(replicated.last_shares(), (std::vector<std::vector<int64_t>>{weighted_sizes(kShrinkBatch, {1, 2, 4})}));
  EXPECT_EQ(replicated.splitter().describe(), "weights [1, 2, 4]");
}

TEST(Shrink, SplittersWithoutReplicas) {
  EXPECT_EQ(Splitter("even", 4).without({2}).shares(12), chunk_sizes(12, 3));
  EXPECT_EQ(Splitter("weights:1,2,3,4", 4).without({0, 3}).weights(), (std::vector<double>{2, 3}));
  Splitter adaptive("adaptive", 3);
  for (int i = 0; i < Splitter::kInterval; ++i) adaptive.observe({1.0, 2.0, 4.0}, {4, 4, 4});
  ASSERT_NE(adaptive.weights(), (std::vector<double>{1, 1, 1}));  // it had re-weighted
  const Splitter restarted = adaptive.without({1});
  EXPECT_TRUE(restarted.adaptive());
  EXPECT_EQ(restarted.weights(), (std::vector<double>{1, 1}));
  EXPECT_NE(error_of([] { Splitter("even", 2).without({0, 1}); }).find("leaves none"), std::string::npos);
}

// Below --min-replicas: the step fails with TooFewReplicas naming the replica, the step and
// the minimum, and the root holds the state from before the step (for the final checkpoint).
TEST(Shrink, BelowTheMinimumTheRunStopsWithTheStateFromBeforeTheStep) {
  for (const char* mode : {"ddp", "dp"}) {
    SCOPED_TRACE(mode);
    ParallelOptions o = shrinking(parallel(3, mode, "throw:replica=1,step=3"), /*min_replicas=*/3);
    o.batchnorm = "local";
    auto faulty = runner(o, kBatchNormNet);
    step(*faulty, 1, kShrinkBatch), step(*faulty, 2, kShrinkBatch);
    const std::vector<float> p = params(*faulty), m = momentum(*faulty), b = buffers(*faulty);
    std::string message;
    try {
      step(*faulty, 3, kShrinkBatch);
    } catch (const TooFewReplicas& e) {
      message = e.what();
    }
    EXPECT_NE(message.find("replica 1 failed at step 3: replica 1: injected throw at step 3"), std::string::npos)
        << message;
    EXPECT_NE(message.find("2 replicas would be left, fewer than --min-replicas 3"), std::string::npos) << message;
    EXPECT_NE(message.find("state from before step 3"), std::string::npos) << message;
    EXPECT_TRUE(bit_equal(params(*faulty), p));
    EXPECT_TRUE(bit_equal(momentum(*faulty), m));
    EXPECT_TRUE(bit_equal(buffers(*faulty), b));
    EXPECT_EQ(faulty->optimizer().steps_taken(), 2);
  }
}

// A replica left alone has no peer whose timeout would notice a hang: an injected hang
// fails at once there (and the run stops), instead of hanging the process for good.
TEST(Shrink, AHangOfTheLastReplicaLeftFailsAtOnce) {
  auto faulty = runner(shrinking(parallel(2, "ddp", "throw:replica=1,step=2;hang:replica=0,step=3")));
  step(*faulty, 1), step(*faulty, 2);
  const auto t0 = std::chrono::steady_clock::now();
  std::string message;
  try {
    step(*faulty, 3);
  } catch (const TooFewReplicas& e) {
    message = e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  EXPECT_NE(message.find("replica 0 failed at step 3: replica 0: injected hang at step 3"), std::string::npos)
      << message;
  EXPECT_NE(message.find("0 replicas would be left, fewer than --min-replicas 1"), std::string::npos) << message;
}

// Without shrink a failure stops the run, as before.
TEST(Shrink, StopIsTheDefault) {
  auto r = runner(parallel(3, "ddp", "throw:replica=1,step=2"));
  step(*r, 1);
  std::string e = error_of([&] { step(*r, 2); });
  EXPECT_NE(e.find("replica 1 failed: replica 1: injected throw at step 2"), std::string::npos) << e;
}

// The trace of a run that shrank is whole: the survivors' lanes keep their names.
TEST(Shrink, TracingGoesOnAfterAShrink) {
  testing::TempDir dir;
  auto faulty = runner(shrinking(parallel(3, "ddp", "throw:replica=1,step=2")));
  trace::start();
  for (int64_t s = 1; s <= 3; ++s) step(*faulty, s);
  trace::stop();
  const std::string path = dir.file("trace.json");
  EXPECT_GT(trace::write(path), 0u);
  std::ifstream file(path);
  const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"replica 2\""), std::string::npos);
}

TEST(Shrink, RefusesWhatCannotShrinkNamingTheFlags) {
  const std::vector<std::pair<std::function<void(ParallelOptions&)>, std::string>> cases = {
      {[](ParallelOptions& o) { o.failure.min_replicas = 4; }, "--min-replicas 4 must be between 1 and --replicas 3"},
      {[](ParallelOptions& o) { o.failure.min_replicas = 0; }, "--min-replicas 0 must be between 1 and --replicas 3"},
      {[](ParallelOptions& o) { o.failure.on_failure = "retry"; },
       "--on-replica-failure retry: expected stop or shrink"},
      {[](ParallelOptions& o) { o.backend = "mpi"; }, "dpcore launch --min-nproc"},
      {[](ParallelOptions& o) { o.backend = "nccl"; }, "needs --backend local"},
      {[](ParallelOptions& o) { o.sync = "local:2"; }, "needs --sync full (with --sync local:2"},
      {[](ParallelOptions& o) { o.sync = "async"; }, "needs --sync full (with --sync async"},
      {[](ParallelOptions& o) { o.replicas = 1; }, "needs --replicas 2 or more"},
  };
  for (const auto& [change, words] : cases) {
    ParallelOptions o = shrinking(parallel(3, "ddp"));
    change(o);
    const std::string e = error_of([&] { runner(o); });
    EXPECT_NE(e.find(words), std::string::npos) << e;
  }
  // --min-replicas is checked with stop too: it must make sense with --replicas.
  ParallelOptions stop = parallel(2, "ddp");
  stop.failure.min_replicas = 3;
  EXPECT_NE(error_of([&] { runner(stop); }).find("--min-replicas 3 must be between 1 and --replicas 2"),
            std::string::npos);
}

}  // namespace
}  // namespace dpcore::train
