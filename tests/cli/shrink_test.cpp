// --on-replica-failure shrink through the `dpcore` command (docs/fault-tolerance.md,
// "Shrinking past a failed replica"): the log line and the metrics record name the replica,
// the step and the new replica count, and the run ends with the weights of a run that used
// the survivors from that step on; below --min-replicas the run stops with an error and a
// checkpoint of the last completed step, which resumes; what cannot shrink is refused
// before training.
#include <gtest/gtest.h>

#include <string>

#include "cli/cli_run.h"
#include "cli/same_maths.h"
#include "engine/io/safetensors.h"
#include "support/test_support.h"

namespace {

using dpcore::testing::CommandResult;
using dpcore::testing::expect_same_maths;
using dpcore::testing::job;
using dpcore::testing::run;
using dpcore::testing::slurp;

const std::string kJob = job();
const std::string kShrink = " --on-replica-failure shrink";

int64_t step_of(const std::string& checkpoint) {
  return std::stoll(dpcore::io::load_safetensors(checkpoint).metadata().at("step"));
}

// Replica 2 of 4 throws at step 5 of 8: the run finishes on 3 replicas with the weights of a
// 4-replica run to step 4 resumed on 3 replicas; the log and the metrics say what happened.
TEST(ShrinkCli, ARunThatShrankLogsAndRecordsItAndEndsWithTheMathsOfThreeReplicas) {
  dpcore::testing::TempDir dir;
  const std::string metrics = dir.file("m.jsonl");
  CommandResult r = run(kJob + " --steps 8 --replicas 4 --inject throw:replica=2,step=5" + kShrink + " --metrics " +
                        metrics + " --save " + dir.file("shrunk.safetensors"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("replica 2 failed at step 5: replica 2: injected throw at step 5 (--inject "
                          "throw:replica=2,step=5); dropped it: step 5 runs again over the same batch on 3 replicas "
                          "(replicas 0, 1 and 3 are ranks 0, 1 and 2 now)\n"),
            std::string::npos)
      << r.output;
  EXPECT_NE(slurp(metrics).find("{\"kind\":\"shrink\",\"reason\":\"replica 2: injected throw at step 5 (--inject "
                                "throw:replica=2,step=5)\",\"replica\":2,\"replicas\":3,\"step\":5,"
                                "\"survivors\":[0,1,3]}\n"),
            std::string::npos)
      << slurp(metrics);

  const std::string ck = " --checkpoint " + dir.file("ck");
  ASSERT_EQ(run(kJob + " --steps 4 --replicas 4" + ck).status, 0);
  CommandResult three = run(kJob + " --steps 8 --replicas 3 --resume --save " + dir.file("three.safetensors") + ck);
  ASSERT_EQ(three.status, 0) << three.output;
  expect_same_maths(dir.file("three.safetensors"), dir.file("shrunk.safetensors"));
}

// A replica that hangs (dp) is dropped once --replica-timeout notices it, and the run ends.
TEST(ShrinkCli, AHangIsShrunkPast) {
  CommandResult r = run(kJob + " --steps 4 --replicas 3 --mode dp --inject hang:replica=1,step=2 --replica-timeout "
                               "0.5" + kShrink);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("replica 1 failed at step 2: local allreduce: replica 1 did not arrive within 0.5 s; "
                          "dropped it: step 2 runs again over the same batch on 2 replicas"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("epoch 1: train loss"), std::string::npos) << r.output;
}

// --min-replicas 3 of 3: the failure at step 5 stops the run, after writing the checkpoint
// of step 4 (the newest --checkpoint-every one was of step 3), which is valid and resumes on
// 2 replicas with the maths of a run that never failed.
TEST(ShrinkCli, BelowTheMinimumTheRunStopsWithACheckpointThatResumes) {
  dpcore::testing::TempDir dir;
  const std::string ck = " --checkpoint " + dir.file("ck");
  CommandResult r = run(kJob + " --steps 8 --replicas 3 --checkpoint-every 3 --inject throw:replica=1,step=5" +
                        kShrink + " --min-replicas 3" + ck);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("dpcore: error: replica 1 failed at step 5: replica 1: injected throw at step 5"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("2 replicas would be left, fewer than --min-replicas 3, so the run stops with the state "
                          "from before step 5; the checkpoint of step 4 is in " + dir.file("ck")),
            std::string::npos)
      << r.output;
  EXPECT_EQ(step_of(dir.file("ck/checkpoint.safetensors")), 4);

  CommandResult resumed = run(kJob + " --steps 8 --replicas 2 --resume --save " + dir.file("resumed.safetensors") + ck);
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from " + dir.file("ck/checkpoint.safetensors") + " at step 4"),
            std::string::npos)
      << resumed.output;
  ASSERT_EQ(run(kJob + " --steps 8 --replicas 3 --save " + dir.file("straight.safetensors")).status, 0);
  expect_same_maths(dir.file("straight.safetensors"), dir.file("resumed.safetensors"));
}

TEST(ShrinkCli, WhatCannotShrinkIsRefusedBeforeTraining) {
  struct Case {
    std::string args, names;
  };
  const Case cases[] = {
      {" --replicas 2 --min-replicas 3" + kShrink, "--min-replicas 3 must be between 1 and --replicas 2"},
      {" --replicas 2 --min-replicas 3", "--min-replicas 3 must be between 1 and --replicas 2"},
      {" --backend mpi" + kShrink, "dpcore launch --min-nproc"},
      {" --replicas 2 --sync local:2" + kShrink, "needs --sync full (with --sync local:2"},
      {kShrink, "needs --replicas 2 or more"},
      {" --replicas 2 --on-replica-failure retry", "--on-replica-failure"},
  };
  for (const Case& c : cases) {
    CommandResult r = run(kJob + " --steps 2" + c.args);
    EXPECT_NE(r.status, 0) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.names), std::string::npos) << c.args << "\n" << r.output;
    EXPECT_EQ(r.output.find("step 1"), std::string::npos) << c.args << ": it trained\n" << r.output;
  }
}

}  // namespace
