// The .rgb files the Python references (pil_rgb.py, torchvision_transforms.py) read and write:
// "W H\n" then the image's RGB bytes, row by row.
#pragma once

#include <cstdio>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>

#include "engine/data/image/image_decode.h"

namespace dpcore::data {

// The image in `path`; nothing when the file is missing or has no header line.
inline std::optional<RgbImage> read_rgb_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string text(std::istreambuf_iterator<char>(in), {});
  const size_t newline = text.find('\n');
  if (newline == std::string::npos) return std::nullopt;
  RgbImage im;
  long long w = 0, h = 0;
  if (std::sscanf(text.substr(0, newline).c_str(), "%lld %lld", &w, &h) != 2) return std::nullopt;
  im.w = w;
  im.h = h;
  im.pixels.assign(text.begin() + long(newline) + 1, text.end());
  return im;
}

inline void write_rgb_file(const std::string& path, const RgbImage& im) {
  std::ofstream out(path, std::ios::binary);
  out << im.w << ' ' << im.h << '\n';
  out.write(reinterpret_cast<const char*>(im.pixels.data()), std::streamsize(im.pixels.size()));
}

}  // namespace dpcore::data
