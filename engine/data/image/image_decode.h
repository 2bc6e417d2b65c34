// Decoding one image file's bytes to 8-bit RGB, pixel for pixel what PIL's
// Image.open(f).convert("RGB") gives (torchvision's default ImageFolder loader): JPEG through
// libjpeg-turbo's TurboJPEG API, PNG through libpng. The format comes from the bytes, never
// from the file name. How each kind of file is converted (docs/image-folders.md):
//   grayscale              R = G = B = the grey value (1, 2 and 4-bit grey scaled to 0..255)
//   palette                the palette's RGB entries
//   alpha (RGBA, LA, tRNS) dropped, not composited
//   16-bit colour PNG      the high byte of each sample (PIL's RGB;16B)
//   16-bit grey PNG        min(value, 255) (PIL opens it as mode I and clips)
//   CMYK / YCCK JPEG       PIL's cmyk2rgb: R = 255 - k - c (255 - k) / 255, rounded as PIL rounds
//   EXIF orientation       ignored, as torchvision ignores it
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/error.h"

namespace dpcore::data {

// A file that is not a decodable image: corrupt, truncated or of another format. Its own type
// so that --skip-bad-images skips these and nothing else.
class BadImage : public Error {
 public:
  explicit BadImage(const std::string& what) : Error(what) {}
};

struct RgbImage {
  int64_t h = 0, w = 0;
  std::vector<uint8_t> pixels;  // h * w * 3 bytes, row by row, R G B per pixel
};

enum class ImageFormat { jpeg, png, other };

// By the magic bytes: FF D8 FF for JPEG, 89 'PNG' 0D 0A 1A 0A for PNG.
ImageFormat sniff_image_format(const uint8_t* bytes, size_t size);

// Throws BadImage naming `source` for a corrupt or truncated file and for a format other
// than JPEG and PNG.
RgbImage decode_image(const uint8_t* bytes, size_t size, const std::string& source);
RgbImage decode_image_file(const std::string& path);

// The decoders behind decode_image, for bytes already known to be of their format.
RgbImage decode_jpeg(const uint8_t* bytes, size_t size, const std::string& source);
RgbImage decode_png(const uint8_t* bytes, size_t size, const std::string& source);

}  // namespace dpcore::data
