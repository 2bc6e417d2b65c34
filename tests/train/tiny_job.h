// The tiny job the fault-tolerance tests train (tests/train/fault_tolerance_test.cpp,
// tests/train/shrink_test.cpp): batches of 1x8x8 samples in 4 classes, a small network, and
// runners made from a few options.
#pragma once

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/error.h"
#include "layers/zoo.h"
#include "support/error_of.h"
#include "support/test_support.h"
#include "train/faults/fault_injection.h"
#include "train/runners/runner.h"

namespace dpcore::train::tiny_job {

// Samples per batch unless a test asks for another size.
constexpr int64_t kBatch = 8;
// Without batch norm (a skipped step then leaves every piece of state as it was), and with.
inline const std::string kNet = "conv(4,3,p1) relu pool(2) flatten linear(4)";
inline const std::string kBatchNormNet = "conv(4,3,p1) bn relu pool(2) flatten linear(4)";

struct TinyBatch {
  std::vector<float> images;
  std::vector<int64_t> labels;
  data::Batch batch;
};

inline TinyBatch tiny_batch(uint64_t seed, int64_t size = kBatch) {
  TinyBatch b;
  b.images = testing::random_vector<float>(size_t(size * 64), seed);
  for (int64_t i = 0; i < size; ++i) b.labels.push_back((i * 3 + int64_t(seed)) % 4);
  b.batch.size = size, b.batch.sample = {1, 8, 8};
  b.batch.images = b.images.data(), b.batch.labels = b.labels.data();
  return b;
}

inline std::unique_ptr<layers::Model> tiny_model(const std::string& spec = kNet) {
  auto net = layers::parse_layer_spec(spec, {1, 8, 8});
  return std::make_unique<layers::Model>(std::move(net), Shape{1, 8, 8}, Device::cpu(), DType::Float32, 3);
}

inline const SgdConfig kSgd{0.1, 0.9, 0.0, 0.0, false};

// The options of `replicas` replicas in `mode` with these faults (--inject syntax).
inline ParallelOptions parallel(int replicas, const std::string& mode, const std::string& faults = "",
                                double timeout_s = 30) {
  ParallelOptions o;
  o.replicas = replicas;
  o.mode = mode;
  o.timeout_s = timeout_s;
  o.faults = FaultInjector(faults.empty() ? std::vector<Fault>{} : parse_faults(faults));
  return o;
}

inline std::unique_ptr<StepRunner> runner(const ParallelOptions& o, const std::string& model = kNet,
                                          int64_t accum = 1, const OptimizerConfig& optimizer = kSgd) {
  return make_runner(tiny_model(model), optimizer, accum, o);
}

// `replicas` replicas in `mode` (one replica: the single-device runner), with these
// faults and guards.
inline std::unique_ptr<StepRunner> runner(int replicas, const std::string& mode, const std::string& faults,
                                          GuardOptions guards = {}, double timeout_s = 30) {
  ParallelOptions o = parallel(replicas, mode, faults, timeout_s);
  o.guards = guards;
  return runner(o);
}

// Step number `step` (from 1) on batch `step`.
inline StepStats step(StepRunner& r, int64_t step, int64_t batch = kBatch) {
  TinyBatch b = tiny_batch(uint64_t(step), batch);
  r.set_step_number(step);
  return r.step(b.batch);
}

inline std::vector<float> params(StepRunner& r) { return r.model().parameters().values().to_vector<float>(); }
inline std::vector<float> momentum(StepRunner& r) { return r.optimizer().state("momentum").to_vector<float>(); }

using dpcore::testing::error_of;

inline bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace dpcore::train::tiny_job
