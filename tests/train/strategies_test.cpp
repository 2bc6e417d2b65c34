// --sync local:K and async (train/sync/local_sgd.h, train/sync/async_sgd.h): each against the
// synchronous step it must reduce to, and the properties that define it.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <set>
#include <thread>

#include "engine/adam.h"
#include "engine/sgd.h"
#include "train/sync/async_sgd.h"
#include "train/sync/local_sgd.h"
#include "train/step/step.h"
#include "train/sync/sync_strategy.h"
#include "equivalence.h"

namespace dpcore::train {
namespace {

using testing::kSgd;

ParallelOptions options_for(const std::string& sync, int replicas, const std::string& split = "even") {
  ParallelOptions o;
  o.sync = sync, o.replicas = replicas, o.split = split, o.timeout_s = 60;
  return o;
}

std::vector<float> params_of(const layers::Model& m) { return m.parameters().values().to_vector<float>(); }

// --- local:K -------------------------------------------------------------------------

struct LocalCase {
  int replicas;
  int64_t accum;
  std::string split;
};

class LocalSgdOneStep : public ::testing::TestWithParam<LocalCase> {};

// With K = 1 and momentum averaged, each replica's step on its own share's mean gradient,
// averaged with weights share/N, is the step on the whole batch's mean gradient: SGD with
// momentum, nesterov and weight decay is linear in the gradient. Only rounding differs.
TEST_P(LocalSgdOneStep, EqualsFullSynchronousTraining) {
  const LocalCase c = GetParam();
  const int64_t n = 13;  // uneven shares for 2, 3 and 4 replicas
  auto runner = make_runner(testing::simplenet(), kSgd, c.accum, options_for("local:1", c.replicas, c.split));
  auto got = testing::train_with(*runner, n, 5);
  double diff = testing::relative_difference(got, testing::reference_params(n, 5));
  EXPECT_LE(diff, 1e-5) << runner->describe();
}

INSTANTIATE_TEST_SUITE_P(Cases, LocalSgdOneStep,
                         ::testing::Values(LocalCase{2, 1, "even"}, LocalCase{3, 2, "even"}, LocalCase{3, 1, "weights:5,1,2"},
                                           LocalCase{4, 1, "weights:1,2,3,4"}),
                         [](const ::testing::TestParamInfo<LocalCase>& info) {
                           return "R" + std::to_string(info.param.replicas) + "_A" + std::to_string(info.param.accum) +
                                  (info.param.split == "even" ? "_even" : "_weights");
                         });

bool replicas_identical(const LocalSgdRunner& runner) {
  auto root = params_of(runner.replica_model(0));
  for (size_t r = 1; r < runner.local_replicas(); ++r) {
    if (params_of(runner.replica_model(r)) != root) return false;
  }
  return true;
}

TEST(LocalSgd, ReplicasAreIdenticalRightAfterEachAveragingAndDifferBetween) {
  LocalSgdRunner runner(testing::simplenet(), kSgd, 1, options_for("local:3", 3), 3);
  ASSERT_TRUE(replicas_identical(runner));  // replicated from rank 0
  for (int s = 1; s <= 7; ++s) {
    testing::HostBatch b = testing::make_batch(12, uint64_t(100 + s));
    runner.step(b.batch);
    if (s % 3 == 0) EXPECT_TRUE(replicas_identical(runner)) << "after step " << s << ", an averaging step";
    else EXPECT_FALSE(replicas_identical(runner)) << "after step " << s << ", between averagings";
  }
  EXPECT_EQ(runner.averagings(), 2);
  // settle() shows the average of what the last step left apart (the trainer calls it
  // before evaluating), which is not one of the schedule's averagings.
  runner.settle();
  EXPECT_TRUE(replicas_identical(runner));
  EXPECT_EQ(runner.averagings(), 2);
  runner.settle();  // nothing new to average
  EXPECT_TRUE(replicas_identical(runner));
  // The next step starts from the replicas as they were: apart again.
  testing::HostBatch b = testing::make_batch(12, 108);
  runner.step(b.batch);
  EXPECT_FALSE(replicas_identical(runner));
}

// Evaluating or saving between averagings (settle()) leaves the schedule and the result
// alone: the same steps with a settle() after every one end bit for bit where they end
// without, and each settle() shows the samples-weighted average of the replicas.
TEST(LocalSgd, SettlingBetweenAveragingsDoesNotChangeTraining) {
  auto train = [](bool settle_every_step) {
    LocalSgdRunner runner(testing::simplenet(), kSgd, 1, options_for("local:3", 3), 3);
    for (int s = 1; s <= 7; ++s) {
      testing::HostBatch b = testing::make_batch(13, uint64_t(100 + s));  // shares 5, 5, 3
      runner.set_step_number(s);
      runner.step(b.batch);
      if (!settle_every_step) continue;
      std::vector<std::vector<float>> replicas;
      for (size_t r = 0; r < runner.local_replicas(); ++r) replicas.push_back(params_of(runner.replica_model(r)));
      runner.settle();
      const int since = s % 3 == 0 ? 0 : s % 3;  // steps since the last averaging
      if (since == 0) {
        EXPECT_EQ(params_of(runner.model()), replicas[0]) << "after step " << s << ": already one model";
        continue;
      }
      std::vector<float> want(replicas[0].size());
      for (size_t i = 0; i < want.size(); ++i) {
        want[i] = float((5.0 * replicas[0][i] + 5.0 * replicas[1][i] + 3.0 * replicas[2][i]) / 13.0);
      }
      EXPECT_LE(testing::relative_difference(params_of(runner.model()), want), 1e-6) << "after step " << s;
    }
    EXPECT_EQ(runner.averagings(), 2);
    const bool apart = params_of(runner.replica_model(0)) != params_of(runner.replica_model(1));
    EXPECT_EQ(apart, !settle_every_step) << "step 7 left the replicas apart; a settle() shows their average";
    runner.settle();
    return params_of(runner.model());
  };
  EXPECT_EQ(train(true), train(false));
}

// The averaging weights are the samples each replica saw since the last averaging: with
// shares 9 and 3 and K = 2, two local steps on each share by hand, averaged 3:1.
TEST(LocalSgd, AveragesReplicasWeightedBySamples) {
  const int64_t n = 12;  // weights 3,1: shares 9 and 3
  LocalSgdRunner runner(testing::simplenet(), SgdConfig{0.05, 0.0, 0.0, 0.0, false}, 1,
                        options_for("local:2", 2, "weights:3,1"), 2);
  // The same two local steps, by hand, on one model per share.
  auto local_params = [&](int64_t begin, int64_t end) {
    auto model = testing::simplenet();
    Sgd sgd(model->parameters(), SgdConfig{0.05, 0.0, 0.0, 0.0, false});
    for (int s = 1; s <= 2; ++s) {
      testing::HostBatch b = testing::make_batch(n, uint64_t(100 + s));
      auto [x, y] = batch_tensors(batch_rows(b.batch, begin, end), Device::cpu());
      accumulate_and_step(*model, sgd, x, y, 1, y.size(0));
    }
    return params_of(*model);
  };
  auto first = local_params(0, 9), second = local_params(9, 12);
  for (int s = 1; s <= 2; ++s) {
    testing::HostBatch b = testing::make_batch(n, uint64_t(100 + s));
    runner.step(b.batch);
  }
  std::vector<float> want(first.size());
  for (size_t i = 0; i < want.size(); ++i) want[i] = float(0.75 * first[i] + 0.25 * second[i]);
  EXPECT_LE(testing::relative_difference(params_of(runner.model()), want), 1e-6);
  EXPECT_GT(testing::relative_difference(first, second), 1e-3);  // the weights matter here
}

// Under AdamW the averaging takes Adam's two moments with the parameters, weighted alike,
// and every replica keeps the run's step count: the same two local steps by hand, on one
// model per share (shares 9 and 3), averaged 3:1.
TEST(LocalSgd, AveragesAdamsMomentsAsItAveragesMomentum) {
  const int64_t n = 12;
  const AdamConfig adamw{0.01, 0.9, 0.999, 1e-8, 0.01, true};
  LocalSgdRunner runner(testing::simplenet(), adamw, 1, options_for("local:2", 2, "weights:3,1"), 2);
  struct Local {
    std::vector<float> params, exp_avg, exp_avg_sq;
  };
  auto local = [&](int64_t begin, int64_t end) {
    auto model = testing::simplenet();
    Adam adam(model->parameters(), adamw);
    for (int s = 1; s <= 2; ++s) {
      testing::HostBatch b = testing::make_batch(n, uint64_t(100 + s));
      auto [x, y] = batch_tensors(batch_rows(b.batch, begin, end), Device::cpu());
      accumulate_and_step(*model, adam, x, y, 1, y.size(0));
    }
    return Local{params_of(*model), adam.exp_avg().to_vector<float>(), adam.exp_avg_sq().to_vector<float>()};
  };
  const Local first = local(0, 9), second = local(9, 12);
  for (int s = 1; s <= 2; ++s) {
    testing::HostBatch b = testing::make_batch(n, uint64_t(100 + s));
    runner.set_step_number(s);
    runner.step(b.batch);
  }
  ASSERT_EQ(runner.averagings(), 1);
  auto average = [](const std::vector<float>& a, const std::vector<float>& b) {
    std::vector<float> out(a.size());
    for (size_t i = 0; i < out.size(); ++i) out[i] = float(0.75 * a[i] + 0.25 * b[i]);
    return out;
  };
  EXPECT_LE(testing::relative_difference(params_of(runner.model()), average(first.params, second.params)), 1e-6);
  EXPECT_LE(testing::relative_difference(runner.optimizer().state("exp_avg").to_vector<float>(),
                                         average(first.exp_avg, second.exp_avg)),
            1e-6);
  EXPECT_LE(testing::relative_difference(runner.optimizer().state("exp_avg_sq").to_vector<float>(),
                                         average(first.exp_avg_sq, second.exp_avg_sq)),
            1e-6);
  EXPECT_GT(testing::relative_difference(first.exp_avg, second.exp_avg), 1e-3);  // the weights matter here
  EXPECT_EQ(runner.optimizer().steps_taken(), 2);
}

// A replica whose share of a step is empty takes no step at all: momentum and weight decay
// must not move it, since what it holds enters the next averaging with the weight of the
// samples it saw before. Shares with K = 2: step 1 (4 rows) 2 and 2, step 2 (1 row) 1 and 0.
TEST(LocalSgd, AReplicaWithAnEmptyShareDoesNotStep) {
  LocalSgdRunner runner(testing::simplenet(), kSgd, 1, options_for("local:2", 2), 2);
  const int64_t sizes[] = {4, 1};
  // By hand: replica 0 steps on rows 0-1 of batch 1 and row 0 of batch 2; replica 1 only on
  // rows 2-3 of batch 1. Averaged 3:2 (parameters and momentum alike).
  auto local_model = [&](const std::vector<std::pair<int64_t, int64_t>>& rows) {
    auto model = testing::simplenet();
    auto sgd = std::make_unique<Sgd>(model->parameters(), kSgd);
    for (size_t s = 0; s < rows.size(); ++s) {
      if (rows[s].first == rows[s].second) continue;
      testing::HostBatch b = testing::make_batch(sizes[s], uint64_t(100 + s));
      auto [x, y] = batch_tensors(batch_rows(b.batch, rows[s].first, rows[s].second), Device::cpu());
      accumulate_and_step(*model, *sgd, x, y, 1, y.size(0));
    }
    return std::make_pair(params_of(*model), sgd->momentum().to_vector<float>());
  };
  auto [first, first_momentum] = local_model({{0, 2}, {0, 1}});
  auto [second, second_momentum] = local_model({{2, 4}, {0, 0}});
  for (size_t s = 0; s < 2; ++s) {
    testing::HostBatch b = testing::make_batch(sizes[s], uint64_t(100 + s));
    runner.set_step_number(int64_t(s) + 1);
    runner.step(b.batch);
  }
  ASSERT_EQ(runner.averagings(), 1);
  std::vector<float> want(first.size()), want_momentum(first.size());
  for (size_t i = 0; i < want.size(); ++i) {
    want[i] = float(0.6 * first[i] + 0.4 * second[i]);
    want_momentum[i] = float(0.6 * first_momentum[i] + 0.4 * second_momentum[i]);
  }
  EXPECT_LE(testing::relative_difference(params_of(runner.model()), want), 1e-6);
  EXPECT_LE(testing::relative_difference(runner.optimizer().state("momentum").to_vector<float>(), want_momentum), 1e-6);
}

// --- async ---------------------------------------------------------------------------

// Steps, numbered as the trainer numbers them, then settle(): the master's parameters.
std::vector<float> train_async(AsyncRunner& runner, int64_t n, int steps) {
  for (int s = 0; s < steps; ++s) {
    testing::HostBatch b = testing::make_batch(n, uint64_t(100 + s));
    runner.set_step_number(s + 1);
    runner.step(b.batch);
  }
  runner.settle();
  return params_of(runner.model());
}

TEST(AsyncSgd, OneReplicaEqualsFullTrainingBitForBit) {
  for (int64_t accum : {1, 3}) {
    AsyncRunner runner(testing::simplenet(), kSgd, accum, options_for("async", 1));
    auto got = train_async(runner, 13, 5);
    SingleDeviceRunner single(testing::simplenet(), kSgd, accum);
    auto want = testing::train_with(single, 13, 5);
    EXPECT_EQ(got, want) << "accum " << accum;
    EXPECT_EQ(runner.updates().size(), 5u);
  }
}

// With S = 0 and several replicas one piece is in flight at a time, computed from the newest
// parameters: serial SGD with one step per piece (R per global batch), bit for bit the
// one-device steps on the pieces in order, whichever replica computed each.
TEST(AsyncSgd, NoStalenessIsOneDeviceSgdOnThePiecesBitForBit) {
  const int64_t n = 13;  // pieces of 5, 5 and 3 rows
  for (int64_t accum : {1, 2}) {
    ParallelOptions o = options_for("async", 3);
    o.max_staleness = 0;
    AsyncRunner runner(testing::simplenet(), kSgd, accum, o);
    auto got = train_async(runner, n, 4);
    SingleDeviceRunner single(testing::simplenet(), kSgd, accum);
    for (int s = 0; s < 4; ++s) {
      testing::HostBatch b = testing::make_batch(n, uint64_t(100 + s));
      int64_t row = 0;
      for (int64_t rows : chunk_sizes(n, 3)) {
        single.step(batch_rows(b.batch, row, row + rows));
        row += rows;
      }
    }
    EXPECT_EQ(got, params_of(single.model())) << "accum " << accum;
    EXPECT_EQ(runner.updates().size(), 12u);
  }
}

// Every piece is applied exactly once, versions count up by one, and no gradient is staler
// than the bound, for bounds that do and do not bind (4 replicas on fewer cores contend).
TEST(AsyncSgd, AppliesEveryPieceOnceAndNeverStalerThanTheBound) {
  for (int64_t bound : {0, 1, 2, 8}) {
    ParallelOptions o = options_for("async", 4);
    o.max_staleness = bound;
    AsyncRunner runner(testing::simplenet(), kSgd, 1, o);
    const int steps = 6;
    train_async(runner, 16, steps);
    const auto& updates = runner.updates();
    ASSERT_EQ(updates.size(), size_t(4 * steps)) << "bound " << bound;
    std::set<std::pair<int64_t, int64_t>> pieces;
    for (size_t i = 0; i < updates.size(); ++i) {
      const AppliedUpdate& u = updates[i];
      EXPECT_EQ(u.version, int64_t(i) + 1);
      EXPECT_GE(u.staleness(), 0);
      EXPECT_LE(u.staleness(), bound) << "update " << u.version << " by replica " << u.replica;
      EXPECT_EQ(u.rows, 4);
      pieces.insert({u.step, u.first_row});
    }
    EXPECT_EQ(pieces.size(), updates.size()) << "a piece applied twice";
    auto counters = runner.epoch_counters();
    ASSERT_EQ(counters.size(), 1u);
    EXPECT_EQ(counters[0].first, "staleness_histogram");
    ASSERT_EQ(counters[0].second.size(), size_t(bound + 1));
    int64_t counted = 0;
    for (int64_t c : counters[0].second) counted += c;
    EXPECT_EQ(counted, int64_t(updates.size()));
    if (bound == 0) {
      for (const AppliedUpdate& u : updates) EXPECT_EQ(u.snapshot, u.version - 1);
    }
  }
}

// A replica that throws (before its compute, or after its update is applied), or hangs past
// --replica-timeout, fails the run naming it; the runner is destroyed without waiting for
// the hung thread's (released) piece.
TEST(AsyncSgd, AFailingOrHangingReplicaFailsTheRunNamingIt) {
  // (A replica's step S is its S-th piece: the first one always comes.)
  for (const std::string& fault :
       {"throw:replica=1,step=1", "throw-after-step:replica=1,step=1", "hang:replica=2,step=1"}) {
    ParallelOptions o = options_for("async", 3);
    o.timeout_s = 0.5;
    o.faults = FaultInjector(parse_faults(fault));
    AsyncRunner runner(testing::simplenet(), kSgd, 1, o);
    try {
      train_async(runner, 12, 6);
      ADD_FAILURE() << fault << ": the run went on";
    } catch (const Error& e) {
      const std::string replica = "replica " + fault.substr(fault.find('=') + 1, 1);
      EXPECT_NE(std::string(e.what()).find(replica), std::string::npos) << fault << ": " << e.what();
    }
  }
}

// What fails in a replica's snapshot or in its update (not only in its compute) fails the
// run naming the replica, as a compute error does; it must not escape the replica's thread
// (std::terminate would end the process).
TEST(AsyncSgd, AFailingSnapshotOrUpdateFailsTheRunNamingTheReplica) {
  for (const std::string phase : {"snapshot", "apply"}) {
    AsyncRunner runner(testing::simplenet(), kSgd, 1, options_for("async", 2));
    runner.set_phase_hook_for_testing([phase](int replica, const char* now) {
      if (replica == 1 && now == phase) fail("injected failure in the ", now);
    });
    try {
      train_async(runner, 12, 6);
      ADD_FAILURE() << phase << ": the run went on";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("replica 1 failed: injected failure in the " + phase), std::string::npos)
          << e.what();
    }
  }
}

// --replica-timeout counts the time a gradient is in flight without an update, not the time
// before any piece was taken (setup, evaluation, checkpoints: the trainer's, not a replica's).
TEST(AsyncSgd, TimeBeforeAPieceIsTakenIsNoReplicasDelay) {
  ParallelOptions o = options_for("async", 2);
  o.timeout_s = 1.5;
  AsyncRunner runner(testing::simplenet(), kSgd, 1, o);
  // Each run's first two pieces (one per replica) take a while, well under the timeout, so
  // that the trainer waits, with gradients in flight, before any update has come.
  std::atomic<int> pieces{0};  // (the replicas compute concurrently)
  runner.set_phase_hook_for_testing([&pieces](int, const char* phase) {
    if (std::string(phase) == "compute" && pieces++ % 10 < 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(400));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(2000));  // setting up, evaluating...
  EXPECT_NO_THROW(train_async(runner, 16, 5));                    // (10 pieces)
  std::this_thread::sleep_for(std::chrono::milliseconds(2000));  // ... and between runs
  EXPECT_NO_THROW(train_async(runner, 16, 5));
}

// --- flags ---------------------------------------------------------------------------

TEST(SyncFlag, ParsesAndRefusesNamingTheValue) {
  EXPECT_EQ(parse_sync("full").kind, SyncStrategy::Kind::Full);
  EXPECT_EQ(parse_sync("async").kind, SyncStrategy::Kind::Async);
  SyncStrategy local = parse_sync("local:16");
  EXPECT_EQ(local.kind, SyncStrategy::Kind::Local);
  EXPECT_EQ(local.period, 16);
  for (std::string bad : {"local:0", "local:", "local:x", "local:-2", "sync", ""}) {
    try {
      parse_sync(bad);
      ADD_FAILURE() << "accepted --sync '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--sync " + bad), std::string::npos) << e.what();
    }
  }
}

TEST(SyncFlag, RefusesCombinationsThatDoNotApply) {
  auto expect_refused = [](ParallelOptions o, const std::string& words) {
    try {
      make_runner(testing::simplenet(), kSgd, 1, o);
      ADD_FAILURE() << "accepted " << o.sync << " with " << words;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  expect_refused(options_for("local:2", 2, "adaptive"), "--split adaptive");
  ParallelOptions dp = options_for("local:2", 2);
  dp.mode = "dp";
  expect_refused(dp, "--mode dp");
  ParallelOptions sync_bn = options_for("local:2", 2);
  sync_bn.batchnorm = "sync";
  expect_refused(sync_bn, "--batchnorm sync");
  ParallelOptions mpi = options_for("async", 2);
  mpi.backend = "mpi";
  expect_refused(mpi, "--backend mpi");
  expect_refused(options_for("async", 2, "weights:1,2"), "--split weights:1,2");
}

}  // namespace
}  // namespace dpcore::train
