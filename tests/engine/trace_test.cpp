// The tracer (engine/trace.h): nothing recorded while off, per-thread lanes with names and
// order, nested spans with their arguments, collective labels, and files written whole or
// refused naming the path.
#include "engine/trace.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

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
  EXPECT_LT(t.sort_index.at(work[0].tid), t.sort_index.at(steps[0].tid)) << "replicas come before main";

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

}  // namespace
}  // namespace dpcore::testing
