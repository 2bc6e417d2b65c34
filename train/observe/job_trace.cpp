#include "train/observe/job_trace.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/trace.h"
#include "kernels/error.h"

namespace dpcore::train {
namespace {

// Which boot of which machine this is: processes that print the same id read the same
// CLOCK_MONOTONIC. Empty where Linux does not say, which matches no other rank.
std::string boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

}  // namespace

int64_t clock_shift_ns(const std::vector<int64_t>& root, const std::vector<int64_t>& mine) {
  DPCORE_CHECK(!root.empty() && root.size() == mine.size(), "clock_shift_ns: ", root.size(), " readings against ",
               mine.size());
  std::vector<int64_t> differences;
  for (size_t k = 0; k < root.size(); ++k) differences.push_back(root[k] - mine[k]);
  std::nth_element(differences.begin(), differences.begin() + differences.size() / 2, differences.end());
  return differences[differences.size() / 2];
}

std::vector<std::string> allgather_text(comm::Communicator& comm, Device device, const std::string& mine) {
  const int64_t ranks = comm.size();
  Tensor length = Tensor::from_vector(std::vector<int64_t>{int64_t(mine.size())}, {1}, device);
  Tensor lengths = Tensor::empty({ranks}, DType::Int64, device);
  comm.allgather(length, lengths).wait();
  const std::vector<int64_t> sizes = lengths.to_vector<int64_t>();
  const int64_t words = (*std::max_element(sizes.begin(), sizes.end()) + 3) / 4;
  std::vector<int32_t> packed(size_t(words), 0);
  std::memcpy(packed.data(), mine.data(), mine.size());
  Tensor in = Tensor::from_vector(packed, {words}, device);
  Tensor out = Tensor::empty({ranks * words}, DType::Int32, device);
  comm.allgather(in, out).wait();
  const std::vector<int32_t> all = out.to_vector<int32_t>();
  std::vector<std::string> texts;
  for (int64_t r = 0; r < ranks; ++r) {
    const char* begin = reinterpret_cast<const char*>(all.data() + r * words);
    texts.emplace_back(begin, size_t(sizes[size_t(r)]));
  }
  return texts;
}

size_t write_job_trace(const std::string& path, comm::Communicator& comm, Device device) {
  std::vector<int64_t> readings;
  for (int k = 0; k < kClockSamples; ++k) {
    comm.barrier();
    readings.push_back(trace::now_ns());
  }
  // One line of clock facts, then this rank's events.
  const nlohmann::json clock = {{"boot_id", boot_id()}, {"clock_ns", readings}};
  const std::vector<std::string> all = allgather_text(comm, device, clock.dump() + "\n" + trace::take());
  if (comm.rank() != 0) return 0;
  std::vector<trace::Part> parts;
  std::string root_boot;
  std::vector<int64_t> root_readings;
  for (size_t r = 0; r < all.size(); ++r) {
    const size_t newline = all[r].find('\n');
    const nlohmann::json facts = nlohmann::json::parse(all[r].substr(0, newline));
    const std::string boot = facts["boot_id"].get<std::string>();
    const std::vector<int64_t> theirs = facts["clock_ns"].get<std::vector<int64_t>>();
    if (r == 0) root_boot = boot, root_readings = theirs;
    const bool same_clock = !boot.empty() && boot == root_boot;
    parts.push_back({all[r].substr(newline + 1), same_clock ? 0 : clock_shift_ns(root_readings, theirs)});
  }
  return trace::write_merged(path, parts);
}

size_t write_run_trace(const std::string& path, StepRunner& runner) {
  size_t spans = 0;
  const bool job = runner.across_processes([&](comm::Communicator& comm, Device device) {
    spans = write_job_trace(path, comm, device);
  });
  return job ? spans : trace::write(path);
}

}  // namespace dpcore::train
