#include "engine/data/normalize.h"

#include <cmath>
#include <utility>

#include "kernels/error.h"

namespace dpcore::data {

ChannelStats channel_stats(const Dataset& d) {
  DPCORE_CHECK(d.n > 0, "channel statistics of ", d.name, ": the dataset is empty");
  DPCORE_CHECK(!d.source, "channel statistics of ", d.name, ": its samples are made per batch (a random --transform)");
  const int64_t plane = d.h * d.w;
  const double count = double(d.n) * double(plane);
  ChannelStats s;
  s.mean.assign(size_t(d.c), 0.0);
  s.std.assign(size_t(d.c), 0.0);
  for (int64_t i = 0; i < d.n; ++i)
    for (int64_t ch = 0; ch < d.c; ++ch) {
      const float* x = d.image(i) + ch * plane;
      for (int64_t p = 0; p < plane; ++p) s.mean[ch] += x[p];
    }
  for (double& m : s.mean) m /= count;
  for (int64_t i = 0; i < d.n; ++i)
    for (int64_t ch = 0; ch < d.c; ++ch) {
      const float* x = d.image(i) + ch * plane;
      for (int64_t p = 0; p < plane; ++p) s.std[ch] += (x[p] - s.mean[ch]) * (x[p] - s.mean[ch]);
    }
  for (int64_t ch = 0; ch < d.c; ++ch) {
    s.std[ch] = std::sqrt(s.std[ch] / count);
    DPCORE_CHECK(s.std[ch] > 0, "channel statistics of ", d.name, ": channel ", ch,
                 " is constant (std 0), it cannot be normalised; turn normalisation off");
  }
  return s;
}

void normalize(Dataset& d, const ChannelStats& s) {
  DPCORE_CHECK(int64_t(s.mean.size()) == d.c && int64_t(s.std.size()) == d.c, "normalize ", d.name, ": ", d.c,
               " channels but statistics for ", s.mean.size());
  DPCORE_CHECK(!d.source, "normalize ", d.name, ": its samples are made per batch (a random --transform)");
  const int64_t plane = d.h * d.w;
  std::vector<float> zero(size_t(d.c));
  for (int64_t ch = 0; ch < d.c; ++ch) zero[size_t(ch)] = float((d.zero_of_channel(ch) - s.mean[ch]) / s.std[ch]);
  d.zero_value = std::move(zero);
  for (int64_t i = 0; i < d.n; ++i)
    for (int64_t ch = 0; ch < d.c; ++ch) {
      float* x = d.images.data() + i * d.sample_size() + ch * plane;
      for (int64_t p = 0; p < plane; ++p) x[p] = float((x[p] - s.mean[ch]) / s.std[ch]);
    }
}

}  // namespace dpcore::data
