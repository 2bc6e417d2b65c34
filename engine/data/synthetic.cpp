#include "engine/data/synthetic.h"

#include <random>
#include <vector>

#include "engine/random.h"
#include "kernels/error.h"

namespace dpcore::data {

// Bounds the allocation for sizes given on the command line (2^32 floats = 16 GiB).
static constexpr int64_t kMaxSampleValues = int64_t(1) << 32;

Dataset make_synthetic(const SyntheticShape& s, int64_t n, uint64_t pattern_seed, uint64_t sample_seed,
                       std::string name) {
  DPCORE_CHECK(s.c > 0 && s.h > 0 && s.w > 0 && n > 0, "synthetic data ", name,
               ": C, H, W and N must be positive, got ", s.c, ", ", s.h, ", ", s.w, ", ", n);
  DPCORE_CHECK(s.classes >= 2, "synthetic data ", name, ": needs at least 2 classes, got ", s.classes);
  const int64_t sample = s.c * s.h * s.w;
  DPCORE_CHECK(s.c <= kMaxSampleValues && s.h <= kMaxSampleValues && s.w <= kMaxSampleValues &&
                   sample <= kMaxSampleValues && n <= kMaxSampleValues / sample &&
                   s.classes <= kMaxSampleValues / sample,
               "synthetic data ", name, ": ", n, " (or ", s.classes, " class means) x ", s.c, " x ", s.h, " x ", s.w,
               " values is too large (the limit is 2^32)");

  std::mt19937_64 pattern_rng(pattern_seed);
  std::vector<float> means(size_t(s.classes * sample));
  for (float& m : means) m = float(uniform01(pattern_rng));

  Dataset d;
  d.name = std::move(name);
  d.n = n;
  d.c = s.c;
  d.h = s.h;
  d.w = s.w;
  d.num_classes = s.classes;
  d.images.resize(size_t(n * sample));
  d.labels.resize(size_t(n));
  std::mt19937_64 rng(sample_seed);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t label = int64_t(uniform_below(rng, uint64_t(s.classes)));
    const float* mean = means.data() + label * sample;
    float* img = d.images.data() + i * sample;
    for (int64_t j = 0; j < sample; ++j) img[j] = 0.5f * mean[j] + 0.5f * float(uniform01(rng));
    d.labels[size_t(i)] = label;
  }
  return d;
}

}  // namespace dpcore::data
