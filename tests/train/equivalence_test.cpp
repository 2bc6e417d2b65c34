// The test that matters: R replicas, in either mode, with accumulation and uneven shares,
// end up with the parameters of single-replica training on the whole batch.
#include <gtest/gtest.h>

#include <thread>

#include "train/runners/data_parallel.h"
#include "train/runners/ddp.h"
#include "equivalence.h"

namespace dpcore::train {

using namespace dpcore::comm;
using namespace dpcore::layers;

namespace {

using testing::kSgd;

using Case = testing::RunnerCase;

class Equivalence : public ::testing::TestWithParam<Case> {};

TEST_P(Equivalence, FiveStepsEqualSingleReplicaTraining) {
  const Case c = GetParam();
  const int64_t n = 13;  // does not divide by 2, 3 or 4
  train::ParallelOptions options;
  options.replicas = c.replicas, options.mode = c.mode, options.split = c.split;
  options.timeout_s = 60;
  auto runner = train::make_runner(testing::simplenet(), kSgd, c.accum, options);
  auto got = testing::train_with(*runner, n, 5);
  double diff = testing::relative_difference(got, testing::reference_params(n, 5));
  EXPECT_LE(diff, 1e-5) << runner->describe();
  std::cout << runner->describe() << ": relative difference " << diff << "\n";
}

std::vector<Case> cases() {
  std::vector<Case> out = testing::runner_cases({1, 2, 3, 4}, {1, 3});
  for (std::string mode : {"dp", "ddp"}) out.push_back({mode, 3, 1, "adaptive"});
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllModes, Equivalence, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return testing::case_name(info.param); });

// On a GPU: R replicas sharing one GPU (each on its own stream, local backend), and NCCL at
// world size 1 (NCCL refuses two ranks on one GPU), against one replica on the same GPU.
TEST(GpuEquivalence, ReplicasOnOneGpuAndNcclAtWorldSizeOne) {
  if (!testing::cuda_available()) GTEST_SKIP() << "no CUDA device: the GPU data-parallel paths are checked on the GPU machine";
  const int64_t n = 13;
  const Device gpu = Device::cuda(0);
  auto reference = testing::reference_params(n, 5, gpu);
  struct GpuCase {
    std::string mode, backend;
    int replicas;
    int64_t accum;
  };
  for (const GpuCase& c : std::vector<GpuCase>{{"dp", "local", 2, 1}, {"dp", "local", 4, 3}, {"ddp", "local", 2, 3},
                                               {"ddp", "local", 4, 1}, {"ddp", "nccl", 1, 1}, {"ddp", "nccl", 1, 3}}) {
    train::ParallelOptions options;
    options.mode = c.mode, options.backend = c.backend, options.replicas = c.replicas, options.timeout_s = 60;
    options.devices.assign(size_t(c.replicas), gpu);
    auto runner = train::make_runner(testing::simplenet(5, gpu), kSgd, c.accum, options);
    double diff = testing::relative_difference(testing::train_with(*runner, n, 5), reference);
    EXPECT_LE(diff, 1e-5) << runner->describe();
    std::cout << runner->describe() << ": relative difference " << diff << "\n";
  }
}

TEST(Replicas, StayBitIdenticalWithoutReBroadcast) {
  train::ParallelOptions options;
  options.replicas = 3, options.mode = "ddp", options.split = "weights:1,2,4";
  DistributedRunner runner(testing::simplenet(), kSgd, 1, options);
  testing::train_with(runner, 10, 3);
  // The reduce leaves identical gradients on every replica and each takes its own SGD step:
  // the replicas stay bit-identical with no parameter broadcast after the first.
  ASSERT_EQ(runner.local_replicas(), 3u);
  auto root = runner.replica_model(0).parameters().values().to_vector<float>();
  for (size_t r = 1; r < 3; ++r) {
    EXPECT_EQ(runner.replica_model(r).parameters().values().to_vector<float>(), root) << "replica " << r;
  }
}

TEST(Buckets, ReverseOrderCapsAndTiling) {
  auto model = testing::simplenet();
  const FlatParameters& p = model->parameters();
  // fc.weight is 160 KiB: with a 1 KiB first cap the first bucket is fc.bias + fc.weight
  // (overshooting by one tensor), then conv.bias + conv.weight.
  auto buckets = make_buckets(p, 1024, 1024);
  ASSERT_EQ(buckets.size(), 2u);
  EXPECT_EQ(buckets[0].params, (std::vector<size_t>{3, 2}));
  EXPECT_EQ(buckets[1].params, (std::vector<size_t>{1, 0}));
  EXPECT_EQ(buckets[0].end, p.total());
  EXPECT_EQ(buckets[1].end, buckets[0].begin);  // contiguous, no gaps
  EXPECT_EQ(buckets[1].begin, 0);
  // Large caps: everything in one bucket after the 1 MiB first one.
  auto big = make_buckets(p, size_t(1) << 20, size_t(25) << 20);
  EXPECT_EQ(big.size(), 1u);
}

TEST(Buckets, TensorSizesAloneCutAsTheFlatBufferDoes) {
  // dpcore predict cuts a profile's tensors (of a model dpcore need not build) with
  // bucket_params: the same buckets as make_buckets over the model's flat buffer.
  auto model = testing::simplenet();
  const FlatParameters& p = model->parameters();
  std::vector<int64_t> bytes;
  for (size_t k = 0; k < p.entries().size(); ++k) {
    const int64_t end = k + 1 < p.entries().size() ? p.entries()[k + 1].offset : p.total();
    bytes.push_back((end - p.entries()[k].offset) * int64_t(dtype_size(p.dtype())));
  }
  for (size_t cap : {size_t(16), size_t(1024), size_t(100000), size_t(25) << 20}) {
    std::vector<std::vector<size_t>> expected;
    for (const Bucket& b : make_buckets(p, cap, cap)) expected.push_back(b.params);
    EXPECT_EQ(bucket_params(bytes, cap, cap), expected) << cap;
  }
  // A 1 KiB first bucket, then 2 KiB ones; each overshoots by the tensor that fills it.
  EXPECT_EQ(bucket_params({500, 600, 1500, 600, 600}, 1024, 2048),
            (std::vector<std::vector<size_t>>{{4, 3}, {2, 1}, {0}}));
}

TEST(Buckets, RunnerTakesBothCapsFromItsOptions) {
  ParallelOptions options;
  options.replicas = 2, options.mode = "ddp";
  DistributedRunner defaults(testing::simplenet(), kSgd, 1, options);
  EXPECT_EQ(defaults.first_bucket_cap_bytes(), size_t(1) << 20);  // PyTorch's first bucket
  EXPECT_EQ(defaults.bucket_cap_bytes(), size_t(25) << 20);
  EXPECT_EQ(defaults.reducer(0).buckets().size(), 1u);  // simplenet's 170 KiB fit in the first
  options.first_bucket_mb = 1.0 / 1024, options.bucket_mb = 1.0 / 1024;  // 1 KiB each (the benchmarks' sweep)
  DistributedRunner small(testing::simplenet(), kSgd, 1, options);
  EXPECT_EQ(small.first_bucket_cap_bytes(), 1024u);
  EXPECT_EQ(small.reducer(0).buckets().size(), 2u);  // as make_buckets(p, 1024, 1024) above
}

TEST(Split, ChunkSemanticsAndWeights) {
  EXPECT_EQ(chunk_sizes(5, 4), (std::vector<int64_t>{2, 2, 1, 0}));  // PyTorch leaves a replica idle
  EXPECT_EQ(chunk_sizes(13, 4), (std::vector<int64_t>{4, 4, 4, 1}));
  EXPECT_EQ(weighted_sizes(10, {3, 1}), (std::vector<int64_t>{8, 2}));
  EXPECT_EQ(weighted_sizes(7, {1, 1, 1}), (std::vector<int64_t>{3, 2, 2}));
  EXPECT_THROW(Splitter("weights:1,2", 3), Error);
  EXPECT_THROW(Splitter("weights:1,-2", 2), Error);
  EXPECT_THROW(Splitter("fastest", 2), Error);
}

TEST(Split, AdaptiveShiftsWorkToTheFasterReplica) {
  Splitter s("adaptive", 2);
  EXPECT_EQ(s.shares(100), (std::vector<int64_t>{50, 50}));
  for (int i = 0; i < Splitter::kInterval; ++i) s.observe({1.0, 3.0}, {50, 50});  // replica 1 is 3x slower
  auto shares = s.shares(100);
  EXPECT_EQ(shares[0] + shares[1], 100);
  EXPECT_EQ(shares, (std::vector<int64_t>{75, 25}));
}

// A layer that fails on one replica: the one whose share has `rows` rows.
class FailOnRows : public layers::Module {
 public:
  FailOnRows(int64_t rows, int sleep_ms) : rows_(rows), sleep_ms_(sleep_ms) {}
  Tensor forward(const Tensor& x) override {
    if (x.size(0) == rows_) {
      if (sleep_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms_));
      else fail("injected failure on a share of ", rows_, " rows");
    }
    return x;
  }
  Shape output_shape(const Shape& in) const override { return in; }
  std::string describe() const override { return "fail_on_rows"; }
  std::unique_ptr<layers::Module> clone() const override { return std::make_unique<FailOnRows>(rows_, sleep_ms_); }

 private:
  int64_t rows_;
  int sleep_ms_;
};

std::unique_ptr<layers::Model> failing_model(int sleep_ms) {
  auto net = layers::parse_layer_spec("flatten linear(10)", {3, 32, 32});
  auto seq = std::make_unique<layers::Sequential>();
  seq->add("trap", std::make_unique<FailOnRows>(5, sleep_ms));
  for (size_t i = 0; i < net->size(); ++i) seq->add(net->child(i).clone());
  return std::make_unique<layers::Model>(std::move(seq), Shape{3, 32, 32});
}

TEST(Failures, AReplicaThatThrowsEndsTheRunNamingIt) {
  for (std::string mode : {"dp", "ddp"}) {
    train::ParallelOptions options;
    options.replicas = 3, options.mode = mode, options.split = "weights:1,1,5", options.timeout_s = 30;
    auto runner = train::make_runner(failing_model(0), kSgd, 1, options);
    testing::HostBatch b = testing::make_batch(7, 1);  // shares 1, 1, 5: replica 2 fails
    try {
      runner->step(b.batch);
      FAIL() << mode << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("replica 2"), std::string::npos) << mode << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find("injected failure"), std::string::npos) << mode << ": " << e.what();
    }
  }
}

TEST(Failures, ASilentReplicaTimesOutInsteadOfHanging) {
  train::ParallelOptions options;
  options.replicas = 3, options.mode = "ddp", options.split = "weights:1,1,5", options.timeout_s = 1;
  auto runner = train::make_runner(failing_model(3000), kSgd, 1, options);
  testing::HostBatch b = testing::make_batch(7, 1);
  auto t0 = std::chrono::steady_clock::now();
  try {
    runner->step(b.batch);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("replica"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
}

}  // namespace
}  // namespace dpcore::train
