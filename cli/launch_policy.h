// `dpcore launch`'s decisions, as pure functions of what happened (no processes here, so
// tests/cli/launch_test.cpp can try every case): whether the command may run at all, how
// many ranks an attempt gets, which flags a restart adds or drops, whether a job that ended
// is restarted, and how its end is described. cli/launch.cpp runs the processes.
//
// The policy (docs/fault-tolerance.md, "Restarts under mpirun"):
//   - attempt 1 runs `MPIRUN -np N dpcore train ARGS` as given;
//   - when it fails (a non-zero exit status from mpirun, which ends the whole job when one
//     rank dies), the job is run again, at most --max-restarts times, resuming with
//     --resume from the newest valid checkpoint in --checkpoint DIR (from step 0 when none
//     was written yet);
//   - restart k uses max(--min-nproc, N - k) ranks: N each time by default (--min-nproc N),
//     one fewer per restart down to --min-nproc when it is lower. The checkpoint holds the
//     global data position, so a resume on fewer ranks keeps the maths (elastic resume);
//   - restarts drop --inject and DPCORE_INJECT: an injected fault would fire again when the
//     resumed run reaches its step, and each restart would fail the same way;
//   - a job stopped by SIGINT or SIGTERM sent to the launcher is not restarted.
#pragma once

#include <string>
#include <vector>

namespace dpcore::cli {

struct LaunchOptions {
  int nproc = 0;                        // -n: ranks of the first attempt
  int max_restarts = 3;                 // --max-restarts
  int min_nproc = 0;                    // --min-nproc; 0 means nproc (never shrink)
  std::string mpirun;                   // --mpirun; empty: $DPCORE_MPIRUN, else "mpirun"
  std::vector<std::string> command;     // after --: "train" and its flags
};

// The checkpoint DIR of the train command; fails naming the problem when the launch cannot
// work: a bad -n, --min-nproc or --max-restarts, a command that is not `train`, no
// --checkpoint (there would be nothing to restart from), no --backend mpi or nccl (each
// rank would train alone), or a DIR that already holds checkpoints while the command has
// no --resume (a restart would silently continue that earlier run).
// `dir_has_checkpoints` says whether DIR holds checkpoint files now.
std::string check_launch(const LaunchOptions& options, bool dir_has_checkpoints);

// The value of `--flag VALUE` or `--flag=VALUE` in `args` (the last one given), else "".
std::string flag_value(const std::vector<std::string>& args, const std::string& flag);
bool has_flag(const std::vector<std::string>& args, const std::string& flag);

// Ranks of attempt `restart` (0: the first attempt, k: the k-th restart).
int ranks_for(const LaunchOptions& options, int restart);

// The train flags of attempt `restart`: the first as given; a restart without --inject
// (each dropped one is appended to `dropped`, as "--inject SPEC") and with --resume added
// when `have_checkpoint` and the command has none.
std::vector<std::string> train_args_for(const std::vector<std::string>& command, int restart, bool have_checkpoint,
                                        std::vector<std::string>& dropped);

// The mpirun command line: the words of `mpirun` (split at spaces; no quoting), -np, the
// dpcore binary `self`, then `train_args`.
std::vector<std::string> mpirun_command(const std::string& mpirun, int ranks, const std::string& self,
                                        const std::vector<std::string>& train_args);

// The --mpirun to use: the flag, else `env` ($DPCORE_MPIRUN, null when unset), else "mpirun".
std::string mpirun_to_use(const std::string& flag, const char* env);

// How a job ended, from waitpid: an exit status, or the signal that killed mpirun.
struct JobEnd {
  bool signaled = false;
  int code = 0;  // the exit status, or the signal number
};
bool succeeded(const JobEnd& end);
int exit_status(const JobEnd& end);       // the status, or 128 + the signal as a shell says
std::string describe(const JobEnd& end);  // "exit status 75", "signal 9 (SIGKILL)"

enum class Next {
  Finished,     // the job succeeded
  Restart,      // it failed, and a restart is left
  GiveUp,       // it failed, and --max-restarts are used up
  Interrupted,  // the launcher was asked to stop (SIGINT, SIGTERM): no restart
};
Next decide(const JobEnd& end, int interrupt_signal, int restarts_done, int max_restarts);

std::string signal_name(int signal);  // "SIGKILL", or "signal 42"

}  // namespace dpcore::cli
