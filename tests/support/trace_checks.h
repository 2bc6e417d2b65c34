// Reading a trace written by dpcore::trace::write (engine/trace.h) back for the tests, and
// the checks every trace must pass: the trace-event format, and spans that nest on each lane.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace dpcore::testing {

struct TraceSpan {
  std::string name, lane;  // lane: the thread_name of its tid
  int tid = 0;
  double begin = 0, end = 0;  // microseconds
  nlohmann::json args;
};

struct TraceFile {
  std::vector<TraceSpan> spans;      // every "X" event, in file order
  std::map<int, std::string> lanes;  // tid -> thread_name
  std::map<int, int> sort_index;     // tid -> thread_sort_index
};

// Parses `path`, checking (with gtest failures naming the event) that it is a JSON object
// with a traceEvents array whose "X" events have name, cat, ph, ts, dur >= 0, pid, tid and
// args, whose "M" events name every lane that has spans, and that every lane's spans nest:
// two spans on one tid are disjoint or one contains the other.
TraceFile read_trace(const std::string& path);

// The spans on `lane` whose name starts with `prefix`, in order of their beginning.
std::vector<TraceSpan> spans_of(const TraceFile& trace, const std::string& lane, const std::string& prefix);

}  // namespace dpcore::testing
