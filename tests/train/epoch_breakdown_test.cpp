// The per-epoch breakdown of training time (train/observe/step_times.h, train/observe/epoch_breakdown.h):
// the lanes of a step combined by hand-worked numbers; then real runs (one device, dp,
// ddp), whose parts must be non-negative, add up to the steps and the loader waits, and
// stay within the epoch's wall time; the metrics JSONL carries every field.
#include <gtest/gtest.h>

#include <algorithm>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/test_support.h"
#include "train/observe/epoch_breakdown.h"
#include "train/trainer.h"

namespace dpcore::testing {
namespace {

using namespace dpcore::train;

// ddp-like lanes: no idle time; replica 0 computes 1 s, 1: 2 s, 2: 4 s (the slowest), so
// replicas 0 and 1 wait 3 s and 2 s of their blocked time for replica 2, the rest is
// communication.
TEST(StepTimes, TheSlowestReplicasLeadIsWaitingTheRestCommunication) {
  const StepTimes t = combine_lanes({{1, 0, 3.5, 0.25, 10}, {2, 0, 2.5, 0.5, 10}, {4, 0, 0.75, 0.75, 12}});
  EXPECT_TRUE(t.measured);
  EXPECT_DOUBLE_EQ(t.waiting, (3.0 + 2.0 + 0.0) / 3);
  EXPECT_DOUBLE_EQ(t.communication, (0.5 + 0.5 + 0.75) / 3);
  EXPECT_DOUBLE_EQ(t.optimizer, 0.5);
  EXPECT_EQ(t.replica_compute, (std::vector<double>{1, 2, 4}));
  EXPECT_EQ(t.replica_samples, (std::vector<int64_t>{10, 10, 12}));
  // dp-like: the idle time in the parallel phases already covers the lead; the blocked
  // time (the allreduce) stays communication.
  const StepTimes dp = combine_lanes({{1, 3, 0.5, 0, 4}, {4, 0, 0.5, 0, 12}});
  EXPECT_DOUBLE_EQ(dp.waiting, 1.5);
  EXPECT_DOUBLE_EQ(dp.communication, 0.5);
}

TEST(EpochBreakdown, PartsAddUpToTheStepsAndTheLoaderWaits) {
  EpochBreakdown b;
  b.add_data(0.5);
  StepTimes t = combine_lanes({{1, 0, 1, 0.5, 8}, {2, 0, 0, 0.5, 8}});  // waiting 0.5, optimizer 0.5
  b.add_step(3, t, 99, 16);
  EXPECT_DOUBLE_EQ(b.parts().data, 0.5);
  EXPECT_DOUBLE_EQ(b.parts().waiting, 0.5);
  EXPECT_DOUBLE_EQ(b.parts().communication, 0);
  EXPECT_DOUBLE_EQ(b.parts().optimizer, 0.5);  // the runner's, not the root's 99
  EXPECT_DOUBLE_EQ(b.parts().compute, 2);
  EXPECT_DOUBLE_EQ(b.parts().sum(), 3.5);
  EXPECT_EQ(b.replica_samples_per_s(), (std::vector<double>{8, 4}));
  EXPECT_EQ(b.biggest_two(), "compute 57%  waiting 14%");  // (ties keep their order)
  // A runner that does not break its step down: the root's optimizer, the rest compute.
  b.add_step(2, StepTimes{}, 0.25, 4);
  EXPECT_DOUBLE_EQ(b.parts().compute, 3.75);
  EXPECT_DOUBLE_EQ(b.parts().optimizer, 0.75);
  EXPECT_EQ(b.shares(), (std::vector<int64_t>{8, 8})) << "the short step is not the split in use";
  b.reset();
  EXPECT_DOUBLE_EQ(b.parts().sum(), 0);
  // Clocks read on several threads can put the parts a hair past the step: they are then
  // scaled to fit it (here, exaggerated: 2 s of parts in a 1 s step).
  b.add_step(1, combine_lanes({{0.5, 0, 1.5, 0.5, 4}}), 0, 4);
  EXPECT_DOUBLE_EQ(b.parts().sum(), 1);
  EXPECT_DOUBLE_EQ(b.parts().communication, 0.75);
  EXPECT_DOUBLE_EQ(b.parts().optimizer, 0.25);
  EXPECT_DOUBLE_EQ(b.parts().compute, 0);
}

// A real run of 2 epochs: every epoch's parts are >= 0, add up to its training time and
// loader waits, fit in its wall time, and reach the JSONL.
void expect_breakdown(const std::string& what, ParallelOptions parallel, size_t replicas) {
  TempDir dir;
  TrainOptions o;
  o.model = "conv(4,3,p1) relu pool(2) flatten linear(4)";
  o.data = "synthetic:1,8,8,4,96";
  o.batch = 16, o.epochs = 2, o.threads = 1, o.progress = 0, o.device = "cpu";
  o.metrics = dir.file("m.jsonl");
  o.parallel = parallel;
  std::ostringstream log;
  const TrainResult result = train::train(o, log);
  ASSERT_EQ(result.epochs.size(), 2u) << what;
  for (const EpochMetrics& m : result.epochs) {
    const TimeParts& t = m.time;
    for (double part : {t.compute, t.communication, t.waiting, t.data, t.optimizer}) EXPECT_GE(part, 0) << what;
    EXPECT_GE(t.sum(), m.seconds - 1e-9) << what << ": the steps are in the parts";
    EXPECT_LE(t.sum(), m.wall_seconds + 1e-9) << what;
    EXPECT_GT(t.compute, 0) << what;
    EXPECT_GT(t.optimizer, 0) << what;
    ASSERT_EQ(m.replica_samples_per_s.size(), replicas) << what;
    // (Under async whichever replica is free takes the next piece: one may get none.)
    const bool every_replica_computes = parallel.sync != "async";
    double fastest = 0;
    for (double speed : m.replica_samples_per_s) {
      if (every_replica_computes) EXPECT_GT(speed, 0) << what;
      EXPECT_GE(speed, 0) << what;
      fastest = std::max(fastest, speed);
    }
    EXPECT_GT(fastest, 0) << what;
    ASSERT_EQ(m.shares.size(), replicas) << what;
    int64_t rows = 0;
    for (int64_t s : m.shares) rows += s;
    // (async has no split of a step: its shares are the pieces that came in during one.)
    if (every_replica_computes) EXPECT_EQ(rows, o.batch) << what;
  }
  // (async's replicas hand their gradients to the master in memory: no collective.)
  if (replicas > 1 && parallel.sync != "async") EXPECT_GT(result.epochs[0].time.communication, 0) << what;
  EXPECT_NE(log.str().find("  time: compute "), std::string::npos) << log.str();

  std::ifstream file(o.metrics);
  std::string line;
  int records = 0;
  while (std::getline(file, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    ++records;
    for (const char* key : {"compute_s", "communication_s", "waiting_s", "data_s", "optimizer_s", "wall_s"}) {
      ASSERT_TRUE(j.contains(key)) << what << ": " << key << " in " << line;
      EXPECT_GE(j[key].get<double>(), 0) << key;
    }
    EXPECT_EQ(j["replica_samples_per_s"].size(), replicas) << line;
    EXPECT_EQ(j["shares"].size(), replicas) << line;
  }
  EXPECT_EQ(records, 2) << what;
}

TEST(EpochBreakdown, RealRunsStayWithinTheirWallTime) {
  expect_breakdown("one device", ParallelOptions{}, 1);
  ParallelOptions ddp;
  ddp.replicas = 3, ddp.mode = "ddp";
  expect_breakdown("ddp", ddp, 3);
  ParallelOptions dp;
  dp.replicas = 2, dp.mode = "dp", dp.split = "weights:3,1";
  expect_breakdown("dp", dp, 2);
  // The replicas of async step the master while the trainer reads the step's times (under
  // ThreadSanitizer, a read of the master's optimizer clock there is a data race).
  ParallelOptions async;
  async.replicas = 2, async.sync = "async";
  expect_breakdown("async", async, 2);
}

}  // namespace
}  // namespace dpcore::testing
