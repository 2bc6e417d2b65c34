// Teams of CPU cores: the cores this process may use split into contiguous teams, and a
// thread made a member of one. A pipeline's stages on the CPU (cpu:0, cpu:1, ...) are
// such teams, so that stages running at once each use cores of their own rather than all
// of them contending for every core.
//
// A thread joins a team by pinning itself to the team's cores (sched_setaffinity) and
// capping its kernels at the team's size (kernels::cpu::set_calling_thread_threads). The
// OpenMP threads its kernels start inherit the pinning, since a new thread starts with its
// creator's affinity; so the thread must join before its first kernel (and OMP_PROC_BIND /
// OMP_PLACES, which place OpenMP's threads themselves, override it).
#pragma once

#include <string>
#include <vector>

namespace dpcore::runtime {

// The CPUs the calling thread may run on (its affinity mask: the process's, until a thread
// joins a team), in increasing order.
std::vector<int> allowed_cpus();

struct CpuTeam {
  std::vector<int> cpus;  // the cores, in increasing order
  int threads = 1;        // its kernels' threads: one per core, at most the process-wide count
  std::string str() const;  // "cores 0-3, 4 threads"; "core 5, 1 thread"
};

// `cpus` split into `teams` contiguous teams as even as can be (the first ones a core larger
// when it does not divide), each team's threads its core count capped at `max_threads`.
// Refuses fewer than 1 team, more teams than CPUs and a cap below 1.
std::vector<CpuTeam> split_into_teams(const std::vector<int>& cpus, int teams, int max_threads);

// Makes the calling thread a member of `team` (see the top of this file). Throws Error
// naming the cores when the system refuses them.
void join_cpu_team(const CpuTeam& team);

}  // namespace dpcore::runtime
