// Shared by the equivalence tests: a fixed batch, single-replica reference training, and
// training through any runner, compared parameter by parameter.
#pragma once

#include <cctype>
#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include "kernels/index_check.h"
#include "train/runners/runner.h"
#include "layers/zoo.h"
#include "support/test_support.h"

namespace dpcore::testing {

using namespace dpcore::train;

struct HostBatch {
  std::vector<float> images;
  std::vector<int64_t> labels;
  data::Batch batch;
};

// `n` random images of shape `sample` with labels 0-9.
inline HostBatch make_batch(int64_t n, uint64_t seed, const std::vector<int64_t>& sample = {3, 32, 32}) {
  HostBatch h;
  int64_t numel = n;
  for (int64_t d : sample) numel *= d;
  h.images = random_vector<float>(size_t(numel), seed);
  for (int64_t i = 0; i < n; ++i) h.labels.push_back((i * 7 + int64_t(seed)) % 10);
  h.batch.size = n, h.batch.sample = sample;
  h.batch.images = h.images.data(), h.batch.labels = h.labels.data();
  return h;
}

inline std::unique_ptr<layers::Model> simplenet(uint64_t seed = 5, Device device = Device::cpu()) {
  layers::ModelDef def = layers::reference_model("simplenet");
  return std::make_unique<layers::Model>(std::move(def.net), def.input_shape, device, DType::Float32, seed);
}

const SgdConfig kSgd{0.05, 0.9, 0.0, 0.001, true};

// Parameters after `steps` steps of `runner` on the batches make(step) (step from 0), each
// step numbered as the trainer numbers it (from 1), read after settle() as the trainer reads
// them: an async runner's replica threads may still be applying updates to the master when
// step() returns (ThreadSanitizer reported that read racing Sgd's update in CI).
template <class MakeBatch>
std::vector<float> train_on(train::StepRunner& runner, int steps, MakeBatch make) {
  for (int s = 0; s < steps; ++s) {
    auto b = make(s);
    runner.set_step_number(s + 1);
    runner.step(b.batch);
  }
  runner.settle();
  return runner.model().parameters().values().to_vector<float>();
}

// Parameters after `steps` steps of `runner` on batches make_batch(n, 100 + step).
inline std::vector<float> train_with(train::StepRunner& runner, int64_t n, int steps) {
  return train_on(runner, steps, [n](int s) { return make_batch(n, uint64_t(100 + s)); });
}

inline std::vector<float> reference_params(int64_t n, int steps, Device device = Device::cpu()) {
  train::SingleDeviceRunner single(simplenet(5, device), kSgd, 1);
  return train_with(single, n, steps);
}

// Per-token batches, for the tests of weighting by counted targets: kTokens tokens of
// kTokenFeatures float values per sample and labels [n, kTokens] of kTokenClasses classes.
// Sample i counts its first (i^2 + 2 i + seed) % (kTokens + 1) tokens and the rest are
// ignore_index: from none to all, so micro-batches and replicas hold different numbers of
// counted tokens.
constexpr int64_t kTokens = 5, kTokenFeatures = 4, kTokenClasses = 6;

struct TokenBatch {
  std::vector<float> values;
  std::vector<int64_t> labels;
  data::Batch batch;
};

inline TokenBatch make_token_batch(int64_t n, uint64_t seed) {
  TokenBatch t;
  t.values = random_vector<float>(size_t(n * kTokens * kTokenFeatures), seed);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t counted = (i * i + 2 * i + int64_t(seed)) % (kTokens + 1);
    for (int64_t k = 0; k < kTokens; ++k) {
      t.labels.push_back(k < counted ? (i * 7 + k * 3 + int64_t(seed)) % kTokenClasses : kernels::kDefaultIgnoreIndex);
    }
  }
  t.batch.size = n, t.batch.sample = {kTokens, kTokenFeatures}, t.batch.labels_per_sample = kTokens;
  t.batch.images = t.values.data(), t.batch.labels = t.labels.data();
  return t;
}

// Per-token logits [n, kTokens, kTokenClasses] from a layer spec.
inline std::unique_ptr<layers::Model> token_net(uint64_t seed = 5) {
  const Shape input{kTokens, kTokenFeatures};
  auto net = layers::parse_layer_spec("linear(8) relu linear(" + std::to_string(kTokenClasses) + ")", input);
  return std::make_unique<layers::Model>(std::move(net), input, Device::cpu(), DType::Float32, seed);
}

// Parameters after `steps` steps of `runner` on batches make_token_batch(n, 100 + step).
inline std::vector<float> train_tokens_with(train::StepRunner& runner, int64_t n, int steps) {
  return train_on(runner, steps, [n](int s) { return make_token_batch(n, uint64_t(100 + s)); });
}

// The reference: one device, the whole batch in one micro-batch.
inline std::vector<float> token_reference_params(int64_t n, int steps) {
  train::SingleDeviceRunner single(token_net(), kSgd, 1);
  return train_tokens_with(single, n, steps);
}

// For batch norm across replicas: a small network with batch norm in the stem, in a
// residual block and its projection, trained kBatchNormSteps steps on batches of
// kBatchNormBatch (micro-batches of 14 or 7: every share non-empty for up to 4 replicas).
constexpr int64_t kBatchNormBatch = 14;
constexpr int kBatchNormSteps = 3;

inline std::unique_ptr<layers::Model> batch_norm_net(uint64_t seed = 5) {
  auto net = layers::parse_layer_spec("conv(8,3,s2,p1,nobias) bn relu res(16,s2) gap flatten linear(10)", {3, 32, 32});
  return std::make_unique<layers::Model>(std::move(net), Shape{3, 32, 32}, Device::cpu(), DType::Float32, seed);
}

struct BatchNormState {
  std::vector<float> params, buffers;  // the root replica's flat buffers
};

inline BatchNormState train_batch_norm_net(train::StepRunner& runner) {
  for (int s = 0; s < kBatchNormSteps; ++s) {
    HostBatch b = make_batch(kBatchNormBatch, uint64_t(200 + s));
    runner.step(b.batch);
  }
  return {runner.model().parameters().values().to_vector<float>(),
          runner.model().buffers().values().to_vector<float>()};
}

// The reference: one replica with the same `accum` micro-batches.
inline BatchNormState single_replica_batch_norm(int64_t accum) {
  train::SingleDeviceRunner single(batch_norm_net(), kSgd, accum);
  return train_batch_norm_net(single);
}

// One data-parallel configuration to compare with single-replica training.
struct RunnerCase {
  std::string mode;  // dp | ddp
  int replicas;
  int64_t accum;
  std::string split;
};

// "ddp_R3_A2_weights_5_1_2": a test name.
inline std::string case_name(const RunnerCase& c) {
  std::string split = c.split;
  for (char& ch : split) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  return c.mode + "_R" + std::to_string(c.replicas) + "_A" + std::to_string(c.accum) + "_" + split;
}

// Both modes, each replica count and accumulation: even shares and, for R > 1, the uneven
// weights 5,1,2,...
inline std::vector<RunnerCase> runner_cases(const std::vector<int>& replicas, const std::vector<int64_t>& accums) {
  std::vector<RunnerCase> out;
  for (std::string mode : {"dp", "ddp"}) {
    for (int r : replicas) {
      for (int64_t a : accums) {
        out.push_back({mode, r, a, "even"});
        std::string weights = "weights:5";
        for (int k = 1; k < r; ++k) weights += "," + std::to_string(k);
        if (r > 1) out.push_back({mode, r, a, weights});
      }
    }
  }
  return out;
}

// max |a - b| / max |b|
inline double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  return scaled_difference(a.data(), b.data(), b.size());
}


// ---- runner configurations for the token tests (per-token targets, token ids, BERT) ----

inline ParallelOptions options_for(const std::string& mode, const std::string& sync, int replicas,
                                   const std::string& split) {
  ParallelOptions o;
  o.mode = mode, o.sync = sync, o.replicas = replicas, o.split = split, o.timeout_s = 60;
  return o;
}

// One runner configuration: make_runner's options and the micro-batches.
struct TokenCase {
  std::string mode, sync;
  int replicas;
  int64_t accum;
  std::string split;
};

// "full_ddp_R3_A2_weights_5_1_2": a test name.
inline std::string token_case_name(const TokenCase& c) {
  std::string sync = c.sync;
  for (char& ch : sync) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  return sync + "_" + case_name({c.mode, c.replicas, c.accum, c.split});
}
inline void PrintTo(const TokenCase& c, std::ostream* os) { *os << token_case_name(c); }

// Every runner the CNN equivalence tests cover, where equivalence with the one-device full
// step applies: one device with accumulation, dp and ddp (even and uneven shares), local SGD
// with K = 1, async with one replica.
inline std::vector<TokenCase> token_cases() {
  std::vector<TokenCase> out;
  for (int64_t accum : {2, 3}) out.push_back({"ddp", "full", 1, accum, "even"});
  for (const RunnerCase& c : runner_cases({2, 3}, {1, 2})) out.push_back({c.mode, "full", c.replicas, c.accum, c.split});
  out.push_back({"ddp", "local:1", 2, 1, "even"});
  out.push_back({"ddp", "local:1", 3, 2, "weights:5,1,2"});
  out.push_back({"ddp", "async", 1, 2, "even"});
  return out;
}

inline std::unique_ptr<StepRunner> runner_for(const TokenCase& c, std::unique_ptr<layers::Model> model,
                                              const OptimizerConfig& optimizer = kSgd) {
  return make_runner(std::move(model), optimizer, c.accum, options_for(c.mode, c.sync, c.replicas, c.split));
}

}  // namespace dpcore::testing
