// --nvtx under an NVTX tool (tests/cli/nvtx_recorder.cpp stands in for Nsight Systems):
// every span of the run is a range of the "dpcore" domain, named as in a trace, pushed and
// popped in pairs, with the threads named as the trace's lanes; without --nvtx the tool
// is never even called.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <sstream>

#include "cli_run.h"
#include "support/test_support.h"

namespace {

// The recorder's lines of `dpcore ARGS` run under it, by kind ("push dpcore NAME" -> "push").
struct Recorded {
  std::multimap<std::string, std::string> lines;  // kind -> the rest
  size_t count(const std::string& kind, const std::string& rest) const {
    size_t n = 0;
    auto [begin, end] = lines.equal_range(kind);
    for (auto it = begin; it != end; ++it) n += it->second == rest;
    return n;
  }
};

Recorded run_under_recorder(const std::string& args, const dpcore::testing::TempDir& dir, int& status) {
  const std::string file = dir.file("nvtx.txt");
  dpcore::testing::CommandResult r = dpcore::testing::run_command(
      args, "NVTX_INJECTION64_PATH=" DPCORE_NVTX_RECORDER " NVTX_RECORD_FILE=" + file);
  status = r.status;
  EXPECT_EQ(r.status, 0) << r.output;
  Recorded recorded;
  std::istringstream in(dpcore::testing::slurp(file));
  for (std::string line; std::getline(in, line);) {
    const size_t space = line.find(' ');
    recorded.lines.emplace(line.substr(0, space), space == std::string::npos ? "" : line.substr(space + 1));
  }
  return recorded;
}

TEST(CliNvtx, EverySpanIsARangeOfTheDpcoreDomainOnlyWithTheFlag) {
  dpcore::testing::TempDir dir;
  int status = 0;
  const std::string job = dpcore::testing::job() + " --steps 3 --replicas 2 --mode ddp";
  Recorded on = run_under_recorder(job + " --nvtx", dir, status);
  EXPECT_EQ(on.count("domain", "dpcore"), 1u);
  for (const char* step : {"dpcore step 1", "dpcore step 2", "dpcore step 3"}) {
    EXPECT_EQ(on.count("push", step), 1u) << step;
  }
  size_t forwards = 0, pushes = 0;
  auto [begin, end] = on.lines.equal_range("push");
  for (auto it = begin; it != end; ++it) {
    ++pushes;
    forwards += it->second.rfind("dpcore forward", 0) == 0;
  }
  EXPECT_GE(forwards, 3u * 2u) << "a forward per replica and step";
  EXPECT_EQ(on.lines.count("pop"), pushes) << "every range pushed is popped";
  EXPECT_EQ(on.count("pop", "dpcore"), pushes);
  for (const char* lane : {"main", "replica 0", "replica 1", "comm 0", "comm 1"}) {
    EXPECT_EQ(on.count("thread", lane), 1u) << "thread " << lane << " not named";
  }

  dpcore::testing::TempDir quiet;
  Recorded off = run_under_recorder(job, quiet, status);
  EXPECT_TRUE(off.lines.empty()) << "without --nvtx NVTX is never called; got " << off.lines.size() << " lines";
}

}  // namespace
