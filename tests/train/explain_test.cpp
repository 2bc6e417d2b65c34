// --explain (train/observe/explain.h): what it tells of a step must be what the runner did. Each
// number is checked against what is known without the runner after a real step: the
// model's buffers counted by hand, the optimizer and shares the test asked for, the loss
// computed from the model's logits; ddp's buckets against its reducer and their ready
// order; and the ring schedule against the ring's rules: each step a permutation of the
// chunks, every chunk reduced at its owner and delivered to every other rank exactly once.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "comm/ring.h"
#include "equivalence.h"
#include "train/observe/explain.h"
#include "train/step/step.h"

namespace dpcore::testing {
namespace {

constexpr int kReplicas = 3;

// Three buckets with a tiny --bucket-mb: the first (capped at 1 MiB) closes after the 1 MiB
// weight of the first linear layer, then the convolution's bias and weight get one each.
std::unique_ptr<layers::Model> small_net() {
  auto net = layers::parse_layer_spec("conv(4,3,s2,p1) relu flatten linear(256) relu linear(10)", {3, 32, 32});
  return std::make_unique<layers::Model>(std::move(net), Shape{3, 32, 32}, Device::cpu(), DType::Float32, 5);
}

ParallelOptions parallel(const std::string& mode, int replicas, const std::string& split, double bucket_mb = 25) {
  ParallelOptions o;
  o.replicas = replicas;
  o.mode = mode;
  o.split = split;
  o.bucket_mb = bucket_mb;
  return o;
}

struct Explained {
  HostBatch batch;
  Explanation e;
};
Explained step_and_explain(StepRunner& runner, int64_t n) {
  HostBatch b = make_batch(n, 3);
  StepStats stats = runner.step(b.batch);
  Explanation e = explain_step(runner, b.batch, stats);
  return {std::move(b), std::move(e)};
}

// small_net's parameters, counted by hand: the convolution 4x3x3x3 + 4 on 3x32x32 (stride 2,
// padding 1: 4x16x16 = 1024 outputs), then 1024x256 + 256 and 256x10 + 10; in the flat
// buffer each tensor starts at a multiple of 16 elements (engine/flat_parameters.h), so
// 108, 4 and 10 take 112, 16 and 16.
constexpr int64_t kTensors = 6;
constexpr int64_t kElements = 112 + 16 + 1024 * 256 + 256 + 256 * 10 + 16;  // 265104
constexpr int64_t kFloatBytes = kElements * int64_t(sizeof(float));

// The mean cross-entropy of small_net as built (before any step) on `b`, in float64 from its
// float32 logits.
double loss_before_the_step(const HostBatch& b) {
  auto net = small_net();
  const Tensor logits = net->forward_logits(Tensor::from_vector(b.images, {b.batch.size, 3, 32, 32}));
  const std::vector<float> z = logits.to_vector<float>();
  double sum = 0;
  for (int64_t i = 0; i < b.batch.size; ++i) {
    const float* row = z.data() + i * 10;
    const double top = *std::max_element(row, row + 10);
    double exp_sum = 0;
    for (int c = 0; c < 10; ++c) exp_sum += std::exp(double(row[c]) - top);
    sum += top + std::log(exp_sum) - double(row[b.labels[size_t(i)]]);
  }
  return sum / double(b.batch.size);
}

// What every kind of runner reports the same way: the batch, the flat buffers, the
// optimizer it was given, the loss and the seed, each against what is known without the
// runner: the model counted by hand, kSgd, and the loss computed here. The step's loss is
// a float32 sum of float32 per-sample losses (replicas: of their shares'), each within a
// few float32 ulps (1e-7) of float64 times the 1024-term dot products' growth, far inside 1e-5.
void expect_common(const Explained& x) {
  const Explanation& e = x.e;
  const HostBatch& b = x.batch;
  const int64_t n = b.batch.size;
  EXPECT_EQ(e.batch, n);
  EXPECT_EQ(e.image_bytes, 3 * 32 * 32 * 4);
  EXPECT_EQ(e.label_bytes, 8);
  EXPECT_EQ(e.classes, 10);
  EXPECT_EQ(e.param_tensors, kTensors);
  EXPECT_EQ(e.param_elements, kElements);
  EXPECT_EQ(e.param_bytes, kFloatBytes);
  EXPECT_EQ(e.grad_bytes, kFloatBytes);
  EXPECT_EQ(e.momentum_bytes, kFloatBytes);  // kSgd has momentum
  EXPECT_EQ(e.buffer_bytes, 0);              // no batch norm
  EXPECT_EQ(e.sgd.lr, kSgd.lr);
  EXPECT_EQ(e.sgd.momentum, kSgd.momentum);
  EXPECT_EQ(e.sgd.dampening, kSgd.dampening);
  EXPECT_EQ(e.sgd.weight_decay, kSgd.weight_decay);
  EXPECT_EQ(e.sgd.nesterov, kSgd.nesterov);
  EXPECT_EQ(e.sgd_steps, 1);
  EXPECT_DOUBLE_EQ(e.seed, 1.0 / double(n));
  const double loss = loss_before_the_step(b);
  EXPECT_NEAR(e.loss, loss, 1e-5 * loss);
  const std::string text = render(e);
  EXPECT_NE(text.find("1/" + std::to_string(n)), std::string::npos) << text;
}

TEST(Explain, DdpBucketsSharesAndBuffersAreTheRunnersOwn) {
  constexpr int64_t kN = 23;  // even: 8, 8, 7
  auto runner = make_runner(small_net(), kSgd, 1, parallel("ddp", kReplicas, "even", 1e-5));
  Explained x = step_and_explain(*runner, kN);
  const Explanation& e = x.e;
  expect_common(x);
  EXPECT_EQ(e.micro, (std::vector<int64_t>{kN}));
  EXPECT_EQ(e.shares, (std::vector<std::vector<int64_t>>{{8, 8, 7}}));
  EXPECT_EQ(e.split, "even");
  EXPECT_EQ(e.kind, Explanation::Kind::Distributed);
  EXPECT_EQ(e.replicas, kReplicas);
  EXPECT_EQ(e.ranks, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(e.backend, "local");

  // Backward finalises the gradients from the last layer back: the first bucket (capped at
  // 1 MiB) holds both linear layers and closes after the 1 MiB weight of the first, then the
  // convolution's bias and weight (each over the 10-byte --bucket-mb 1e-5) get one each.
  // Their element ranges in the flat buffer, padding included (above): the convolution's
  // weight [0, 112), its bias [112, 128), the linear layers [128, kElements).
  struct Want {
    int64_t begin, end;
    std::vector<std::string> params;
    int64_t ready_after;
  };
  const std::vector<Want> want = {{128, kElements, {"5.bias", "5.weight", "3.bias", "3.weight"}, 4},
                                  {112, 128, {"0.bias"}, 5},
                                  {0, 112, {"0.weight"}, 6}};
  ASSERT_EQ(e.buckets.size(), want.size());
  for (size_t b = 0; b < want.size(); ++b) {
    const ExplainedBucket& k = e.buckets[b];
    EXPECT_EQ(k.begin, want[b].begin) << b;
    EXPECT_EQ(k.end, want[b].end) << b;
    EXPECT_EQ(k.bytes, (want[b].end - want[b].begin) * 4) << b;
    EXPECT_EQ(k.params, want[b].params) << b;
    EXPECT_EQ(k.ready_after, want[b].ready_after) << b;
  }
  EXPECT_EQ(e.first_cap_bytes, 1 << 20);
  EXPECT_EQ(e.cap_bytes, 10);  // 1e-5 MiB

  // The ring schedule is bucket 0's: 2(R-1) steps over its elements.
  EXPECT_EQ(e.ring_begin, 128);
  EXPECT_EQ(e.ring_end, kElements);
  EXPECT_EQ(e.ring.size(), size_t(2 * (kReplicas - 1)));
  const std::string text = render(e);
  for (const ExplainedBucket& k : e.buckets) EXPECT_NE(text.find(k.params.front()), std::string::npos) << text;
}

TEST(Explain, UnevenWeightsShowInTheSharesAndTheDpMoves) {
  constexpr int64_t kN = 16;
  auto runner = make_runner(small_net(), kSgd, 2, parallel("dp", 2, "weights:3,1"));
  Explained x = step_and_explain(*runner, kN);
  const Explanation& e = x.e;
  expect_common(x);
  EXPECT_EQ(e.micro, (std::vector<int64_t>{8, 8}));
  EXPECT_EQ(e.shares, (std::vector<std::vector<int64_t>>{{6, 2}, {6, 2}}));  // 3:1 of each micro-batch of 8
  EXPECT_EQ(e.kind, Explanation::Kind::DataParallel);
  EXPECT_EQ(e.split, "weights");
  EXPECT_EQ(e.weights, (std::vector<double>{3, 1}));
  // dp reduces the whole gradient buffer at once: that is the ring's buffer.
  EXPECT_EQ(e.ring_begin, 0);
  EXPECT_EQ(e.ring_end, kElements);
  EXPECT_EQ(e.ring.size(), 2u);
  EXPECT_TRUE(e.buckets.empty());
  const std::string text = render(e);
  EXPECT_NE(text.find("gather"), std::string::npos) << text;
  EXPECT_NE(text.find("weights 3:1"), std::string::npos) << text;
}

// --grad-dtype bf16: the buckets, the ring's chunks and dp's one allreduce count bfloat16
// bytes, and the text says the gradients are rounded into the copy and widened back.
TEST(Explain, ABfloat16AllreduceCountsItsBytesAndSaysSo) {
  for (const std::string mode : {"ddp", "dp"}) {
    SCOPED_TRACE(mode);
    ParallelOptions options = parallel(mode, 2, "even", 1e-5);
    options.grad_dtype = "bf16";
    auto runner = make_runner(small_net(), kSgd, 1, options);
    Explained x = step_and_explain(*runner, 16);
    const Explanation& e = x.e;
    EXPECT_EQ(e.wire_dtype, "bfloat16");
    EXPECT_EQ(e.wire_bytes, kElements * 2);
    int64_t bucket_bytes = 0;
    for (const ExplainedBucket& b : e.buckets) bucket_bytes += b.bytes;
    EXPECT_EQ(bucket_bytes, mode == "ddp" ? kElements * 2 : 0);
    const std::string text = render(e);
    EXPECT_NE(text.find("bfloat16 copy (530,208 B, --grad-dtype)"), std::string::npos) << text;
    EXPECT_NE(text.find("widen"), std::string::npos) << text;
  }
}

TEST(Explain, OneDeviceTellsMicroBatchesSeedAndSgd) {
  constexpr int64_t kN = 10;
  auto runner = make_runner(small_net(), kSgd, 3, ParallelOptions{});
  Explained x = step_and_explain(*runner, kN);
  expect_common(x);
  EXPECT_EQ(x.e.kind, Explanation::Kind::SingleDevice);
  EXPECT_EQ(x.e.micro, (std::vector<int64_t>{4, 3, 3}));
  EXPECT_TRUE(x.e.shares.empty());
  EXPECT_TRUE(x.e.ring.empty());
}

// The schedule explain prints is the ring's: comm/ring.h's moves over ring::chunk_range.
TEST(Explain, RingScheduleCoversEveryChunkOncePerPhase) {
  for (int n = 1; n <= 5; ++n) {
    const int64_t begin = 100, end = 100 + 7 * n + 2;  // uneven chunks
    // The ring sends at step s+1 what it received at step s (ring.cpp relies on it), and
    // receives what its left neighbour sends.
    for (int r = 0; r < n; ++r) {
      for (int s = 0; s + 1 < n; ++s) {
        for (auto move : {comm::ring::reduce_scatter_move, comm::ring::allgather_move}) {
          EXPECT_EQ(move(n, r, s).receive, move(n, comm::ring::left_of(r, n), s).send) << n << " " << r << " " << s;
          if (s + 2 < n) EXPECT_EQ(move(n, r, s + 1).send, move(n, r, s).receive) << n << " " << r << " " << s;
        }
      }
    }
    const std::vector<RingStep> steps = ring_schedule(n, begin, end);
    ASSERT_EQ(steps.size(), size_t(2 * (n - 1))) << n;
    // [phase][rank]: chunks received; the reduce-scatter's last receive per rank.
    std::vector<std::vector<std::multiset<int>>> received(2, std::vector<std::multiset<int>>(size_t(n)));
    std::vector<int> last_reduced(size_t(n), -1);
    for (const RingStep& step : steps) {
      ASSERT_EQ(step.transfers.size(), size_t(n));
      std::set<int> sent;
      for (int r = 0; r < n; ++r) {
        const RingTransfer& t = step.transfers[size_t(r)];
        EXPECT_EQ(t.from, r);
        EXPECT_EQ(t.to, (r + 1) % n);
        const comm::ring::Range c = comm::ring::chunk_range(end - begin, n, t.chunk);
        EXPECT_EQ(t.begin, begin + c.begin);
        EXPECT_EQ(t.end, begin + c.end);
        sent.insert(t.chunk);
        received[step.reduce ? 0 : 1][size_t(t.to)].insert(t.chunk);
        if (step.reduce && step.step == n - 2) last_reduced[size_t(t.to)] = t.chunk;
      }
      EXPECT_EQ(int(sent.size()), n) << "each step moves every chunk once (n " << n << ")";
    }
    for (int r = 0; r < n; ++r) {
      // Allgather: every chunk but its own reaches rank r exactly once.
      std::multiset<int> others;
      for (int c = 0; c < n; ++c) {
        if (c != r) others.insert(c);
      }
      EXPECT_EQ(received[1][size_t(r)], others) << "n " << n << " rank " << r;
      // Reduce-scatter: rank r adds to n-1 distinct chunks, ending with its own, complete.
      EXPECT_EQ(std::set<int>(received[0][size_t(r)].begin(), received[0][size_t(r)].end()).size(), size_t(n - 1));
      if (n > 1) EXPECT_EQ(last_reduced[size_t(r)], r) << "n " << n;
    }
  }
}

}  // namespace
}  // namespace dpcore::testing
