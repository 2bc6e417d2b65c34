// `dpcore launch -n N [--max-restarts K] [--min-nproc M] [--mpirun CMD] -- train ...`: runs
// the train command under mpirun and restarts the job from its newest valid checkpoint when
// a rank dies (docs/fault-tolerance.md, "Restarts under mpirun"). What to do when is decided
// in cli/launch_policy.h; this runs the processes.
#pragma once

#include <ostream>
#include <string>

#include "cli/launch_policy.h"

namespace dpcore::cli {

// Runs the job, restarting it as the policy says, and logs each attempt and restart to
// `log`. SIGINT and SIGTERM sent to this process are forwarded to mpirun, and the job is
// then not restarted. `argv0` names this program where /proc/self/exe does not exist.
// Returns 0 when the job finished, the last failure's exit status when the restarts are
// used up, and 128 + the signal when interrupted. Fails (dpcore::Error) before running
// anything when check_launch refuses, or when mpirun cannot be started.
int launch(const LaunchOptions& options, const std::string& argv0, std::ostream& log);

}  // namespace dpcore::cli
