#include "engine/data/image/image_transforms.h"

#include <algorithm>
#include <cstring>

#include "engine/data/image/image_resize.h"
#include "kernels/error.h"

namespace dpcore::data {

Extent resized_extent(int64_t h, int64_t w, const ResizeSize& size) {
  if (!size.shorter_side()) return {size.h, size.w};
  const int64_t shorter = std::min(h, w), longer = std::max(h, w);
  // int(requested * long / short): Python's true division, then truncation.
  const int64_t new_long = int64_t(double(size.h * longer) / double(shorter));
  return w <= h ? Extent{new_long, size.h} : Extent{size.h, new_long};
}

RgbImage resize(const RgbImage& in, const ResizeSize& size) {
  const Extent out = resized_extent(in.h, in.w, size);
  return resize_bilinear(in, out.h, out.w);
}

RgbImage crop(const RgbImage& in, const CropBox& box) {
  DPCORE_CHECK(box.top >= 0 && box.left >= 0 && box.h >= 1 && box.w >= 1 && box.top + box.h <= in.h &&
                   box.left + box.w <= in.w,
               "crop: the window ", box.w, " x ", box.h, " at (", box.left, ", ", box.top, ") is not inside the ",
               in.w, " x ", in.h, " image (width x height)");
  RgbImage out;
  out.h = box.h;
  out.w = box.w;
  out.pixels.resize(size_t(out.h * out.w * 3));
  for (int64_t y = 0; y < box.h; ++y)
    std::memcpy(out.pixels.data() + y * box.w * 3, in.pixels.data() + ((box.top + y) * in.w + box.left) * 3,
                size_t(box.w * 3));
  return out;
}

// F.pad(img, [left, top, right, bottom], fill=0).
static RgbImage pad_zeros(const RgbImage& in, int64_t left, int64_t top, int64_t right, int64_t bottom) {
  RgbImage out;
  out.h = in.h + top + bottom;
  out.w = in.w + left + right;
  out.pixels.assign(size_t(out.h * out.w * 3), 0);
  for (int64_t y = 0; y < in.h; ++y)
    std::memcpy(out.pixels.data() + ((top + y) * out.w + left) * 3, in.pixels.data() + y * in.w * 3,
                size_t(in.w * 3));
  return out;
}

RgbImage center_crop(const RgbImage& in, const Extent& size) {
  const RgbImage* image = &in;
  RgbImage padded;
  if (size.w > in.w || size.h > in.h) {
    const int64_t dw = std::max<int64_t>(0, size.w - in.w), dh = std::max<int64_t>(0, size.h - in.h);
    padded = pad_zeros(in, dw / 2, dh / 2, (dw + 1) / 2, (dh + 1) / 2);
    image = &padded;
  }
  const int64_t top = int64_t(std::nearbyint(double(image->h - size.h) / 2.0));
  const int64_t left = int64_t(std::nearbyint(double(image->w - size.w) / 2.0));
  return crop(*image, {top, left, size.h, size.w});
}

RgbImage flip_horizontal(const RgbImage& in) {
  RgbImage out = in;
  for (int64_t y = 0; y < in.h; ++y) {
    const uint8_t* src = in.pixels.data() + y * in.w * 3;
    uint8_t* dst = out.pixels.data() + y * in.w * 3;
    for (int64_t x = 0; x < in.w; ++x) std::memcpy(dst + (in.w - 1 - x) * 3, src + x * 3, 3);
  }
  return out;
}

void to_tensor(const RgbImage& in, float* out) {
  const int64_t plane = in.h * in.w;
  for (int64_t p = 0; p < plane; ++p)
    for (int64_t ch = 0; ch < 3; ++ch) out[ch * plane + p] = float(in.pixels[size_t(p * 3 + ch)]) / 255.0f;
}

void normalize_tensor(float* tensor, int64_t plane, const float mean[3], const float std[3]) {
  for (int64_t ch = 0; ch < 3; ++ch) {
    float* x = tensor + ch * plane;
    for (int64_t p = 0; p < plane; ++p) x[p] = (x[p] - mean[ch]) / std[ch];
  }
}

}  // namespace dpcore::data
