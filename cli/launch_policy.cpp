#include "cli/launch_policy.h"

#include <signal.h>

#include <algorithm>
#include <sstream>

#include "kernels/error.h"

namespace dpcore::cli {

std::string flag_value(const std::vector<std::string>& args, const std::string& flag) {
  std::string value;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == flag && i + 1 < args.size()) value = args[i + 1];
    if (args[i].rfind(flag + "=", 0) == 0) value = args[i].substr(flag.size() + 1);
  }
  return value;
}

bool has_flag(const std::vector<std::string>& args, const std::string& flag) {
  return std::any_of(args.begin(), args.end(),
                     [&](const std::string& a) { return a == flag || a.rfind(flag + "=", 0) == 0; });
}

std::string check_launch(const LaunchOptions& o, bool dir_has_checkpoints) {
  DPCORE_CHECK(o.nproc >= 1, "launch: -n ", o.nproc, ": the job needs at least 1 rank");
  DPCORE_CHECK(o.max_restarts >= 0, "launch: --max-restarts ", o.max_restarts, ": must be 0 or more");
  DPCORE_CHECK(o.min_nproc >= 0 && o.min_nproc <= o.nproc, "launch: --min-nproc ", o.min_nproc,
               ": must be from 1 to -n ", o.nproc, " (the fewest ranks a restart may use)");
  DPCORE_CHECK(!o.command.empty() && o.command[0] == "train",
               "launch: expected the command to run after --, as `dpcore launch -n N -- train FLAGS...`",
               o.command.empty() ? std::string(" (nothing follows)") : ", not '" + o.command[0] + "'");
  const std::vector<std::string> args(o.command.begin() + 1, o.command.end());
  const std::string dir = flag_value(args, "--checkpoint");
  DPCORE_CHECK(!dir.empty(), "launch: the train command has no --checkpoint DIR: a restart resumes from the newest "
               "checkpoint there, so without one every restart would start again from step 0. Add --checkpoint DIR "
               "(and --checkpoint-every STEPS, to lose at most that many steps)");
  const std::string split = flag_value(args, "--split");
  DPCORE_CHECK(o.min_nproc == 0 || o.min_nproc == o.nproc || split.rfind("weights:", 0) != 0, "launch: --min-nproc ",
               o.min_nproc, " with --split ", split, ": a restart on fewer ranks cannot tell whose weights to drop (the "
               "surviving ranks are numbered anew), so it would fail on --split; use --split even or adaptive, or "
               "--min-nproc ", o.nproc, " (never fewer ranks)");
  const std::string backend = flag_value(args, "--backend");
  DPCORE_CHECK(o.nproc == 1 || backend == "mpi" || backend == "nccl", "launch: -n ", o.nproc,
               " needs --backend mpi (or nccl) in the train command",
               backend.empty() ? std::string("") : ", not --backend " + backend,
               ": otherwise each of the ", o.nproc, " processes would train alone");
  DPCORE_CHECK(!dir_has_checkpoints || has_flag(args, "--resume"), "launch: --checkpoint ", dir,
               " already holds checkpoints of an earlier run, and the train command has no --resume: a restart "
               "would continue that run. Add --resume to continue it, or use an empty DIR");
  return dir;
}

int ranks_for(const LaunchOptions& o, int restart) {
  const int fewest = o.min_nproc > 0 ? o.min_nproc : o.nproc;
  return std::max(fewest, o.nproc - restart);
}

std::vector<std::string> train_args_for(const std::vector<std::string>& command, int restart, bool have_checkpoint,
                                        std::vector<std::string>& dropped) {
  if (restart == 0) return command;
  std::vector<std::string> args;
  for (size_t i = 0; i < command.size(); ++i) {
    if (command[i] == "--inject" && i + 1 < command.size()) {
      dropped.push_back("--inject " + command[++i]);
    } else if (command[i].rfind("--inject=", 0) == 0) {
      dropped.push_back("--inject " + command[i].substr(9));
    } else {
      args.push_back(command[i]);
    }
  }
  if (have_checkpoint && !has_flag(args, "--resume")) args.push_back("--resume");
  return args;
}

std::vector<std::string> mpirun_command(const std::string& mpirun, int ranks, const std::string& self,
                                        const std::vector<std::string>& train_args) {
  std::vector<std::string> argv;
  std::istringstream words(mpirun);
  for (std::string w; words >> w;) argv.push_back(w);
  DPCORE_CHECK(!argv.empty(), "launch: --mpirun is empty: give the command that starts MPI jobs, e.g. mpirun");
  argv.insert(argv.end(), {"-np", std::to_string(ranks), self});
  argv.insert(argv.end(), train_args.begin(), train_args.end());
  return argv;
}

std::string mpirun_to_use(const std::string& flag, const char* env) {
  if (!flag.empty()) return flag;
  if (env && *env) return env;
  return "mpirun";
}

bool succeeded(const JobEnd& end) { return !end.signaled && end.code == 0; }

int exit_status(const JobEnd& end) { return end.signaled ? 128 + end.code : end.code; }

std::string signal_name(int signal) {
  switch (signal) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGKILL: return "SIGKILL";
    case SIGSEGV: return "SIGSEGV";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGHUP: return "SIGHUP";
    default: return "signal " + std::to_string(signal);
  }
}

std::string describe(const JobEnd& end) {
  if (!end.signaled) return "exit status " + std::to_string(end.code);
  return "signal " + std::to_string(end.code) + " (" + signal_name(end.code) + ")";
}

Next decide(const JobEnd& end, int interrupt_signal, int restarts_done, int max_restarts) {
  if (succeeded(end)) return Next::Finished;
  // Ctrl-C ends the ranks with a failure status, which is the user's wish, not a failure
  // to recover from.
  if (interrupt_signal != 0) return Next::Interrupted;
  return restarts_done < max_restarts ? Next::Restart : Next::GiveUp;
}

}  // namespace dpcore::cli
