// A failing rank ends an mpirun job, it never hangs it (docs/fault-tolerance.md): a rank
// whose run stops with an error calls MPI_Abort, which ends every rank, instead of
// finalising MPI while the others wait for it in their next collective; and a rank that
// stalls is noticed by the others' --replica-timeout, which aborts the job naming the rank
// that waited and the collective. Every run is bounded (within_seconds): a hang fails.
#include <gtest/gtest.h>

#include <string>

#include "cli/cli_run.h"
#include "support/test_support.h"

namespace {

#ifdef DPCORE_MPIEXEC
using dpcore::testing::CommandResult;
using dpcore::testing::kTimedOut;
using dpcore::testing::run_command;
using dpcore::testing::within_seconds;

// The tiny job takes about a second; a minute means it hung.
constexpr int kLimitSeconds = 60;
const std::string kJob = dpcore::testing::job() + " --backend mpi --mode ddp --steps 6";

CommandResult mpirun_bounded(int processes, const std::string& args) {
  return run_command(args, within_seconds(kLimitSeconds, dpcore::testing::mpirun(processes)));
}

// The job ended by itself, failing, saying `says`.
void expect_ended_failing(const CommandResult& r, const std::string& says) {
  EXPECT_NE(r.status, kTimedOut) << "the job hung and was killed after " << kLimitSeconds << " s:\n" << r.output;
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find(says), std::string::npos) << r.output;
}
#endif

// Rank 0 alone writes the metrics, so it alone fails while rank 1 waits in the first
// step's allreduce. In one process (MPI initialised by dpcore alone, without mpirun) the
// same error ends the run as usual, MPI finalised, no MPI_Abort.
TEST(CliMpiFailure, AnErrorOnRankZeroAloneEndsTheJob) {
#ifndef DPCORE_MPIEXEC
  GTEST_SKIP() << "built without MPI";
#else
  const std::string args = kJob + " --metrics /nonexistent-dir/m.jsonl";
  expect_ended_failing(mpirun_bounded(2, args),
                       "dpcore: error: rank 0 aborts the MPI job: --metrics: cannot open /nonexistent-dir/m.jsonl");
  CommandResult alone = run_command(args, within_seconds(kLimitSeconds, ""));
  EXPECT_EQ(alone.status, 1) << alone.output;
  EXPECT_NE(alone.output.find("dpcore: error: --metrics: cannot open /nonexistent-dir/m.jsonl"), std::string::npos)
      << alone.output;
  EXPECT_EQ(alone.output.find("aborts the MPI job"), std::string::npos) << alone.output;
#endif
}

// Rank 1 alone (mpirun's MPMD form gives it other flags) fails after joining the job,
// while rank 0, the one that prints, trains on into its first allreduce.
TEST(CliMpiFailure, AnErrorOnRankOneAloneEndsTheJob) {
#ifndef DPCORE_MPIEXEC
  GTEST_SKIP() << "built without MPI";
#else
  const std::string rank0 = within_seconds(kLimitSeconds, dpcore::testing::mpirun(1)) + " " + DPCORE_BIN + " " + kJob;
  CommandResult r = run_command(kJob + " --resume --checkpoint /nonexistent-dir", rank0 + " : -np 1");
  expect_ended_failing(r, "dpcore: error: rank 1 aborts the MPI job: --resume: no checkpoint in /nonexistent-dir");
#endif
}

// Rank 1 stops before its compute of step 2 and never comes back; rank 0's allreduce of
// that step gives up after --replica-timeout and ends the job.
TEST(CliMpiFailure, ARankThatHangsEndsTheJobAfterTheReplicaTimeout) {
#ifndef DPCORE_MPIEXEC
  GTEST_SKIP() << "built without MPI";
#else
  CommandResult r = mpirun_bounded(2, kJob + " --inject hang:replica=1,step=2 --replica-timeout 2");
  expect_ended_failing(r,
                       "dpcore: error: rank 0 aborts the MPI job: mpi allreduce: not complete after 2 s (the replica "
                       "timeout, --replica-timeout): a rank died or hangs");
#endif
}

}  // namespace
