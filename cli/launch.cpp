#include "cli/launch.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "kernels/error.h"
#include "train/checkpoints/checkpoint.h"
#include "train/checkpoints/checkpoint_files.h"

namespace dpcore::cli {
namespace {

// The signal that asked the launcher to stop (0: none), and the running mpirun's pid
// (0: none), shared with the handler.
volatile sig_atomic_t g_interrupt = 0;
volatile sig_atomic_t g_child = 0;

extern "C" void forward_interrupt(int signal) {
  g_interrupt = signal;
  if (g_child > 0) kill(pid_t(g_child), signal);  // mpirun ends the ranks when it gets one
}

// SIGINT and SIGTERM go to forward_interrupt while the launcher runs. On a terminal,
// Ctrl-C reaches mpirun and the ranks directly too (one process group); `kill PID` of the
// launcher reaches only the launcher, hence the forwarding.
class ForwardInterrupts {
 public:
  ForwardInterrupts() {
    struct sigaction action {};
    action.sa_handler = forward_interrupt;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, &old_int_);
    sigaction(SIGTERM, &action, &old_term_);
  }
  ~ForwardInterrupts() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }

 private:
  struct sigaction old_int_ {}, old_term_ {};
};

std::string self_path(const std::string& argv0) {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, size_t(n)) : argv0;
}

// The command as a shell would take it back: a word with spaces, quotes or other special
// characters in single quotes, so that a logged attempt can be pasted into a shell.
std::string joined(const std::vector<std::string>& words) {
  std::string s;
  for (const std::string& w : words) {
    const bool plain = !w.empty() && w.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                         "0123456789_./:=,+-@%") == std::string::npos;
    std::string quoted = "'";
    for (char c : w) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    s += (s.empty() ? "" : " ") + (plain ? w : quoted + "'");
  }
  return s;
}

// Runs argv (fork + exec, PATH searched) and waits for it to end.
JobEnd run_job(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // The child reports a failed exec through this pipe; a successful exec closes it.
  int exec_error[2];
  DPCORE_CHECK(pipe2(exec_error, O_CLOEXEC) == 0, "launch: pipe: ", std::strerror(errno));
  // Interrupts are held from fork until g_child is set, so that none falls between the two.
  sigset_t interrupts, before;
  sigemptyset(&interrupts);
  sigaddset(&interrupts, SIGINT);
  sigaddset(&interrupts, SIGTERM);
  sigprocmask(SIG_BLOCK, &interrupts, &before);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    sigprocmask(SIG_SETMASK, &before, nullptr);
#ifdef __linux__
    // A launcher killed outright (SIGKILL) cannot forward anything: mpirun then gets
    // SIGTERM from the kernel and ends the job, rather than training on unwatched.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);
#endif
    execvp(args[0], args.data());
    const int e = errno;
    (void)!write(exec_error[1], &e, sizeof e);
    _exit(127);
  }
  const int fork_errno = errno;
  if (pid > 0) {
    g_child = pid;
    // An interrupt that came after the launcher's last look, before the fork, had no child
    // to go to.
    if (g_interrupt != 0) kill(pid, g_interrupt);
  }
  sigprocmask(SIG_SETMASK, &before, nullptr);
  close(exec_error[1]);
  if (pid < 0) {
    close(exec_error[0]);
    fail("launch: fork: ", std::strerror(fork_errno));
  }
  int exec_errno = 0;
  ssize_t n;
  while ((n = read(exec_error[0], &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR) {
  }
  close(exec_error[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    DPCORE_CHECK(errno == EINTR, "launch: waitpid: ", std::strerror(errno));
  }
  g_child = 0;
  DPCORE_CHECK(n != sizeof exec_errno, "launch: cannot run '", argv[0], "': ", std::strerror(exec_errno),
               " (give the MPI launcher with --mpirun CMD or the environment variable DPCORE_MPIRUN)");
  if (WIFSIGNALED(status)) return {true, WTERMSIG(status)};
  return {false, WEXITSTATUS(status)};
}

// The newest valid checkpoint in `dir`, for a restart: its file and step, or nothing.
struct Newest {
  bool found = false;
  std::string file, why_none;
  int64_t step = 0;
};
Newest newest_checkpoint(const std::string& dir) {
  Newest newest;
  if (train::checkpoint_files(dir).empty()) {
    newest.why_none = "no checkpoint in " + dir + " yet";
    return newest;
  }
  try {
    std::vector<std::string> skipped;
    const io::SafetensorsFile file = train::newest_valid_checkpoint(dir, skipped);
    newest.found = true;
    newest.file = train::checkpoint_files(dir)[skipped.size()];  // (newest first; the skipped ones precede it)
    newest.step = train::checkpoint_progress(file).step;
  } catch (const Error& e) {
    newest.why_none = e.what();
  }
  return newest;
}

// "dpcore launch: restart 1 of 3, with 2 ranks, resuming from step 5 (DIR/checkpoint...)"
std::string restart_line(const LaunchOptions& o, int restart, const Newest& newest) {
  const int ranks = ranks_for(o, restart);
  std::string line = "dpcore launch: restart " + std::to_string(restart) + " of " + std::to_string(o.max_restarts) +
                     ", with " + std::to_string(ranks) + (ranks == 1 ? " rank" : " ranks");
  if (ranks < ranks_for(o, restart - 1)) line += " (one fewer, --min-nproc " + std::to_string(o.min_nproc) + ")";
  if (newest.found) {
    return line + ", resuming from step " + std::to_string(newest.step) + " (" + newest.file +
           ", the newest valid checkpoint)\n";
  }
  return line + ", starting again from step 0: " + newest.why_none + "\n";
}

}  // namespace

int launch(const LaunchOptions& o, const std::string& argv0, std::ostream& log) {
  const std::vector<std::string> train_flags(o.command.empty() ? o.command.end() : o.command.begin() + 1,
                                             o.command.end());
  const std::string requested_dir = flag_value(train_flags, "--checkpoint");
  const std::string dir =
      check_launch(o, !requested_dir.empty() && !train::checkpoint_files(requested_dir).empty());
  const std::string mpirun = mpirun_to_use(o.mpirun, std::getenv("DPCORE_MPIRUN"));
  const std::string self = self_path(argv0);
  g_interrupt = 0;
  ForwardInterrupts forward;
  for (int restart = 0;; ++restart) {
    const int ranks = ranks_for(o, restart);
    bool have_checkpoint = false;
    if (restart > 0) {
      const Newest newest = newest_checkpoint(dir);
      have_checkpoint = newest.found;
      log << restart_line(o, restart, newest);
    }
    std::vector<std::string> dropped;
    const std::vector<std::string> args = train_args_for(o.command, restart, have_checkpoint, dropped);
    if (restart > 0 && std::getenv("DPCORE_INJECT")) {
      dropped.push_back(std::string("DPCORE_INJECT=") + std::getenv("DPCORE_INJECT"));
      unsetenv("DPCORE_INJECT");  // (the ranks inherit the launcher's environment)
    }
    for (const std::string& d : dropped) {
      log << "dpcore launch: restart " << restart << " leaves out " << d
          << " (injected faults happen on the first attempt only; on a restart the fault would fire again)\n";
    }
    const std::vector<std::string> argv = mpirun_command(mpirun, ranks, self, args);
    if (g_interrupt != 0) {  // (between two attempts)
      log << "dpcore launch: interrupted by " << signal_name(g_interrupt) << " before attempt " << restart + 1
          << " started\n";
      return 128 + g_interrupt;
    }
    log << "dpcore launch: attempt " << restart + 1 << " of at most " << o.max_restarts + 1 << ": " << joined(argv)
        << std::endl;
    const JobEnd end = run_job(argv);
    const int interrupt = g_interrupt;
    switch (decide(end, interrupt, restart, o.max_restarts)) {
      case Next::Finished:
        log << "dpcore launch: the job finished";
        if (restart > 0) log << " after " << restart << (restart == 1 ? " restart" : " restarts");
        log << "\n";
        return 0;
      case Next::Interrupted:
        log << "dpcore launch: interrupted by " << signal_name(interrupt) << ": the job ended with " << describe(end)
            << " and is not restarted\n";
        return 128 + interrupt;
      case Next::GiveUp:
        log << "dpcore launch: attempt " << restart + 1 << " failed: mpirun ended with " << describe(end)
            << "; giving up, --max-restarts " << o.max_restarts << " used up\n";
        return exit_status(end);
      case Next::Restart:
        log << "dpcore launch: attempt " << restart + 1 << " failed: mpirun ended with " << describe(end)
            << " (mpirun ends the whole job when one rank fails or dies; its lines above say which)\n";
        break;
    }
  }
}

}  // namespace dpcore::cli
