// Random data a classifier can learn, reproducible from seeds on every platform: for smoke
// tests, benchmarks and any input shape without downloading anything.
#pragma once

#include <cstdint>
#include <string>

#include "engine/data/dataset.h"

namespace dpcore::data {

struct SyntheticShape {
  int64_t c = 1, h = 1, w = 1, classes = 2;
};

// Class k has a fixed mean image m_k with pixels uniform in [0, 1), drawn from
// `pattern_seed`; sample i gets a label uniform over the classes and pixels
// 0.5 * m_label + 0.5 * u, u uniform in [0, 1), drawn from `sample_seed`. Pixels stay in
// [0, 1]; the class means are far apart relative to the noise once an image has a few dozen
// pixels, so the loss of a training run on it goes down quickly. Train and test sets share
// `pattern_seed` and differ in `sample_seed`.
Dataset make_synthetic(const SyntheticShape& shape, int64_t n, uint64_t pattern_seed, uint64_t sample_seed,
                       std::string name);

}  // namespace dpcore::data
