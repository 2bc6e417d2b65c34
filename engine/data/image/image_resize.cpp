#include "engine/data/image/image_resize.h"

#include <cmath>
#include <vector>

#include "kernels/error.h"

namespace dpcore::data {

namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;  // Pillow's PRECISION_BITS for 8-bit images

// The fixed-point weights of one axis: output index x reads `count[x]` source indices from
// `first[x]` with the weights at weights[x * taps ...].
struct AxisWeights {
  int taps = 0;
  std::vector<int> first, count;
  std::vector<int32_t> weights;
};

double triangle(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

// Pillow's precompute_coeffs for the box [0, in_size) and normalize_coeffs_8bpc.
AxisWeights axis_weights(int in_size, int out_size) {
  const double scale = double(in_size) / out_size;
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = 1.0 * filterscale;
  AxisWeights a;
  a.taps = int(std::ceil(support)) * 2 + 1;
  a.first.resize(size_t(out_size));
  a.count.resize(size_t(out_size));
  a.weights.assign(size_t(out_size) * size_t(a.taps), 0);
  std::vector<double> k(size_t(a.taps));
  for (int x = 0; x < out_size; ++x) {
    const double center = (x + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    int lo = int(center - support + 0.5);
    if (lo < 0) lo = 0;
    int hi = int(center + support + 0.5);
    if (hi > in_size) hi = in_size;
    const int n = hi - lo;
    double sum = 0.0;
    for (int i = 0; i < n; ++i) {
      k[size_t(i)] = triangle((i + lo - center + 0.5) * ss);
      sum += k[size_t(i)];
    }
    for (int i = 0; i < n; ++i) {
      const double w = sum != 0.0 ? k[size_t(i)] / sum : k[size_t(i)];
      const double fixed = w * double(1 << kPrecisionBits);
      a.weights[size_t(x) * size_t(a.taps) + size_t(i)] = int32_t(w < 0 ? -0.5 + fixed : 0.5 + fixed);
    }
    a.first[size_t(x)] = lo;
    a.count[size_t(x)] = n;
  }
  return a;
}

uint8_t clip8(int32_t sum) {
  if (sum >= (1 << kPrecisionBits << 8)) return 255;
  if (sum <= 0) return 0;
  return uint8_t(sum >> kPrecisionBits);
}

// Rows [row0, row0 + rows) of `in` resampled along the width with `a`.
RgbImage resample_width(const RgbImage& in, int64_t row0, int64_t rows, const AxisWeights& a) {
  RgbImage out;
  out.h = rows;
  out.w = int64_t(a.first.size());
  out.pixels.resize(size_t(out.h * out.w * 3));
  for (int64_t y = 0; y < rows; ++y) {
    const uint8_t* src = in.pixels.data() + (row0 + y) * in.w * 3;
    uint8_t* dst = out.pixels.data() + y * out.w * 3;
    for (int64_t x = 0; x < out.w; ++x) {
      const int32_t* k = a.weights.data() + x * a.taps;
      const uint8_t* p = src + int64_t(a.first[size_t(x)]) * 3;
      for (int ch = 0; ch < 3; ++ch) {
        int32_t sum = 1 << (kPrecisionBits - 1);
        for (int i = 0; i < a.count[size_t(x)]; ++i) sum += int32_t(p[i * 3 + ch]) * k[i];
        dst[x * 3 + ch] = clip8(sum);
      }
    }
  }
  return out;
}

// `in` resampled along the height with `a`, whose source rows start at row `row0` of the
// original image (`in` holds only the rows from row0 on).
RgbImage resample_height(const RgbImage& in, int64_t row0, const AxisWeights& a) {
  RgbImage out;
  out.h = int64_t(a.first.size());
  out.w = in.w;
  out.pixels.resize(size_t(out.h * out.w * 3));
  const int64_t row_bytes = in.w * 3;
  for (int64_t y = 0; y < out.h; ++y) {
    const int32_t* k = a.weights.data() + y * a.taps;
    const uint8_t* src = in.pixels.data() + (a.first[size_t(y)] - row0) * row_bytes;
    uint8_t* dst = out.pixels.data() + y * row_bytes;
    for (int64_t b = 0; b < row_bytes; ++b) {
      int32_t sum = 1 << (kPrecisionBits - 1);
      for (int i = 0; i < a.count[size_t(y)]; ++i) sum += int32_t(src[i * row_bytes + b]) * k[i];
      dst[b] = clip8(sum);
    }
  }
  return out;
}

}  // namespace

RgbImage resize_bilinear(const RgbImage& in, int64_t out_h, int64_t out_w) {
  DPCORE_CHECK(out_h >= 1 && out_w >= 1 && in.h >= 1 && in.w >= 1, "resize: cannot resize a ", in.w, " x ", in.h,
               " image to ", out_w, " x ", out_h, " (width x height)");
  DPCORE_CHECK(out_h < (int64_t(1) << 31) && out_w < (int64_t(1) << 31), "resize: ", out_w, " x ", out_h,
               " is too large");
  if (out_h == in.h && out_w == in.w) return in;
  const AxisWeights horizontal = axis_weights(int(in.w), int(out_w));
  const AxisWeights vertical = axis_weights(int(in.h), int(out_h));
  // The source rows the vertical pass reads: the horizontal pass computes only these.
  const int64_t row0 = vertical.first.front();
  const int64_t row_end = vertical.first.back() + vertical.count.back();
  if (out_w == in.w) return resample_height(in, 0, vertical);
  RgbImage wide = resample_width(in, row0, row_end - row0, horizontal);
  if (out_h == in.h) return wide;
  return resample_height(wide, row0, vertical);
}

}  // namespace dpcore::data
