// Running the `dpcore` command as a user does, for the whole-process tests of tests/cli/:
// its status and output, and the small job they train. DPCORE_BIN is the built command
// (tests/cli/CMakeLists.txt).
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

namespace dpcore::testing {

struct CommandResult {
  int status = -1;
  std::string output;  // stdout and stderr together
};

// `dpcore ARGS`, or with a non-empty `launcher` (e.g. "mpirun -np 2") `LAUNCHER dpcore ARGS`.
inline CommandResult run_command(const std::string& args, const std::string& launcher = "") {
  const std::string cmd = (launcher.empty() ? "" : launcher + " ") + DPCORE_BIN + " " + args + " 2>&1";
  CommandResult r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, pipe)) r.output.append(buf, n);
  const int status = pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// run_command without a launcher: what most tests run.
inline CommandResult run(const std::string& args) { return run_command(args); }

#ifdef DPCORE_MPIEXEC
// mpirun with `processes` ranks as tests/CMakeLists.txt's dpcore_add_mpi_test runs it: as
// root, more processes than cores, no kernel-assisted copies, one OpenMP thread each.
inline std::string mpirun(int processes) {
  return "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 "
         "OMPI_MCA_btl_vader_single_copy_mechanism=none OMP_NUM_THREADS=1 " DPCORE_MPIEXEC " -np " +
         std::to_string(processes);
}
#endif

// `launcher` (a run_command launcher, environment assignments first or none) ended after
// `seconds` (SIGTERM, then SIGKILL 10 s later): a command that hangs then exits with
// kTimedOut, so a test of what must not hang fails instead of blocking.
constexpr int kTimedOut = 124;  // timeout(1)'s status
inline std::string within_seconds(int seconds, const std::string& launcher) {
  return "timeout -k 10 " + std::to_string(seconds) + " env " + launcher;
}

inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// A small, fast job: 200 learnable synthetic 1x8x8 images in 4 classes (13 steps per epoch
// at batch 16, the last of 8 samples).
const std::string kSpec = "\"conv(4,3,p1) relu pool(2) flatten linear(4)\"";
const std::string kData = "synthetic:1,8,8,4,200";
inline std::string job(const std::string& model = kSpec, const std::string& data = kData,
                       const std::string& device = "cpu", int batch = 16) {
  return "train --data " + data + " --model " + model + " --batch " + std::to_string(batch) +
         " --threads 1 --progress 0 --device " + device;
}

}  // namespace dpcore::testing
