// The C++ twin of scripts/make_fixtures.py's deterministic parts: the reference models'
// parameter lists, the formula that fills their initial weights and the rule that samples
// large tensors. The parity fixtures (tests/fixtures/<model>.safetensors) do not store whole
// weights (they would not fit the fixtures' 2 MB), so tests rebuild them from this file.
// Keep the two in step: tests/io/fixtures_test.cpp checks them against each other bit for bit.
#pragma once

#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/error.h"

namespace dpcore::testing {

constexpr uint64_t kFixtureInitSeed = 1;       // INIT_SEED; the fixtures' metadata "init_seed"
constexpr int64_t kFixtureFullLimit = 32768;   // FULL_LIMIT: larger tensors are sampled
constexpr int64_t kFixtureSampleTarget = 8192; // SAMPLE_TARGET: about this many samples

struct FixtureParam {
  std::string name;  // state_dict name, e.g. "conv.weight"
  std::vector<int64_t> shape;
  int64_t fan_in;  // in_channels*3*3 for a conv, in_features for a linear layer
};

struct FixtureModel {
  std::string name;
  int64_t channels, height, width;  // one input sample
  std::vector<FixtureParam> params;  // in state_dict order, which numbers the init streams
};

// shared/reference/models.md
inline FixtureModel fixture_model(const std::string& model) {
  auto conv = [](const std::string& n, int64_t cin, int64_t cout) {
    return std::vector<FixtureParam>{{n + ".weight", {cout, cin, 3, 3}, cin * 9}, {n + ".bias", {cout}, cin * 9}};
  };
  auto linear = [](const std::string& n, int64_t in, int64_t out) {
    return std::vector<FixtureParam>{{n + ".weight", {out, in}, in}, {n + ".bias", {out}, in}};
  };
  auto join = [](std::vector<std::vector<FixtureParam>> layers) {
    std::vector<FixtureParam> all;
    for (auto& l : layers) all.insert(all.end(), l.begin(), l.end());
    return all;
  };
  if (model == "simplenet") return {model, 3, 32, 32, join({conv("conv", 3, 16), linear("fc", 4096, 10)})};
  if (model == "fashioncnn")
    return {model, 1, 28, 28,
            join({conv("c1", 1, 32), conv("c2", 32, 64), linear("f1", 3136, 128), linear("f2", 128, 10)})};
  if (model == "vggs")
    return {model, 3, 32, 32,
            join({conv("c1", 3, 64), conv("c2", 64, 128), conv("c3", 128, 256), linear("fc", 4096, 10)})};
  fail("fixture_model: unknown model '", model, "' (known: simplenet, fashioncnn, vggs)");
}

inline int64_t fixture_numel(const std::vector<int64_t>& shape) {
  return std::accumulate(shape.begin(), shape.end(), int64_t(1), std::multiplies<int64_t>());
}

inline uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Element i of parameter number t: float32(bound * (2u - 1)), u = (bits >> 11) * 2^-53.
inline std::vector<float> fixture_init(uint64_t seed, uint64_t tensor_index, int64_t numel, int64_t fan_in) {
  const uint64_t stream = splitmix64(splitmix64(seed) ^ tensor_index);
  const double bound = 1.0 / std::sqrt(double(fan_in));
  std::vector<float> out(static_cast<size_t>(numel));
  for (int64_t i = 0; i < numel; ++i) {
    double u = double(splitmix64(stream + uint64_t(i)) >> 11) * 0x1p-53;
    out[size_t(i)] = float(bound * (2.0 * u - 1.0));
  }
  return out;
}

// Every parameter of the model at its fixture initialisation, in state_dict order.
inline std::vector<std::vector<float>> fixture_initial_params(const FixtureModel& model) {
  std::vector<std::vector<float>> out;
  for (size_t t = 0; t < model.params.size(); ++t) {
    const FixtureParam& p = model.params[t];
    out.push_back(fixture_init(kFixtureInitSeed, t, fixture_numel(p.shape), p.fan_in));
  }
  return out;
}

// 1 when a tensor of numel elements is stored whole; otherwise the smallest stride
// >= ceil(numel / kFixtureSampleTarget) that shares no factor with numel.
inline int64_t fixture_sample_stride(int64_t numel) {
  if (numel <= kFixtureFullLimit) return 1;
  int64_t stride = (numel + kFixtureSampleTarget - 1) / kFixtureSampleTarget;
  while (std::gcd(stride, numel) != 1) ++stride;
  return stride;
}

// What the fixture stores for a full row-major tensor: all of it, or flat[0::stride].
inline std::vector<float> fixture_sample(const float* full, int64_t numel) {
  const int64_t stride = fixture_sample_stride(numel);
  std::vector<float> out;
  for (int64_t i = 0; i < numel; i += stride) out.push_back(full[i]);
  return out;
}

// The shape the fixture stores for a parameter-sized tensor of the given shape.
inline std::vector<int64_t> fixture_stored_shape(const std::vector<int64_t>& shape) {
  const int64_t numel = fixture_numel(shape), stride = fixture_sample_stride(numel);
  if (stride == 1) return shape;
  return {(numel + stride - 1) / stride};
}

}  // namespace dpcore::testing
