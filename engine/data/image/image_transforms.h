// torchvision 0.14's geometric transforms on 8-bit RGB images (PIL images in torchvision),
// and the conversion to a float CHW tensor. Each function is named after the torchvision
// function whose result it reproduces; docs/image-folders.md lists them with the
// --transform words.
#pragma once

#include <cmath>
#include <cstdint>

#include "engine/data/image/image_decode.h"

namespace dpcore::data {

// torchvision's Resize size: one number, the length of the shorter side (the longer one is
// int(size * long / short), as _compute_resized_output_size truncates it), or (h, w).
struct ResizeSize {
  int64_t h = 0, w = 0;  // w == 0: h is the shorter side's length
  bool shorter_side() const { return w == 0; }
};

struct Extent {
  int64_t h = 0, w = 0;
  bool operator==(const Extent& o) const { return h == o.h && w == o.w; }
};

// The size Resize gives an h x w image.
Extent resized_extent(int64_t h, int64_t w, const ResizeSize& size);

// transforms.Resize(size) with PIL's bilinear filter (image_resize.h); the image itself when
// the size does not change, as torchvision returns it.
RgbImage resize(const RgbImage& in, const ResizeSize& size);

// A window of an image: rows [top, top + h), columns [left, left + w).
struct CropBox {
  int64_t top = 0, left = 0, h = 0, w = 0;
  bool operator==(const CropBox& o) const { return top == o.top && left == o.left && h == o.h && w == o.w; }
};

// F.crop on a window inside the image (the callers' boxes always are).
RgbImage crop(const RgbImage& in, const CropBox& box);

// transforms.CenterCrop((h, w)): a side smaller than the crop is first padded with zeros,
// (crop - side) // 2 before and (crop - side + 1) // 2 after; then the window at
// top = int(round((H - h) / 2)), left = int(round((W - w) / 2)), Python's round (half to even).
RgbImage center_crop(const RgbImage& in, const Extent& size);

// transforms.RandomHorizontalFlip's flip: the columns reversed.
RgbImage flip_horizontal(const RgbImage& in);

// RandomResizedCrop's scale and ratio ranges (torchvision's defaults).
struct ResizedCropRange {
  double scale_lo = 0.08, scale_hi = 1.0;
  double ratio_lo = 3.0 / 4.0, ratio_hi = 4.0 / 3.0;
};

// transforms.RandomResizedCrop.get_params for an h x w image, drawing from `draws` (anything
// with uniform(lo, hi) and below(n), such as dpcore::Generator) where torchvision draws from
// torch: up to ten tries of
//   area fraction  s = draws.uniform(scale_lo, scale_hi)
//   aspect         a = exp(draws.uniform(log(ratio_lo), log(ratio_hi)))
//   w = int(round(sqrt(h * w * s * a))), h = int(round(sqrt(h * w * s / a))) (half to even)
// and the first try with 0 < w <= W and 0 < h <= H takes top = draws.below(H - h + 1), then
// left = draws.below(W - w + 1). When no try fits: the whole image cut to the nearest
// ratio in range, centred ((H - h) // 2, (W - w) // 2).
template <class Draws>
CropBox random_resized_crop_box(int64_t height, int64_t width, const ResizedCropRange& range, Draws& draws) {
  const double area = double(height * width);
  const double log_lo = std::log(range.ratio_lo), log_hi = std::log(range.ratio_hi);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * draws.uniform(range.scale_lo, range.scale_hi);
    const double aspect = std::exp(draws.uniform(log_lo, log_hi));
    const int64_t w = int64_t(std::nearbyint(std::sqrt(target_area * aspect)));
    const int64_t h = int64_t(std::nearbyint(std::sqrt(target_area / aspect)));
    if (0 < w && w <= width && 0 < h && h <= height) {
      const int64_t top = int64_t(draws.below(uint64_t(height - h + 1)));
      const int64_t left = int64_t(draws.below(uint64_t(width - w + 1)));
      return {top, left, h, w};
    }
  }
  const double in_ratio = double(width) / double(height);
  int64_t w = width, h = height;
  if (in_ratio < range.ratio_lo) {
    h = int64_t(std::nearbyint(double(w) / range.ratio_lo));
  } else if (in_ratio > range.ratio_hi) {
    w = int64_t(std::nearbyint(double(h) * range.ratio_hi));
  }
  return {(height - h) / 2, (width - w) / 2, h, w};
}

// F.to_tensor on an RGB image: 3 x h x w floats, byte / 255 (a float32 division, as torch's).
void to_tensor(const RgbImage& in, float* out);

// transforms.Normalize(mean, std) in place on a 3 x plane tensor: (x - mean_c) / std_c in
// float32, as torch computes it (x.sub_(mean).div_(std)).
void normalize_tensor(float* tensor, int64_t plane, const float mean[3], const float std[3]);

}  // namespace dpcore::data
