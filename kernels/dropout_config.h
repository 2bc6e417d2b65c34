// What a dropout kernel needs to know, shared by the CPU and CUDA kernels, the loop-nest
// reference and the op (engine/ops/dropout.cpp), and the rule that makes the mask.
//
// The mask is a pure function of (seed, step, global sample index, element index within
// the sample): one Philox4x32-10 call (kernels/philox.h) with key = seed and counter =
// (element / 4, sample, step low word, step high word) gives the four uniform words of
// elements 4g .. 4g+3 of the sample. So a run reproduces bit for bit, a resumed run draws
// the same masks, and neither the thread count nor how a batch is split over replicas
// changes them (each replica passes the global index of its first sample).
#pragma once

#include <cstdint>

#include "kernels/philox.h"

namespace dpcore::kernels {

struct DropoutConfig {
  double p = 0.5;            // probability of zeroing an element, in [0, 1]
  uint64_t seed = 0;         // the Philox key
  uint64_t step = 0;         // the training step (a new mask every step)
  int64_t first_sample = 0;  // global index of the first sample of this call
};

// The limits of the counter layout: a sample index and an element group fill one 32-bit word each.
constexpr int64_t kDropoutMaxSamples = int64_t(1) << 32;
constexpr int64_t kDropoutMaxSampleSize = int64_t(4) << 32;

// An element is kept when its uniform 32-bit word is below round((1 - p) * 2^32): exactly
// never for p = 1 and always for p = 0, and otherwise within 2^-33 of 1 - p.
inline uint64_t dropout_keep_threshold(double p) { return uint64_t((1.0 - p) * 4294967296.0 + 0.5); }

// Kept elements are multiplied by 1 / (1 - p) rounded to T once, as PyTorch's
// noise.div_(1 - p) does; p = 1 keeps nothing, so its scale is never used (0 avoids inf).
template <class T>
T dropout_scale(double p) {
  return p < 1.0 ? T(1) / T(1.0 - p) : T(0);
}

// The Philox counter of elements 4 * group .. 4 * group + 3 of global sample `sample`.
DPCORE_PHILOX_FN Philox4x32 dropout_counter(uint64_t step, int64_t sample, int64_t group) {
  return Philox4x32{{uint32_t(group), uint32_t(sample), uint32_t(step), uint32_t(step >> 32)}};
}

// The four uniform words of those elements.
DPCORE_PHILOX_FN Philox4x32 dropout_words(uint64_t seed, uint64_t step, int64_t sample, int64_t group) {
  return philox4x32_10(dropout_counter(step, sample, group), uint32_t(seed), uint32_t(seed >> 32));
}

}  // namespace dpcore::kernels
