// Traces of the runners' steps (engine/trace.h): what a learner reads off the timeline must
// be true of the run. Each bucket's allreduce ends after its last gradient became final
// (checked against the runner's own buckets), the allreduces of one bucket overlap on every
// replica, dp's scatter and gather account for every row, a pipeline's stages are lanes
// that follow their schedule, every lane nests, and a run without tracing records nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>

#include "engine/trace.h"
#include "equivalence.h"
#include "support/trace_checks.h"
#include "train/pipeline/pipeline_step.h"
#include "train/runners/ddp.h"
#include "train/observe/job_trace.h"
#include "train/observe/trace_window.h"

namespace dpcore::testing {
namespace {

constexpr int64_t kBatch = 24;
constexpr int kReplicas = 3;

// Three DDP buckets: the first (capped at 1 MiB) closes after the 1 MiB weight of the first
// linear layer; with a tiny --bucket-mb, the convolution's bias and weight get one each.
std::unique_ptr<layers::Model> bucketed_net() {
  auto net = layers::parse_layer_spec("conv(4,3,s2,p1) relu flatten linear(256) relu linear(10)", {3, 32, 32});
  return std::make_unique<layers::Model>(std::move(net), Shape{3, 32, 32}, Device::cpu(), DType::Float32, 5);
}

ParallelOptions parallel(const std::string& mode, const std::string& split = "even") {
  ParallelOptions o;
  o.replicas = kReplicas;
  o.mode = mode;
  o.split = split;
  o.bucket_mb = 1e-5;
  return o;
}

// `steps` steps of `runner` traced, after one that is not; the trace as read back.
TraceFile traced_steps(StepRunner& runner, int steps, const TempDir& dir,
                       const std::vector<int64_t>& sample = {3, 32, 32}) {
  HostBatch warm = make_batch(kBatch, 1, sample);
  runner.step(warm.batch);
  trace::set_lane("main", trace::kMainLane);
  trace::start();
  for (int s = 0; s < steps; ++s) {
    HostBatch b = make_batch(kBatch, uint64_t(10 + s), sample);
    runner.step(b.batch);
  }
  trace::stop();
  const size_t written = trace::write(dir.file("trace.json"));
  TraceFile t = read_trace(dir.file("trace.json"));
  EXPECT_EQ(written, t.spans.size());
  return t;
}

std::string lane(const char* what, int r) { return std::string(what) + " " + std::to_string(r); }

TEST(TrainTrace, DdpBucketAllreducesEndAfterTheirLastGradientAndOverlapAcrossReplicas) {
  TempDir dir;
  auto runner = make_runner(bucketed_net(), kSgd, 1, parallel("ddp"));
  const auto& ddp = dynamic_cast<const DistributedRunner&>(*runner);
  const std::vector<Bucket>& buckets = ddp.reducer(0).buckets();
  ASSERT_EQ(buckets.size(), 3u);
  const auto& entries = runner->model().parameters().entries();
  constexpr int kSteps = 2;
  TraceFile t = traced_steps(*runner, kSteps, dir);

  std::vector<std::vector<TraceSpan>> allreduces(kReplicas);  // [replica][step * buckets + bucket]
  for (int r = 0; r < kReplicas; ++r) {
    allreduces[size_t(r)] = spans_of(t, lane("comm", r), "allreduce bucket");
    ASSERT_EQ(allreduces[size_t(r)].size(), kSteps * buckets.size()) << lane("comm", r);
    const std::vector<TraceSpan> gradients = spans_of(t, lane("replica", r), "AccumulateGrad");
    for (int s = 0; s < kSteps; ++s) {
      for (size_t k = 0; k < buckets.size(); ++k) {
        const TraceSpan& allreduce = allreduces[size_t(r)][size_t(s) * buckets.size() + k];
        EXPECT_EQ(allreduce.args["bucket"], k);
        EXPECT_EQ(allreduce.args["bytes"], (buckets[k].end - buckets[k].begin) * 4);
        EXPECT_EQ(allreduce.args["algorithm"], "ring");
        EXPECT_EQ(allreduce.args["ranks"], kReplicas);
        // The bucket's last gradient (in the order backward finalises them), where it
        // became final in step s: its AccumulateGrad, found by its place in the buffer.
        const int64_t offset = entries[buckets[k].params.back()].offset;
        std::vector<TraceSpan> last;
        for (const TraceSpan& g : gradients) {
          if (g.args.value("grad_offset", int64_t(-1)) == offset) last.push_back(g);
        }
        ASSERT_EQ(last.size(), size_t(kSteps)) << "AccumulateGrad at offset " << offset;
        EXPECT_GE(allreduce.end, last[size_t(s)].begin)
            << "replica " << r << " step " << s << ": bucket " << k << "'s allreduce ended before its last gradient";
      }
    }
    const std::vector<TraceSpan> waits = spans_of(t, lane("replica", r), "wait for allreduce");
    ASSERT_EQ(waits.size(), size_t(kSteps));
    EXPECT_EQ(waits[0].args["on"], lane("comm", r));
  }
  // A ring allreduce cannot end on one replica before every replica has entered it.
  for (size_t i = 0; i < allreduces[0].size(); ++i) {
    double latest_begin = 0, earliest_end = 1e300;
    for (int r = 0; r < kReplicas; ++r) {
      latest_begin = std::max(latest_begin, allreduces[size_t(r)][i].begin);
      earliest_end = std::min(earliest_end, allreduces[size_t(r)][i].end);
    }
    EXPECT_LT(latest_begin, earliest_end) << "allreduce " << i << " does not overlap on every replica";
  }
}

TEST(TrainTrace, DpScatterAndGatherAccountForEveryRowOfTheBatch) {
  TempDir dir;
  auto runner = make_runner(bucketed_net(), kSgd, /*accum=*/2, parallel("dp", "weights:1,2,3"));
  TraceFile t = traced_steps(*runner, 1, dir);
  const std::vector<TraceSpan> scatters = spans_of(t, "main", "scatter"), gathers = spans_of(t, "main", "gather");
  ASSERT_EQ(scatters.size(), 2u);  // one per micro-batch
  ASSERT_EQ(gathers.size(), 2u);
  const int64_t row_bytes = 3 * 32 * 32 * 4 + 8;  // image and label
  int64_t rows = 0;
  for (size_t m = 0; m < scatters.size(); ++m) {
    const auto shares = scatters[m].args["rows"].get<std::vector<int64_t>>();
    const auto bytes = scatters[m].args["bytes"].get<std::vector<int64_t>>();
    ASSERT_EQ(shares.size(), size_t(kReplicas));
    EXPECT_EQ(shares, (std::vector<int64_t>{2, 4, 6})) << "weights 1:2:3 of 12 rows";
    for (int r = 0; r < kReplicas; ++r) EXPECT_EQ(bytes[size_t(r)], shares[size_t(r)] * row_bytes);
    EXPECT_EQ(gathers[m].args["rows"].get<std::vector<int64_t>>(), shares);
    EXPECT_LT(scatters[m].end, gathers[m].begin);
    for (int64_t n : shares) rows += n;
  }
  EXPECT_EQ(rows, kBatch);
  for (int r = 0; r < kReplicas; ++r) {
    EXPECT_EQ(spans_of(t, lane("comm", r), "allreduce all gradients").size(), 1u) << lane("comm", r);
    EXPECT_EQ(spans_of(t, lane("replica", r), "optimizer step").size(), 1u) << lane("replica", r);
  }
}

TEST(TrainTrace, OneDeviceStepShowsEachLayerLossBackwardAndOptimizer) {
  TempDir dir;
  train::SingleDeviceRunner runner(bucketed_net(), kSgd, 1);
  TraceFile t = traced_steps(runner, 1, dir);
  // One span per layer (conv + relu run fused, so they share one), named by the layers,
  // with the input's shape.
  const std::vector<std::pair<std::string, std::string>> layers = {
      {"forward conv(3->4, k3, s2, p1) + relu", "[24, 3, 32, 32]"}, {"forward flatten", "[24, 4, 16, 16]"},
      {"forward linear(1024->256)", "[24, 1024]"},                   {"forward relu", "[24, 256]"},
      {"forward linear(256->10)", "[24, 256]"}};
  const std::vector<TraceSpan> forward = spans_of(t, "main", "forward ");
  ASSERT_EQ(forward.size(), layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    EXPECT_EQ(forward[i].name, layers[i].first);
    EXPECT_EQ(forward[i].args["input"], layers[i].second) << layers[i].first;
  }
  EXPECT_EQ(spans_of(t, "main", "loss").size(), 1u);
  EXPECT_EQ(spans_of(t, "main", "optimizer step").size(), 1u);
  const std::vector<TraceSpan> backward = spans_of(t, "main", "backward");
  ASSERT_EQ(backward.size(), 1u);
  EXPECT_EQ(spans_of(t, "main", "AccumulateGrad").size(), runner.model().parameters().entries().size());
}

// A pipeline of 4 stages and 8 micro-batches: a lane per stage, placed in stage order, with
// one forward and one backward span per micro-batch in its schedule's order; each forward
// after the stage below finished it, each backward after the stage above finished its own;
// every transfer a span naming its peer and bytes, and the stages' communication threads
// lanes of their own.
TEST(TrainTrace, EachPipelineStageIsALaneWithItsScheduleAndTransfers) {
  constexpr int P = 4, M = 8;
  for (const std::string schedule : {"gpipe", "1f1b"}) {
    SCOPED_TRACE(schedule);
    TempDir dir;
    ParallelOptions o;
    o.pipeline.stages = "0@cpu:0,1@cpu:1,2-3@cpu:0,4-6@cpu:1", o.pipeline.schedule = schedule;
    o.pipeline.micro_batches = M;
    auto runner = make_runner(bucketed_net(), kSgd, 1, o);
    TraceFile t = traced_steps(*runner, 1, dir);
    const auto stages = train::pipeline::parse_stages(o.pipeline.stages, 7, {2, 0});
    const auto shapes = train::pipeline::stage_input_shapes(runner->model(), stages, {3, 32, 32});
    std::vector<std::vector<TraceSpan>> ops(P);  // [stage]: its micro-batch spans in order
    for (int s = 0; s < P; ++s) {
      const std::string name = "stage " + std::to_string(s);
      ops[s] = spans_of(t, name, "micro-batch ");
      const auto order = train::pipeline::stage_order(train::pipeline::parse_schedule(schedule), s, P, M);
      ASSERT_EQ(ops[s].size(), order.size()) << name;
      for (size_t i = 0; i < order.size(); ++i) {
        const bool forward = order[i].kind == train::pipeline::PipelineOp::Kind::Forward;
        EXPECT_EQ(ops[s][i].name, "micro-batch " + std::to_string(order[i].micro_batch) + (forward ? " forward" : " backward"));
      }
      for (const auto& [key, lane] : t.lanes)
        if (lane == name) EXPECT_EQ(t.sort_index.at(key), trace::kStageLanes + s);
      // Stage s > 0 receives M activations of [3 rows, its input] from stage s - 1.
      const std::vector<TraceSpan> received = spans_of(t, name, "recv activations");
      ASSERT_EQ(received.size(), size_t(s > 0 ? M : 0)) << name;
      for (const TraceSpan& r : received) {
        EXPECT_EQ(r.args["peer"], s - 1);
        EXPECT_EQ(r.args["bytes"], int64_t(kBatch / M * shape_numel(shapes[size_t(s)]) * 4)) << r.name;
      }
      EXPECT_EQ(spans_of(t, name, "send gradients").size(), size_t(s > 0 ? M : 0)) << name;
      EXPECT_FALSE(spans_of(t, "stage comm " + std::to_string(s), "").empty());
    }
    auto find = [&](int s, const std::string& name) {
      for (const TraceSpan& span : ops[s])
        if (span.name == name) return span;
      ADD_FAILURE() << "stage " << s << " has no span " << name;
      return TraceSpan{};
    };
    for (int s = 1; s < P; ++s) {
      for (int m = 0; m < M; ++m) {
        const std::string f = "micro-batch " + std::to_string(m) + " forward", b = "micro-batch " + std::to_string(m) + " backward";
        EXPECT_GE(find(s, f).begin, find(s - 1, f).end) << "stage " << s << " " << f;
        EXPECT_GE(find(s - 1, b).begin, find(s, b).end) << "stage " << s - 1 << " " << b;
      }
    }
  }
}

// Pipeline x data parallel: a lane per replica's stage, and each stage's gradients reduced
// over its own group once its last backward is done.
TEST(TrainTrace, EachReplicasStageIsALaneAndReducesItsGradientsWithItsGroup) {
  TempDir dir;
  ParallelOptions o;
  o.replicas = 2, o.pipeline.stages = "0-2@cpu:0,3-6@cpu:1", o.pipeline.schedule = "1f1b", o.pipeline.micro_batches = 2;
  auto runner = make_runner(bucketed_net(), kSgd, 1, o);
  TraceFile t = traced_steps(*runner, 1, dir);
  for (int d = 0; d < 2; ++d) {
    for (int s = 0; s < 2; ++s) {
      const std::string name = "replica " + std::to_string(d) + " stage " + std::to_string(s);
      const std::vector<TraceSpan> ops = spans_of(t, name, "micro-batch ");
      ASSERT_EQ(ops.size(), 4u) << name;
      const std::vector<TraceSpan> reduce = spans_of(t, name, "allreduce stage " + std::to_string(s));
      ASSERT_EQ(reduce.size(), 1u) << name;
      EXPECT_GE(reduce[0].begin, ops.back().end) << name;
      const std::vector<TraceSpan> group =
          spans_of(t, "stage " + std::to_string(s) + " group comm " + std::to_string(d), "");
      const auto reduction = std::find_if(group.begin(), group.end(), [&](const TraceSpan& span) {
        return span.name.find("stage " + std::to_string(s) + " gradients") != std::string::npos;
      });
      ASSERT_NE(reduction, group.end()) << name;
      EXPECT_NE(reduction->name.rfind("allreduce", 0), std::string::npos) << reduction->name;
      EXPECT_EQ(reduction->args["bytes"], reduce[0].args["bytes"]) << reduction->name;
    }
  }
}

TEST(TrainTrace, ARunWithoutTracingRecordsNothing) {
  TempDir dir;
  trace::write(dir.file("before.json"));  // whatever earlier tests of this process left
  auto runner = make_runner(bucketed_net(), kSgd, 2, parallel("ddp"));
  for (int s = 0; s < 2; ++s) {
    HostBatch b = make_batch(kBatch, uint64_t(s));
    runner->step(b.batch);
  }
  EXPECT_EQ(trace::write(dir.file("off.json")), 0u);
}

// The clock shift of another host: the median difference of readings taken together, so
// that one reading disturbed by a descheduled rank does not move it.
TEST(JobTrace, ClockShiftIsTheMedianDifferenceOfPairedReadings) {
  EXPECT_EQ(clock_shift_ns({100, 200, 300, 400, 500}, {90, 190, 290, 390, 490}), 10);
  EXPECT_EQ(clock_shift_ns({100, 200, 300, 400, 500}, {90, 190, -5000, 390, 490}), 10) << "an outlier";
  EXPECT_EQ(clock_shift_ns({1000}, {1500}), -500);
  EXPECT_THROW(clock_shift_ns({1, 2}, {1}), Error);
}

// Texts of any length (none, one word, not a whole number of words, with a NUL) reach
// every rank whole and in rank order, over the collectives every transport has.
TEST(JobTrace, AllgatherTextGivesEveryRankEveryText) {
  const std::vector<std::string> texts = {"", "rank one, thirteen", std::string("a\0b", 3)};
  auto comms = comm::make_local_group(int(texts.size()));
  std::vector<std::vector<std::string>> got(texts.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < texts.size(); ++r) {
    threads.emplace_back([&, r] { got[r] = allgather_text(*comms[r], Device::cpu(), texts[r]); });
  }
  for (std::thread& t : threads) t.join();
  for (size_t r = 0; r < texts.size(); ++r) EXPECT_EQ(got[r], texts) << "on rank " << r;
}

// A trace window removes what a run killed while writing its file left ("<path>.tmp-" and
// six characters), and nothing else.
TEST(TraceWindowFile, StaleTemporaryFilesOfThePathAreRemovedOthersKept) {
  TempDir dir;
  const std::string path = dir.file("t.json");
  for (const std::string& name : {"t.json.tmp-a1B2c3", "t.json.tmp-zzzzzz", "t.json.tmp-short", "u.json.tmp-a1B2c3",
                                  "t.json"}) {
    std::ofstream(dir.file(name)) << "x";
  }
  TraceWindow window(path, 3, 0, 10, [](const std::string&) { return size_t(0); });
  std::vector<std::string> left;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) left.push_back(entry.path().filename());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"t.json", "t.json.tmp-short", "u.json.tmp-a1B2c3"}));
}

// On a GPU, each replica's spans also appear on a lane of its stream, at the times the GPU
// ran them: never before the host queued them, nested as on the host, one per host span.
TEST(TrainTrace, CudaReplicasGetALanePerStreamWithDeviceTimes) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: device-side span times (CUDA events) need the GPU machine";
  TempDir dir;
  const Device gpu = Device::cuda(0);
  ParallelOptions options = parallel("ddp");
  options.replicas = 2;
  options.devices.assign(2, gpu);
  // 8x8 images: the host build's emulated GPU runs each CUDA thread in turn.
  auto net = layers::parse_layer_spec("conv(4,3,s2,p1) relu flatten linear(64) relu linear(10)", {3, 8, 8});
  auto runner = make_runner(std::make_unique<layers::Model>(std::move(net), Shape{3, 8, 8}, gpu, DType::Float32, 5),
                            kSgd, 1, options);
  TraceFile t = traced_steps(*runner, 2, dir, {3, 8, 8});
  for (int r = 0; r < 2; ++r) expect_device_lane_mirrors(t, lane("replica", r), "cuda:0 stream ", "forward");
}

}  // namespace
}  // namespace dpcore::testing
