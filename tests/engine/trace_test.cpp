// The tracer (engine/trace.h): nothing recorded while off, per-thread lanes with names and
// order, nested spans with their arguments, collective labels, and files written whole or
// refused naming the path.
#include "engine/trace.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "engine/backend.h"
#include "kernels/error.h"
#include "support/test_support.h"
#include "support/trace_checks.h"

namespace dpcore::testing {
namespace {

// Spans on this thread and on another, each describing itself through `described`.
void record_some_spans(int& described) {
  auto describe = [&] {
    ++described;
    return trace::Label{"outer", {{"rows", int64_t(3)}}};
  };
  trace::Span outer("test", describe);
  { trace::Span inner("test", "inner"); }
  trace::CollectiveLabel purpose([&] {
    ++described;
    return trace::Label{"bucket", {}};
  });
  std::thread([&] {
    trace::set_lane("worker", 5);
    trace::Span span("test", describe);
  }).join();
}

TEST(Trace, OffRecordsNothingAndBuildsNoLabels) {
  TempDir dir;
  trace::write(dir.file("before.json"));  // whatever earlier tests of this process left
  int described = 0;
  record_some_spans(described);
  EXPECT_EQ(described, 0) << "a label was built while tracing was off";
  EXPECT_TRUE(trace::CollectiveLabel::current().name.empty());
  EXPECT_EQ(trace::write(dir.file("off.json")), 0u);
  EXPECT_TRUE(read_trace(dir.file("off.json")).spans.empty());
}

TEST(Trace, LanesSpansAndArgumentsReachTheFile) {
  TempDir dir;
  trace::write(dir.file("before.json"));
  trace::set_lane("main", trace::kMainLane);
  trace::start();
  {
    trace::Span step("step", [] {
      return trace::Label{"step 1", {{"rows", std::vector<int64_t>{3, 3, 2}}, {"lr", 0.5}, {"what", "sgd"}}};
    });
    step.add("samples", int64_t(8));
    {
      trace::Span inner("step", "inner");
      trace::CollectiveLabel outer_purpose([] { return trace::Label{"bucket 0", {{"bucket", int64_t(0)}}}; });
      {
        trace::CollectiveLabel inner_purpose([] { return trace::Label{"loss", {}}; });
        EXPECT_EQ(trace::CollectiveLabel::current().name, "loss");
      }
      EXPECT_EQ(trace::CollectiveLabel::current().name, "bucket 0");
    }
    std::thread([] {
      trace::set_lane("replica 1", trace::kReplicaLanes + 1);
      trace::Span work("test", "replica work");
      trace::Span nested("test", "nested");
    }).join();
  }
  trace::stop();
  const size_t written = trace::write(dir.file("t.json"));
  TraceFile t = read_trace(dir.file("t.json"));
  ASSERT_EQ(written, t.spans.size());
  ASSERT_EQ(written, 4u);

  std::vector<TraceSpan> steps = spans_of(t, "main", "step 1");
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0].args["rows"], nlohmann::json({3, 3, 2}));
  EXPECT_EQ(steps[0].args["lr"], 0.5);
  EXPECT_EQ(steps[0].args["what"], "sgd");
  EXPECT_EQ(steps[0].args["samples"], 8);
  std::vector<TraceSpan> inner = spans_of(t, "main", "inner");
  ASSERT_EQ(inner.size(), 1u);
  EXPECT_TRUE(steps[0].begin <= inner[0].begin && inner[0].end <= steps[0].end);
  std::vector<TraceSpan> work = spans_of(t, "replica 1", "replica work"), nested = spans_of(t, "replica 1", "nested");
  ASSERT_EQ(work.size(), 1u);
  ASSERT_EQ(nested.size(), 1u);
  EXPECT_NE(work[0].tid, steps[0].tid);
  EXPECT_LT(t.sort_index.at(work[0].key()), t.sort_index.at(steps[0].key())) << "replicas come before main";

  // A write takes what was recorded since the previous one.
  EXPECT_EQ(trace::write(dir.file("again.json")), 0u);
}

TEST(Trace, WritesThroughATemporaryFileAndRefusesUnwritablePaths) {
  TempDir dir;
  trace::start();
  { trace::Span span("test", "one"); }
  trace::stop();
  EXPECT_GE(trace::write(dir.file("t.json")), 1u);
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) names.push_back(entry.path().filename());
  EXPECT_EQ(names, std::vector<std::string>{"t.json"}) << "a temporary file was left behind";

  for (const std::string& bad : {dir.file("missing/t.json"), dir.path()}) {
    try {
      trace::check_writable(bad, "--trace");
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--trace " + bad + ":"), std::string::npos) << e.what();
    }
    EXPECT_THROW(trace::write(bad), Error) << bad;
  }
  EXPECT_NO_THROW(trace::check_writable(dir.file("fine.json"), "--trace"));
  EXPECT_FALSE(std::filesystem::exists(dir.file("fine.json"))) << "checking must not create the file";
}

// The processes of one job: each take()s its own events, and write_merged puts them in one
// file, each with its pid and lanes, its times moved by its part's shift.
TEST(Trace, TakenPartsMergeIntoOneFileEachProcessWithItsPidAndShift) {
  TempDir dir;
  trace::write(dir.file("before.json"));
  trace::set_lane("main", trace::kMainLane);
  std::vector<trace::Part> parts;
  for (int rank = 0; rank < 2; ++rank) {
    trace::set_process(rank, "rank " + std::to_string(rank));
    trace::start();
    { trace::Span span("step", [&] { return trace::Label{"work of rank " + std::to_string(rank), {}}; }); }
    trace::stop();
    parts.push_back({trace::take(), rank == 0 ? 0 : 1'000'000});
  }
  trace::set_process(0, "dpcore");
  EXPECT_EQ(trace::take().find("\"ph\":\"X\""), std::string::npos) << "take() must consume what it returns";
  const double original = nlohmann::json::parse(parts[1].events)["traceEvents"].back()["ts"].get<double>();

  EXPECT_EQ(trace::write_merged(dir.file("job.json"), parts), 2u);
  TraceFile t = read_trace(dir.file("job.json"));
  EXPECT_EQ(t.processes, (std::map<int, std::string>{{0, "rank 0"}, {1, "rank 1"}}));
  std::vector<TraceSpan> first = spans_of(t, "main", "work of rank 0"), second = spans_of(t, "main", "work of rank 1");
  ASSERT_EQ(first.size(), 1u);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(first[0].pid, 0);
  EXPECT_EQ(second[0].pid, 1);
  EXPECT_DOUBLE_EQ(second[0].begin, original + 1000.0) << "rank 1's times move by its 1 ms shift";
  std::ifstream in(dir.file("job.json"));
  EXPECT_EQ(nlohmann::json::parse(in)["otherData"]["clock_shift_us"], nlohmann::json({0.0, 1000.0}));

  try {
    trace::write_merged(dir.file("bad.json"), {parts[0], {"not json", 0}});
    ADD_FAILURE() << "a part that is not a take() was merged";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir.file("bad.json") + ": part 1 of 2"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("bad.json")));
}

// A listener that writes down what it sees ("open NAME", "close", "lane NAME").
class RecordingListener : public trace::SpanListener {
 public:
  void open(const char*, const std::string& name) override { add("open " + name); }
  void close() override { add("close"); }
  void lane_named(const std::string& name) override { add("lane " + name); }
  std::vector<std::string> seen() {
    std::lock_guard<std::mutex> lock(mutex_);
    return seen_;
  }

 private:
  void add(std::string what) {
    std::lock_guard<std::mutex> lock(mutex_);
    seen_.push_back(std::move(what));
  }
  std::mutex mutex_;
  std::vector<std::string> seen_;
};

// The NVTX ranges of the CUDA build (engine/nvtx_ranges.cpp) are exactly such a listener,
// installed exactly when the CUDA backend is: --nvtx works in the builds that have CUDA.
TEST(Trace, TheListenerIsInstalledExactlyWithTheCudaBackend) {
  EXPECT_EQ(trace::listener() != nullptr, find_backend(Device::Type::CUDA) != nullptr);
}

// While listening, every span goes to the listener in nesting order, with or without
// recording for a file; while not, the listener sees nothing and no label is built.
TEST(Trace, ListeningGivesEverySpanToTheListenerAndNothingWhileOff) {
  TempDir dir;
  trace::write(dir.file("before.json"));
  RecordingListener listener;
  trace::SpanListener* previous = trace::set_listener(&listener);
  trace::listen(true, "--nvtx");
  {
    trace::Span outer("step", [] { return trace::Label{"outer", {}}; });
    trace::Span inner("step", "inner");
  }
  trace::set_lane("listened", 7);
  trace::listen(false, "--nvtx");
  int described = 0;
  {
    trace::Span after("step", [&] {
      ++described;
      return trace::Label{"after", {}};
    });
  }
  trace::set_listener(previous);
  EXPECT_EQ(listener.seen(),
            (std::vector<std::string>{"open outer", "open inner", "close", "close", "lane listened"}));
  EXPECT_EQ(described, 0) << "a label was built while neither recording nor listening";
  EXPECT_EQ(trace::write(dir.file("t.json")), 0u) << "listening records nothing for the file";

  trace::SpanListener* installed = trace::set_listener(nullptr);
  try {
    trace::listen(true, "--nvtx");
    ADD_FAILURE() << "listening without a listener was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--nvtx: this build has no NVTX ranges"), std::string::npos) << e.what();
  }
  trace::set_listener(installed);
  EXPECT_FALSE(trace::recording());
}

// A device timer whose streams are named per thread (t_stream; empty: the thread queues no
// device work) and whose marks are reached 1 ms apart, in the order they were made.
thread_local std::string t_stream;
class FakeDeviceTimer : public trace::DeviceTimer {
 public:
  void restart() override {
    std::lock_guard<std::mutex> lock(mutex_);
    ++restarts;
    first_valid_ = int64_t(marks_.size());
  }
  int64_t mark() override {
    if (t_stream.empty()) return -1;
    std::lock_guard<std::mutex> lock(mutex_);
    marks_.push_back(t_stream);
    return int64_t(marks_.size()) - 1;
  }
  bool reached(int64_t id, Reached& out) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (id < first_valid_ || id >= int64_t(marks_.size())) return false;
    out.stream = marks_[size_t(id)];
    out.ns = (id + 1) * 1'000'000;
    out.uncertainty_ns = 2'500;
    return true;
  }
  int restarts = 0;

 private:
  std::mutex mutex_;
  std::vector<std::string> marks_;
  int64_t first_valid_ = 0;
};

// Spans of a thread with device work also appear, at the device's times, on a lane of
// their stream and thread, sorted after every thread's lane; a span whose ends are on two
// streams, or whose marks predate start(), does not; a thread without device work has none.
TEST(Trace, DeviceMarksBecomeSpansOnALanePerStreamAndThread) {
  TempDir dir;
  trace::write(dir.file("before.json"));
  FakeDeviceTimer timer;
  trace::DeviceTimer* previous = trace::set_device_timer(&timer);
  trace::set_lane("replica 0", trace::kReplicaLanes);
  t_stream = "gpu stream 7";
  trace::start();
  { trace::Span stale("step", "from before the restart"); }  // marks 0 and 1
  trace::stop();
  trace::start();  // marks 0 and 1 were made before this restart: the timer forgets them
  {
    trace::Span outer("step", "outer");  // marks 2 and 5
    trace::Span inner("layer", "inner");  // marks 3 and 4
  }
  {
    trace::Span moved("step", "moved");  // marks 6 (stream 7) and 7 (stream 8)
    t_stream = "gpu stream 8";
  }
  std::thread([] {
    trace::set_lane("loader", trace::kLoaderLane);
    trace::Span host_only("data", "host only");
  }).join();
  trace::stop();
  t_stream.clear();
  trace::write(dir.file("t.json"));  // (asks the timer where the marks were reached)
  trace::set_device_timer(previous);
  EXPECT_EQ(timer.restarts, 2);

  TraceFile t = read_trace(dir.file("t.json"));
  std::vector<TraceSpan> device = spans_of(t, "gpu stream 7 (replica 0)", "");
  ASSERT_EQ(device.size(), 2u);
  EXPECT_EQ(device[0].name, "outer");
  EXPECT_DOUBLE_EQ(device[0].begin, 3000.0);  // mark 2, reached at 3 ms
  EXPECT_DOUBLE_EQ(device[0].end, 6000.0);
  EXPECT_EQ(device[1].name, "inner");
  EXPECT_DOUBLE_EQ(device[1].begin, 4000.0);
  EXPECT_DOUBLE_EQ(device[1].end, 5000.0);
  EXPECT_EQ(t.sort_index.at(device[0].key()), trace::kDeviceLanes + trace::kReplicaLanes);
  ASSERT_TRUE(t.clock_uncertainty_us.count(device[0].key())) << "the lane does not say how well its clock is known";
  EXPECT_DOUBLE_EQ(t.clock_uncertainty_us.at(device[0].key()), 2.5);
  for (const auto& [lane, name] : t.lanes) {
    EXPECT_TRUE(name.find("loader)") == std::string::npos && name.find("gpu stream 8") == std::string::npos)
        << "unexpected device lane " << name;
  }
  EXPECT_EQ(spans_of(t, "replica 0", "moved").size(), 1u) << "the host span stays";
  EXPECT_EQ(spans_of(t, "replica 0", "from before the restart").size(), 1u);
}

}  // namespace
}  // namespace dpcore::testing
