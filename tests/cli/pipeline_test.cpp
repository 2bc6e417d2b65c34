// `dpcore train --stages ...` (and --pipeline P) as a user runs it: a pipelined run trains one device's
// parameters with --accum M (the saved weights are the same bytes), a checkpoint it writes
// resumes on one device and one device's resumes as a pipeline, the log says what runs;
// with --replicas D, ddp's parameters, and checkpoints across one device, ddp and the
// hybrid; what a pipeline cannot take is refused naming the flags.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "cli/cli_run.h"
#include "cli/metrics_lines.h"
#include "support/test_support.h"

namespace {

using dpcore::testing::CommandResult;
using dpcore::testing::run;
using dpcore::testing::slurp;

// The model of cli_run.h, a batch norm added: 7 layers, conv bn relu pool flatten linear
// logsoftmax, so that the micro-batches' statistics are part of what must match.
const std::string kModel = "\"conv(4,3,p1) bn relu pool(2) flatten linear(4)\"";
const std::string kJob = dpcore::testing::job(kModel);
constexpr const char* kSteps = " --steps 16";  // across the first epoch's end (13 steps) and its short batch

TEST(CliPipeline, APipelinedRunSavesOneDevicesWeightsWithAccum) {
  dpcore::testing::TempDir dir;
  CommandResult one = run(kJob + kSteps + " --accum 4 --save " + dir.file("one.safetensors"));
  ASSERT_EQ(one.status, 0) << one.output;
  for (const std::string& pipeline : {std::string(" --stages 0-2@cpu:0,3-6@cpu:1 --schedule 1f1b --micro-batches 4"),
                                      std::string(" --stages 0@cpu:0,1-3@cpu:1,4-6@cpu:1 --schedule gpipe --micro-batches 4"),
                                      std::string(" --stages 0-2@cpu:0,3-6@cpu:1 --micro-batches 4 --recompute")}) {
    SCOPED_TRACE(pipeline);
    CommandResult piped = run(kJob + kSteps + pipeline + " --save " + dir.file("piped.safetensors"));
    ASSERT_EQ(piped.status, 0) << piped.output;
    EXPECT_EQ(slurp(dir.file("piped.safetensors")), slurp(dir.file("one.safetensors")));
  }
}

// --pipeline P: the stages chosen by timing the layers, and the arithmetic one device's
// whatever they are (the saved weights are the same bytes as --accum 4's).
TEST(CliPipeline, PipelineBalancesMeasuredLayersAndTrainsOneDevicesWeights) {
  dpcore::testing::TempDir dir;
  ASSERT_EQ(run(kJob + kSteps + " --accum 4 --save " + dir.file("one.safetensors")).status, 0);
  CommandResult r = run(kJob + kSteps + " --pipeline 3 --schedule 1f1b --micro-batches 4 --save " + dir.file("piped.safetensors"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(slurp(dir.file("piped.safetensors")), slurp(dir.file("one.safetensors")));
  // 16 samples in 4 micro-batches: the layers are timed on 4; the stages it chose are the runner's.
  const std::string measured = "--pipeline 3: per layer on a micro-batch of 4 samples, forward + backward ms";
  const size_t at = r.output.find(measured);
  ASSERT_NE(at, std::string::npos) << r.output;
  const std::string into = "; balanced into ";
  const size_t chosen = r.output.find(into, at) + into.size();
  const std::string stages = r.output.substr(chosen, r.output.find(", the stages taking", chosen) - chosen);
  EXPECT_EQ(std::count(stages.begin(), stages.end(), '@'), 3) << stages;
  EXPECT_NE(r.output.find("pipeline (1f1b) of 3 stages [" + stages + "], 4 micro-batches"), std::string::npos) << r.output;
}

// --stage-memory-mb bounds what --pipeline's split may put on a stage: one no split keeps is
// refused before anything trains, naming the least any split needs; a generous one trains;
// without --pipeline the flag is refused.
TEST(CliPipeline, StageMemoryLimitBoundsThePipelinesSplit) {
  CommandResult tight = run(kJob + " --steps 2 --pipeline 3 --schedule gpipe --micro-batches 4 --stage-memory-mb 0.001");
  EXPECT_NE(tight.status, 0);
  EXPECT_NE(tight.output.find("--stage-memory-mb 0.001: no split of the 7 layers into 3 stages holds at most that on "
                              "every stage; the least any split needs is "),
            std::string::npos)
      << tight.output;
  CommandResult roomy = run(kJob + " --steps 2 --pipeline 3 --schedule gpipe --micro-batches 4 --stage-memory-mb 64");
  ASSERT_EQ(roomy.status, 0) << roomy.output;
  EXPECT_NE(roomy.output.find(" KiB at most (gpipe, 4 micro-batches)"), std::string::npos) << roomy.output;
  CommandResult alone = run(kJob + " --steps 2 --stages 0-2@cpu:0,3-6@cpu:1 --stage-memory-mb 64");
  EXPECT_NE(alone.status, 0);
  EXPECT_NE(alone.output.find("--stage-memory-mb is --pipeline P's"), std::string::npos) << alone.output;
}

TEST(CliPipeline, TheLogNamesTheScheduleStagesAndMicroBatches) {
  CommandResult r = run(kJob + " --steps 2 --stages 0-2@cpu:0,3-6@cpu:1");
  ASSERT_EQ(r.status, 0) << r.output;
  // The defaults: gpipe, one micro-batch per stage.
  EXPECT_NE(r.output.find("pipeline (gpipe) of 2 stages [0-2@cpu:0,3-6@cpu:1], 2 micro-batches"), std::string::npos)
      << r.output;
  CommandResult recomputed = run(kJob + " --steps 2 --stages 0-2@cpu:0,3-6@cpu:1 --recompute");
  ASSERT_EQ(recomputed.status, 0) << recomputed.output;
  EXPECT_NE(recomputed.output.find("2 micro-batches, recomputing activations"), std::string::npos) << recomputed.output;
}

// Each stage's peak memory (the tensors its thread held at once) in the epoch line and the
// metrics, and the step's in --explain.
TEST(CliPipeline, EachStagesPeakMemoryIsInTheEpochLineTheMetricsAndExplain) {
  dpcore::testing::TempDir dir;
  CommandResult r = run(kJob + " --steps 3 --stages 0-2@cpu:0,3-6@cpu:1 --schedule 1f1b --micro-batches 4 --metrics " +
                        dir.file("m.jsonl"));
  ASSERT_EQ(r.status, 0) << r.output;
  const size_t line = r.output.find("epoch 1: ");
  ASSERT_NE(line, std::string::npos) << r.output;
  const std::string epoch = r.output.substr(line, r.output.find('\n', line) - line);
  const size_t stages = epoch.find(" (stages ");
  ASSERT_NE(stages, std::string::npos) << epoch;
  EXPECT_EQ(std::count(epoch.begin() + std::ptrdiff_t(stages), epoch.end(), 'B'), 2) << epoch;  // two sizes
  const nlohmann::json m = dpcore::testing::metrics_lines(dir.file("m.jsonl")).front();
  ASSERT_EQ(m["stage_peak_bytes"].size(), 2u) << m.dump();
  for (const auto& bytes : m["stage_peak_bytes"]) EXPECT_GT(bytes.get<int64_t>(), 0) << m.dump();
  EXPECT_LT(m["stage_peak_bytes"][0].get<int64_t>(), m["peak_bytes"].get<int64_t>()) << m.dump();
  CommandResult e = run(kJob + " --steps 1 --stages 0-2@cpu:0,3-6@cpu:1 --explain");
  EXPECT_NE(e.output.find("measured in this step, the most bytes of tensors each stage held at once: stage 0 "),
            std::string::npos)
      << e.output;
}

TEST(CliPipeline, ExplainTellsTheStagesTicksAndWhatCrossesEachBoundary) {
  CommandResult r = run(kJob + " --steps 1 --stages 0-2@cpu:0,3-6@cpu:1 --schedule 1f1b --micro-batches 3 --explain");
  ASSERT_EQ(r.status, 0) << r.output;
  for (const std::string& line : {
           std::string("explain: step 1 of this run as a pipeline (1f1b) of 2 stages"),
           std::string("   stage 0: layers 0-2 (conv(1->4, k3, s1, p1) bn(4) relu) on cpu:0\n"),
           std::string("3 micro-batches of 6, 5, 5 samples"),
           // 1f1b on 2 stages: stage 1 runs micro-batch 0's backward before stage 0's forward of 2.
           std::string("   2     .        B0"),
           // conv(4) of an 8x8 image: 4 x 8 x 8 float32 values a sample, 6 samples in the first.
           std::string("stage 0 -> 1: each micro-batch's activations, 256 float32 values a sample (1,024 B; 6,144 B for the "
                       "first micro-batch)"),
           std::string("measured in this step, micro-batches of activations held at once: stage 0 2, stage 1 1"),
           std::string("as one device's --accum 3 adds them"),
       })
    EXPECT_NE(r.output.find(line), std::string::npos) << line << "\n" << r.output;
  // Under bf16 the relu's 16-bit output crosses: half the bytes.
  CommandResult bf16 = run(kJob + " --steps 1 --stages 0-2@cpu:0,3-6@cpu:1 --micro-batches 3 --precision bf16 --explain");
  ASSERT_EQ(bf16.status, 0) << bf16.output;
  EXPECT_NE(bf16.output.find("stage 0 -> 1: each micro-batch's activations, 256 bfloat16 values a sample (512 B; "
                             "3,072 B for the first micro-batch)"),
            std::string::npos)
      << bf16.output;
}

// With --replicas 2: the batch's cut among the replicas, replica 0's pipeline on its pieces,
// and each stage's allreduce of its own part of the gradients.
TEST(CliPipeline, ExplainTellsTheHybridsSharesAndEachStagesReduction) {
  CommandResult r =
      run(kJob + " --steps 1 --stages 0-2@cpu:0,3-6@cpu:1 --schedule 1f1b --micro-batches 2 --replicas 2 --explain");
  ASSERT_EQ(r.status, 0) << r.output;
  for (const std::string& line : {
           std::string(", x 2 replicas (each its own pipeline of 2 threads, its own copy of the model)"),
           std::string("     micro-batch 1 (8): replica 0 rows [0, 4), replica 1 rows [4, 8)\n"),
           std::string("what follows is replica 0's pipeline"),
           std::string("3. 2 micro-batches of 4, 4 samples"),
           std::string("stage 0 -> 1: each micro-batch's activations, 256 float32 values a sample (1,024 B; 4,096 B for the "
                       "first micro-batch)"),
           std::string("   stage 0, after its last backward: allreduce (sum) of its gradients, elements 0-"),
           std::string("among the 2 replicas' stage 1 (a group of their own)"),
       })
    EXPECT_NE(r.output.find(line), std::string::npos) << line << "\n" << r.output;
}

// --batchnorm sync in the hybrid: stage 0's batch norm combines its statistics over the two
// replicas' stage 0, so the run saves ddp's --batchnorm sync weights (two replicas: every
// sum has one order), across the epoch's short batch; --explain says so.
TEST(CliPipeline, HybridBatchNormSyncSavesDdpsSyncWeights) {
  dpcore::testing::TempDir dir;
  const std::string hybrid = " --stages 0-2@cpu:0,3-6@cpu:1 --schedule 1f1b --micro-batches 2 --replicas 2 --batchnorm sync";
  ASSERT_EQ(run(kJob + kSteps + " --replicas 2 --accum 2 --batchnorm sync --save " + dir.file("ddp.safetensors")).status, 0);
  CommandResult r = run(kJob + kSteps + hybrid + " --save " + dir.file("hybrid.safetensors"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(slurp(dir.file("hybrid.safetensors")), slurp(dir.file("ddp.safetensors")));
  CommandResult e = run(kJob + " --steps 1 --explain" + hybrid);
  ASSERT_EQ(e.status, 0) << e.output;
  EXPECT_NE(e.output.find("--batchnorm sync: in each forward a stage's batch norms allgather their statistics"),
            std::string::npos)
      << e.output;
}

TEST(CliPipeline, CheckpointsResumeAcrossOneDeviceAndAPipeline) {
  dpcore::testing::TempDir dir;
  const std::string piped = " --stages 0-3@cpu:0,4-6@cpu:1 --schedule 1f1b --micro-batches 4";
  ASSERT_EQ(run(kJob + kSteps + " --accum 4 --save " + dir.file("straight.safetensors")).status, 0);
  // A pipeline writes the checkpoint of step 8 and stops; one device takes it to the end.
  ASSERT_EQ(run(kJob + piped + " --steps 8 --checkpoint " + dir.file("a")).status, 0);
  CommandResult a = run(kJob + kSteps + " --accum 4 --resume --checkpoint " + dir.file("a") + " --save " + dir.file("a.safetensors"));
  ASSERT_EQ(a.status, 0) << a.output;
  EXPECT_EQ(slurp(dir.file("a.safetensors")), slurp(dir.file("straight.safetensors")));
  // And the other way round.
  ASSERT_EQ(run(kJob + " --accum 4 --steps 8 --checkpoint " + dir.file("b")).status, 0);
  CommandResult b = run(kJob + kSteps + piped + " --resume --checkpoint " + dir.file("b") + " --save " + dir.file("b.safetensors"));
  ASSERT_EQ(b.status, 0) << b.output;
  EXPECT_EQ(slurp(dir.file("b.safetensors")), slurp(dir.file("straight.safetensors")));
  // Other micro-batches are other maths: refused, as another --accum is.
  CommandResult other = run(kJob + kSteps + " --stages 0-3@cpu:0,4-6@cpu:1 --micro-batches 2 --resume --checkpoint " + dir.file("b"));
  EXPECT_NE(other.status, 0);
  EXPECT_NE(other.output.find("--accum 4, this run has 2"), std::string::npos) << other.output;
  // --pipeline P's micro-batches are one per stage unless given: P of them, as the checkpoint sees.
  CommandResult balanced = run(kJob + kSteps + " --pipeline 2 --resume --checkpoint " + dir.file("b"));
  EXPECT_NE(balanced.status, 0);
  EXPECT_NE(balanced.output.find("--accum 4, this run has 2"), std::string::npos) << balanced.output;
}

// Pipeline x data parallel: 2 stages x 2 replicas train ddp's weights with --accum 4 (the
// same bytes: a sum of two replicas has one order), batch norm's running statistics
// included, whether the stages are given or balanced.
TEST(CliPipeline, StagesTimesReplicasSaveDdpsWeights) {
  dpcore::testing::TempDir dir;
  ASSERT_EQ(run(kJob + kSteps + " --replicas 2 --accum 4 --save " + dir.file("ddp.safetensors")).status, 0);
  for (const std::string& hybrid : {std::string(" --stages 0-2@cpu:0,3-6@cpu:1 --schedule 1f1b --micro-batches 4"),
                                    std::string(" --pipeline 2 --micro-batches 4")}) {
    SCOPED_TRACE(hybrid);
    CommandResult r = run(kJob + kSteps + hybrid + " --replicas 2 --save " + dir.file("hybrid.safetensors"));
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_TRUE(slurp(dir.file("hybrid.safetensors")) == slurp(dir.file("ddp.safetensors")));
    EXPECT_NE(r.output.find(" x 2 replicas (each stage's gradients reduced among its replicas)"), std::string::npos)
        << r.output;
  }
}

// A checkpoint of 2 stages x 2 replicas resumes on one device and on plain data parallel,
// and theirs resume on it: each run ends with the weights of the same history run without
// the hybrid (ddp's checkpoint of step 8, then the same runner to step 16).
TEST(CliPipeline, HybridCheckpointsResumeOnOneDeviceAndDataParallelAndBack) {
  dpcore::testing::TempDir dir;
  const std::string hybrid = " --stages 0-3@cpu:0,4-6@cpu:1 --micro-batches 4 --replicas 2";
  const std::string ddp = " --replicas 2 --accum 4", one = " --accum 4";
  auto resumed = [&](const std::string& from, const std::string& runner, const std::string& out) {
    CommandResult r = run(kJob + kSteps + runner + " --resume --checkpoint " + dir.file(from) + " --save " + dir.file(out));
    EXPECT_EQ(r.status, 0) << r.output;
    return slurp(dir.file(out));
  };
  ASSERT_EQ(run(kJob + hybrid + " --steps 8 --checkpoint " + dir.file("hybrid")).status, 0);
  ASSERT_EQ(run(kJob + ddp + " --steps 8 --checkpoint " + dir.file("ddp")).status, 0);
  ASSERT_EQ(run(kJob + one + " --steps 8 --checkpoint " + dir.file("one")).status, 0);
  EXPECT_TRUE(resumed("hybrid", one, "h1.safetensors") == resumed("ddp", one, "d1.safetensors"));
  EXPECT_TRUE(resumed("hybrid", ddp, "h2.safetensors") == resumed("ddp", ddp, "d2.safetensors"));
  EXPECT_TRUE(resumed("ddp", hybrid, "d3.safetensors") == slurp(dir.file("d2.safetensors")));
  EXPECT_TRUE(resumed("one", hybrid, "o3.safetensors") == resumed("one", ddp, "o2.safetensors"));
}

// The same 2 stages x 2 replicas as 4 processes under mpirun: ddp's weights, and its
// checkpoints resume on one device and ddp's resume on it.
TEST(CliPipeline, StagesAndReplicasAsMpiProcessesSaveDdpsWeightsAndResumeAnywhere) {
#ifndef DPCORE_MPIEXEC
  GTEST_SKIP() << "built without MPI: the stages run as processes under mpirun";
#else
  dpcore::testing::TempDir dir;
  const std::string stages = " --backend mpi --stages 0-3@cpu:0,4-6@cpu:1 --schedule 1f1b --micro-batches 4";
  const std::string mpirun = dpcore::testing::mpirun(4);
  ASSERT_EQ(run(kJob + kSteps + " --replicas 2 --accum 4 --save " + dir.file("ddp.safetensors")).status, 0);
  CommandResult r = dpcore::testing::run_command(kJob + kSteps + stages + " --save " + dir.file("mpi.safetensors"), mpirun);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(slurp(dir.file("mpi.safetensors")) == slurp(dir.file("ddp.safetensors")));
  EXPECT_NE(r.output.find("x 2 replicas, a process each (mpi, 4 processes; this one: stage 0 of replica 0)"),
            std::string::npos) << r.output;
  // Step 8's checkpoint, from the processes and from ddp, taken to the end on one device.
  ASSERT_EQ(dpcore::testing::run_command(kJob + stages + " --steps 8 --checkpoint " + dir.file("mpi"), mpirun).status, 0);
  ASSERT_EQ(run(kJob + " --replicas 2 --accum 4 --steps 8 --checkpoint " + dir.file("ddp")).status, 0);
  const std::string one = kSteps + std::string(" --accum 4 --resume --checkpoint ");
  ASSERT_EQ(run(kJob + one + dir.file("mpi") + " --save " + dir.file("m1.safetensors")).status, 0);
  ASSERT_EQ(run(kJob + one + dir.file("ddp") + " --save " + dir.file("d1.safetensors")).status, 0);
  EXPECT_TRUE(slurp(dir.file("m1.safetensors")) == slurp(dir.file("d1.safetensors")));
  // And ddp's checkpoint taken to the end by the processes, as by ddp.
  CommandResult back = dpcore::testing::run_command(
      kJob + kSteps + stages + " --resume --checkpoint " + dir.file("ddp") + " --save " + dir.file("d4.safetensors"), mpirun);
  ASSERT_EQ(back.status, 0) << back.output;
  ASSERT_EQ(run(kJob + kSteps + " --replicas 2 --accum 4 --resume --checkpoint " + dir.file("ddp") + " --save " +
                dir.file("d2.safetensors")).status, 0);
  EXPECT_TRUE(slurp(dir.file("d4.safetensors")) == slurp(dir.file("d2.safetensors")));
#endif
}

// The bytes of "the most bytes of tensors each stage held at once: stage 0 14,948 B, stage 1
// 1,576 B" in `output`, per stage; none: empty.
std::vector<double> stage_bytes_explained(const std::string& output) {
  const std::string line = "the most bytes of tensors each stage held at once:";
  const size_t at = output.find(line);
  std::vector<double> out;
  if (at == std::string::npos) return out;
  std::istringstream words(output.substr(at + line.size(), output.find('\n', at) - at - line.size()));
  for (std::string stage, index, number, unit; words >> stage >> index >> number >> unit;) {  // stage S N B,
    std::string digits;
    for (char c : number) if (std::isdigit(static_cast<unsigned char>(c))) digits += c;
    if (!digits.empty()) out.push_back(std::stod(digits));
  }
  return out;
}

// --explain under mpirun tells the stage processes' first step: the processes and their
// ranks, the batch's cut, replica 0's pipeline with every stage's measurements gathered
// from its process (what each held: within 1% of the same pipeline's threads in one
// process, the same tensors but for a few scalars), each stage's reduction; the epoch line
// gives each stage's peak memory.
TEST(CliPipeline, ExplainTellsTheStageProcessesStepWithEveryStagesMeasurements) {
#ifndef DPCORE_MPIEXEC
  GTEST_SKIP() << "built without MPI: the stages run as processes under mpirun";
#else
  const std::string pipeline = " --stages 0-3@cpu:0,4-6@cpu:1 --schedule 1f1b --micro-batches 4 --explain";
  CommandResult r =
      dpcore::testing::run_command(kJob + " --steps 2 --backend mpi" + pipeline, dpcore::testing::mpirun(4));
  ASSERT_EQ(r.status, 0) << r.output;
  for (const std::string& line : {
           std::string("explain: step 1 of this run as a pipeline (1f1b) of 2 stages, each a process of this mpirun job "
                       "on cpu (4 processes: rank r is stage r mod 2 of replica r / 2)"),
           std::string("     micro-batch 1 (4): replica 0 rows [0, 2), replica 1 rows [2, 4)\n"),
           std::string("measured in this step, micro-batches of activations held at once: stage 0 2, stage 1 1"),
           std::string("among the 2 replicas' stage 1 (a group of their own)"),
           std::string(" (stages "),
       })
    EXPECT_NE(r.output.find(line), std::string::npos) << line << "\n" << r.output;
  CommandResult here = run(kJob + " --steps 2 --replicas 2" + pipeline);
  ASSERT_EQ(here.status, 0) << here.output;
  const std::vector<double> processes = stage_bytes_explained(r.output), threads = stage_bytes_explained(here.output);
  ASSERT_EQ(processes.size(), 2u) << r.output;
  ASSERT_EQ(threads.size(), 2u) << here.output;
  for (size_t s = 0; s < 2; ++s) EXPECT_NEAR(processes[s], threads[s], 0.01 * threads[s]) << "stage " << s;
#endif
}

TEST(CliPipeline, WhatAPipelineCannotTakeIsRefusedNamingIt) {
  struct Case {
    std::string args, expected;
  };
  const std::vector<Case> cases = {
      {" --stages 0-2@cpu:0,4-6@cpu:1", "--stages '0-2@cpu:0,4-6@cpu:1': layer 3 in no stage"},
      {" --stages 0-2@cpu:0,3-7@cpu:1", "layer 7 does not exist (the model has 7 layers, 0-6)"},
      // (Without a GPU: "cuda:0 does not exist"; with one: "this runner's stages are CPU thread teams".)
      {" --stages 0-6@cuda:0", "0-6@cuda:0"},
      {" --stages 0-2@cpu:0,3-6@cpu:1 --replicas 2 --mode dp", "--stages 0-2@cpu:0,3-6@cpu:1 with --replicas 2 --mode dp"},
      {" --stages 0-2@cpu:0,3-6@cpu:1 --replicas 2 --micro-batches 9",
       "--batch 16 cannot be split into --micro-batches 9 x --replicas 2 micro-batches"},
      {" --stages 0-2@cpu:0,3-6@cpu:1 --accum 2", "the pipeline's micro-batches are --micro-batches"},
      {" --stages 0-2@cpu:0,3-6@cpu:1 --sync local:2", "with --sync local:2"},
      {" --stages 0-2@cpu:0,3-6@cpu:1 --schedule pipedream", "--schedule 'pipedream': unknown pipeline schedule"},
      {" --stages 0-2@cpu:0,3-6@cpu:1 --schedule naive --micro-batches 4",
       "--schedule naive runs the batch whole: --micro-batches 4 needs --schedule gpipe or 1f1b"},
      {" --stages 0-2@cpu:0,3-6@cpu:1 --micro-batches 17", "--batch 16 cannot be split into --micro-batches 17"},
      {" --schedule 1f1b", "--schedule is a pipeline's: give it with --stages or --pipeline P"},
      {" --micro-batches 2", "--micro-batches is a pipeline's: give it with --stages or --pipeline P"},
      {" --recompute", "--recompute is a pipeline's: give it with --stages or --pipeline P"},
      {" --pipeline 8", "--pipeline 8: more stages than the model has layers (7;"},
      {" --pipeline 2 --stages 0-6@cpu:0", "--stages excludes --pipeline"},
      {" --pipeline 2 --replicas 2 --split adaptive", "--pipeline 2 with --replicas 2 --split adaptive"},
      {" --pipeline 2 --micro-batches 17", "--batch 16 cannot be split into --micro-batches 17"},
  };
  for (const Case& c : cases) {
    CommandResult r = run(kJob + kSteps + c.args);
    EXPECT_NE(r.status, 0) << c.args;
    EXPECT_NE(r.output.find(c.expected), std::string::npos) << c.args << "\n" << r.output;
  }
}

}  // namespace
