// Resizing an 8-bit RGB image as PIL 9.4's Image.resize(size, Image.BILINEAR) does, which is
// what torchvision 0.14's transforms.Resize runs on a PIL image (antialiased: the filter's
// support grows with the downscale factor). The algorithm is Pillow's ImagingResample
// (libImaging/Resample.c), step for step, so the pixels are identical:
//   - separable: a horizontal pass over the source rows the vertical pass needs, then a
//     vertical pass; a pass whose size does not change is skipped;
//   - per output index x: scale = in / out, filterscale = max(scale, 1), support =
//     filterscale (the triangle filter's support is 1), center = (x + 0.5) * scale, source
//     indices [int(center - support + 0.5), int(center + support + 0.5)) clipped to the image,
//     weights triangle((i - center + 0.5) / filterscale) normalised to sum 1 in double;
//   - the weights become fixed point with 22 fraction bits (rounded half away from zero), the
//     sums start at 2^21 (rounding) and are clipped to 0..255 after the shift.
#pragma once

#include <cstdint>

#include "engine/data/image/image_decode.h"

namespace dpcore::data {

// `in` resized to out_h x out_w (both >= 1); `in` itself, copied, when the size is the same.
RgbImage resize_bilinear(const RgbImage& in, int64_t out_h, int64_t out_w);

}  // namespace dpcore::data
