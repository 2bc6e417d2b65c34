// libFuzzer target: the JPEG and PNG decoders (engine/data/image/image_decode.h), above all their
// handling of libjpeg's and libpng's errors (libpng's longjmp) and of the sizes in headers.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "engine/data/image/image_decode.h"

using namespace dpcore::data;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  RgbImage im;
  try {
    im = decode_image(data, size, "fuzz");
  } catch (const BadImage&) {
    return 0;  // refused with a message naming the file: what bad input should get
  }
  // A decoded image has a size and exactly its pixels.
  if (im.h <= 0 || im.w <= 0 || im.pixels.size() != size_t(im.h * im.w * 3)) std::abort();
  return 0;
}
