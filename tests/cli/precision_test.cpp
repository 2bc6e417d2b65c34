// --precision through the `dpcore` command (issue 27): bf16 and fp16 train under autocast
// with float32 master weights (layers::Model::set_precision), say so in their first line,
// keep the maths of one device with a micro-batch per replica and resume bit for bit; fp16
// scales the loss and skips the steps whose gradients overflow, on every replica alike,
// with the scale in the log, the metrics and checkpoints; what they cannot run is refused
// naming the flags.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli/cli_run.h"
#include "cli/metrics_lines.h"
#include "engine/io/safetensors.h"
#include "support/test_support.h"

namespace {

using dpcore::testing::CommandResult;
using dpcore::testing::job;
using dpcore::testing::metrics_lines;
using dpcore::testing::run;
using dpcore::testing::slurp;

const std::string kJob = job();

// A run that must fail before training, with `expected` in what it prints.
struct Refusal {
  std::string args, expected;
};
void expect_refusals(const std::vector<Refusal>& cases) {
  for (const Refusal& c : cases) {
    SCOPED_TRACE(c.args);
    CommandResult r = run(c.args + " --steps 2");
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.output.find(c.expected), std::string::npos) << r.output;
  }
}

TEST(PrecisionFlag, RefusesWhatItCannotRunNamingTheFlags) {
  const std::vector<Refusal> cases = {
      {kJob + " --precision half", "--precision half: must be one of fp32, bf16, fp16"},
      {kJob + " --precision fp16 --replicas 2 --sync local:2",
       "--precision fp16 with --sync local:2: the loss scaler judges the one reduced gradient of a synchronous step"},
      {kJob + " --precision fp16 --skip-nonfinite",
       "--precision fp16 with --skip-nonfinite: the loss scaler skips the steps whose gradients hold an Inf or NaN itself"},
  };
  expect_refusals(cases);
}

// Under bf16 each replica's share of the batch gives 16-bit gradients (a 16-bit op's
// gradient is 16-bit, as in PyTorch), which the allreduce adds in float32: so R replicas
// are one device with R micro-batches (--accum R), whose 16-bit gradients the flat float32
// buffer adds up, bit for bit, on every runner (the same files). The saved weights are the
// float32 master weights, and they differ from the float32 run's: the forward really ran
// in 16 bits. The first line says so.
TEST(PrecisionBf16, ReplicasAreOneDeviceWithAMicroBatchEachAndTheWeightsStayFloat32) {
  dpcore::testing::TempDir dir;
  const std::string fashion = job("fashioncnn", "synthetic:1,28,28,10,256", "cpu", 32) + " --steps 6";
  CommandResult accum = run(fashion + " --precision bf16 --accum 2 --save " + dir.file("accum.safetensors"));
  ASSERT_EQ(accum.status, 0) << accum.output;
  EXPECT_NE(accum.output.find("precision bf16 (autocast, float32 master weights)"), std::string::npos) << accum.output;
  for (const std::string mode : {"dp", "ddp"}) {
    SCOPED_TRACE(mode);
    CommandResult two = run(fashion + " --precision bf16 --replicas 2 --mode " + mode + " --save " + dir.file(mode));
    ASSERT_EQ(two.status, 0) << two.output;
    EXPECT_EQ(slurp(dir.file("accum.safetensors")), slurp(dir.file(mode)));
  }
  CommandResult fp32 = run(fashion + " --accum 2 --save " + dir.file("fp32.safetensors"));
  ASSERT_EQ(fp32.status, 0) << fp32.output;
  EXPECT_EQ(fp32.output.find("precision"), std::string::npos) << fp32.output;
  EXPECT_NE(slurp(dir.file("accum.safetensors")), slurp(dir.file("fp32.safetensors")));
  const auto weights = dpcore::io::load_safetensors(dir.file("accum.safetensors"));
  for (const auto& t : weights.tensors()) EXPECT_EQ(t.dtype, dpcore::DType::Float32) << t.name;
}

// A pipeline under bf16 and fp16: each stage runs its layers under the model's autocast,
// so the stages (threads here, and the processes of an mpirun job) save the weights of one
// device with as many micro-batches (--accum), byte for byte; fp16's loss scale is in the
// metrics as on one device.
TEST(PrecisionPipeline, StagesUnderBf16AndFp16SaveOneDevicesWeights) {
  for (const std::string precision : {"bf16", "fp16"}) {
    SCOPED_TRACE(precision);
    dpcore::testing::TempDir dir;
    const std::string base = kJob + " --precision " + precision + " --steps 6";
    CommandResult accum = run(base + " --accum 2 --save " + dir.file("accum.safetensors"));
    ASSERT_EQ(accum.status, 0) << accum.output;
    CommandResult piped = run(base + " --stages 0-1@cpu:0,2-5@cpu:0 --micro-batches 2 --metrics " + dir.file("m.jsonl") +
                              " --save " + dir.file("piped.safetensors"));
    ASSERT_EQ(piped.status, 0) << piped.output;
    EXPECT_NE(piped.output.find("precision " + precision + " (autocast, float32 master weights"), std::string::npos)
        << piped.output;
    EXPECT_EQ(slurp(dir.file("accum.safetensors")), slurp(dir.file("piped.safetensors")));
    if (precision == "fp16") EXPECT_EQ(metrics_lines(dir.file("m.jsonl")).back().at("loss_scale").get<double>(), 65536.0);
#ifdef DPCORE_MPIEXEC
    CommandResult mpi = dpcore::testing::run_command(base + " --backend mpi --stages 0-1@cpu:0,2-5@cpu:1 --micro-batches 2 "
                                                            "--save " + dir.file("mpi.safetensors"),
                                                     dpcore::testing::mpirun(2));
    ASSERT_EQ(mpi.status, 0) << mpi.output;
    EXPECT_EQ(slurp(dir.file("accum.safetensors")), slurp(dir.file("mpi.safetensors")));
#endif
  }
}

// A bf16 run resumed from its checkpoint is the run that never stopped, bit for bit: the
// 16-bit copy is made again from the loaded master weights before the first step.
TEST(PrecisionBf16, AResumedRunIsTheRunThatNeverStopped) {
  for (const std::string& runner : {std::string(), std::string(" --replicas 2 --mode ddp")}) {
    SCOPED_TRACE(runner);
    dpcore::testing::TempDir dir;
    const std::string bf16 = kJob + " --precision bf16" + runner, ckpt = " --checkpoint " + dir.file("ckpt");
    ASSERT_EQ(run(bf16 + " --steps 20 --save " + dir.file("straight.safetensors")).status, 0);
    CommandResult first = run(bf16 + " --steps 10" + ckpt);
    ASSERT_EQ(first.status, 0) << first.output;
    CommandResult resumed = run(bf16 + " --steps 20 --resume --save " + dir.file("resumed.safetensors") + ckpt);
    ASSERT_EQ(resumed.status, 0) << resumed.output;
    EXPECT_NE(resumed.output.find("resumed"), std::string::npos) << resumed.output;
    EXPECT_EQ(slurp(dir.file("straight.safetensors")), slurp(dir.file("resumed.safetensors")));
  }
}

// --precision fp16 scales the loss (GradScaler's 65536 to start) and skips a step whose
// gradients hold an Inf or NaN: an injected NaN at step 3 is skipped, logged with the
// halved scale, counted in the metrics with the scale, and the run goes on. Over 2
// replicas the NaN of replica 1 reaches every replica through the reduction, so all skip
// alike: dp and ddp equal one device with --accum 2 and its NaN, bit for bit.
TEST(PrecisionFp16, AStepWithAnInfOrNanIsSkippedOnEveryReplicaAndHalvesTheScale) {
  dpcore::testing::TempDir dir;
  const std::string fp16 = kJob + " --precision fp16 --steps 8";
  CommandResult one = run(fp16 + " --accum 2 --inject nan:replica=0,step=3 --metrics " + dir.file("m.jsonl") +
                          " --save " + dir.file("accum.safetensors"));
  ASSERT_EQ(one.status, 0) << one.output;
  EXPECT_NE(one.output.find("precision fp16 (autocast, float32 master weights, loss scale 65536)"), std::string::npos)
      << one.output;
  EXPECT_NE(one.output.find("step 3 skipped: Inf or NaN in the float16 gradients (--precision fp16: parameters and "
                            "optimizer state unchanged; loss scale now 32768)"),
            std::string::npos)
      << one.output;
  const auto records = metrics_lines(dir.file("m.jsonl"));
  ASSERT_FALSE(records.empty());
  EXPECT_EQ(records.back().at("loss_scale").get<double>(), 32768.0);
  EXPECT_EQ(records.back().at("skipped_steps").get<int64_t>(), 1);
  for (const std::string mode : {"dp", "ddp"}) {
    SCOPED_TRACE(mode);
    CommandResult two = run(fp16 + " --replicas 2 --mode " + mode + " --inject nan:replica=1,step=3 --save " + dir.file(mode));
    ASSERT_EQ(two.status, 0) << two.output;
    EXPECT_NE(two.output.find("step 3 skipped: Inf or NaN in the float16 gradients"), std::string::npos) << two.output;
    EXPECT_EQ(slurp(dir.file("accum.safetensors")), slurp(dir.file(mode)));
  }
  // Without the NaN no step is skipped: the scale stays (growth needs 2000 clean steps).
  CommandResult clean = run(fp16 + " --metrics " + dir.file("clean.jsonl"));
  ASSERT_EQ(clean.status, 0) << clean.output;
  EXPECT_EQ(clean.output.find("skipped"), std::string::npos) << clean.output;
  EXPECT_EQ(metrics_lines(dir.file("clean.jsonl")).back().at("loss_scale").get<double>(), 65536.0);
}

// The scale and its growth tracker are in the checkpoint (PyTorch's "scale" and
// "_growth_tracker"): a run that backed off at step 3 and stopped at step 6 writes scale
// 32768 and tracker 3 (steps 4 to 6 clean), and the resumed run goes on from them: the run
// that never stopped, bit for bit, and its scale at the end. A float32 checkpoint resumed
// under fp16 (--force-resume) starts at 65536, saying so.
TEST(PrecisionFp16, TheScaleSurvivesCheckpointAndResume) {
  dpcore::testing::TempDir dir;
  const std::string fp16 = kJob + " --precision fp16 --inject nan:replica=0,step=3", ckpt = " --checkpoint " + dir.file("ckpt");
  ASSERT_EQ(run(fp16 + " --steps 12 --metrics " + dir.file("straight.jsonl") + " --save " + dir.file("straight.safetensors")).status, 0);
  CommandResult first = run(fp16 + " --steps 6" + ckpt);
  ASSERT_EQ(first.status, 0) << first.output;
  const auto checkpoint = dpcore::io::load_safetensors(dir.file("ckpt/checkpoint.safetensors"));
  EXPECT_EQ(checkpoint.metadata().at("loss_scale"), "32768");
  EXPECT_EQ(checkpoint.metadata().at("loss_scale_growth_tracker"), "3");
  EXPECT_EQ(checkpoint.metadata().at("precision"), "fp16");
  CommandResult resumed = run(kJob + " --precision fp16 --steps 12 --resume --metrics " + dir.file("resumed.jsonl") +
                              " --save " + dir.file("resumed.safetensors") + ckpt);
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_EQ(slurp(dir.file("straight.safetensors")), slurp(dir.file("resumed.safetensors")));
  EXPECT_EQ(metrics_lines(dir.file("resumed.jsonl")).back().at("loss_scale"),
            metrics_lines(dir.file("straight.jsonl")).back().at("loss_scale"));

  dpcore::testing::TempDir fp32_dir;
  const std::string fp32_ckpt = " --checkpoint " + fp32_dir.file("ckpt");
  ASSERT_EQ(run(kJob + " --steps 4" + fp32_ckpt).status, 0);
  CommandResult refused = run(kJob + " --precision fp16 --steps 8 --resume" + fp32_ckpt);
  EXPECT_NE(refused.status, 0);
  EXPECT_NE(refused.output.find("--precision fp32, this run has fp16: every step's gradient is computed in it"),
            std::string::npos)
      << refused.output;
  CommandResult forced = run(kJob + " --precision fp16 --steps 8 --resume --force-resume" + fp32_ckpt);
  ASSERT_EQ(forced.status, 0) << forced.output;
  EXPECT_NE(forced.output.find("the checkpoint holds no loss scale (it was not written under --precision fp16): "
                               "starting at 65536"),
            std::string::npos)
      << forced.output;
}

// --grad-dtype bf16 rounds the gradient allreduce of dp and ddp to bfloat16 (the exact
// result and the bytes: tests/train/gradient_wire_test.cpp): the first line says so, the run
// differs from float32 communication, mpirun's 2 processes equal 2 local replicas bit for
// bit (one 16-bit sum per element either way), and a run that has no such allreduce refuses it.
TEST(GradDtype, Bf16AllreduceIsNamedDiffersFromFloat32AndIsRefusedWhereNothingIsReduced) {
  dpcore::testing::TempDir dir;
  const std::string two = kJob + " --steps 6 --replicas 2";
  CommandResult bf16 = run(two + " --grad-dtype bf16 --save " + dir.file("bf16.safetensors"));
  ASSERT_EQ(bf16.status, 0) << bf16.output;
  EXPECT_NE(bf16.output.find("gradients allreduced in bfloat16 (accumulated in float32)"), std::string::npos)
      << bf16.output;
  ASSERT_EQ(run(two + " --save " + dir.file("fp32.safetensors")).status, 0);
  EXPECT_NE(slurp(dir.file("bf16.safetensors")), slurp(dir.file("fp32.safetensors")));
#ifdef DPCORE_MPIEXEC
  CommandResult mpi = dpcore::testing::run_command(kJob + " --steps 6 --backend mpi --grad-dtype bf16 --save " +
                                                       dir.file("mpi.safetensors"),
                                                   dpcore::testing::mpirun(2));
  ASSERT_EQ(mpi.status, 0) << mpi.output;
  EXPECT_EQ(slurp(dir.file("bf16.safetensors")), slurp(dir.file("mpi.safetensors")));
#endif
  const std::vector<Refusal> cases = {
      {kJob + " --grad-dtype fp16", "--grad-dtype fp16: must be one of fp32, bf16"},
      {kJob + " --grad-dtype bf16", "--grad-dtype bf16 with one replica: there is no gradient allreduce to make smaller"},
      {kJob + " --grad-dtype bf16 --replicas 2 --sync local:2",
       "--grad-dtype bf16 with --sync local:2: only the gradient allreduce of a synchronous step"},
      {kJob + " --grad-dtype bf16 --replicas 2 --pipeline 2",
       "--grad-dtype bf16 with --pipeline 2: only the data-parallel gradient allreduce"},
  };
  expect_refusals(cases);
}

}  // namespace
