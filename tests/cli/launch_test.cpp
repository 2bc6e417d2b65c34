// `dpcore launch` (docs/fault-tolerance.md, "Restarts under mpirun"): its policy as pure
// functions (cli/launch_policy.h), then whole launches under mpirun of the tiny synthetic job
// of cli_run.h: a rank that exits (injected) or is SIGKILLed is restarted from the newest
// checkpoint and the run ends with the weights of one that never stopped; restarts that run
// out give the failure's status; SIGTERM stops without a restart; refusals name the problem.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "cli/cli_run.h"
#include "cli/launch_policy.h"
#include "cli/same_maths.h"
#include "kernels/error.h"
#include "support/test_support.h"

namespace {

using dpcore::cli::JobEnd;
using dpcore::cli::LaunchOptions;
using dpcore::cli::Next;
using dpcore::testing::CommandResult;
using dpcore::testing::run_command;
using Args = std::vector<std::string>;
namespace fs = std::filesystem;

LaunchOptions options(int nproc, const Args& command, int min_nproc = 0) {
  LaunchOptions o;
  o.nproc = nproc;
  o.min_nproc = min_nproc;
  o.command = command;
  return o;
}

const Args kTrain = {"train", "--backend", "mpi", "--checkpoint", "ck", "--checkpoint-every", "5"};

std::string refusal(const LaunchOptions& o, bool dir_has_checkpoints = false) {
  try {
    dpcore::cli::check_launch(o, dir_has_checkpoints);
  } catch (const dpcore::Error& e) {
    return e.what();
  }
  return "";
}

// ----------------------------------------------------------------- the policy

TEST(LaunchPolicy, RanksStayAtNUnlessMinNprocIsLower) {
  EXPECT_EQ(dpcore::cli::ranks_for(options(4, kTrain), 0), 4);
  EXPECT_EQ(dpcore::cli::ranks_for(options(4, kTrain), 3), 4);
  const LaunchOptions shrink = options(4, kTrain, 2);
  const std::vector<int> expected = {4, 3, 2, 2, 2};
  for (int restart = 0; restart < 5; ++restart) {
    EXPECT_EQ(dpcore::cli::ranks_for(shrink, restart), expected[size_t(restart)]) << "restart " << restart;
  }
}

TEST(LaunchPolicy, RestartsOnFailureUntilTheyAreUsedUpAndNeverAfterAnInterrupt) {
  const JobEnd ok{false, 0}, exited{false, 75}, killed{true, SIGKILL};
  EXPECT_EQ(dpcore::cli::decide(ok, 0, 0, 3), Next::Finished);
  EXPECT_EQ(dpcore::cli::decide(exited, 0, 0, 3), Next::Restart);
  EXPECT_EQ(dpcore::cli::decide(killed, 0, 2, 3), Next::Restart);
  EXPECT_EQ(dpcore::cli::decide(exited, 0, 3, 3), Next::GiveUp);
  EXPECT_EQ(dpcore::cli::decide(exited, 0, 0, 0), Next::GiveUp);
  EXPECT_EQ(dpcore::cli::decide(exited, SIGINT, 0, 3), Next::Interrupted);
  EXPECT_EQ(dpcore::cli::decide(killed, SIGTERM, 0, 3), Next::Interrupted);
  EXPECT_EQ(dpcore::cli::decide(ok, SIGINT, 0, 3), Next::Finished);  // it finished before the signal mattered
}

TEST(LaunchPolicy, DescribesHowTheJobEnded) {
  EXPECT_EQ(dpcore::cli::describe({false, 75}), "exit status 75");
  EXPECT_EQ(dpcore::cli::describe({true, SIGKILL}), "signal 9 (SIGKILL)");
  EXPECT_EQ(dpcore::cli::exit_status({false, 75}), 75);
  EXPECT_EQ(dpcore::cli::exit_status({true, SIGKILL}), 137);
  EXPECT_TRUE(dpcore::cli::succeeded({false, 0}));
  EXPECT_FALSE(dpcore::cli::succeeded({true, 0}));
}

TEST(LaunchPolicy, ARestartDropsInjectionsAndResumesWhenACheckpointExists) {
  const Args command = {"train", "--inject", "exit:replica=1,step=7", "--steps", "16", "--inject=nan:replica=0,step=2"};
  Args dropped;
  EXPECT_EQ(dpcore::cli::train_args_for(command, 0, true, dropped), command);  // the first attempt: as given
  EXPECT_TRUE(dropped.empty());
  EXPECT_EQ(dpcore::cli::train_args_for(command, 1, true, dropped), (Args{"train", "--steps", "16", "--resume"}));
  EXPECT_EQ(dropped, (Args{"--inject exit:replica=1,step=7", "--inject nan:replica=0,step=2"}));
  dropped.clear();
  // No checkpoint yet: from step 0 (no --resume). The user's own --resume is not doubled.
  EXPECT_EQ(dpcore::cli::train_args_for({"train", "--steps", "16"}, 2, false, dropped), (Args{"train", "--steps", "16"}));
  EXPECT_EQ(dpcore::cli::train_args_for({"train", "--resume"}, 1, true, dropped), (Args{"train", "--resume"}));
}

TEST(LaunchPolicy, TheMpirunCommandSplitsTheLauncherAndComesFromFlagEnvOrDefault) {
  EXPECT_EQ(dpcore::cli::mpirun_command("mpirun  --oversubscribe", 2, "/bin/dpcore", {"train", "--steps", "3"}),
            (Args{"mpirun", "--oversubscribe", "-np", "2", "/bin/dpcore", "train", "--steps", "3"}));
  EXPECT_EQ(dpcore::cli::mpirun_to_use("mpiexec", "mpirun -x A"), "mpiexec");
  EXPECT_EQ(dpcore::cli::mpirun_to_use("", "mpirun -x A"), "mpirun -x A");
  EXPECT_EQ(dpcore::cli::mpirun_to_use("", nullptr), "mpirun");
  EXPECT_EQ(dpcore::cli::mpirun_to_use("", ""), "mpirun");
  EXPECT_THROW(dpcore::cli::mpirun_command("  ", 2, "/bin/dpcore", {"train"}), dpcore::Error);
}

TEST(LaunchPolicy, RefusesWhatCannotWorkNamingTheProblem) {
  EXPECT_EQ(refusal(options(2, kTrain)), "");
  EXPECT_EQ(dpcore::cli::check_launch(options(2, kTrain), false), "ck");
  EXPECT_EQ(dpcore::cli::check_launch(options(2, {"train", "--backend=mpi", "--checkpoint=dir"}), false), "dir");
  EXPECT_NE(refusal(options(2, {"train", "--backend", "mpi"})).find("the train command has no --checkpoint DIR"),
            std::string::npos);
  EXPECT_NE(refusal(options(0, kTrain)).find("-n 0: the job needs at least 1 rank"), std::string::npos);
  EXPECT_NE(refusal(options(2, kTrain, 3)).find("--min-nproc 3: must be from 1 to -n 2"), std::string::npos);
  EXPECT_NE(refusal(options(2, {"eval", "--checkpoint", "ck"})).find("-- train FLAGS...`, not 'eval'"),
            std::string::npos);
  EXPECT_NE(refusal(options(2, {})).find("(nothing follows)"), std::string::npos);
  EXPECT_NE(refusal(options(2, {"train", "--checkpoint", "ck"})).find("-n 2 needs --backend mpi (or nccl)"),
            std::string::npos);
  EXPECT_NE(refusal(options(2, {"train", "--backend", "local", "--checkpoint", "ck"})).find("not --backend local"),
            std::string::npos);
  EXPECT_EQ(refusal(options(1, {"train", "--checkpoint", "ck"})), "");  // one process: any backend
  EXPECT_NE(refusal(options(2, kTrain), true).find("already holds checkpoints of an earlier run"), std::string::npos);
  Args resuming = kTrain;
  resuming.push_back("--resume");
  EXPECT_EQ(refusal(options(2, resuming), true), "");
  // Weights per rank cannot follow a restart on fewer ranks (which rank died is not known:
  // the survivors are numbered anew), so every such restart would fail on its --split.
  Args weighted = kTrain;
  weighted.insert(weighted.end(), {"--split", "weights:3,1,1"});
  EXPECT_NE(refusal(options(3, weighted, 2)).find("--min-nproc 2 with --split weights:3,1,1"), std::string::npos)
      << refusal(options(3, weighted, 2));
  EXPECT_EQ(refusal(options(3, weighted)), "");     // never fewer ranks: the weights hold
  EXPECT_EQ(refusal(options(3, weighted, 3)), "");
  Args adaptive = kTrain;
  adaptive.insert(adaptive.end(), {"--split=adaptive"});
  EXPECT_EQ(refusal(options(3, adaptive, 2)), "");  // even and adaptive work on any count
}

// ----------------------------------------------------------------- whole launches

#ifdef DPCORE_MPIEXEC
// As tests/CMakeLists.txt's dpcore_add_mpi_test: root, more processes than cores, no CMA.
const std::string kMpiEnv =
    "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 "
    "OMPI_MCA_btl_vader_single_copy_mechanism=none OMP_NUM_THREADS=1";
const std::string kLaunch = "launch --mpirun " DPCORE_MPIEXEC;
#endif

// 16 steps cross the end of epoch 1 (13 steps) and its short last batch.
const std::string kJob = dpcore::testing::job() + " --backend mpi --mode ddp --steps 16";

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// `env dpcore launch ...` with the MPI environment.
CommandResult launch(const std::string& args, const std::string& env = "") {
#ifdef DPCORE_MPIEXEC
  return run_command(kLaunch + " " + args, kMpiEnv + " " + env);
#else
  (void)args, (void)env;
  return {};
#endif
}

#ifdef DPCORE_MPIEXEC
#define REQUIRE_MPI()
#else
#define REQUIRE_MPI() GTEST_SKIP() << "built without MPI: dpcore launch runs mpirun"
#endif

// The test, with an injected exit: rank 1 dies at step 7 (status 75; the newest
// checkpoint is step 5's), the launcher restarts 2 ranks from step 5 without the injection,
// and the job ends with the weights of one replica that never stopped.
TEST(Launch, ARankThatExitsIsRestartedFromTheNewestCheckpointWithTheSameMaths) {
  REQUIRE_MPI();
  dpcore::testing::TempDir dir;
  ASSERT_EQ(run_command(dpcore::testing::job() + " --steps 16 --save " + dir.file("straight.safetensors")).status, 0);
  CommandResult r = launch("-n 2 -- " + kJob + " --checkpoint-every 5 --inject exit:replica=1,step=7 --checkpoint " +
                           dir.file("ck") + " --save " + dir.file("launched.safetensors"));
  ASSERT_EQ(r.status, 0) << r.output;
  for (const std::string& line : std::vector<std::string>{"injected exit at step 7", "dpcore launch: attempt 1 failed: mpirun ended with exit status 75",
        "dpcore launch: restart 1 of 3, with 2 ranks, resuming from step 5 (" + dir.file("ck/checkpoint.safetensors"),
        "dpcore launch: restart 1 leaves out --inject exit:replica=1,step=7",
        "dpcore launch: attempt 2 of at most 4: ", "resumed from " + dir.file("ck/checkpoint.safetensors") + " at step 5",
        "dpcore launch: the job finished after 1 restart"}) {
    EXPECT_TRUE(contains(r.output, line)) << line << "\n" << r.output;
  }
  EXPECT_TRUE(contains(r.output, "--resume\n")) << "the restart's command ends with the added --resume\n" << r.output;
  dpcore::testing::expect_same_maths(dir.file("straight.safetensors"), dir.file("launched.safetensors"));
}

#if defined(DPCORE_MPIEXEC) && defined(__linux__)
// The pids of the processes whose environment holds `marker` and `entry` (e.g.
// "OMPI_COMM_WORLD_RANK=1"): a rank of this test's job, and no other process.
std::vector<pid_t> processes_with(const std::string& marker, const std::string& entry) {
  std::vector<pid_t> pids;
  std::error_code ec;
  for (fs::directory_iterator it("/proc", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream f(it->path() / "environ", std::ios::binary);
    std::string env((std::istreambuf_iterator<char>(f)), {});
    env.insert(env.begin(), '\0');
    if (contains(env, std::string(1, '\0') + marker + '\0') && contains(env, std::string(1, '\0') + entry + '\0')) {
      pids.push_back(pid_t(std::stol(name)));
    }
  }
  return pids;
}

// Waits (up to 60 s) until `path` exists; false if it never did.
bool wait_for_file(const std::string& path) {
  for (int i = 0; i < 30000 && !fs::exists(path); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  return fs::exists(path);
}
#endif

// A slow job (rank 1 takes 100 times its compute from step 1: about 60 steps of several ms
// each) that the test interrupts once its first checkpoint (step 5) is on disk.
const std::string kSlowJob = dpcore::testing::job() +
                             " --backend mpi --mode ddp --steps 60 --checkpoint-every 5 --inject slow:replica=1,factor=100";

// The test with a real kill: rank 1 is SIGKILLed after the first checkpoint; mpirun
// ends the job, and the launcher restarts it from the newest checkpoint (the slow injection
// left out), ending with the weights of an uninterrupted run.
TEST(Launch, ARankKilledWithSigkillIsRestartedAndTheRunEndsWithTheSameMaths) {
#if !defined(DPCORE_MPIEXEC) || !defined(__linux__)
  GTEST_SKIP() << "needs MPI, and Linux's /proc to find the rank to kill";
#else
  dpcore::testing::TempDir dir;
  ASSERT_EQ(run_command(dpcore::testing::job() + " --steps 60 --save " + dir.file("straight.safetensors")).status, 0);
  const std::string marker = "DPCORE_LAUNCH_TEST=" + dir.path();
  auto launched = std::async(std::launch::async, [&] {
    return launch("-n 2 -- " + kSlowJob + " --checkpoint " + dir.file("ck") + " --save " + dir.file("launched.safetensors"),
                  marker);
  });
  ASSERT_TRUE(wait_for_file(dir.file("ck/checkpoint.safetensors")));
  std::vector<pid_t> rank1 = processes_with(marker, "OMPI_COMM_WORLD_RANK=1");
  ASSERT_EQ(rank1.size(), 1u);
  ASSERT_EQ(kill(rank1[0], SIGKILL), 0);
  CommandResult r = launched.get();
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "dpcore launch: attempt 1 failed: mpirun ended with")) << r.output;
  EXPECT_TRUE(contains(r.output, "leaves out --inject slow:replica=1,factor=100")) << r.output;
  EXPECT_TRUE(contains(r.output, "dpcore launch: restart 1 of 3, with 2 ranks, resuming from step ")) << r.output;
  EXPECT_TRUE(contains(r.output, "dpcore launch: the job finished after 1 restart")) << r.output;
  dpcore::testing::expect_same_maths(dir.file("straight.safetensors"), dir.file("launched.safetensors"));
#endif
}

// A stand-in for mpirun, for the launcher's own behaviour without MPI's start-up time: a
// script that appends its arguments and $DPCORE_INJECT to DIR/commands, writes the
// launcher's pid (its parent) to DIR/launcher.pid and its own to DIR/job.pid, then runs `body`.
std::string fake_mpirun(const dpcore::testing::TempDir& dir, const std::string& body) {
  const std::string path = dir.file("fake-mpirun");
  std::ofstream(path) << "#!/bin/sh\necho \"$@ inject=$DPCORE_INJECT\" >> " << dir.file("commands") << "\necho $PPID > "
                      << dir.file("launcher.pid") << "\necho $$ > " << dir.file("job.pid") << "\n" << body << "\n";
  fs::permissions(path, fs::perms::owner_all);
  return path;
}

std::vector<std::string> lines_of(const std::string& path) {
  std::vector<std::string> lines;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) lines.push_back(line);
  return lines;
}

// A job that fails every time is restarted --max-restarts times, from step 0 as no
// checkpoint was written, with one rank fewer each time down to --min-nproc; the launcher
// then ends with the failure's status.
TEST(Launch, UsedUpRestartsEndWithTheFailuresStatusAndSaySo) {
  dpcore::testing::TempDir dir;
  const std::string mpirun = fake_mpirun(dir, "exit 7");
  CommandResult r = run_command("launch -n 3 --min-nproc 2 --max-restarts 2 --mpirun " + mpirun +
                                " -- train --backend mpi --checkpoint " + dir.file("ck"));
  EXPECT_EQ(r.status, 7) << r.output;
  for (const std::string& line : std::vector<std::string>{
           "dpcore launch: attempt 1 failed: mpirun ended with exit status 7 (",
           "dpcore launch: restart 1 of 2, with 2 ranks (one fewer, --min-nproc 2), starting again from step 0: "
           "no checkpoint in " + dir.file("ck") + " yet",
           "dpcore launch: restart 2 of 2, with 2 ranks, starting again",
           "dpcore launch: attempt 3 failed: mpirun ended with exit status 7; giving up, --max-restarts 2 used up"}) {
    EXPECT_TRUE(contains(r.output, line)) << line << "\n" << r.output;
  }
  const std::vector<std::string> commands = lines_of(dir.file("commands"));
  ASSERT_EQ(commands.size(), 3u) << r.output;
  const std::vector<std::string> ranks = {"-np 3 ", "-np 2 ", "-np 2 "};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(commands[i].rfind(ranks[i], 0), 0u) << commands[i];
    EXPECT_FALSE(contains(commands[i], "--resume")) << "resumed without a checkpoint: " << commands[i];
  }
}

// A restart leaves out --inject and DPCORE_INJECT, saying so: the fault would fire again
// when the resumed run reaches its step. The first attempt gets them as given.
TEST(Launch, ARestartLeavesOutInjectedFaults) {
  dpcore::testing::TempDir dir;
  const std::string mpirun =
      fake_mpirun(dir, "if [ -f " + dir.file("failed") + " ]; then exit 0; fi; touch " + dir.file("failed") + "; exit 75");
  CommandResult r = run_command("launch -n 2 --mpirun " + mpirun +
                                    " -- train --backend mpi --inject exit:replica=1,step=3 --checkpoint " + dir.file("ck"),
                                "DPCORE_INJECT='nan:replica=0,step=2'");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "dpcore launch: restart 1 leaves out --inject exit:replica=1,step=3 (injected faults "
                                 "happen on the first attempt only")) << r.output;
  EXPECT_TRUE(contains(r.output, "dpcore launch: restart 1 leaves out DPCORE_INJECT=nan:replica=0,step=2")) << r.output;
  EXPECT_TRUE(contains(r.output, "dpcore launch: the job finished after 1 restart")) << r.output;
  const std::vector<std::string> commands = lines_of(dir.file("commands"));
  ASSERT_EQ(commands.size(), 2u) << r.output;
  EXPECT_TRUE(contains(commands[0], "--inject exit:replica=1,step=3")) << commands[0];
  EXPECT_TRUE(contains(commands[0], "inject=nan:replica=0,step=2")) << commands[0];
  EXPECT_FALSE(contains(commands[1], "exit:replica")) << commands[1];
  EXPECT_TRUE(contains(commands[1], " inject=")) << commands[1];
  EXPECT_FALSE(contains(commands[1], "inject=nan")) << commands[1];
}

// The pid in `path` once the fake mpirun has written it (waiting up to 30 s), else 0.
pid_t pid_in(const std::string& path) {
  const auto start = std::chrono::steady_clock::now();
  std::string pid;
  while ((pid = dpcore::testing::slurp(path)).empty() && std::chrono::steady_clock::now() - start < std::chrono::seconds(30)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return pid.empty() ? 0 : pid_t(std::stol(pid));
}

// SIGTERM to the launcher is forwarded to the job, which ends; it is not restarted, and the
// launcher's status is 128 + 15 as a shell's would be.
TEST(Launch, SigtermToTheLauncherStopsTheJobWithoutARestart) {
  dpcore::testing::TempDir dir;
  const std::string mpirun = fake_mpirun(dir, "exec sleep 60");
  auto launched = std::async(std::launch::async, [&] {
    return run_command("launch -n 2 --mpirun " + mpirun + " -- train --backend mpi --checkpoint " + dir.file("ck"));
  });
  const auto start = std::chrono::steady_clock::now();
  const pid_t launcher = pid_in(dir.file("launcher.pid"));
  ASSERT_NE(launcher, 0);
  ASSERT_EQ(kill(launcher, SIGTERM), 0);
  CommandResult r = launched.get();
  EXPECT_EQ(r.status, 128 + SIGTERM) << r.output;
  EXPECT_TRUE(contains(r.output, "dpcore launch: interrupted by SIGTERM: the job ended with signal 15 (SIGTERM) and is "
                                 "not restarted")) << r.output;
  EXPECT_FALSE(contains(r.output, "restart 1")) << r.output;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30)) << "the job was not stopped";
}

#ifdef __linux__
// Whether `pid` is gone (or a zombie that nobody reaped: it runs no more).
bool ended(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(f)), {});
  const size_t paren = stat.rfind(')');
  return stat.empty() || (paren != std::string::npos && stat.compare(paren + 1, 3, " Z ") == 0);
}
#endif

// A launcher killed outright (SIGKILL) can forward nothing: the job gets SIGTERM from the
// kernel (PR_SET_PDEATHSIG) and ends, rather than training on unwatched.
TEST(Launch, ALauncherKilledOutrightTakesTheJobWithIt) {
#ifndef __linux__
  GTEST_SKIP() << "PR_SET_PDEATHSIG is Linux's";
#else
  dpcore::testing::TempDir dir;
  // (Its output away from the test's pipe, which would otherwise stay open while it lives.)
  const std::string mpirun = fake_mpirun(dir, "exec sleep 60 >/dev/null 2>&1");
  auto launched = std::async(std::launch::async, [&] {
    return run_command("launch -n 2 --mpirun " + mpirun + " -- train --backend mpi --checkpoint " + dir.file("ck"));
  });
  const pid_t launcher = pid_in(dir.file("launcher.pid")), job = pid_in(dir.file("job.pid"));
  ASSERT_NE(launcher, 0);
  ASSERT_NE(job, 0);
  ASSERT_FALSE(ended(job));
  ASSERT_EQ(kill(launcher, SIGKILL), 0);
  const auto start = std::chrono::steady_clock::now();
  while (!ended(job) && std::chrono::steady_clock::now() - start < std::chrono::seconds(10)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(ended(job)) << "the job (pid " << job << ") outlived its launcher";
  if (!ended(job)) kill(job, SIGKILL);
  launched.get();
#endif
}

// Refused before anything runs, through the command: no --checkpoint, a bad -n, no --,
// nothing to run, an mpirun that does not exist.
TEST(Launch, RefusesWithoutCheckpointOrWithABadNp) {
  CommandResult no_checkpoint = run_command("launch -n 2 -- train --backend mpi --steps 3");
  EXPECT_EQ(no_checkpoint.status, 1);
  EXPECT_TRUE(contains(no_checkpoint.output, "dpcore: error: launch: the train command has no --checkpoint DIR"))
      << no_checkpoint.output;
  EXPECT_FALSE(contains(no_checkpoint.output, "attempt 1")) << no_checkpoint.output;
  for (const char* np : {"0", "-1", "two"}) {
    CommandResult bad = run_command(std::string("launch -n ") + np + " -- train --backend mpi --checkpoint ck");
    EXPECT_NE(bad.status, 0) << np;
    EXPECT_TRUE(contains(bad.output, std::string("--np ") + np + ": must be a whole number of at least 1"))
        << bad.output;
  }
  CommandResult no_dashes = run_command("launch -n 2 train --checkpoint ck");
  EXPECT_NE(no_dashes.status, 0);
  EXPECT_TRUE(contains(no_dashes.output, "not expected: --checkpoint (put -- before the command: dpcore launch -n N -- "
                                         "train FLAGS...)")) << no_dashes.output;
  CommandResult no_command = run_command("launch -n 2");
  EXPECT_NE(no_command.status, 0);
  EXPECT_TRUE(contains(no_command.output, "command is required")) << no_command.output;
  CommandResult no_mpirun = run_command("launch -n 1 --mpirun /nonexistent/mpirun -- train --checkpoint " +
                                        std::string("/nonexistent/ck"));
  EXPECT_EQ(no_mpirun.status, 1);
  EXPECT_TRUE(contains(no_mpirun.output, "cannot run '/nonexistent/mpirun': No such file or directory"))
      << no_mpirun.output;
}

}  // namespace
