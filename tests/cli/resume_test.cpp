// --resume as a promise (docs/fault-tolerance.md, "Elastic resume"), through the `dpcore`
// command: a checkpoint written by R replicas on one backend continues on R' replicas on
// another with the maths of an uninterrupted run; what would change the maths is refused
// naming both values, or accepted and logged with --force-resume; --keep-checkpoints keeps
// the K newest, and a damaged newest falls back to the one before it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
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
using dpcore::testing::run_command;
using dpcore::testing::slurp;
namespace fs = std::filesystem;

const std::string kJob = job();
const std::string kAvgpool = "\"conv(4,3,p1) relu avgpool(2) flatten linear(4)\"";  // another model, the same shapes

// A copy of checkpoint directory `from` at `to`: each resume writes into its own directory,
// so that every one starts from the same checkpoint.
std::string copy_of(const std::string& from, const std::string& to) {
  fs::copy(from, to, fs::copy_options::recursive);
  return " --checkpoint " + to;
}

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

int64_t step_of(const std::string& checkpoint) {
  return std::stoll(dpcore::io::load_safetensors(checkpoint).metadata().at("step"));
}

// 16 steps cross the end of epoch 1 (13 steps) and its short last batch of 8 samples.
constexpr const char* kSteps = " --steps 16";

TEST(ElasticResume, ALocalCheckpointResumesOnOneThreeAndFourReplicas) {
  dpcore::testing::TempDir dir;
  ASSERT_EQ(run(kJob + kSteps + " --save " + dir.file("straight.safetensors")).status, 0);
  // Two replicas, a checkpoint every 5 steps; the process dies at step 7 (as a killed one
  // would: no final checkpoint), leaving the checkpoint of step 5.
  CommandResult killed = run(kJob + kSteps + " --replicas 2 --checkpoint-every 5 --inject exit:replica=1,step=7" +
                             " --checkpoint " + dir.file("ck"));
  ASSERT_EQ(killed.status, 75) << killed.output;
  // Each resume changes what may change freely: the replica count, the mode, the split.
  const std::vector<std::string> resumes = {"", " --replicas 3 --split weights:1,2,3", " --replicas 4 --mode dp"};
  for (size_t i = 0; i < resumes.size(); ++i) {
    SCOPED_TRACE(resumes[i]);
    const std::string out = dir.file("resumed" + std::to_string(i) + ".safetensors");
    CommandResult r = run(kJob + kSteps + resumes[i] + " --resume --save " + out +
                          copy_of(dir.file("ck"), dir.file("ck" + std::to_string(i))));
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("at step 5 (epoch 1), written by distributed data parallel (ddp, local) over 2 replicas"),
              std::string::npos)
        << r.output;
    expect_same_maths(dir.file("straight.safetensors"), out);
  }
}

// mpirun -np 2 (--backend mpi) writes the checkpoint; 3 local replicas take it to step 10,
// and mpirun -np 2 again to the end (local -> mpi); 1 local replica takes the same mpi
// checkpoint to the end. All end with the parameters of one replica that never stopped.
TEST(ElasticResume, AnMpiCheckpointResumesLocallyAndALocalOneUnderMpi) {
#ifndef DPCORE_MPIEXEC
  GTEST_SKIP() << "built without MPI";
#else
  const std::string mpirun = dpcore::testing::mpirun(2);
  const std::string mpi = " --backend mpi --mode ddp";
  dpcore::testing::TempDir dir;
  ASSERT_EQ(run(kJob + kSteps + " --save " + dir.file("straight.safetensors")).status, 0);
  CommandResult written = run_command(kJob + mpi + " --steps 5 --checkpoint " + dir.file("ck"), mpirun);
  ASSERT_EQ(written.status, 0) << written.output;

  const std::string on_three = copy_of(dir.file("ck"), dir.file("ck3"));
  CommandResult three = run(kJob + " --steps 10 --replicas 3 --resume" + on_three);
  ASSERT_EQ(three.status, 0) << three.output;
  EXPECT_NE(three.output.find("at step 5 (epoch 1), written by distributed data parallel (ddp, mpi) over 2 replicas"),
            std::string::npos)
      << three.output;
  CommandResult back = run_command(kJob + mpi + kSteps + " --resume --save " + dir.file("three.safetensors") + on_three,
                                   mpirun);
  ASSERT_EQ(back.status, 0) << back.output;
  EXPECT_NE(back.output.find("at step 10 (epoch 1), written by distributed data parallel (ddp, local) over 3 replicas"),
            std::string::npos)
      << back.output;
  expect_same_maths(dir.file("straight.safetensors"), dir.file("three.safetensors"));

  CommandResult one = run(kJob + kSteps + " --resume --save " + dir.file("one.safetensors") +
                          copy_of(dir.file("ck"), dir.file("ck1")));
  ASSERT_EQ(one.status, 0) << one.output;
  expect_same_maths(dir.file("straight.safetensors"), dir.file("one.safetensors"));
#endif
}

// Another model, global batch or accumulation than the checkpoint's is refused before any
// step, naming the flag and both values (every difference at once); the replica count is
// not among them.
TEST(ElasticResume, AnotherModelBatchOrAccumIsRefusedNamingBothValues) {
  dpcore::testing::TempDir dir;
  const std::string ck = " --checkpoint " + dir.file("ck");
  ASSERT_EQ(run(kJob + " --steps 3" + ck).status, 0);
  struct Case {
    std::string args, names;
  };
  const std::vector<Case> cases = {
      {job(kSpec, kData, "cpu", 32), "was written with --batch 16, this run has 32"},
      {kJob + " --accum 2", "was written with --accum 1, this run has 2"},
      {job(kSpec, kData, "cpu", 32) + " --accum 2", "this run has 32: every step's gradient is the mean over the "
                                                    "global batch; and with --accum 1, this run has 2"},
      {job(kAvgpool),
       "was written with --model 'conv(4,3,p1) relu pool(2) flatten linear(4)', this run has "
       "'conv(4,3,p1) relu avgpool(2) flatten linear(4)'"},
  };
  for (const Case& c : cases) {
    CommandResult r = run(c.args + " --steps 6 --replicas 2 --resume" + ck);
    EXPECT_EQ(r.status, 1) << c.args;
    EXPECT_NE(r.output.find(c.names), std::string::npos) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find("or add --force-resume"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("step 4"), std::string::npos) << "trained before refusing: " << c.args;
  }
  EXPECT_EQ(step_of(dir.file("ck/checkpoint.safetensors")), 3) << "a refused resume wrote a checkpoint";
  CommandResult no_resume = run(kJob + " --steps 6 --force-resume" + ck);
  EXPECT_NE(no_resume.status, 0);
  EXPECT_NE(no_resume.output.find("--force-resume requires --resume"), std::string::npos) << no_resume.output;
}

// --force-resume goes on with this run's values, logging each change; with another batch
// the data position moves with the samples already seen, not with the batch count.
TEST(ElasticResume, ForceResumeLogsEachChangeAndCarriesTheDataPosition) {
  dpcore::testing::TempDir dir;
  const std::string ck = " --checkpoint " + dir.file("ck");
  ASSERT_EQ(run(kJob + " --steps 3" + ck).status, 0);  // 48 samples into epoch 1
  CommandResult r = run(job(kAvgpool, kData, "cpu", 32) + " --accum 2 --steps 5 --resume --force-resume" + ck);
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* line :
       {"--force-resume: --model 'conv(4,3,p1) relu pool(2) flatten linear(4)' -> "
        "'conv(4,3,p1) relu avgpool(2) flatten linear(4)'\n",
        "--force-resume: --batch 16 -> 32\n", "--force-resume: --accum 1 -> 2\n",
        "--force-resume: the data position, 48 samples into epoch 1 (3 batches of 16), is batch 1 of epoch 1 in "
        "batches of 32, 16 samples are seen again; steps keep counting from 3\n"}) {
    EXPECT_NE(r.output.find(line), std::string::npos) << line << "\n" << r.output;
  }
  EXPECT_EQ(r.output.find("--force-resume: --seed"), std::string::npos) << "logged an unchanged setting: " << r.output;
  // 7 batches of 32 per epoch: steps 4 and 5 are its batches 2 and 3, and the run ends in epoch 1.
  EXPECT_NE(r.output.find("step 5/5  epoch 1"), std::string::npos) << r.output;
  // The checkpoint it wrote records the new values: resuming it needs no force.
  CommandResult again = run(job(kAvgpool, kData, "cpu", 32) + " --accum 2 --steps 6 --resume" + ck);
  EXPECT_EQ(again.status, 0) << again.output;
}

// A checkpoint from before --accum was recorded resumes, saying what it assumed.
TEST(ElasticResume, ACheckpointThatDoesNotRecordAccumResumesWithANote) {
  dpcore::testing::TempDir dir;
  const std::string path = dir.file("ck/checkpoint.safetensors");
  ASSERT_EQ(run(kJob + " --steps 3 --checkpoint " + dir.file("ck")).status, 0);
  {
    const auto file = dpcore::io::load_safetensors(path);
    std::map<std::string, std::string> meta = file.metadata();
    ASSERT_EQ(meta.erase("accum"), 1u);
    std::vector<dpcore::io::TensorView> views;
    for (const auto& t : file.tensors()) views.push_back({t.name, t.dtype, t.shape, t.data.data(), t.data.size()});
    dpcore::io::save_safetensors(path, views, meta);
  }
  CommandResult r = run(kJob + " --steps 5 --resume --checkpoint " + dir.file("ck"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("note: " + path + " does not record --accum (written before checkpoints recorded it): "
                          "taking this run's --accum 1"),
            std::string::npos)
      << r.output;
}

TEST(KeepCheckpoints, KeepsTheNewestKAndRemovesTheOldest) {
  dpcore::testing::TempDir dir;
  // Checkpoints after steps 2, 4, 6, 8 and 10.
  CommandResult r = run(kJob + " --steps 10 --checkpoint-every 2 --keep-checkpoints 2 --checkpoint " + dir.file("k2"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(files_in(dir.file("k2")),
            (std::vector<std::string>{"checkpoint-00000008.safetensors", "checkpoint.safetensors"}));
  EXPECT_EQ(step_of(dir.file("k2/checkpoint.safetensors")), 10);
  EXPECT_EQ(step_of(dir.file("k2/checkpoint-00000008.safetensors")), 8);
  // The default keeps only the newest, as one file did before.
  ASSERT_EQ(run(kJob + " --steps 10 --checkpoint-every 2 --checkpoint " + dir.file("k1")).status, 0);
  EXPECT_EQ(files_in(dir.file("k1")), (std::vector<std::string>{"checkpoint.safetensors"}));
  CommandResult zero = run(kJob + " --steps 2 --keep-checkpoints 0 --checkpoint " + dir.file("k0"));
  EXPECT_NE(zero.status, 0);
  EXPECT_NE(zero.output.find("--keep-checkpoints 0: must be a whole number of at least 1"), std::string::npos)
      << zero.output;
}

// A truncated newest checkpoint: --resume says so, naming it, and continues from the one
// before, ending exactly where an uninterrupted run does; the damaged file (its header
// intact) is not kept as an older checkpoint.
TEST(KeepCheckpoints, ATruncatedNewestFallsBackToThePreviousNamingTheFile) {
  dpcore::testing::TempDir dir;
  const std::string ck = " --checkpoint " + dir.file("ck") + " --keep-checkpoints 2";
  ASSERT_EQ(run(kJob + " --steps 12 --save " + dir.file("straight.safetensors")).status, 0);
  ASSERT_EQ(run(kJob + " --steps 10 --checkpoint-every 2" + ck).status, 0);
  const std::string newest = dir.file("ck/checkpoint.safetensors");
  fs::resize_file(newest, fs::file_size(newest) / 2);

  CommandResult r = run(kJob + " --steps 12 --resume --save " + dir.file("resumed.safetensors") + ck);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("note: " + newest + ": "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(": falling back to an older checkpoint"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("resumed from " + dir.file("ck/checkpoint-00000008.safetensors") + " at step 8"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(slurp(dir.file("straight.safetensors")), slurp(dir.file("resumed.safetensors")));
  // Step 12 written; the truncated step 10 replaced, not kept.
  EXPECT_EQ(files_in(dir.file("ck")),
            (std::vector<std::string>{"checkpoint-00000008.safetensors", "checkpoint.safetensors"}));

  // With every file damaged, the error lists each.
  for (const std::string& name : files_in(dir.file("ck"))) fs::resize_file(dir.file("ck/" + name), 7);
  CommandResult none = run(kJob + " --steps 14 --resume" + ck);
  EXPECT_EQ(none.status, 1);
  EXPECT_NE(none.output.find("--resume: no usable checkpoint in " + dir.file("ck")), std::string::npos) << none.output;
  EXPECT_NE(none.output.find(dir.file("ck/checkpoint-00000008.safetensors") + ": not a safetensors file"),
            std::string::npos)
      << none.output;
}

}  // namespace
