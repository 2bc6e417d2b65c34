// --explain (train/explain.h): what it tells of a step must be what the runner did. Every
// number is checked against the runner's own state after a real step (its splitter's
// shares, its reducer's buckets and their ready order, its flat buffers, its optimizer),
// and the ring schedule against the ring's rules: each step a permutation of the chunks,
// every chunk reduced at its owner and delivered to every other rank exactly once.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "comm/ring.h"
#include "equivalence.h"
#include "train/data_parallel.h"
#include "train/ddp.h"
#include "train/explain.h"
#include "train/step.h"

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
  Explanation e;
  StepStats stats;
};
Explained step_and_explain(StepRunner& runner, int64_t n) {
  HostBatch b = make_batch(n, 3);
  StepStats stats = runner.step(b.batch);
  return {explain_step(runner, b.batch, stats), stats};
}

// What every kind of runner reports the same way: flat buffers, optimizer, loss, seed.
void expect_common(const Explained& x, StepRunner& runner, int64_t n) {
  const Explanation& e = x.e;
  const FlatParameters& params = runner.model().parameters();
  EXPECT_EQ(e.batch, n);
  EXPECT_EQ(e.image_bytes, 3 * 32 * 32 * int64_t(sizeof(float)));
  EXPECT_EQ(e.classes, runner.model().num_classes());
  EXPECT_EQ(e.param_tensors, int64_t(params.entries().size()));
  EXPECT_EQ(e.param_elements, params.total());
  EXPECT_EQ(e.param_bytes, int64_t(params.values().nbytes()));
  EXPECT_EQ(e.grad_bytes, int64_t(params.grads().nbytes()));
  EXPECT_EQ(e.momentum_bytes, int64_t(runner.optimizer().momentum().nbytes()));
  EXPECT_GT(e.momentum_bytes, 0);  // kSgd has momentum
  EXPECT_EQ(e.sgd.lr, runner.optimizer().config().lr);
  EXPECT_EQ(e.sgd.momentum, runner.optimizer().config().momentum);
  EXPECT_EQ(e.sgd.weight_decay, runner.optimizer().config().weight_decay);
  EXPECT_EQ(e.sgd.nesterov, runner.optimizer().config().nesterov);
  EXPECT_EQ(e.sgd_steps, 1);
  EXPECT_DOUBLE_EQ(e.seed, 1.0 / double(n));
  EXPECT_DOUBLE_EQ(e.loss, x.stats.loss_sum.item() / double(n));
  const std::string text = render(e);
  EXPECT_NE(text.find("1/" + std::to_string(n)), std::string::npos) << text;
}

// The shares the explanation gives are the runner's, which are its splitter's.
void expect_shares(const Explanation& e, const ReplicatedRunner& runner, int64_t n, int64_t accum) {
  EXPECT_EQ(e.shares, runner.last_shares());
  const std::vector<int64_t> micro = even_split(n, accum);
  EXPECT_EQ(e.micro, micro);
  ASSERT_EQ(e.shares.size(), micro.size());
  for (size_t m = 0; m < micro.size(); ++m) EXPECT_EQ(e.shares[m], runner.splitter().shares(micro[m])) << m;
}

TEST(Explain, DdpBucketsSharesAndBuffersAreTheRunnersOwn) {
  constexpr int64_t kN = 23;  // even: 8, 8, 7
  auto runner = make_runner(small_net(), kSgd, 1, parallel("ddp", kReplicas, "even", 1e-5));
  const auto& ddp = dynamic_cast<const DistributedRunner&>(*runner);
  Explained x = step_and_explain(*runner, kN);
  const Explanation& e = x.e;
  expect_common(x, *runner, kN);
  expect_shares(e, ddp, kN, 1);
  EXPECT_EQ(e.shares[0], (std::vector<int64_t>{8, 8, 7}));
  EXPECT_EQ(e.kind, Explanation::Kind::Distributed);
  EXPECT_EQ(e.replicas, kReplicas);
  EXPECT_EQ(e.ranks, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(e.backend, "local");

  const std::vector<Bucket>& buckets = ddp.reducer(0).buckets();
  const auto& entries = runner->model().parameters().entries();
  ASSERT_EQ(e.buckets.size(), buckets.size());
  ASSERT_GE(buckets.size(), 3u);
  std::vector<int64_t> ready;
  for (size_t b = 0; b < buckets.size(); ++b) {
    const ExplainedBucket& k = e.buckets[b];
    EXPECT_EQ(k.begin, buckets[b].begin) << b;
    EXPECT_EQ(k.end, buckets[b].end) << b;
    EXPECT_EQ(k.bytes, int64_t(runner->model().parameters().grads().narrow0(k.begin, k.end).nbytes())) << b;
    ASSERT_EQ(k.params.size(), buckets[b].params.size()) << b;
    for (size_t i = 0; i < k.params.size(); ++i) EXPECT_EQ(k.params[i], entries[buckets[b].params[i]].name);
    ready.push_back(k.ready_after);
  }
  // Backward finalises the gradients from the last layer back, so the buckets become ready
  // in order, the last when every gradient has arrived.
  EXPECT_TRUE(std::is_sorted(ready.begin(), ready.end())) << ::testing::PrintToString(ready);
  EXPECT_GT(ready.front(), 0);
  EXPECT_EQ(ready.back(), int64_t(entries.size()));
  EXPECT_EQ(e.first_cap_bytes, int64_t(ddp.first_bucket_cap_bytes()));
  EXPECT_EQ(e.cap_bytes, int64_t(ddp.bucket_cap_bytes()));

  // The ring schedule is bucket 0's: 2(R-1) steps over its elements.
  EXPECT_EQ(e.ring_begin, buckets[0].begin);
  EXPECT_EQ(e.ring_end, buckets[0].end);
  EXPECT_EQ(e.ring.size(), size_t(2 * (kReplicas - 1)));
  const std::string text = render(e);
  for (const ExplainedBucket& k : e.buckets) EXPECT_NE(text.find(k.params.front()), std::string::npos) << text;
}

TEST(Explain, UnevenWeightsShowInTheSharesAndTheDpMoves) {
  constexpr int64_t kN = 16;
  auto runner = make_runner(small_net(), kSgd, 2, parallel("dp", 2, "weights:3,1"));
  const auto& dp = dynamic_cast<const DataParallelRunner&>(*runner);
  Explained x = step_and_explain(*runner, kN);
  const Explanation& e = x.e;
  expect_common(x, *runner, kN);
  expect_shares(e, dp, kN, 2);
  EXPECT_EQ(e.shares, (std::vector<std::vector<int64_t>>{{6, 2}, {6, 2}}));  // 3:1 of each micro-batch of 8
  EXPECT_EQ(e.kind, Explanation::Kind::DataParallel);
  EXPECT_EQ(e.split, "weights");
  EXPECT_EQ(e.weights, dp.splitter().weights());
  // dp reduces the whole gradient buffer at once: that is the ring's buffer.
  EXPECT_EQ(e.ring_begin, 0);
  EXPECT_EQ(e.ring_end, runner->model().parameters().total());
  EXPECT_EQ(e.ring.size(), 2u);
  EXPECT_TRUE(e.buckets.empty());
  const std::string text = render(e);
  EXPECT_NE(text.find("gather"), std::string::npos) << text;
  EXPECT_NE(text.find("weights 3:1"), std::string::npos) << text;
}

TEST(Explain, OneDeviceTellsMicroBatchesSeedAndSgd) {
  constexpr int64_t kN = 10;
  auto runner = make_runner(small_net(), kSgd, 3, ParallelOptions{});
  Explained x = step_and_explain(*runner, kN);
  expect_common(x, *runner, kN);
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
