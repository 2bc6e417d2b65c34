// --trace as a user meets it, whole processes: an `mpirun -np 2` job's trace is one file
// with both ranks on one clock (the allreduces of one bucket overlap across ranks), a run
// killed at any moment leaves either no trace or a whole one (and the next run clears the
// temporary file it may have left), and --nvtx works exactly in the builds with CUDA.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/wait.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cli_run.h"
#include "engine/backend.h"
#include "support/test_support.h"
#include "support/trace_checks.h"

namespace {

using dpcore::testing::CommandResult;
using dpcore::testing::TraceFile;
using dpcore::testing::TraceSpan;

const std::string kJob = dpcore::testing::job();

// The number N of "trace: N events of ... written to PATH", or -1.
long events_said(const std::string& output, const std::string& path) {
  const size_t at = output.find(" written to " + path);
  const size_t line = output.rfind("trace: ", at);
  if (at == std::string::npos || line == std::string::npos) return -1;
  return std::stol(output.substr(line + 7));
}

TEST(CliTrace, TwoMpiRanksWriteOneFileOnOneClock) {
#ifndef DPCORE_MPIEXEC
  GTEST_SKIP() << "built without MPI";
#else
  const std::string mpirun = dpcore::testing::mpirun(2);
  dpcore::testing::TempDir dir;
  const std::string path = dir.file("job.json");
  CommandResult r = dpcore::testing::run_command(
      kJob + " --backend mpi --mode ddp --steps 6 --bucket-mb 0.0001 --trace " + path, mpirun);
  ASSERT_EQ(r.status, 0) << r.output;
  TraceFile t = dpcore::testing::read_trace(path);
  EXPECT_EQ(long(t.spans.size()), events_said(r.output, path)) << r.output;
  EXPECT_EQ(t.processes, (std::map<int, std::string>{{0, "rank 0"}, {1, "rank 1"}}));
  for (int rank = 0; rank < 2; ++rank) {
    const std::string replica = "replica " + std::to_string(rank);
    const std::vector<TraceSpan> forward = dpcore::testing::spans_of(t, replica, "forward");
    ASSERT_FALSE(forward.empty()) << "rank " << rank << " recorded no forward";
    EXPECT_EQ(forward[0].pid, rank);
    std::vector<std::string> steps;
    for (const TraceSpan& s : t.spans) {
      if (s.pid == rank && s.lane == "main" && s.name.rfind("step ", 0) == 0) steps.push_back(s.name);
    }
    EXPECT_EQ(steps, (std::vector<std::string>{"step 3", "step 4", "step 5"})) << "rank " << rank;
  }
  // Each bucket's allreduce, step by step: rank 0's and rank 1's are one MPI collective,
  // which neither can finish before the other has begun; on one clock they overlap.
  const std::vector<TraceSpan> mine = dpcore::testing::spans_of(t, "comm 0", "allreduce bucket "),
                               theirs = dpcore::testing::spans_of(t, "comm 1", "allreduce bucket ");
  ASSERT_EQ(mine.size(), theirs.size());
  ASSERT_GE(mine.size(), 3u) << "one bucket or more in each of 3 steps";
  for (size_t i = 0; i < mine.size(); ++i) {
    EXPECT_EQ(mine[i].name, theirs[i].name);
    EXPECT_EQ(mine[i].pid, 0);
    EXPECT_EQ(theirs[i].pid, 1);
    EXPECT_LT(std::max(mine[i].begin, theirs[i].begin), std::min(mine[i].end, theirs[i].end))
        << mine[i].name << " #" << i << ": rank 0 [" << mine[i].begin << ", " << mine[i].end << "], rank 1 ["
        << theirs[i].begin << ", " << theirs[i].end << "] do not overlap";
  }
  std::ifstream in(path);
  EXPECT_EQ(nlohmann::json::parse(in)["otherData"]["clock_shift_us"], nlohmann::json({0.0, 0.0}))
      << "two ranks on one host share its clock";
#endif
}

// `dpcore ARGS` started in the background, its output discarded.
pid_t start_dpcore(const std::string& args) {
  const std::string command = std::string("exec ") + DPCORE_BIN + " " + args + " >/dev/null 2>&1";
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

void kill_and_reap(pid_t pid) {
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
}

// What a killed run may leave at `path`: nothing, or a whole trace; beside it only its
// temporary files ("<name>.tmp-" and six characters), which no viewer takes for a trace.
// Returns how many temporary files there were.
int expect_no_trace_or_a_whole_one(const std::string& dir, const std::string& path, const std::string& when) {
  int temps = 0;
  const std::string temp_prefix = std::filesystem::path(path).filename().string() + ".tmp-";
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename();
    if (entry.path() == path) continue;
    const bool temp = name.size() == temp_prefix.size() + 6 && name.rfind(temp_prefix, 0) == 0;
    EXPECT_TRUE(temp) << when << ": left " << name;
    temps += temp;
  }
  if (std::filesystem::exists(path)) {
    SCOPED_TRACE(when);
    const TraceFile t = dpcore::testing::read_trace(path);  // fails the test unless whole and valid
    EXPECT_FALSE(t.spans.empty()) << when;
  }
  return temps;
}

TEST(CliTrace, AKilledRunLeavesNoTraceOrAWholeOne) {
  dpcore::testing::TempDir dir;
  const std::string path = dir.file("t.json");
  // 30 traced steps of 3 replicas: about 2,000 spans, 300 KB to write.
  const std::string args = kJob + " --steps 40 --replicas 3 --mode ddp --trace " + path + " --trace-steps 30";

  // Killed the moment the first file appears in the directory: while the trace is being
  // written (a writer that wrote `path` in place would leave it cut short).
  const int watch = inotify_init1(IN_NONBLOCK);
  ASSERT_GE(watch, 0);
  ASSERT_GE(inotify_add_watch(watch, dir.path().c_str(), IN_CREATE | IN_MOVED_TO), 0);
  pid_t pid = start_dpcore(args);
  pollfd ready{watch, POLLIN, 0};
  const int seen = poll(&ready, 1, 30'000);
  kill_and_reap(pid);
  close(watch);
  ASSERT_EQ(seen, 1) << "the run wrote nothing within 30 s";
  const int left = expect_no_trace_or_a_whole_one(dir.path(), path, "killed at the first file");
  std::cout << "killed at the first file: " << (std::filesystem::exists(path) ? "a whole trace" : "no trace")
            << ", " << left << " temporary file(s)\n";

  // The next run writes the trace and clears what the killed one left.
  const auto begin = std::chrono::steady_clock::now();
  CommandResult whole = dpcore::testing::run_command(args);
  const auto took = std::chrono::steady_clock::now() - begin;
  ASSERT_EQ(whole.status, 0) << whole.output;
  EXPECT_EQ(expect_no_trace_or_a_whole_one(dir.path(), path, "after a whole run"), 0);
  ASSERT_TRUE(std::filesystem::exists(path));

  // Killed at points through a run: before, during and after the window and its writing.
  for (double fraction : {0.1, 0.3, 0.5, 0.7, 0.9}) {
    std::filesystem::remove(path);
    pid = start_dpcore(args);
    std::this_thread::sleep_for(took * fraction);
    kill_and_reap(pid);
    expect_no_trace_or_a_whole_one(dir.path(), path, "killed at " + std::to_string(fraction) + " of a run");
  }
}

// --nvtx: NVTX ranges come with the CUDA backend; a build without it says so and stops.
TEST(CliTrace, NvtxRunsWhereCudaIsBuiltAndIsRefusedElsewhere) {
  CommandResult r = dpcore::testing::run_command(kJob + " --steps 2 --nvtx");
  if (dpcore::find_backend(dpcore::Device::Type::CUDA)) {
    EXPECT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("epoch 1: train loss"), std::string::npos) << r.output;
  } else {
    EXPECT_NE(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("--nvtx: this build has no NVTX ranges"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("step "), std::string::npos) << "refused before training: " << r.output;
  }
}

}  // namespace
