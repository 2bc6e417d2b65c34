#include "engine/data/image/image_decode.h"

#include <cstring>

#include "engine/data/bytes.h"

namespace dpcore::data {

ImageFormat sniff_image_format(const uint8_t* bytes, size_t size) {
  static const uint8_t kJpeg[] = {0xFF, 0xD8, 0xFF};
  static const uint8_t kPng[] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  if (size >= sizeof kJpeg && std::memcmp(bytes, kJpeg, sizeof kJpeg) == 0) return ImageFormat::jpeg;
  if (size >= sizeof kPng && std::memcmp(bytes, kPng, sizeof kPng) == 0) return ImageFormat::png;
  return ImageFormat::other;
}

RgbImage decode_image(const uint8_t* bytes, size_t size, const std::string& source) {
  switch (sniff_image_format(bytes, size)) {
    case ImageFormat::jpeg:
      return decode_jpeg(bytes, size, source);
    case ImageFormat::png:
      return decode_png(bytes, size, source);
    case ImageFormat::other:
      break;
  }
  throw BadImage(source + ": not a JPEG or PNG file (by its first bytes; " + std::to_string(size) +
                 " bytes); dpcore decodes only JPEG and PNG");
}

RgbImage decode_image_file(const std::string& path) {
  const std::vector<uint8_t> bytes = read_file_bytes(path);
  return decode_image(bytes.data(), bytes.size(), path);
}

}  // namespace dpcore::data
