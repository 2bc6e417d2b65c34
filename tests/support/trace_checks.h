// Reading a trace written by dpcore::trace::write (engine/trace.h) back for the tests, and
// the checks every trace must pass: the trace-event format, and spans that nest on each lane.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace dpcore::testing {

// A lane is a thread of a process: (pid, tid).
using LaneKey = std::pair<int, int>;

struct TraceSpan {
  std::string name, lane;  // lane: the thread_name of its (pid, tid)
  int pid = 0, tid = 0;
  double begin = 0, end = 0;  // microseconds
  nlohmann::json args;
  LaneKey key() const { return {pid, tid}; }
};

struct TraceFile {
  std::vector<TraceSpan> spans;          // every "X" event, in file order
  std::map<LaneKey, std::string> lanes;  // thread_name
  std::map<LaneKey, int> sort_index;     // thread_sort_index
  std::map<int, std::string> processes;  // pid -> process_name
  std::map<LaneKey, double> clock_uncertainty_us;  // a device lane's clock_uncertainty
};

// Parses `path`, checking (with gtest failures naming the event) that it is a JSON object
// with a traceEvents array whose "X" events have name, cat, ph, ts, dur >= 0, pid, tid and
// args, whose "M" events name every lane that has spans and every process, and that every
// lane's spans nest: two spans on one (pid, tid) are disjoint or one contains the other.
TraceFile read_trace(const std::string& path);

// The spans on `lane` whose name starts with `prefix`, in file order: the order dpcore
// recorded them, and for a device lane the order of their host spans.
std::vector<TraceSpan> spans_in_file_order(const TraceFile& trace, const std::string& lane, const std::string& prefix);

// The same spans in order of their beginning.
std::vector<TraceSpan> spans_of(const TraceFile& trace, const std::string& lane, const std::string& prefix);

// Checks (with gtest failures) that the spans of lane `host` whose name starts with
// `prefix` appear again on a device lane of that host lane whose name starts with
// `device_prefix` ("cuda:0 stream "): one per host span, with its name and args, never
// beginning before the host queued it (give or take the lane's clock_uncertainty and the
// half microsecond resolution of device times). They are paired in the order they were recorded,
// not by their times: a view (flatten) queues no kernel, so its device span has no length
// and can carry the same begin as the next layer's (device times are float milliseconds
// since a reference: a microsecond apart tens of seconds after it).
void expect_device_lane_mirrors(const TraceFile& trace, const std::string& host, const std::string& device_prefix,
                                const std::string& prefix);

}  // namespace dpcore::testing
