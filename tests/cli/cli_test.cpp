// The `dpcore` command as a user runs it: flags, errors, metrics, weights, checkpoints,
// exact resume, and a checkpoint that survives the process being killed mid-write.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "cli/cli_run.h"
#include "cli/metrics_lines.h"
#include "data/data_files.h"
#include "engine/io/safetensors.h"
#include "support/test_support.h"
#include "support/trace_checks.h"
#include "train/checkpoints/checkpoint.h"

namespace {

using dpcore::testing::CommandResult;
using dpcore::testing::job;
using dpcore::testing::kData;
using dpcore::testing::metrics_lines;
using dpcore::testing::kSpec;
using dpcore::testing::run;
using dpcore::testing::slurp;

const std::string kJob = job();

TEST(Cli, HelpExplainsEveryFlag) {
  CommandResult r = run("train --help");
  EXPECT_EQ(r.status, 0);
  for (const char* flag : {"--model", "--data", "--epochs", "--steps", "--batch", "--accum", "--lr", "--momentum",
                           "--nesterov", "--weight-decay", "--seed", "--no-shuffle", "--no-normalize", "--augment",
                           "--device",
                           "--threads", "--init", "--init-from", "--convert-weights", "--save", "--checkpoint", "--checkpoint-every", "--resume",
                           "--keep-checkpoints", "--force-resume",
                           "--metrics", "--replicas", "--mode", "--backend", "--split", "--bucket-mb",
                           "--conv-engine", "--gemm-engine", "--tf32", "--cuda-graph", "--lr-schedule",
                           "--warmup-steps", "--trace", "--trace-steps", "--nvtx", "--explain", "--inject", "DPCORE_INJECT",
                           "--skip-nonfinite", "--max-skipped", "--check-replicas", "--sync", "--max-staleness",
                           "--eval-every", "--on-replica-failure", "--min-replicas"}) {
    EXPECT_NE(r.output.find(flag), std::string::npos) << flag;
  }
  EXPECT_EQ(run("--help").status, 0);
  EXPECT_EQ(run("eval --help").status, 0);
}

TEST(Cli, BadInputFailsWithAClearMessage) {
  CommandResult r = run(job("nonsense"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("unknown model 'nonsense'"), std::string::npos) << r.output;
  r = run(job(kSpec, "cifar10:/nonexistent"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("/nonexistent"), std::string::npos) << r.output;
  r = run(kJob + " --batch 0");
  EXPECT_NE(r.status, 0);
  r = run(job(kSpec, kData, "tpu"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("tpu"), std::string::npos) << r.output;
  r = run(kJob + " --init /nonexistent.safetensors");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("/nonexistent.safetensors"), std::string::npos) << r.output;
  r = run(kJob + " --accum 17");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--accum"), std::string::npos) << r.output;
}

// Every kind of rejected flag value: refused before anything runs, with a sentence that
// names the flag and the value and says what it needs, never CLI11's raw range
// ("Value 0 not in range 0.000000 to 179769313486231570814527...") or a later, wrong reason.
TEST(Cli, RejectedFlagsSayWhatTheyNeed) {
  const std::string eval = "eval --data " + kData + " --model " + kSpec + " --device cpu --init w.safetensors";
  struct Case {
    std::string args, expected;
  };
  const std::vector<Case> cases = {
      // whole numbers, with their lower ends
      {kJob + " --batch 0", "--batch 0: must be a whole number of at least 1"},
      {kJob + " --batch -3", "--batch -3: must be a whole number of at least 1"},
      {kJob + " --batch 1.5", "--batch 1.5: must be a whole number of at least 1"},
      {kJob + " --batch lots", "--batch lots: must be a whole number of at least 1"},
      {kJob + " --epochs 0", "--epochs 0: must be a whole number of at least 1"},
      {kJob + " --steps -1", "--steps -1: must be a whole number of at least 0"},
      {kJob + " --accum 0", "--accum 0: must be a whole number of at least 1"},
      {kJob + " --checkpoint-every -2", "--checkpoint-every -2: must be a whole number of at least 0"},
      {kJob + " --replicas 0", "--replicas 0: must be a whole number of at least 1"},
      {kJob + " --seed -1", "--seed -1: must be a whole number of at least 0"},
      {"train --data " + kData + " --threads -1", "--threads -1: must be a whole number of at least 0"},
      // ... and upper ends: what the field can hold
      {"train --data " + kData + " --threads 99999999999", "--threads 99999999999: must be a whole number from 0 to 2147483647"},
      {kJob + " --steps 99999999999999999999",
       "--steps 99999999999999999999: must be a whole number from 0 to 9223372036854775807"},
      // finite numbers
      {kJob + " --lr nan", "--lr nan: must be a finite number >= 0"},
      {kJob + " --lr inf", "--lr inf: must be a finite number >= 0"},
      {kJob + " --lr -0.1", "--lr -0.1: must be a finite number >= 0"},
      {kJob + " --lr 1e999", "--lr 1e999: must be a finite number >= 0"},
      {kJob + " --momentum -1", "--momentum -1: must be a finite number >= 0"},
      {kJob + " --dampening nan", "--dampening nan: must be a finite number >= 0"},
      {kJob + " --weight-decay x", "--weight-decay x: must be a finite number >= 0"},
      {kJob + " --bucket-mb 0", "--bucket-mb 0: must be a finite number of MiB > 0 and at most 1048576"},
      {kJob + " --replica-timeout nan", "--replica-timeout nan: must be a finite number of seconds > 0"},
      // learning-rate schedules
      {kJob + " --lr-schedule exponential",
       "--lr-schedule exponential: must be constant, step:EPOCHS:GAMMA (EPOCHS a whole number of at least 1, GAMMA a "
       "finite number > 0), cosine, onecycle or linear"},
      {kJob + " --lr-schedule step:0:0.5",
       "--lr-schedule step:0:0.5: must be step:EPOCHS:GAMMA with EPOCHS a whole number of at least 1 (got '0')"},
      {kJob + " --lr-schedule step:2:-1",
       "--lr-schedule step:2:-1: must be step:EPOCHS:GAMMA with GAMMA a finite number > 0 (got '-1')"},
      {kJob + " --warmup-steps -1", "--warmup-steps -1: must be a whole number of at least 0"},
      {kJob + " --steps 30 --warmup-steps 30", "--warmup-steps 30 must be less than the run's 30 steps"},
      // choices
      {kJob + " --progress 2", "--progress 2: must be -1 (a bar on a terminal), 0 (plain lines) or 1 (a bar)"},
      {kJob + " --mode fast", "--mode fast: must be one of dp, ddp"},
      {kJob + " --backend gloo", "--backend gloo: must be one of local, nccl, mpi"},
      {kJob + " --conv-engine x", "--conv-engine x: must be one of hand, cudnn, auto"},
      {kJob + " --gemm-engine x", "--gemm-engine x: must be one of hand, cublas, auto"},
      {kJob + " --cuda-graph maybe", "--cuda-graph maybe: must be one of on, off"},
      {"train --data " + kData + " --device tpu", "--device tpu: must be cpu, cuda, cuda:N (N a GPU index from 0) or auto"},
      // a value missing, a flag given twice, a switch given a value, flags that go together
      {kJob + " --lr", "--lr needs a value: a finite number >= 0"},
      {kJob + " --seed 1 --seed 2", "--seed is given more than once: give it once"},
      {kJob + " --nesterov=maybe", "--nesterov=maybe: must be given alone (a switch takes no value)"},
      {kJob + " --no-shuffle=maybe", "--no-shuffle=maybe: must be given alone (a switch takes no value)"},
      {kJob + " --nesterov --momentum 0", "--nesterov: needs --momentum > 0 and --dampening 0"},
      {kJob + " --trace-steps 2", "--trace-steps requires --trace"},
      {kJob + " --replicas 2 --sync local:4 --checkpoint ckpt --checkpoint-every 6",
       "--checkpoint-every 6 with --sync local:4: a checkpoint holds one model, which local SGD has only at its "
       "averagings (every 4 steps); use a multiple of 4"},
      // --trace's window
      {kJob + " --trace t.json --trace-steps 0", "--trace-steps 0: must be a whole number of at least 1"},
      {kJob + " --trace t.json --trace-steps -3", "--trace-steps -3: must be a whole number of at least 1"},
      // --augment's syntax, and a padding the 8 x 8 images cannot take
      {kJob + " --augment crop:abc", "--augment \"crop:abc\": PAD \"abc\" of crop:PAD is not a positive integer"},
      {kJob + " --augment crop:-1", "--augment \"crop:-1\": PAD \"-1\" of crop:PAD is not a positive integer"},
      {kJob + " --augment blur", "--augment \"blur\": unknown augmentation \"blur\""},
      {kJob + " --augment crop:8,flip", "--augment \"crop:8,flip\": PAD 8 must be smaller than the 8 x 8 images"},
      // eval's own flags
      {eval + " --batch 0", "--batch 0: must be a whole number of at least 1"},
      {eval + " --threads x", "--threads x: must be a whole number of at least 0"},
      {"eval --data " + kData + " --device cpu", "--init is required: weights to evaluate (safetensors)"},
  };
  for (const Case& c : cases) {
    CommandResult r = run(c.args);
    EXPECT_NE(r.status, 0) << c.args;
    EXPECT_NE(r.output.find("dpcore: error: " + c.expected), std::string::npos) << c.args << "\n" << r.output;
    for (const char* raw : {"not in range", "179769", "Could not convert", "At Most", "must not be negative"}) {
      EXPECT_EQ(r.output.find(raw), std::string::npos) << c.args << "\n" << r.output;
    }
    EXPECT_EQ(r.output.find("epoch 1"), std::string::npos) << "nothing runs: " << c.args;
  }
}

// A layer spec whose shapes collapse (8x8 pooled to 1x1, then pooled again) is refused when
// the model is built, naming the layer as written and the shapes, as PyTorch refuses it.
TEST(Cli, ShapesThatCollapseAreRefusedWhenTheModelIsBuilt) {
  CommandResult r = run(job("\"conv(4,3,p1) relu pool(2) pool(2) pool(2) pool(2) flatten linear(4)\""));
  EXPECT_NE(r.status, 0) << r.output;
  for (const char* part : {"layer 5 'pool(2)'", "input [1, 4, 1, 1]", "empty output [1, 4, 0, 0]",
                           "2x2 window is larger than the 1x1 input"}) {
    EXPECT_NE(r.output.find(part), std::string::npos) << part << "\n" << r.output;
  }
  EXPECT_EQ(r.output.find("epoch 1"), std::string::npos) << r.output;
}

TEST(Cli, TrainsWritesMetricsAndWeightsThatEvalReads) {
  dpcore::testing::TempDir dir;
  CommandResult r = run(kJob + " --epochs 4 --lr 0.1 --metrics " + dir.file("m.jsonl") + " --save " + dir.file("w.safetensors"));
  ASSERT_EQ(r.status, 0) << r.output;
  std::vector<nlohmann::json> epochs = metrics_lines(dir.file("m.jsonl"));
  ASSERT_EQ(epochs.size(), 4u);
  for (const char* key : {"epoch", "train_loss", "test_loss", "test_accuracy", "samples_per_s", "peak_bytes"}) {
    EXPECT_TRUE(epochs[0].contains(key)) << key;
  }
  EXPECT_LT(epochs[3]["train_loss"].get<double>(), epochs[0]["train_loss"].get<double>());
  EXPECT_GT(epochs[3]["test_accuracy"].get<double>(), 0.5);  // 4 classes: chance is 0.25

  CommandResult e = run("eval --data synthetic:1,8,8,4,200 --model \"conv(4,3,p1) relu pool(2) flatten linear(4)\" --device cpu "
              "--init " + dir.file("w.safetensors"));
  ASSERT_EQ(e.status, 0) << e.output;
  std::ostringstream acc;
  acc.precision(2);
  acc << std::fixed << 100 * epochs[3]["test_accuracy"].get<double>() << "%";
  EXPECT_NE(e.output.find(acc.str()), std::string::npos) << e.output << " vs " << acc.str();
}

TEST(Cli, AccumulationDoesNotChangeTheMathematics) {
  dpcore::testing::TempDir dir;
  // Sums in another order differ in the last bits, so compare closely rather than exactly.
  ASSERT_EQ(run(kJob + " --steps 5 --save " + dir.file("a.safetensors")).status, 0);
  ASSERT_EQ(run(kJob + " --steps 5 --accum 4 --save " + dir.file("b.safetensors")).status, 0);
  auto a = dpcore::io::load_safetensors(dir.file("a.safetensors"));
  auto b = dpcore::io::load_safetensors(dir.file("b.safetensors"));
  for (const auto& t : a.tensors()) {
    const auto& u = b.at(t.name);
    for (int64_t i = 0; i < t.numel(); ++i) {
      EXPECT_NEAR(t.values<float>()[i], u.values<float>()[i], 1e-5) << t.name << "[" << i << "]";
    }
  }
}

TEST(Cli, ResumeIsBitIdenticalToAnUninterruptedRun) {
  dpcore::testing::TempDir dir;
  std::string ckpt = " --checkpoint " + dir.file("ckpt");
  ASSERT_EQ(run(kJob + " --steps 30 --save " + dir.file("straight.safetensors")).status, 0);
  ASSERT_EQ(run(kJob + " --steps 15" + ckpt).status, 0);  // 15 steps: not an epoch boundary (13 per epoch)
  CommandResult r = run(kJob + " --steps 30 --resume --save " + dir.file("resumed.safetensors") + ckpt);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("resumed"), std::string::npos);
  EXPECT_EQ(slurp(dir.file("straight.safetensors")), slurp(dir.file("resumed.safetensors")));
}

// A network with batch norm: the running statistics and batch counts are in the
// checkpoint, so a resumed run ends bit-identical to an uninterrupted one, also with
// synchronised batch norm over two replicas; the weights file holds the batch count.
TEST(Cli, BatchNormResumesBitIdenticallyWithItsRunningStatistics) {
  const std::string bn_job = job("\"conv(4,3,p1,nobias) bn relu res(8,s2) gap flatten linear(4)\"");
  for (const std::string parallel : {"", " --replicas 2 --batchnorm sync"}) {
    dpcore::testing::TempDir dir;
    const std::string ckpt = " --checkpoint " + dir.file("ckpt");
    ASSERT_EQ(run(bn_job + parallel + " --steps 30 --save " + dir.file("straight.safetensors")).status, 0);
    ASSERT_EQ(run(bn_job + parallel + " --steps 15" + ckpt).status, 0);
    CommandResult r = run(bn_job + parallel + " --steps 30 --resume --save " + dir.file("resumed.safetensors") + ckpt);
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_EQ(slurp(dir.file("straight.safetensors")), slurp(dir.file("resumed.safetensors"))) << parallel;
    dpcore::io::SafetensorsFile saved = dpcore::io::load_safetensors(dir.file("resumed.safetensors"));
    EXPECT_EQ(*saved.at("1.num_batches_tracked").values<int64_t>(), 30) << parallel;
  }
}

// resnet8's recipe fills in the flags the command line leaves out, and only those.
TEST(Cli, ResNetRecipeDefaultsApplyToFlagsNotGiven) {
  const std::string resnet = "train --model resnet8 --data synthetic:1,28,28,10,300 --device cpu --progress 0 --steps 2";
  CommandResult r = run(resnet);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("batch 128, lr onecycle to 0.1"), std::string::npos) << r.output;
  // A run so short that 15% of it rounds to one warm-up step (which onecycle refuses) still runs.
  CommandResult short_run = run("train --model resnet8 --data synthetic:1,28,28,10,300 --device cpu --progress 0 --steps 7");
  EXPECT_EQ(short_run.status, 0) << short_run.output;
  CommandResult own = run(resnet + " --batch 32 --lr-schedule constant --lr 0.01");
  ASSERT_EQ(own.status, 0) << own.output;
  EXPECT_NE(own.output.find("batch 32, lr constant 0.01"), std::string::npos) << own.output;
}

// torchvision's ResNets take the data's channels and classes: a 7-class dataset of 1x32x32
// images trains resnet18 with a [64, 1, 7, 7] conv1 and a [7, 512] fc, saved under
// torchvision's names.
TEST(Cli, TorchvisionResNetTakesTheDatasChannelsAndClasses) {
  dpcore::testing::TempDir dir;
  CommandResult r = run("train --model resnet18 --data synthetic:1,32,32,7,32 --device cpu --progress 0 --steps 1 "
                        "--batch 8 --save " + dir.file("r18.safetensors"));
  ASSERT_EQ(r.status, 0) << r.output;
  const auto saved = dpcore::io::load_safetensors(dir.file("r18.safetensors"));
  EXPECT_EQ(saved.at("conv1.weight").shape, (std::vector<int64_t>{64, 1, 7, 7}));
  EXPECT_EQ(saved.at("fc.weight").shape, (std::vector<int64_t>{7, 512}));
  EXPECT_EQ(*saved.at("layer4.1.bn2.num_batches_tracked").values<int64_t>(), 1);
}

// The ResNets' recipe turns on Nesterov momentum and a warm-up: the help of --model,
// --nesterov and --warmup-steps says how to turn each off (onecycle's rise is the schedule
// itself, so no warm-up needs another schedule), and what it says does it, as the
// checkpoint's recorded settings show.
TEST(Cli, HelpSaysHowToTurnOffTheRecipesNesterovAndWarmUpAndThatDoesIt) {
  const std::string nesterov_off = "--nesterov=false", warmup_off = "--lr-schedule cosine --warmup-steps 0";
  CommandResult help = run("train --help");
  ASSERT_EQ(help.status, 0) << help.output;
  auto help_of = [&](const std::string& flag) {  // from the flag's line to the next flag's
    const size_t begin = help.output.find("\n  " + flag + " ");
    EXPECT_NE(begin, std::string::npos) << flag << "\n" << help.output;
    return begin == std::string::npos ? "" : help.output.substr(begin, help.output.find("\n  --", begin + 1) - begin);
  };
  for (const std::string& flag : {"--model", "--nesterov"}) {
    EXPECT_NE(help_of(flag).find("off: " + nesterov_off), std::string::npos) << help_of(flag);
  }
  for (const std::string& flag : {"--model", "--warmup-steps"}) {
    EXPECT_NE(help_of(flag).find("no warm-up: " + warmup_off), std::string::npos) << help_of(flag);
  }

  dpcore::testing::TempDir dir;
  CommandResult r = run("train --model resnet8 --data synthetic:1,28,28,10,300 --device cpu --progress 0 --steps 2 " +
                        nesterov_off + " " + warmup_off + " --checkpoint " + dir.file("ck"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("lr cosine from 0.1 to 0 over 2 steps,"), std::string::npos) << r.output;
  const auto settings = dpcore::io::load_safetensors(dir.file("ck/checkpoint.safetensors")).metadata();
  EXPECT_EQ(settings.at("sgd"), "0.1,0.9,0,0.0005,0");  // lr, momentum, dampening, weight decay, nesterov
  EXPECT_EQ(settings.at("lr_schedule"), "cosine, warm-up 0, steps 2");
}

// Augmented training: the header says so, the weights differ from an unaugmented run, a
// resume repeats the augmented batches exactly and refuses another --augment, and the test
// metrics of each epoch are those of the unaugmented test set (what `eval` computes).
TEST(Cli, AugmentedTrainingResumesExactlyAndNeverAugmentsEvaluation) {
  dpcore::testing::TempDir dir;
  const std::string job = kJob + " --augment flip,crop:2";
  const std::string ckpt = " --checkpoint " + dir.file("ckpt");
  CommandResult r = run(job + " --steps 30 --save " + dir.file("straight.safetensors"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find(", augment crop:2,flip\n"), std::string::npos) << r.output;
  CommandResult plain = run(kJob + " --steps 30 --save " + dir.file("plain.safetensors"));
  ASSERT_EQ(plain.status, 0) << plain.output;
  EXPECT_EQ(plain.output.find("augment"), std::string::npos) << plain.output;
  EXPECT_NE(slurp(dir.file("straight.safetensors")), slurp(dir.file("plain.safetensors")));

  ASSERT_EQ(run(job + " --steps 15" + ckpt).status, 0);  // mid-epoch (13 steps per epoch)
  r = run(job + " --steps 30 --resume --save " + dir.file("resumed.safetensors") + ckpt);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(slurp(dir.file("straight.safetensors")), slurp(dir.file("resumed.safetensors")));
  r = run(kJob + " --augment crop:2 --steps 45 --resume" + ckpt);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("written with --augment 'crop:2,flip', this run has crop:2"), std::string::npos) << r.output;

  // The last epoch line's test metrics, against eval of the same weights.
  CommandResult t = run(job + " --steps 26 --save " + dir.file("w.safetensors"));
  ASSERT_EQ(t.status, 0) << t.output;
  const size_t begin = t.output.rfind("test loss "), end = t.output.find('%', begin);
  ASSERT_NE(end, std::string::npos) << t.output;
  CommandResult e = run("eval --data " + kData + " --model " + kSpec + " --device cpu --init " + dir.file("w.safetensors"));
  ASSERT_EQ(e.status, 0) << e.output;
  EXPECT_NE(e.output.find(t.output.substr(begin, end + 1 - begin)), std::string::npos)
      << e.output << " vs " << t.output;
}

// The schedule is a function of the step count, which the checkpoint restores: a run
// resumed in the middle of the warm-up-then-step-decay schedule (13 steps per epoch: the
// warm-up ends at step 5, the lr halves at steps 5+13 and 5+26) ends bit-identical to one
// that was never interrupted; a schedule restarted on resume would warm up again.
TEST(Cli, AScheduledRunResumesExactly) {
  dpcore::testing::TempDir dir;
  const std::string scheduled = kJob + " --lr 0.1 --lr-schedule step:1:0.5 --warmup-steps 5";
  std::string ckpt = " --checkpoint " + dir.file("ckpt");
  CommandResult straight = run(scheduled + " --steps 30 --metrics " + dir.file("m.jsonl") + " --save " +
                               dir.file("straight.safetensors"));
  ASSERT_EQ(straight.status, 0) << straight.output;
  EXPECT_NE(straight.output.find("lr step 0.1 x0.5 every 1 epoch after 5 warm-up steps"), std::string::npos)
      << straight.output;
  ASSERT_EQ(run(scheduled + " --steps 6" + ckpt).status, 0);  // stopped one step after the warm-up
  CommandResult r = run(scheduled + " --steps 30 --resume --save " + dir.file("resumed.safetensors") + ckpt);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("resumed"), std::string::npos);
  EXPECT_EQ(slurp(dir.file("straight.safetensors")), slurp(dir.file("resumed.safetensors")));
  // Each epoch's metrics carry the lr of its last step (steps 12, 25 and 29).
  std::vector<double> lrs;
  for (const nlohmann::json& epoch : metrics_lines(dir.file("m.jsonl"))) lrs.push_back(epoch["lr"].get<double>());
  EXPECT_EQ(lrs, (std::vector<double>{0.1, 0.05, 0.05}));
  // The schedule is applied: a constant lr ends elsewhere.
  ASSERT_EQ(run(kJob + " --lr 0.1 --steps 30 --save " + dir.file("constant.safetensors")).status, 0);
  EXPECT_NE(slurp(dir.file("straight.safetensors")), slurp(dir.file("constant.safetensors")));
}

TEST(Cli, ResumeRefusesAnotherSchedule) {
  dpcore::testing::TempDir dir;
  std::string ckpt = " --checkpoint " + dir.file("ckpt");
  ASSERT_EQ(run(kJob + " --steps 3 --lr-schedule cosine" + ckpt).status, 0);
  for (const char* other : {" --steps 6 --lr-schedule onecycle", " --steps 3 --lr-schedule cosine --warmup-steps 1",
                            " --steps 6 --lr-schedule cosine"}) {  // cosine over another total
    CommandResult r = run(kJob + other + " --resume" + ckpt);
    EXPECT_NE(r.status, 0) << other;
    EXPECT_NE(r.output.find("--warmup-steps and, for cosine, onecycle and linear, the run's length) 'cosine, warm-up 0, "
                            "steps 3'"),
              std::string::npos)
        << other << "\n" << r.output;
  }
}

TEST(Cli, ResumeRefusesDifferentSettingsAndDamagedCheckpoints) {
  dpcore::testing::TempDir dir;
  std::string ckpt = " --checkpoint " + dir.file("ckpt");
  ASSERT_EQ(run(kJob + " --steps 3" + ckpt).status, 0);
  CommandResult r = run(kJob + " --steps 6 --resume --seed 9" + ckpt);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("seed"), std::string::npos) << r.output;
  // Flip one byte in the last tensor's data.
  std::string path = dir.file("ckpt") + "/checkpoint.safetensors";
  std::string bytes = slurp(path);
  bytes[bytes.size() - 5] ^= 0x40;
  std::ofstream(path, std::ios::binary) << bytes;
  r = run(kJob + " --steps 6 --resume" + ckpt);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("damaged"), std::string::npos) << r.output;
}

// Waits (at most `limit`) until the run `pid` has written `path`: until it exists with another
// modification time than `before` (a checkpoint replaced by rename is a new file). False when
// the run ended first (left for waitpid to collect) or the limit passed.
bool wait_for_new_file(pid_t pid, const std::string& path, std::filesystem::file_time_type before,
                       std::chrono::seconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    std::error_code ec;
    const auto written = std::filesystem::last_write_time(path, ec);
    if (!ec && written != before) return true;
    siginfo_t ended{};
    if (waitid(P_PID, id_t(pid), &ended, WEXITED | WNOHANG | WNOWAIT) == 0 && ended.si_pid == pid) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

TEST(Cli, KillingTheProcessNeverLeavesABrokenCheckpoint) {
  dpcore::testing::TempDir dir;
  std::string ckpt_dir = dir.file("ckpt");
  const std::string ckpt = ckpt_dir + "/checkpoint.safetensors";
  // A larger model so each checkpoint takes a while to write; one every step.
  std::string args = "train --data synthetic:3,32,32,10,2000 --model vggs --batch 8 --threads 1 --device cpu "
                     "--progress 0 --checkpoint-every 1 --checkpoint " + ckpt_dir;
  int64_t step = 0;
  for (int attempt = 0; attempt < 6; ++attempt) {
    std::error_code no_file;
    const auto before = std::filesystem::last_write_time(ckpt, no_file);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      freopen("/dev/null", "w", stdout);
      const std::string command =
          std::string(DPCORE_BIN) + " " + args + " --steps 100000" + (attempt ? " --resume" : "");
      execl("/bin/sh", "sh", "-c", ("exec " + command).c_str(), nullptr);
      _exit(127);
    }
    // Once it has written a checkpoint of its own (however slowly a loaded machine starts
    // it), let it write a few more, then kill it at an arbitrary moment.
    const bool wrote = wait_for_new_file(pid, ckpt, before, std::chrono::seconds(60));
    if (wrote) std::this_thread::sleep_for(std::chrono::milliseconds(100 + 170 * attempt));
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "attempt " << attempt << ": the run ended before it was killed";
    ASSERT_TRUE(wrote) << "attempt " << attempt << ": the run wrote no checkpoint within 60 s";
    // Whatever moment it died at, the checkpoint on disk is a whole, valid one (its CRC-32
    // included).
    const auto file = dpcore::train::read_checkpoint(ckpt);
    step = dpcore::train::checkpoint_progress(file).step;
    EXPECT_GT(step, 0) << "attempt " << attempt;
  }
  // A kill in the middle of a write leaves its temporary file (the timing above may or may
  // not have hit one: this one stands for it); the next run's first save removes them all.
  std::ofstream(ckpt_dir + "/checkpoint.safetensors.tmp-K1lled") << "half a checkpoint";
  CommandResult resumed = run(args + " --steps " + std::to_string(step + 1) + " --resume");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  for (const auto& entry : std::filesystem::directory_iterator(ckpt_dir)) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp-"), std::string::npos) << entry.path() << " was left";
  }
}

TEST(Cli, EveryTrainingFlagIsAccepted) {
  dpcore::testing::TempDir dir;
  std::string init = dir.file("init.safetensors");
  ASSERT_EQ(run(kJob + " --steps 1 --lr 0 --save " + init).status, 0);
  const std::string base = "train --data " + kData + " --model " + kSpec + " --device cpu";
  CommandResult r = run(base + " --epochs 2 --steps 0 --batch 10 --accum 2 --lr 0.05 --momentum 0.8 --dampening 0.1 " +
                        "--weight-decay 0.001 --seed 3 --no-shuffle --no-normalize --drop-last --threads 1 --init " +
                        init + " --save " + dir.file("out.safetensors") + " --checkpoint " + dir.file("ck") +
                        " --checkpoint-every 5 --keep-checkpoints 2 --metrics " + dir.file("m.jsonl") +
                        " --replicas 2 --mode dp --backend local --split weights:1,2 --replica-timeout 30 --progress 1");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find('\r'), std::string::npos) << "--progress 1 draws a bar";
  EXPECT_NE(r.output.find("20 steps per epoch"), std::string::npos) << r.output;  // 200 / 10, --drop-last
  EXPECT_NE(r.output.find("weights [1, 2]"), std::string::npos) << r.output;
  CommandResult n = run(kJob + " --steps 3 --nesterov --momentum 0.9 --replicas 3 --mode ddp --bucket-mb 1");
  ASSERT_EQ(n.status, 0) << n.output;
  EXPECT_NE(n.output.find("ddp, local) over 3 replicas"), std::string::npos) << n.output;
}

// --trace: the steps it says, in a file the trace checks accept, with the lanes of a ddp
// run; the events the log line counts are the file's. The loader's lane holds only what its
// thread did during the window: it works ahead of the steps (2 batches queued beside the one
// in use, engine/data/loader.h), so batches 2 and 3 (from 0), which steps 3 and 4 use, were
// prepared before it; in it the loader can prepare no batch before 3 and, with step 4's
// batch in use, none after 5, and when it is ahead its only work is batch 5, started by
// step 4's next(): whether its thread runs before step 4 ends is the scheduler's choice, so
// its lane may be empty and then it is not in the file.
TEST(Cli, TraceRecordsTheStepsItNamesOnEveryLane) {
  dpcore::testing::TempDir dir;
  const std::string file = dir.file("trace.json");
  CommandResult r = run(kJob + " --steps 8 --replicas 3 --mode ddp --trace " + file + " --trace-steps 2");
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string said = " events of steps 3-4 written to " + file;
  const size_t at = r.output.find(said);
  ASSERT_NE(at, std::string::npos) << r.output;
  const size_t line = r.output.rfind("trace: ", at);
  ASSERT_NE(line, std::string::npos) << r.output;
  const size_t events = std::stoul(r.output.substr(line + 7, at - line - 7));

  dpcore::testing::TraceFile t = dpcore::testing::read_trace(file);
  EXPECT_EQ(t.spans.size(), events);
  std::vector<std::string> steps;
  for (const auto& s : dpcore::testing::spans_of(t, "main", "step ")) steps.push_back(s.name);
  EXPECT_EQ(steps, (std::vector<std::string>{"step 3", "step 4"}));
  for (const char* lane : {"replica 0", "replica 1", "replica 2", "comm 0", "comm 1", "comm 2", "main"}) {
    bool found = false;
    for (const auto& [tid, name] : t.lanes) found = found || name == lane;
    EXPECT_TRUE(found) << "no lane " << lane;
  }
  for (const auto& s : dpcore::testing::spans_of(t, "loader", "")) {
    EXPECT_EQ(s.name, "prepare batch");
    EXPECT_EQ(s.args.value("epoch", 0), 1) << s.args.dump();
    EXPECT_GE(s.args.value("batch", -1), 3) << s.args.dump();
    EXPECT_LE(s.args.value("batch", -1), 5) << s.args.dump();
  }
}

// --explain tells the run's first step once, in the moves of its mode, before the run goes
// on (tests/train/explain_test.cpp checks its numbers against values known without the runner).
TEST(Cli, ExplainTellsTheFirstStepOnce) {
  auto occurrences = [](const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  CommandResult ddp = run(kJob + " --steps 3 --replicas 3 --mode ddp --split weights:2,1,1 --explain");
  ASSERT_EQ(ddp.status, 0) << ddp.output;
  EXPECT_EQ(occurrences(ddp.output, "explain: step 1 of this run, move by move: --mode ddp"), 1u) << ddp.output;
  EXPECT_LT(ddp.output.find("explain: "), ddp.output.find("step 3/3")) << ddp.output;
  // --batch 16 over weights 2:1:1 is 8, 4, 4: rows [0, 8), [8, 12), [12, 16).
  EXPECT_NE(ddp.output.find("replica 0 rows [0, 8), replica 1 rows [8, 12), replica 2 rows [12, 16)"),
            std::string::npos) << ddp.output;
  EXPECT_NE(ddp.output.find("1/N = 1/16 = 0.0625"), std::string::npos) << ddp.output;
  EXPECT_EQ(occurrences(ddp.output, "reduce-scatter step "), 2u) << ddp.output;
  EXPECT_EQ(occurrences(ddp.output, "allgather      step "), 2u) << ddp.output;

  CommandResult one = run(kJob + " --steps 2 --accum 2 --explain");
  ASSERT_EQ(one.status, 0) << one.output;
  EXPECT_NE(one.output.find("explain: step 1 of this run on one device (cpu)"), std::string::npos) << one.output;
  EXPECT_NE(one.output.find("2 micro-batches of 8, 8 samples"), std::string::npos) << one.output;
  EXPECT_EQ(run(kJob + " --steps 1").output.find("explain:"), std::string::npos);
  // Local SGD has no one step of all replicas to tell: refused before training, saying so.
  CommandResult local = run(kJob + " --steps 1 --replicas 2 --sync local:2 --explain");
  EXPECT_NE(local.status, 0);
  EXPECT_NE(local.output.find("dpcore: error: --explain tells one synchronous step (--sync full); with --sync local:2"),
            std::string::npos) << local.output;
  EXPECT_EQ(local.output.find("step 1/1"), std::string::npos) << local.output;
}

// --log-every N: a plain progress line every N steps and at the last, none in between; 0 refused.
TEST(Cli, LogEveryPrintsAProgressLineEveryNStepsAndAtTheLast) {
  CommandResult r = run(kJob + " --steps 5 --log-every 2");
  ASSERT_EQ(r.status, 0) << r.output;
  for (const std::string step : {"step 2/5 ", "step 4/5 ", "step 5/5 "})
    EXPECT_NE(r.output.find(step), std::string::npos) << step << "\n" << r.output;
  for (const std::string step : {"step 1/5 ", "step 3/5 "}) EXPECT_EQ(r.output.find(step), std::string::npos) << r.output;
  CommandResult zero = run(kJob + " --steps 5 --log-every 0");
  EXPECT_NE(zero.status, 0);
  EXPECT_NE(zero.output.find("--log-every 0: must be a whole number of at least 1"), std::string::npos) << zero.output;
}

// A trace that could not be written is refused before the run spends anything on training.
TEST(Cli, UnwritableTracePathFailsBeforeTraining) {
  dpcore::testing::TempDir dir;
  for (const std::string& bad : {dir.file("missing/trace.json"), dir.path()}) {
    CommandResult r = run(kJob + " --steps 3 --metrics " + dir.file("m.jsonl") + " --checkpoint " + dir.file("ck") +
                          " --trace " + bad);
    EXPECT_NE(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("dpcore: error: --trace " + bad + ": "), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("step "), std::string::npos) << r.output;
    EXPECT_FALSE(std::ifstream(dir.file("m.jsonl")).good()) << "metrics written for " << bad;
    EXPECT_FALSE(std::ifstream(dir.file("ck/checkpoint.safetensors")).good()) << "checkpoint written for " << bad;
  }
}

TEST(Cli, TrainsOnCifar10BinaryBatches) {
  dpcore::testing::TempDir dir;
  for (std::string name : {"data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5", "test_batch"}) {
    dpcore::testing::Bytes labels;
    for (uint8_t i = 0; i < 8; ++i) labels.push_back(uint8_t((i * 3 + name.size()) % 10));
    dpcore::testing::write_bytes(dir.file(name + ".bin"), dpcore::testing::cifar10_bytes(
                                                              labels, dpcore::testing::pattern_bytes(8 * 3072, uint32_t(name.size()))));
  }
  CommandResult r = run("train --data cifar10:" + dir.path() + " --model simplenet --batch 8 --steps 6 --device cpu " +
                        "--threads 1 --progress 0");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("40 x 3 x 32 x 32"), std::string::npos) << r.output;  // 5 batches of 8 records
  EXPECT_NE(r.output.find("test accuracy"), std::string::npos) << r.output;
}

TEST(Cli, NoShuffleNoNormalizeRunIsReproducibleInPyTorch) {
  if (!dpcore::testing::python_has_torch()) {
    GTEST_SKIP() << "/usr/bin/python3 cannot import torch (Debian's python3-torch is not installed)";
  }
  // A small Fashion-MNIST-shaped dataset in raw IDX files: 100 train and 20 test images.
  // The pixels are random, not a pattern. Patterned images (pattern_bytes) are locally
  // linear, which gives max-pool windows whose largest values tie to the last bit; their
  // argmax then follows the rounding of the BLAS kernel, and the gradient goes to another
  // pixel: with OPENBLAS_CORETYPE=Haswell OPENBLAS_L2_SIZE=512 on an AVX-512 machine,
  // c2.weight ended 8e-4 away from PyTorch (and from a float64 replay) while c2.bias, the
  // same gradient summed without the pixels, still matched to 1e-8. With random pixels
  // both runs stay within 2.5e-7 of each other and 2e-7 of float64 on either kernel and
  // with 1 or 2 threads, so the 1e-5 bound holds with a wide margin.
  dpcore::testing::TempDir dir;
  auto write_split = [&](const std::string& prefix, uint32_t n, uint32_t salt) {
    dpcore::testing::Bytes labels(n), pixels(size_t(n) * 784);
    for (uint32_t i = 0; i < n; ++i) labels[i] = uint8_t((i * 7 + salt) % 10);
    std::mt19937 rng(salt);
    std::uniform_int_distribution<int> byte(0, 255);
    for (auto& p : pixels) p = uint8_t(byte(rng));
    dpcore::testing::write_bytes(dir.file(prefix + "-images-idx3-ubyte"), dpcore::testing::idx_bytes(0x803, {n, 28, 28}, pixels));
    dpcore::testing::write_bytes(dir.file(prefix + "-labels-idx1-ubyte"), dpcore::testing::idx_bytes(0x801, {n}, labels));
  };
  write_split("train", 100, 1);
  write_split("t10k", 20, 2);
  // On the CPU, as the replay (torch_replay.py runs PyTorch on the CPU): `auto`, the default,
  // would take the GPU of a GPU machine, whose kernels are another rounding.
  std::string data = " --data fashion-mnist:" + dir.path() + " --model fashioncnn --device cpu --threads 1 --progress 0";
  std::string init = dir.file("init.safetensors"), result = dir.file("result.safetensors");
  ASSERT_EQ(run("train" + data + " --steps 1 --lr 0 --save " + init).status, 0);
  // 100 samples in batches of 32: the 4th step is the short last batch, the 5th starts epoch 2.
  CommandResult r = run("train" + data + " --no-shuffle --no-normalize --batch 32 --steps 5 --lr 0.05 --momentum 0.9 " +
                        "--init " + init + " --save " + result);
  ASSERT_EQ(r.status, 0) << r.output;
  auto replay = [&](const std::string& schedule) {
    std::string cmd = "/usr/bin/python3 " + dpcore::testing::source_dir() + "/tests/cli/torch_replay.py --data " +
                      dir.path() + " --model fashioncnn --init " + init + " --result " + result +
                      " --batch 32 --steps 5 --lr 0.05 --momentum 0.9" + schedule + " 2>&1";
    FILE* pipe = popen(cmd.c_str(), "r");
    std::string out;
    char buf[4096];
    while (size_t k = fread(buf, 1, sizeof buf, pipe)) out.append(buf, k);
    int status = pclose(pipe);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << schedule << "\n" << out;
    std::cout << out;
  };
  replay("");
  // The same run under onecycle: lr and momentum set before every step as OneCycleLR sets them.
  const std::string onecycle = " --lr-schedule onecycle --warmup-steps 2";
  r = run("train" + data + " --no-shuffle --no-normalize --batch 32 --steps 5 --lr 0.05 --momentum 0.9 " + "--init " +
          init + " --save " + result + onecycle);
  ASSERT_EQ(r.status, 0) << r.output;
  replay(onecycle);
}

// dpcore predict (train/predict/predict.h): a row per power of two up to --max-replicas, full
// efficiency on one replica, and a saved profile that gives the same predictions again.
TEST(Cli, PredictTabulatesEveryPowerOfTwoAndReplaysASavedProfile) {
  dpcore::testing::TempDir dir;
  const std::string common = "predict --model " + kSpec +
                             " --input 1x8x8 --classes 4 --batch 8 --threads 1 --max-replicas 16 --profile-steps 2"
                             " --cluster 4,20,3,20,3 --strategies ddp,dp,local:4";
  CommandResult r = run(common + " --profile-out " + dir.file("profile.json") + " --json " + dir.file("first.json"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("measured on the CPU, 1 thread,"), std::string::npos) << r.output;
  const nlohmann::json first = nlohmann::json::parse(slurp(dir.file("first.json")));
  const nlohmann::json& rows = first.at("predictions");
  ASSERT_EQ(rows.size(), 5u) << first.dump();  // 1, 2, 4, 8, 16
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].at("replicas"), 1 << i);
    for (const char* s : {"ddp", "dp", "local:4"}) {
      const double e = rows[i].at(s).at("efficiency");
      EXPECT_GT(e, 0.0) << s;
      EXPECT_LE(e, 1.0) << s;
      if (i == 0) EXPECT_EQ(e, 1.0) << s;
    }
  }
  r = run(common + " --profile " + dir.file("profile.json") + " --json " + dir.file("again.json"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("loaded from " + dir.file("profile.json")), std::string::npos) << r.output;
  EXPECT_EQ(nlohmann::json::parse(slurp(dir.file("again.json"))).at("predictions"), rows);
}

TEST(Cli, PredictRefusesWhatItCannotUseNamingIt) {
  dpcore::testing::TempDir dir;
  const std::string base = "predict --model " + kSpec + " --batch 4 --threads 1 --profile-steps 1";
  const std::string small = base + " --input 1x8x8 --classes 4";
  struct Case {
    std::string args, names;
  };
  const Case cases[] = {
      {small + " --cluster dgx-a100", "'dgx-a100'"},
      {small + " --cluster 8,2,370,5", "8,2,370,5"},
      {small + " --strategies ddp,local:0", "local:0"},
      {small + " --algorithm butterfly", "butterfly"},
      {base + " --input 8x8 --classes 4", "--input '8x8'"},
      {base + " --input 1x8x8 --classes 7", "--classes 7"},
      {small + " --profile " + dir.file("missing.json"), dir.file("missing.json")},
      {small + " --json " + dir.file("no/such/dir/p.json"), dir.file("no/such/dir/p.json")},
  };
  for (const Case& c : cases) {
    CommandResult r = run(c.args);
    EXPECT_NE(r.status, 0) << c.args;
    EXPECT_NE(r.output.find(c.names), std::string::npos) << c.args << "\n" << r.output;
    EXPECT_EQ(r.output.find("step profile"), std::string::npos) << "measured before refusing: " << c.args;
  }
  // A profile of another model is refused, naming both parameter counts.
  ASSERT_EQ(run(small + " --profile-out " + dir.file("small.json")).status, 0);
  CommandResult r = run("predict --model \"conv(4,3,p1) relu conv(4,3,p1) relu pool(2) flatten linear(4)\" --input 1x8x8 "
                        "--classes 4 --profile " + dir.file("small.json"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("4 parameters, but --model conv(4,3,p1)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" has 6"), std::string::npos) << r.output;
  // A profile that names no model needs --model.
  {
    std::ofstream bare(dir.file("bare.json"));
    bare << R"({"forward_s": 1e-3, "backward_s": 2e-3, "optimizer_s": 1e-4, "param_bytes": [400, 16],
               "grad_ready_s": [2e-3, 1e-3], "input_bytes": 100, "output_bytes": 10})";
  }
  r = run("predict --profile " + dir.file("bare.json"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("names no model and batch"), std::string::npos) << r.output;
}

// dpcore predict --stages: a pipeline's step per replica count, from each layer measured on a
// micro-batch; the stages' p2p bytes are twice the boundary's activations per micro-batch; more
// replicas of each stage add only their reductions; what a pipeline's prediction cannot take
// is refused naming it.
TEST(Cli, PredictTabulatesAPipelinesStepFromItsMeasuredLayers) {
  dpcore::testing::TempDir dir;
  // conv(4,3,p1) relu pool(2) flatten linear(4) on 1x8x8, split after the pool: 4 x 4 x 4 values a sample.
  const std::string common = "predict --model " + kSpec +
                             " --input 1x8x8 --classes 4 --batch 16 --threads 1 --profile-steps 2 --cluster 4,20,3,20,3"
                             " --stages 0-2@cpu:0,3-5@cpu:1 --micro-batches 4 --replicas 1,4";
  CommandResult r = run(common + " --schedule 1f1b --json " + dir.file("p.json"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("pipeline (1f1b) of 2 stages [0-2@cpu:0,3-5@cpu:1], 4 micro-batches of 4 samples"),
            std::string::npos) << r.output;
  const nlohmann::json j = nlohmann::json::parse(slurp(dir.file("p.json")));
  const nlohmann::json& rows = j.at("predictions");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].at("p2p_bytes"), 2 * 4 * (4 * 64 * 4));
  EXPECT_EQ(rows[0].at("exposed_allreduce_s"), 0.0);
  EXPECT_EQ(rows[1].at("pipeline_s"), rows[0].at("pipeline_s"));
  EXPECT_GE(rows[1].at("step_s").get<double>(), rows[0].at("step_s").get<double>());
  EXPECT_EQ(j.at("layers").size(), 6u);
  const std::pair<std::string, std::string> refusals[] = {
      {" --profile " + dir.file("p.json"), "--stages with --profile"},
      {" --profile-out " + dir.file("q.json"), "--stages with --profile or --profile-out"},
      {" --schedule naive", "--schedule naive runs the batch whole"},
  };
  for (const auto& [args, names] : refusals) {
    CommandResult bad = run(common + args);
    EXPECT_NE(bad.status, 0) << args;
    EXPECT_NE(bad.output.find(names), std::string::npos) << args << "\n" << bad.output;
  }
}

// With --profile and no --model the model is the profile's (dpcore need not build it: the
// GPU presets' ResNet-50 is PyTorch's); --replicas lists the counts, and a CPU cluster's
// cores bring the measured busy slowdown.
TEST(Cli, PredictTakesTheModelFromItsProfileAndTheCountsAskedFor) {
  dpcore::testing::TempDir dir;
  const std::string measure = "predict --model " + kSpec +
                              " --input 1x8x8 --classes 4 --batch 8 --threads 1 --profile-steps 2 --replicas 1,3,5"
                              " --cluster 8,20,3,20,3,2 --strategies ddp,dp";
  CommandResult r = run(measure + " --profile-out " + dir.file("profile.json") + " --json " + dir.file("given.json"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("with 2 replicas at once"), std::string::npos) << r.output;
  const nlohmann::json given = nlohmann::json::parse(slurp(dir.file("given.json")));
  const nlohmann::json& rows = given.at("predictions");
  ASSERT_EQ(rows.size(), 3u) << given.dump();
  EXPECT_EQ(rows[1].at("replicas"), 3);
  EXPECT_EQ(rows[2].at("replicas"), 5);
  // 3 and 5 replicas of one thread on one node's 2 cores: their compute is one replica's
  // times the middle of a fair share (1.5 and 2.5 busy steps) and staying put (1 and 2 busy
  // steps, then 1 alone), whatever the measured busy slowdown.
  const double busy = nlohmann::json::parse(slurp(dir.file("profile.json"))).at("busy_slowdown");
  const double one = rows[0].at("dp").at("step_s");
  auto compute = [&](size_t row) {
    return double(rows[row].at("dp").at("step_s")) - double(rows[row].at("dp").at("exposed_comm_s"));
  };
  EXPECT_NEAR(compute(1) / one, (1.5 * busy + busy + 1) / 2, 1e-9);
  EXPECT_NEAR(compute(2) / one, (2.5 * busy + 2 * busy + 1) / 2, 1e-9);
  r = run("predict --profile " + dir.file("profile.json") +
          " --replicas 1,3,5 --cluster 8,20,3,20,3,2 --strategies ddp,dp --json " + dir.file("from_profile.json"));
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string spec = kSpec.substr(1, kSpec.size() - 2);  // without its shell quotes
  EXPECT_NE(r.output.find("dpcore predict: " + spec + " ("), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("batch 8 per replica"), std::string::npos) << r.output;
  EXPECT_EQ(nlohmann::json::parse(slurp(dir.file("from_profile.json"))).at("predictions"), rows);
}

// ---- fault injection and the guards (docs/fault-tolerance.md) as a user meets them

TEST(Cli, SkipNonfiniteSkipsLogsAndCountsAnInjectedNanStep) {
  dpcore::testing::TempDir dir;
  CommandResult r = run(kJob + " --steps 6 --replicas 2 --inject nan:replica=1,step=3 --skip-nonfinite --metrics " +
                        dir.file("m.jsonl"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("step 3 skipped: NaN or Inf in the loss or the gradients"), std::string::npos) << r.output;
  std::vector<nlohmann::json> epochs = metrics_lines(dir.file("m.jsonl"));
  ASSERT_EQ(epochs.size(), 1u);
  EXPECT_EQ(epochs[0]["skipped_steps"].get<int64_t>(), 1);
  EXPECT_TRUE(std::isfinite(epochs[0]["train_loss"].get<double>())) << "the skipped step's NaN loss was averaged in";
  // Without a fault the count is there, and zero.
  ASSERT_EQ(run(kJob + " --steps 2 --metrics " + dir.file("n.jsonl")).status, 0);
  EXPECT_EQ(metrics_lines(dir.file("n.jsonl"))[0]["skipped_steps"].get<int64_t>(), 0);
}

TEST(Cli, MaxSkippedStopsTheRunAndDpcoreInjectAddsToInject) {
  setenv("DPCORE_INJECT", "nan:replica=0,step=2", 1);
  CommandResult r = run(kJob + " --steps 6 --inject nan:replica=0,step=3 --skip-nonfinite --max-skipped 2");
  unsetenv("DPCORE_INJECT");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("--skip-nonfinite: 2 steps in a row (steps 2 to 3)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("the parameters are those after step 1"), std::string::npos) << r.output;
}

TEST(Cli, AnInjectedExitEndsTheProcessAtOnceAndTheCheckpointSurvives) {
  dpcore::testing::TempDir dir;
  const std::string ck = " --checkpoint " + dir.file("ck") + " --checkpoint-every 1";
  CommandResult r = run(kJob + " --steps 6 --replicas 2 --inject exit:replica=1,step=3" + ck);
  EXPECT_EQ(r.status, 75) << r.output;
  EXPECT_NE(r.output.find("replica 1: injected exit at step 3"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("epoch 1:"), std::string::npos) << "the process went on: " << r.output;
  CommandResult resumed = run(kJob + " --steps 6 --replicas 2 --resume" + ck);
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("at step 2"), std::string::npos) << resumed.output;
}

TEST(Cli, InjectedFailuresEndTheRunNamingTheReplica) {
  struct Case {
    std::string args, names;
  };
  const Case cases[] = {
      {" --replicas 2 --mode dp --inject throw:replica=1,step=2", "replica 1: injected throw at step 2"},
      {" --replicas 2 --inject hang:replica=1,step=2 --replica-timeout 0.5", "replica 1 did not arrive within 0.5 s"},
      {" --replicas 2 --mode dp --inject hang:replica=0,step=2 --replica-timeout 0.5",
       "replica 0 did not arrive within 0.5 s"},
      {" --replicas 2 --inject bitflip:replica=1,step=2 --check-replicas 1",
       "--check-replicas: after step 2, replica 1 differs from replica 0: first in 0.weight"},
  };
  for (const Case& c : cases) {
    CommandResult r = run(kJob + " --steps 4" + c.args);
    EXPECT_EQ(r.status, 1) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.names), std::string::npos) << c.args << "\n" << r.output;
  }
}

TEST(Cli, BadInjectionsAreRefusedBeforeTraining) {
  struct Case {
    std::string args, env, names;
  };
  const Case cases[] = {
      {" --inject boom:replica=0,step=1", "", "--inject 'boom:replica=0,step=1': unknown kind 'boom'"},
      {" --inject nan:replica=1", "", "--inject 'nan:replica=1': step=S is required for nan"},
      {" --replicas 2 --inject nan:replica=2,step=1", "", "replica 2 does not exist with --replicas 2"},
      {" --inject hang:replica=0,step=1", "", "with one replica nothing would notice the hang"},
      {"", "slow:replica=0", "DPCORE_INJECT 'slow:replica=0': factor=F is required for slow"},
      {" --max-skipped 3", "", "--max-skipped requires --skip-nonfinite"},
      {" --check-replicas -1", "", "--check-replicas -1"},
  };
  for (const Case& c : cases) {
    if (!c.env.empty()) setenv("DPCORE_INJECT", c.env.c_str(), 1);
    CommandResult r = run(kJob + " --steps 2" + c.args);
    unsetenv("DPCORE_INJECT");
    EXPECT_NE(r.status, 0) << c.args;
    EXPECT_NE(r.output.find(c.names), std::string::npos) << c.args << c.env << "\n" << r.output;
    EXPECT_EQ(r.output.find("step 1"), std::string::npos) << "trained before refusing: " << c.args;
  }
}

// --sync local:K and async through the CLI: the runner named in the header, the metrics
// fields each adds (one record per --eval-every evaluation, then the epoch's), and the
// refusals, before any training.
TEST(Cli, SyncStrategiesTrainAndRecordWhatTheyDid) {
  dpcore::testing::TempDir dir;
  // 200 samples, batch 16: 13 steps per epoch; evaluations after steps 4, 8 and 12.
  CommandResult local = run(kJob + " --epochs 1 --replicas 2 --sync local:3 --eval-every 4 --metrics " + dir.file("l.jsonl"));
  ASSERT_EQ(local.status, 0) << local.output;
  EXPECT_NE(local.output.find("local SGD (local:3, local) over 2 replicas"), std::string::npos) << local.output;
  EXPECT_NE(local.output.find("step 8: test loss"), std::string::npos) << local.output;
  auto l = metrics_lines(dir.file("l.jsonl"));
  ASSERT_EQ(l.size(), 4u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(l[size_t(i)]["kind"], "eval");
    EXPECT_EQ(l[size_t(i)]["step"], 4 * (i + 1));
  }
  EXPECT_EQ(l[3]["kind"], "epoch");
  // Every 3 steps: 4 of them in 13 steps. The evaluations that fell between (after steps 4
  // and 8) and the epoch's own (after step 13) evaluate the replicas' average without
  // making it one of the schedule's (docs/strategies.md).
  EXPECT_EQ(l[3]["averagings"], nlohmann::json::array({4}));

  CommandResult async = run(kJob + " --epochs 1 --replicas 3 --sync async --max-staleness 2 --metrics " + dir.file("a.jsonl"));
  ASSERT_EQ(async.status, 0) << async.output;
  EXPECT_NE(async.output.find("asynchronous SGD (async, parameter server in this process) over 3 replicas"),
            std::string::npos) << async.output;
  auto a = metrics_lines(dir.file("a.jsonl"));
  ASSERT_EQ(a.size(), 1u);
  auto histogram = a[0]["staleness_histogram"].get<std::vector<int64_t>>();
  ASSERT_EQ(histogram.size(), 3u);  // staleness 0, 1, 2
  int64_t updates = 0;
  for (int64_t h : histogram) updates += h;
  EXPECT_EQ(updates, 12 * 3 + 3);  // 12 batches of 16 cut in 3 pieces, and the last batch of 8 in 3

  for (const auto& [flags, words] : std::vector<std::pair<std::string, std::string>>{
           {"--sync local:0", "--sync local:0: K must be"},
           {"--sync sometimes", "--sync sometimes: expected full, local:K or async"},
           {"--sync local:2 --split adaptive", "--split adaptive"},
           {"--sync async --split weights:1,2", "--split weights:1,2"},
           {"--sync async --max-staleness -1", "--max-staleness"}}) {
    CommandResult r = run(kJob + " --steps 2 --replicas 2 " + flags);
    EXPECT_NE(r.status, 0) << flags;
    EXPECT_NE(r.output.find(words), std::string::npos) << flags << ": " << r.output;
    EXPECT_EQ(r.output.find("step 1"), std::string::npos) << "trained before refusing: " << flags;
  }
}

}  // namespace
