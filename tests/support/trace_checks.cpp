#include "support/trace_checks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

namespace dpcore::testing {

namespace {

// Spans end where their clock reads said, converted from nanoseconds: a child may end in
// the same nanosecond as its parent, and ts + dur rounds in the last decimal.
constexpr double kSlackUs = 1e-3;

void expect_nested(const TraceFile& trace) {
  std::map<LaneKey, std::vector<const TraceSpan*>> by_lane;
  for (const TraceSpan& s : trace.spans) by_lane[s.key()].push_back(&s);
  for (auto& [lane, spans] : by_lane) {
    // Outer spans first: by beginning, the longer of two that begin together first.
    std::sort(spans.begin(), spans.end(), [](const TraceSpan* a, const TraceSpan* b) {
      return a->begin != b->begin ? a->begin < b->begin : a->end > b->end;
    });
    std::vector<const TraceSpan*> open;
    for (const TraceSpan* s : spans) {
      while (!open.empty() && open.back()->end <= s->begin + kSlackUs) open.pop_back();
      if (!open.empty()) {
        EXPECT_LE(s->end, open.back()->end + kSlackUs)
            << "on lane " << s->lane << ", '" << s->name << "' [" << s->begin << ", " << s->end
            << "] overlaps '" << open.back()->name << "' [" << open.back()->begin << ", " << open.back()->end
            << "] without nesting in it";
      }
      open.push_back(s);
    }
  }
}

}  // namespace

TraceFile read_trace(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "no trace at " << path;
  nlohmann::json doc = nlohmann::json::parse(in);  // throws, failing the test, on invalid JSON
  TraceFile trace;
  EXPECT_TRUE(doc.is_object() && doc.contains("traceEvents") && doc["traceEvents"].is_array()) << path;
  if (!doc.is_object() || !doc.contains("traceEvents")) return trace;
  for (const nlohmann::json& e : doc["traceEvents"]) {
    const std::string ph = e.value("ph", "");
    if (ph == "M") {
      const LaneKey lane{e["pid"].get<int>(), e["tid"].get<int>()};
      if (e["name"] == "process_name") trace.processes[lane.first] = e["args"]["name"].get<std::string>();
      if (e["name"] == "thread_name") trace.lanes[lane] = e["args"]["name"].get<std::string>();
      if (e["name"] == "thread_sort_index") trace.sort_index[lane] = e["args"]["sort_index"].get<int>();
      if (e["name"] == "clock_uncertainty") trace.clock_uncertainty_us[lane] = e["args"]["us"].get<double>();
      continue;
    }
    EXPECT_EQ(ph, "X") << e.dump();
    bool complete = true;
    for (const char* key : {"name", "cat", "ts", "dur", "pid", "tid", "args"}) {
      if (!e.contains(key)) ADD_FAILURE() << "event without " << key << ": " << e.dump(), complete = false;
    }
    if (!complete) continue;
    EXPECT_GE(e["dur"].get<double>(), 0.0) << e.dump();
    TraceSpan s;
    s.name = e["name"].get<std::string>();
    s.pid = e["pid"].get<int>();
    s.tid = e["tid"].get<int>();
    s.begin = e["ts"].get<double>();
    s.end = s.begin + e["dur"].get<double>();
    s.args = e["args"];
    trace.spans.push_back(std::move(s));
  }
  for (TraceSpan& s : trace.spans) {
    auto lane = trace.lanes.find(s.key());
    EXPECT_TRUE(lane != trace.lanes.end()) << "tid " << s.tid << " of pid " << s.pid << " ('" << s.name
                                           << "') has no thread_name";
    EXPECT_TRUE(trace.sort_index.count(s.key()))
        << "tid " << s.tid << " of pid " << s.pid << " has no thread_sort_index";
    EXPECT_TRUE(trace.processes.count(s.pid)) << "pid " << s.pid << " has no process_name";
    if (lane != trace.lanes.end()) s.lane = lane->second;
  }
  expect_nested(trace);
  return trace;
}

std::vector<TraceSpan> spans_in_file_order(const TraceFile& trace, const std::string& lane, const std::string& prefix) {
  std::vector<TraceSpan> found;
  for (const TraceSpan& s : trace.spans) {
    if (s.lane == lane && s.name.rfind(prefix, 0) == 0) found.push_back(s);
  }
  return found;
}

std::vector<TraceSpan> spans_of(const TraceFile& trace, const std::string& lane, const std::string& prefix) {
  std::vector<TraceSpan> found = spans_in_file_order(trace, lane, prefix);
  // By begin; of spans that begin together (a device's events recorded back to back can
  // carry one timestamp), the enclosing one first; then in file order.
  std::stable_sort(found.begin(), found.end(), [](const TraceSpan& a, const TraceSpan& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end > b.end;
  });
  return found;
}

void expect_device_lane_mirrors(const TraceFile& trace, const std::string& host, const std::string& device_prefix,
                                const std::string& prefix) {
  std::string device;
  LaneKey device_key;
  for (const auto& [key, name] : trace.lanes) {
    if (name.rfind(device_prefix, 0) == 0 && name.find("(" + host + ")") != std::string::npos) device = name, device_key = key;
  }
  ASSERT_FALSE(device.empty()) << "no lane of '" << device_prefix << "' for " << host;
  ASSERT_TRUE(trace.clock_uncertainty_us.count(device_key)) << device << " has no clock_uncertainty";
  // Device times are float milliseconds after the reference: about a microsecond apart
  // 10 s after it, longer than any test's window.
  constexpr double kResolutionUs = 1.0;
  const double slack = trace.clock_uncertainty_us.at(device_key) + kResolutionUs;
  const std::vector<TraceSpan> on_host = spans_in_file_order(trace, host, prefix),
                               on_device = spans_in_file_order(trace, device, prefix);
  ASSERT_FALSE(on_host.empty()) << host;
  ASSERT_EQ(on_device.size(), on_host.size()) << device;
  for (size_t i = 0; i < on_host.size(); ++i) {
    EXPECT_EQ(on_device[i].name, on_host[i].name);
    EXPECT_EQ(on_device[i].args, on_host[i].args);
    // Queued work cannot run before it is queued; its time is known within `slack`.
    EXPECT_GE(on_device[i].begin, on_host[i].begin - slack)
        << on_host[i].name << " ran on " << device << " before the host queued it (clock known within " << slack
        << " us)";
  }
}

}  // namespace dpcore::testing
