#include "engine/cpu_team.h"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "kernels/cpu/kernels.h"
#include "kernels/error.h"

namespace dpcore::runtime {

namespace {

// "0-3" for consecutive cores, else "0,2,5".
std::string cpu_list(const std::vector<int>& cpus) {
  const bool consecutive = !cpus.empty() && cpus.back() - cpus.front() + 1 == int(cpus.size());
  if (consecutive && cpus.size() > 1) return std::to_string(cpus.front()) + "-" + std::to_string(cpus.back());
  std::string out;
  for (int c : cpus) out += (out.empty() ? "" : ",") + std::to_string(c);
  return out;
}

}  // namespace

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  DPCORE_CHECK(sched_getaffinity(0, sizeof set, &set) == 0, "sched_getaffinity: ", std::strerror(errno));
  std::vector<int> out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

std::string CpuTeam::str() const {
  return std::string(cpus.size() == 1 ? "core " : "cores ") + cpu_list(cpus) + ", " + std::to_string(threads) +
         (threads == 1 ? " thread" : " threads");
}

std::vector<CpuTeam> split_into_teams(const std::vector<int>& cpus, int teams, int max_threads) {
  DPCORE_CHECK(teams >= 1, "CPU teams: ", teams, " teams (need at least 1)");
  DPCORE_CHECK(teams <= int(cpus.size()), "CPU teams: ", teams, " teams of ", cpus.size(), " cores (",
               cpu_list(cpus), "): a team needs a core of its own");
  DPCORE_CHECK(max_threads >= 1, "CPU teams: at most ", max_threads, " threads a team (need at least 1)");
  std::vector<CpuTeam> out;
  const size_t base = cpus.size() / size_t(teams), extra = cpus.size() % size_t(teams);
  size_t begin = 0;
  for (size_t t = 0; t < size_t(teams); ++t) {
    const size_t size = base + (t < extra ? 1 : 0);
    CpuTeam team;
    team.cpus.assign(cpus.begin() + std::ptrdiff_t(begin), cpus.begin() + std::ptrdiff_t(begin + size));
    team.threads = std::min(int(size), max_threads);
    out.push_back(std::move(team));
    begin += size;
  }
  return out;
}

void join_cpu_team(const CpuTeam& team) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : team.cpus) CPU_SET(c, &set);
  DPCORE_CHECK(sched_setaffinity(0, sizeof set, &set) == 0, "CPU team (", team.str(),
               "): the system refused to pin a thread to them: ", std::strerror(errno));
  kernels::cpu::set_calling_thread_threads(team.threads);
}

}  // namespace dpcore::runtime
