// The largest image the decoders accept, checked from the header before any pixel buffer is
// allocated, so that a corrupt or hostile header is an error and not a gigantic allocation.
// PIL refuses images over 2 * 89478485 pixels (Image.MAX_IMAGE_PIXELS) as a decompression
// bomb; the same bound here.
#pragma once

#include <cstdint>
#include <string>

#include "engine/data/image/image_decode.h"

namespace dpcore::data {

constexpr int64_t kMaxImagePixels = 2 * int64_t(89478485);

inline void check_image_size(int64_t h, int64_t w, const std::string& source) {
  if (h <= 0 || w <= 0 || h > kMaxImagePixels / w)
    throw BadImage(source + ": image size " + std::to_string(w) + " x " + std::to_string(h) +
                   " is empty or larger than " + std::to_string(kMaxImagePixels) + " pixels");
}

}  // namespace dpcore::data
