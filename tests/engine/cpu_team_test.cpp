// CPU teams (engine/cpu_team.h): the allowed cores split into contiguous teams as even as
// can be, named as --explain names them; a thread that joins one runs on its cores only,
// its kernels capped at the team's threads while other threads keep theirs, and the
// OpenMP threads its kernels start run on the team's cores too.
#include <omp.h>
#include <sched.h>

#include <thread>

#include <gtest/gtest.h>

#include "engine/cpu_team.h"
#include "kernels/cpu/kernels.h"
#include "support/error_of.h"

namespace dpcore::runtime {
namespace {

using dpcore::testing::error_of;

TEST(CpuTeams, TheCoresSplitIntoContiguousTeamsAsEvenAsCanBe) {
  const std::vector<int> eight = {0, 1, 2, 3, 4, 5, 6, 7};
  const std::vector<CpuTeam> three = split_into_teams(eight, 3, 64);
  ASSERT_EQ(three.size(), 3u);
  EXPECT_EQ(three[0].cpus, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(three[1].cpus, (std::vector<int>{3, 4, 5}));
  EXPECT_EQ(three[2].cpus, (std::vector<int>{6, 7}));
  EXPECT_EQ(three[0].threads, 3);
  EXPECT_EQ(three[2].threads, 2);
  // The process-wide thread count caps a team's threads, not its cores.
  const std::vector<CpuTeam> capped = split_into_teams(eight, 2, 3);
  EXPECT_EQ(capped[1].cpus, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(capped[1].threads, 3);
  // Whatever the mask holds, in its order: a machine whose process may use cores 2, 3, 8, 9.
  const std::vector<CpuTeam> sparse = split_into_teams({2, 3, 8, 9}, 2, 64);
  EXPECT_EQ(sparse[1].cpus, (std::vector<int>{8, 9}));
}

TEST(CpuTeams, ATeamIsNamedByItsCoresAndThreads) {
  EXPECT_EQ((CpuTeam{{0, 1, 2, 3}, 4}).str(), "cores 0-3, 4 threads");
  EXPECT_EQ((CpuTeam{{5}, 1}).str(), "core 5, 1 thread");
  EXPECT_EQ((CpuTeam{{0, 2, 5}, 2}).str(), "cores 0,2,5, 2 threads");
}

TEST(CpuTeams, WhatCannotBeSplitIsRefusedNamingIt) {
  EXPECT_EQ(error_of([] { split_into_teams({0, 1}, 3, 4); }),
            "CPU teams: 3 teams of 2 cores (0-1): a team needs a core of its own");
  EXPECT_EQ(error_of([] { split_into_teams({0, 1}, 0, 4); }), "CPU teams: 0 teams (need at least 1)");
  EXPECT_EQ(error_of([] { split_into_teams({0, 1}, 1, 0); }), "CPU teams: at most 0 threads a team (need at least 1)");
}

// Joins `team` on a thread of its own; returns what that thread then sees: its cores, its
// kernels' threads, and the cores every thread of a kernel-sized OpenMP team may run on.
struct Seen {
  std::vector<int> cpus;
  int kernel_threads = 0;
  std::vector<std::vector<int>> openmp_cpus;
};
Seen seen_in(const CpuTeam& team) {
  Seen seen;
  std::thread member([&] {
    join_cpu_team(team);
    seen.cpus = allowed_cpus();
    seen.kernel_threads = kernels::cpu::num_threads();
    seen.openmp_cpus.resize(size_t(seen.kernel_threads));
#pragma omp parallel num_threads(seen.kernel_threads)
    seen.openmp_cpus[size_t(omp_get_thread_num())] = allowed_cpus();
  });
  member.join();
  return seen;
}

TEST(CpuTeams, AThreadThatJoinsRunsItsKernelsOnTheTeamsCoresOnly) {
  const std::vector<int> cpus = allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  const int everyone = kernels::cpu::num_threads();
  // A team of one core: one thread there, whatever the process-wide count.
  const Seen one = seen_in({{cpus.back()}, 1});
  EXPECT_EQ(one.cpus, std::vector<int>{cpus.back()});
  EXPECT_EQ(one.kernel_threads, 1);
  EXPECT_EQ(kernels::cpu::num_threads(), everyone) << "the cap is the joining thread's own";
  EXPECT_EQ(allowed_cpus(), cpus) << "the pinning is the joining thread's own";
  if (cpus.size() < 2 || everyone < 2) GTEST_SKIP() << "an OpenMP team of two needs 2 cores and 2 kernel threads";
  // A team of two: both OpenMP threads its kernels start are on the team's cores.
  const std::vector<int> two = {cpus[0], cpus[1]};
  const Seen pair = seen_in({two, 2});
  EXPECT_EQ(pair.cpus, two);
  EXPECT_EQ(pair.kernel_threads, 2);
  for (const std::vector<int>& c : pair.openmp_cpus) EXPECT_EQ(c, two);
}

}  // namespace
}  // namespace dpcore::runtime
