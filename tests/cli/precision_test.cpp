// --precision through the `dpcore` command (issue 27): bf16 trains under autocast with
// float32 master weights (layers::Model::set_precision), says so in its first line, keeps
// the maths of one device with a micro-batch per replica and resumes bit for bit; what it
// cannot run is refused naming the flags.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli/cli_run.h"
#include "engine/io/safetensors.h"
#include "support/test_support.h"

namespace {

using dpcore::testing::CommandResult;
using dpcore::testing::job;
using dpcore::testing::run;
using dpcore::testing::slurp;

const std::string kJob = job();

TEST(PrecisionFlag, RefusesWhatItCannotRunNamingTheFlags) {
  struct Case {
    std::string args, expected;
  };
  const std::vector<Case> cases = {
      {kJob + " --precision fp16", "--precision fp16: must be one of fp32, bf16"},
      {kJob + " --precision half", "--precision half: must be one of fp32, bf16"},
      {kJob + " --precision bf16 --pipeline 2",
       "--precision bf16 with --pipeline 2: a pipeline's stages run their layers outside the model's autocast forward"},
      {kJob + " --precision bf16 --stages 0-1@cpu:0,2-4@cpu:0",
       "--precision bf16 with --stages 0-1@cpu:0,2-4@cpu:0: a pipeline's stages run their layers outside"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    CommandResult r = run(c.args + " --steps 2");
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.output.find(c.expected), std::string::npos) << r.output;
  }
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

}  // namespace
