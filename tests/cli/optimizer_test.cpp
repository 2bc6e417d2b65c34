// --optimizer sgd|adam|adamw through the `dpcore` command: its flags and their refusals,
// torch.optim's defaults, checkpoints that carry Adam's moments and step count (a resumed
// run is the run that never stopped, on one device and over replicas), and data-parallel
// AdamW with the maths of one device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cli/cli_run.h"
#include "cli/same_maths.h"
#include "engine/io/safetensors.h"
#include "support/test_support.h"

namespace {

using dpcore::testing::CommandResult;
using dpcore::testing::expect_same_maths;
using dpcore::testing::job;
using dpcore::testing::kData;
using dpcore::testing::kSpec;
using dpcore::testing::run;
using dpcore::testing::slurp;

const std::string kJob = job();
const std::string kAdamW = kJob + " --optimizer adamw";

TEST(OptimizerFlags, BadValuesAreRefusedNamingTheFlagAndTheValue) {
  struct Case {
    std::string args, expected;
  };
  const std::vector<Case> cases = {
      {kJob + " --optimizer lion", "--optimizer lion: must be one of sgd, adam, adamw"},
      {kAdamW + " --betas 1,0.999", "--betas 1,0.999: must be two numbers B1,B2, each in [0, 1)"},
      {kAdamW + " --betas 0.9,1", "--betas 0.9,1: must be two numbers B1,B2, each in [0, 1)"},
      {kAdamW + " --betas -0.1,0.999", "--betas -0.1,0.999: must be two numbers B1,B2, each in [0, 1)"},
      {kAdamW + " --betas 0.9", "--betas 0.9: must be two numbers B1,B2, each in [0, 1)"},
      {kAdamW + " --betas 0.9,0.99,0.9", "--betas 0.9,0.99,0.9: must be two numbers B1,B2, each in [0, 1)"},
      {kAdamW + " --betas nan,0.999", "--betas nan,0.999: must be two numbers B1,B2, each in [0, 1)"},
      {kAdamW + " --eps 0", "--eps 0: must be a finite number > 0"},
      {kAdamW + " --eps -1e-8", "--eps -1e-8: must be a finite number > 0"},
      {kAdamW + " --weight-decay -0.01", "--weight-decay -0.01: must be a finite number >= 0"},
      {kJob + " --betas 0.9,0.99", "--betas is Adam's: give it with --optimizer adam or adamw"},
      {kJob + " --eps 1e-6", "--eps is Adam's: give it with --optimizer adam or adamw"},
      {kAdamW + " --momentum 0.9", "--momentum is SGD's, not --optimizer adamw's (its momentum is --betas B1,B2)"},
      {kJob + " --optimizer adam --nesterov", "--nesterov is SGD's, not --optimizer adam's"},
      {kJob + " --clip-grad-norm -1", "--clip-grad-norm -1: must be a finite number >= 0"},
      {kJob + " --clip-grad-norm inf", "--clip-grad-norm inf: must be a finite number >= 0"},
  };
  for (const Case& c : cases) {
    CommandResult r = run(c.args);
    EXPECT_NE(r.status, 0) << c.args;
    EXPECT_NE(r.output.find("dpcore: error: " + c.expected), std::string::npos) << c.args << "\n" << r.output;
    EXPECT_EQ(r.output.find("epoch 1"), std::string::npos) << "nothing runs: " << c.args;
  }
}

// torch.optim.Adam's and torch.optim.AdamW's defaults where the flags are left out (AdamW's
// weight decay 0.01), the flags where given; the header says what runs.
TEST(OptimizerFlags, AdamAndAdamWTakeTorchOptimsDefaults) {
  CommandResult adamw = run(kAdamW + " --steps 1");
  ASSERT_EQ(adamw.status, 0) << adamw.output;
  EXPECT_NE(adamw.output.find("batch 16, adamw (betas 0.9,0.999, eps 1e-08, weight decay 0.01), lr constant 0.001"),
            std::string::npos)
      << adamw.output;
  CommandResult adam = run(kJob + " --optimizer adam --steps 1");
  ASSERT_EQ(adam.status, 0) << adam.output;
  EXPECT_NE(adam.output.find("adam (betas 0.9,0.999, eps 1e-08, weight decay 0), lr constant 0.001"), std::string::npos)
      << adam.output;
  CommandResult given = run(kAdamW + " --steps 1 --lr 0.01 --betas 0.8,0.99 --eps 1e-6 --weight-decay 0.1");
  ASSERT_EQ(given.status, 0) << given.output;
  EXPECT_NE(given.output.find("adamw (betas 0.8,0.99, eps 1e-06, weight decay 0.1), lr constant 0.01"),
            std::string::npos)
      << given.output;
  CommandResult sgd = run(kJob + " --steps 1");
  ASSERT_EQ(sgd.status, 0) << sgd.output;
  EXPECT_NE(sgd.output.find("batch 16, lr constant 0.03"), std::string::npos) << sgd.output;
}

// --explain tells the step that ran: AdamW's buffers and settings instead of SGD's.
TEST(OptimizerFlags, ExplainTellsTheAdamWStep) {
  CommandResult r = run(kAdamW + " --steps 1 --explain");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("4. AdamW step: one fused launch over the flat buffers"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("lr 0.001, betas 0.9,0.999, eps 1e-08, weight decay 0.01 (decoupled); the optimizer has now "
                          "taken 1 step"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("SGD step"), std::string::npos) << r.output;
}

// The checkpoint holds exp_avg, exp_avg_sq and the step count: 30 steps straight equal 15 +
// checkpoint + resume + 15 bit for bit (15: not an epoch's end; 13 steps per epoch), on one
// device and over two ddp replicas.
TEST(OptimizerCheckpoints, AdamWResumesBitIdenticallyOnOneDeviceAndOverReplicas) {
  for (const std::string& runner : {std::string(), std::string(" --replicas 2 --mode ddp")}) {
    SCOPED_TRACE(runner);
    dpcore::testing::TempDir dir;
    const std::string ckpt = " --checkpoint " + dir.file("ckpt");
    ASSERT_EQ(run(kAdamW + runner + " --steps 30 --save " + dir.file("straight.safetensors")).status, 0);
    CommandResult first = run(kAdamW + runner + " --steps 15" + ckpt);
    ASSERT_EQ(first.status, 0) << first.output;
    const auto checkpoint = dpcore::io::load_safetensors(dir.file("ckpt/checkpoint.safetensors"));
    EXPECT_EQ(checkpoint.metadata().at("optimizer_steps"), "15");
    EXPECT_NE(checkpoint.find("optimizer.exp_avg"), nullptr);
    EXPECT_NE(checkpoint.find("optimizer.exp_avg_sq"), nullptr);
    EXPECT_EQ(checkpoint.find("optimizer.momentum"), nullptr);
    CommandResult resumed = run(kAdamW + runner + " --steps 30 --resume --save " + dir.file("resumed.safetensors") + ckpt);
    ASSERT_EQ(resumed.status, 0) << resumed.output;
    EXPECT_NE(resumed.output.find("resumed"), std::string::npos) << resumed.output;
    EXPECT_EQ(slurp(dir.file("straight.safetensors")), slurp(dir.file("resumed.safetensors")));
  }
}

// Elastic resume keeps the moments: a ddp checkpoint of 2 replicas continues on one device
// with the maths of the run that never stopped; another optimizer's checkpoint is refused
// naming what each holds.
TEST(OptimizerCheckpoints, AnAdamWCheckpointResumesOnOneDeviceAndRefusesSgd) {
  dpcore::testing::TempDir dir;
  const std::string ckpt = " --checkpoint " + dir.file("ckpt");
  ASSERT_EQ(run(kAdamW + " --steps 20 --save " + dir.file("straight.safetensors")).status, 0);
  ASSERT_EQ(run(kAdamW + " --replicas 2 --steps 10" + ckpt).status, 0);
  CommandResult sgd = run(kJob + " --steps 20 --resume --force-resume" + ckpt);
  EXPECT_NE(sgd.status, 0);
  EXPECT_NE(sgd.output.find("holds optimizer state [exp_avg, exp_avg_sq] but this run's sgd optimizer has [momentum]"),
            std::string::npos)
      << sgd.output;
  CommandResult resumed = run(kAdamW + " --steps 20 --resume --save " + dir.file("resumed.safetensors") + ckpt);
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  expect_same_maths(dir.file("straight.safetensors"), dir.file("resumed.safetensors"));
}

// The largest difference between an element of `a` and the same element of `b`, over every
// float tensor.
double largest_difference(const std::string& a_path, const std::string& b_path) {
  const auto a = dpcore::io::load_safetensors(a_path), b = dpcore::io::load_safetensors(b_path);
  EXPECT_EQ(a.names(), b.names());
  double worst = 0;
  for (const auto& t : a.tensors()) {
    if (t.dtype != dpcore::DType::Float32) continue;
    const auto& u = b.at(t.name);
    for (int64_t i = 0; i < t.numel(); ++i) {
      worst = std::max(worst, double(std::fabs(t.values<float>()[i] - u.values<float>()[i])));
    }
  }
  return worst;
}

// Fashion-MNIST's shape (1 x 28 x 28, 10 classes) in synthetic data: a few AdamW steps of
// fashioncnn under --mode dp over 2 replicas equal one device's. Not within SGD's bound
// (expect_same_maths): SGD's step is linear in the gradient, so the last bits that a sum in
// another order changes stay last bits, but Adam divides by sqrt(v), and where an element's
// gradient nearly cancels, the same absolute rounding is a large relative change of that
// element's step (up to the whole step, lr: Adam's |m/sqrt(v)| <= 1 on these early steps).
// So the bound is on the steps: no parameter may differ by more than 1% of the lr * steps
// Adam can move it at most; a gradient that is not the global batch's (one replica's
// half, or the batch of 16 below) moves most parameters by a good part of that.
TEST(OptimizerDataParallel, AdamWOverTwoDpReplicasEqualsOneDevice) {
  dpcore::testing::TempDir dir;
  const double lr = 1e-3, steps = 6;
  auto fashion = [](int batch) {
    return job("fashioncnn", "synthetic:1,28,28,10,256", "cpu", batch) + " --optimizer adamw --steps 6";
  };
  CommandResult one = run(fashion(32) + " --save " + dir.file("one.safetensors"));
  ASSERT_EQ(one.status, 0) << one.output;
  CommandResult dp = run(fashion(32) + " --replicas 2 --mode dp --save " + dir.file("dp.safetensors"));
  ASSERT_EQ(dp.status, 0) << dp.output;
  EXPECT_LE(largest_difference(dir.file("one.safetensors"), dir.file("dp.safetensors")), 0.01 * lr * steps);
  CommandResult other = run(fashion(16) + " --save " + dir.file("other.safetensors"));
  ASSERT_EQ(other.status, 0) << other.output;
  EXPECT_GT(largest_difference(dir.file("one.safetensors"), dir.file("other.safetensors")), 0.1 * lr * steps)
      << "the bound tells another gradient from the same one";
}

// --clip-grad-norm clips the reduced gradient, so every replica finds the same norm and
// stays identical (--check-replicas 1 compares their bits after every step), and ddp over
// 2 replicas keeps one device's maths (SGD: within expect_same_maths); the metrics hold the
// last step's norm, which clipping at 0.05 (below this job's norms) leaves above 0.05.
TEST(ClipGradNormCli, ClipsTheReducedGradientAlikeOnEveryReplicaAndReportsTheNorm) {
  dpcore::testing::TempDir dir;
  const std::string clipped = kJob + " --steps 8 --clip-grad-norm 0.05";
  CommandResult one = run(clipped + " --save " + dir.file("one.safetensors") + " --metrics " + dir.file("one.jsonl"));
  ASSERT_EQ(one.status, 0) << one.output;
  CommandResult ddp = run(clipped + " --replicas 2 --mode ddp --check-replicas 1 --save " + dir.file("ddp.safetensors"));
  ASSERT_EQ(ddp.status, 0) << ddp.output;
  expect_same_maths(dir.file("one.safetensors"), dir.file("ddp.safetensors"));
  const std::string metrics = slurp(dir.file("one.jsonl"));
  const size_t at = metrics.find("\"grad_norm\":");
  ASSERT_NE(at, std::string::npos) << metrics;
  EXPECT_GT(std::stod(metrics.substr(at + 12)), 0.05) << metrics;
  CommandResult plain = run(kJob + " --steps 8 --save " + dir.file("plain.safetensors") + " --metrics " +
                            dir.file("plain.jsonl"));
  ASSERT_EQ(plain.status, 0) << plain.output;
  EXPECT_EQ(slurp(dir.file("plain.jsonl")).find("grad_norm"), std::string::npos) << "no clip, no norm";
  EXPECT_NE(slurp(dir.file("plain.safetensors")), slurp(dir.file("one.safetensors"))) << "the clip changed the steps";
}

// BERT fine-tuning's recipe: AdamW, the linear warm-up and decay, clipping at 1. Its rates
// are a function of the step and its norm of the gradient, so a resumed run is again the
// run that never stopped, bit for bit.
TEST(OptimizerCheckpoints, AdamWWithLinearWarmUpAndClippingResumesBitIdentically) {
  dpcore::testing::TempDir dir;
  const std::string bert = kAdamW + " --lr 0.01 --lr-schedule linear --warmup-steps 6 --clip-grad-norm 1 --steps 30";
  const std::string ckpt = " --checkpoint " + dir.file("ckpt");
  CommandResult straight = run(bert + " --save " + dir.file("straight.safetensors"));
  ASSERT_EQ(straight.status, 0) << straight.output;
  EXPECT_NE(straight.output.find("lr linear from 0.01 to 0 over 30 steps (warm-up from 0 over 6 steps)"),
            std::string::npos)
      << straight.output;
  ASSERT_EQ(run(bert + " --checkpoint-every 15 --inject exit:replica=0,step=17" + ckpt).status, 75);
  CommandResult resumed = run(bert + " --resume --save " + dir.file("resumed.safetensors") + ckpt);
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("at step 15"), std::string::npos) << resumed.output;
  EXPECT_EQ(slurp(dir.file("straight.safetensors")), slurp(dir.file("resumed.safetensors")));
  CommandResult other = run(kAdamW + " --lr 0.01 --lr-schedule linear --warmup-steps 6 --steps 30 --resume" + ckpt);
  EXPECT_NE(other.status, 0) << "another clip is refused";
  EXPECT_NE(other.output.find("--clip-grad-norm"), std::string::npos) << other.output;
}

}  // namespace
