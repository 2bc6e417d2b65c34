// The C++ twin of scripts/make_fixtures.py's deterministic parts: the reference models'
// parameter lists, the formula that fills their initial weights and the rule that samples
// large tensors. The parity fixtures (tests/fixtures/<model>.safetensors) do not store whole
// weights (they would not fit the fixtures' 2 MB), so tests rebuild them from this file.
// Keep the two in step: tests/io/fixtures_test.cpp checks them against each other bit for bit.
// The batch-norm models (resnet8, resnet20) also list their buffers (running statistics and
// num_batches_tracked), which start at PyTorch's defaults.
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
constexpr double kFixtureBatchNormSpread = 0.1; // BN_SPREAD: batch norm weight 1 + b*(2u-1), bias b*(2u-1)

// How a parameter's initial values are made from u in [0, 1) (fixture_init).
enum class FixtureInit {
  Uniform,          // float32(bound * (2u - 1)), bound = 1 / sqrt(fan_in): conv and linear layers
  BatchNormWeight,  // float32(1.0 + b * (2u - 1)), b = kFixtureBatchNormSpread, in double
  BatchNormBias,    // float32(b * (2u - 1))
};

struct FixtureParam {
  std::string name;  // state_dict name, e.g. "conv.weight"
  std::vector<int64_t> shape;
  int64_t fan_in;  // in_channels*k*k for a conv (k = 3, or 1), in_features for a linear layer; 0 for batch norm
  FixtureInit init = FixtureInit::Uniform;
};

// A batch norm buffer, in state_dict (= named_buffers()) order. Never sampled (all are small).
struct FixtureBuffer {
  std::string name;            // e.g. "bn1.running_mean", "layer2.0.downsample.1.num_batches_tracked"
  std::vector<int64_t> shape;  // {C} for running_mean / running_var, {} for num_batches_tracked
  bool is_int64;               // num_batches_tracked is int64 (I64); the running statistics float32
};

struct FixtureModel {
  std::string name;
  int64_t channels, height, width;  // one input sample
  std::vector<FixtureParam> params;  // in state_dict order, which numbers the init streams
  std::vector<FixtureBuffer> buffers = {};  // in state_dict order; empty without batch norm
  bool batch_norm() const { return !buffers.empty(); }
};

// PyTorch's default value of a buffer, where the fixtures start: running_var 1, the others 0.
inline double fixture_buffer_default(const FixtureBuffer& b) {
  const std::string suffix = ".running_var";
  return b.name.size() >= suffix.size() && b.name.compare(b.name.size() - suffix.size(), suffix.size(), suffix) == 0
             ? 1.0
             : 0.0;
}

// The CIFAR ResNets (bench/torch_models.py, torchvision's names): conv1, bn1, then layer1..3
// of `blocks` BasicBlocks (conv1, bn1, conv2, bn2 and, in the first block of layer2 and
// layer3, downsample.0 (1x1 conv, stride 2) and downsample.1 (batch norm)), then fc.
inline FixtureModel fixture_resnet(const std::string& name, int64_t blocks, int64_t channels, int64_t height,
                                   int64_t width) {
  FixtureModel m{name, channels, height, width, {}, {}};
  auto conv = [&m](const std::string& n, int64_t cin, int64_t cout, int64_t k) {
    m.params.push_back({n + ".weight", {cout, cin, k, k}, cin * k * k, FixtureInit::Uniform});
  };
  auto bn = [&m](const std::string& n, int64_t c) {
    m.params.push_back({n + ".weight", {c}, 0, FixtureInit::BatchNormWeight});
    m.params.push_back({n + ".bias", {c}, 0, FixtureInit::BatchNormBias});
    m.buffers.push_back({n + ".running_mean", {c}, false});
    m.buffers.push_back({n + ".running_var", {c}, false});
    m.buffers.push_back({n + ".num_batches_tracked", {}, true});
  };
  conv("conv1", channels, 16, 3);
  bn("bn1", 16);
  int64_t cin = 16;
  const int64_t widths[] = {16, 32, 64};
  for (int stage = 0; stage < 3; ++stage) {
    const int64_t width = widths[stage];
    for (int64_t b = 0; b < blocks; ++b) {
      const std::string block = "layer" + std::to_string(stage + 1) + "." + std::to_string(b);
      conv(block + ".conv1", cin, width, 3);
      bn(block + ".bn1", width);
      conv(block + ".conv2", width, width, 3);
      bn(block + ".bn2", width);
      if (cin != width) {  // the first block of layer2 and layer3: stride 2, projection shortcut
        conv(block + ".downsample.0", cin, width, 1);
        bn(block + ".downsample.1", width);
      }
      cin = width;
    }
  }
  m.params.push_back({"fc.weight", {10, 64}, 64, FixtureInit::Uniform});
  m.params.push_back({"fc.bias", {10}, 64, FixtureInit::Uniform});
  return m;
}

// shared/reference/models.md. resnet8 has a fixture (1x28x28); resnet20 is listed for
// completeness, with the same input, but has none.
inline FixtureModel fixture_model(const std::string& model) {
  auto conv = [](const std::string& n, int64_t cin, int64_t cout) {
    return std::vector<FixtureParam>{{n + ".weight", {cout, cin, 3, 3}, cin * 9, FixtureInit::Uniform},
                                     {n + ".bias", {cout}, cin * 9, FixtureInit::Uniform}};
  };
  auto linear = [](const std::string& n, int64_t in, int64_t out) {
    return std::vector<FixtureParam>{{n + ".weight", {out, in}, in, FixtureInit::Uniform},
                                     {n + ".bias", {out}, in, FixtureInit::Uniform}};
  };
  auto join = [](std::vector<std::vector<FixtureParam>> layers) {
    std::vector<FixtureParam> all;
    for (auto& l : layers) all.insert(all.end(), l.begin(), l.end());
    return all;
  };
  if (model == "simplenet") return {model, 3, 32, 32, join({conv("conv", 3, 16), linear("fc", 4096, 10)}), {}};
  if (model == "fashioncnn")
    return {model, 1, 28, 28,
            join({conv("c1", 1, 32), conv("c2", 32, 64), linear("f1", 3136, 128), linear("f2", 128, 10)}), {}};
  if (model == "vggs")
    return {model, 3, 32, 32,
            join({conv("c1", 3, 64), conv("c2", 64, 128), conv("c3", 128, 256), linear("fc", 4096, 10)}), {}};
  if (model == "resnet8") return fixture_resnet(model, 1, 1, 28, 28);
  if (model == "resnet20") return fixture_resnet(model, 3, 1, 28, 28);
  fail("fixture_model: unknown model '", model, "' (known: simplenet, fashioncnn, vggs, resnet8, resnet20)");
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

// Element i of parameter number t, u = (bits >> 11) * 2^-53: float32(bound * (2u - 1)) (Uniform),
// float32(1.0 + b * (2u - 1)) (BatchNormWeight) or float32(b * (2u - 1)) (BatchNormBias), b =
// kFixtureBatchNormSpread, each operation rounded in double as numpy does (fan_in is used by
// Uniform only).
inline std::vector<float> fixture_init(uint64_t seed, uint64_t tensor_index, int64_t numel, int64_t fan_in,
                                       FixtureInit kind = FixtureInit::Uniform) {
  const uint64_t stream = splitmix64(splitmix64(seed) ^ tensor_index);
  const double bound = kind == FixtureInit::Uniform ? 1.0 / std::sqrt(double(fan_in)) : kFixtureBatchNormSpread;
  std::vector<float> out(static_cast<size_t>(numel));
  for (int64_t i = 0; i < numel; ++i) {
    double u = double(splitmix64(stream + uint64_t(i)) >> 11) * 0x1p-53;
    // volatile: the product is rounded to double before the sum, as numpy rounds it; a
    // compiler contracting 1.0 + b*s into one FMA (-ffp-contract=fast, the default of GCC
    // where FMA is in the base ISA) would round once and could differ in the last bit.
    volatile double scaled = bound * (2.0 * u - 1.0);
    out[size_t(i)] = float(kind == FixtureInit::BatchNormWeight ? 1.0 + scaled : double(scaled));
  }
  return out;
}

// Every parameter of the model at its fixture initialisation, in state_dict order.
inline std::vector<std::vector<float>> fixture_initial_params(const FixtureModel& model) {
  std::vector<std::vector<float>> out;
  for (size_t t = 0; t < model.params.size(); ++t) {
    const FixtureParam& p = model.params[t];
    out.push_back(fixture_init(kFixtureInitSeed, t, fixture_numel(p.shape), p.fan_in, p.init));
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
