#include "engine/data/augment.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "engine/data/flag_text.h"
#include "engine/random.h"
#include "kernels/error.h"

namespace dpcore::data {

static const char* const kForms = "expected none, crop:PAD, flip or crop:PAD,flip";

Augment parse_augment(const std::string& value) {
  Augment a;
  a.text = value;
  if (value == "none") return a;
  bool crop_seen = false;
  for (const std::string& item : split_commas(value)) {
    if (item == "flip") {
      DPCORE_CHECK(!a.flip, "--augment \"", value, "\": flip is given twice");
      a.flip = true;
    } else if (item.compare(0, 5, "crop:") == 0) {
      DPCORE_CHECK(!crop_seen, "--augment \"", value, "\": crop is given twice");
      crop_seen = true;
      const std::string pad = item.substr(5);
      const std::optional<int64_t> v = positive_integer(pad);
      DPCORE_CHECK(v.has_value(), "--augment \"", value, "\": PAD \"", pad, "\" of crop:PAD is not a positive integer");
      a.crop_pad = *v;
    } else if (item == "crop") {
      fail("--augment \"", value, "\": crop needs its padding, crop:PAD (e.g. crop:4)");
    } else if (item == "none") {
      fail("--augment \"", value, "\": none cannot be combined with other augmentations");
    } else {
      fail("--augment \"", value, "\": unknown augmentation \"", item, "\"; ", kForms);
    }
  }
  return a;
}

std::string describe(const Augment& a) {
  if (a.none()) return "none";
  std::string s;
  if (a.crop_pad > 0) s = "crop:" + std::to_string(a.crop_pad);
  if (a.flip) s += s.empty() ? "flip" : ",flip";
  return s;
}

void check_augment(const Augment& a, const Dataset& data) {
  DPCORE_CHECK(a.crop_pad < data.h && a.crop_pad < data.w, "--augment \"", a.text, "\": PAD ", a.crop_pad,
               " must be smaller than the ", data.h, " x ", data.w, " images of ", data.name,
               " (a crop would otherwise hold no image pixel at all)");
}

AugmentDraw draw_augment(const Augment& a, uint64_t seed, int64_t epoch, int64_t position) {
  AugmentDraw d;
  if (a.none()) return d;
  std::mt19937_64 rng(sample_seed(seed, kAugmentStream, uint64_t(epoch), uint64_t(position)));
  if (a.crop_pad > 0) {
    const uint64_t offsets = uint64_t(2 * a.crop_pad + 1);
    d.dy = int64_t(uniform_below(rng, offsets));
    d.dx = int64_t(uniform_below(rng, offsets));
  }
  if (a.flip) d.flip = uniform_below(rng, 2) == 1;
  return d;
}

void augment_sample(const float* in, float* out, int64_t c, int64_t h, int64_t w, int64_t pad,
                    const AugmentDraw& draw, const float* fill) {
  // Output row i reads image row i + oy, output column j (before the flip) image column
  // j + ox; the columns [lo, hi) of the cropped row lie inside the image.
  const int64_t oy = draw.dy - pad, ox = draw.dx - pad;
  const int64_t lo = std::max<int64_t>(0, -ox), hi = std::min(w, w - ox);
  for (int64_t ch = 0; ch < c; ++ch) {
    const float value = fill[ch];
    const float* plane = in + ch * h * w;
    for (int64_t i = 0; i < h; ++i) {
      float* row = out + (ch * h + i) * w;
      const int64_t r = i + oy;
      if (r < 0 || r >= h) {
        std::fill(row, row + w, value);
        continue;
      }
      const float* src = plane + r * w + (lo + ox);  // image pixels of cropped columns lo..hi-1
      if (!draw.flip) {
        std::fill(row, row + lo, value);
        std::memcpy(row + lo, src, size_t(hi - lo) * sizeof(float));
        std::fill(row + hi, row + w, value);
      } else {  // flipped column j is cropped column w - 1 - j
        std::fill(row, row + (w - hi), value);
        std::reverse_copy(src, src + (hi - lo), row + (w - hi));
        std::fill(row + (w - lo), row + w, value);
      }
    }
  }
}

}  // namespace dpcore::data
