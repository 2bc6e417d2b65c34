// PNG through libpng's sequential read API, with the transformations that give PIL's
// convert("RGB") (image_decode.h lists them). libpng reports errors by longjmp, so the part
// that can fail, read_pixels, holds no object with a destructor of its own: everything it
// fills is set up by decode_png before it runs.
#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>

#include "engine/data/image/image_decode.h"
#include "engine/data/image/image_size_limit.h"

namespace dpcore::data {

namespace {

struct PngSource {
  const uint8_t* bytes;
  size_t size, pos;
  char message[256];  // libpng's error, or the reader's
};

void read_bytes(png_structp png, png_bytep dst, png_size_t n) {
  auto* in = static_cast<PngSource*>(png_get_io_ptr(png));
  if (n > in->size - in->pos) png_error(png, "truncated PNG: the file ends inside a chunk");
  std::memcpy(dst, in->bytes + in->pos, n);
  in->pos += n;
}

void on_error(png_structp png, png_const_charp message) {
  auto* in = static_cast<PngSource*>(png_get_error_ptr(png));
  std::snprintf(in->message, sizeof in->message, "%s", message);
  png_longjmp(png, 1);
}

void on_warning(png_structp, png_const_charp) {}  // damaged ancillary chunks: ignored, as PIL ignores them

// What read_pixels fills; its vectors are decode_png's, so that a longjmp out of libpng
// skips no destructor.
struct PngPixels {
  int64_t h = 0, w = 0;
  bool grey16 = false;  // 16-bit grey without alpha: two big-endian bytes per pixel, else RGB
  bool too_large = false;
  std::vector<uint8_t>* rows;
  std::vector<png_bytep>* row_pointers;
};

// Returns false with in.message set when libpng fails, or with too_large set.
bool read_pixels(png_structp png, png_infop info, PngPixels& out) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_info(png, info);
  png_uint_32 w = 0, h = 0;
  int depth = 0, color = 0;
  png_get_IHDR(png, info, &w, &h, &depth, &color, nullptr, nullptr, nullptr);
  out.h = h;
  out.w = w;
  if (out.h <= 0 || out.w <= 0 || out.h > kMaxImagePixels / out.w) {
    out.too_large = true;
    return false;
  }
  // Deflate compresses at most 1032:1: a file too short for its header's image size is cut
  // short, and is refused before its size is allocated.
  const auto* in = static_cast<const PngSource*>(png_get_io_ptr(png));
  const double pixel_bytes = double(w) * double(h) * png_get_channels(png, info) * depth / 8;
  if (pixel_bytes > 1032.0 * double(in->size - in->pos) + 1024)
    png_error(png, "truncated PNG: the file is too short for its image size");
  // PIL opens 16-bit grey as mode I (32-bit integers), and convert("RGB") clips to 255:
  // keep the 16 bits and clip in decode_png. Every other 16-bit image PIL reads by its
  // high bytes, which is libpng's strip_16.
  out.grey16 = depth == 16 && color == PNG_COLOR_TYPE_GRAY;
  if (!out.grey16) {
    png_set_strip_16(png);
    png_set_palette_to_rgb(png);
    png_set_expand_gray_1_2_4_to_8(png);
    png_set_gray_to_rgb(png);
    png_set_strip_alpha(png);
  }
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const size_t row_bytes = png_get_rowbytes(png, info);
  if (row_bytes != size_t(w) * (out.grey16 ? 2 : 3)) png_error(png, "unexpected row size after conversion to RGB");
  out.rows->resize(size_t(h) * row_bytes);
  out.row_pointers->resize(h);
  for (png_uint_32 y = 0; y < h; ++y) (*out.row_pointers)[y] = out.rows->data() + size_t(y) * row_bytes;
  png_read_image(png, out.row_pointers->data());
  return true;
}

}  // namespace

RgbImage decode_png(const uint8_t* bytes, size_t size, const std::string& source) {
  PngSource in{bytes, size, 0, {0}};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &in, on_error, on_warning);
  if (!png) throw Error(source + ": cannot start the PNG decoder");
  png_infop info = png_create_info_struct(png);
  if (!info) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    throw Error(source + ": cannot start the PNG decoder");
  }
  png_set_read_fn(png, &in, read_bytes);
  std::vector<uint8_t> rows;
  std::vector<png_bytep> row_pointers;
  PngPixels pixels;
  pixels.rows = &rows;
  pixels.row_pointers = &row_pointers;
  const bool ok = read_pixels(png, info, pixels);
  png_destroy_read_struct(&png, &info, nullptr);
  if (pixels.too_large) check_image_size(pixels.h, pixels.w, source);
  if (!ok) throw BadImage(source + ": corrupt PNG: " + in.message);
  if (!pixels.grey16) return RgbImage{pixels.h, pixels.w, std::move(rows)};
  RgbImage out{pixels.h, pixels.w, std::vector<uint8_t>(size_t(pixels.h * pixels.w) * 3)};
  for (size_t p = 0; p < size_t(pixels.h * pixels.w); ++p) {
    const int v = rows[2 * p] << 8 | rows[2 * p + 1];
    out.pixels[3 * p] = out.pixels[3 * p + 1] = out.pixels[3 * p + 2] = uint8_t(v > 255 ? 255 : v);
  }
  return out;
}

}  // namespace dpcore::data
