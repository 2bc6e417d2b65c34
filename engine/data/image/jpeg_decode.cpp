// JPEG through TurboJPEG, with libjpeg's default decoding (accurate integer DCT, fancy
// upsampling), which is what PIL asks libjpeg for: the same library gives the same pixels.
#include <turbojpeg.h>

#include <memory>

#include "engine/data/image/image_decode.h"
#include "engine/data/image/image_size_limit.h"

namespace dpcore::data {

namespace {

using Handle = std::unique_ptr<void, int (*)(tjhandle)>;

// PIL's MULDIV255: a * b / 255 rounded, in integers.
inline int muldiv255(int a, int b) {
  const int t = a * b + 128;
  return ((t >> 8) + t) >> 8;
}

// PIL reads a CMYK JPEG as Adobe's inverted CMYK ("CMYK;I") and converts to RGB with
// cmyk2rgb: channel = clip(255 - k - c * (255 - k) / 255). `pixels` holds n pixels of the
// inverted values as the file stores them (and TurboJPEG returns them), so 255 - k is the
// stored k; they become n RGB pixels in place (pixel p's RGB is written at 3p, at or before
// its CMYK at 4p, which is read first).
void cmyk_to_rgb_in_place(std::vector<uint8_t>& pixels, size_t n) {
  for (size_t p = 0; p < n; ++p) {
    const int nk = pixels[p * 4 + 3];
    int rgb[3];
    for (int ch = 0; ch < 3; ++ch) {
      const int v = nk - muldiv255(255 - pixels[p * 4 + size_t(ch)], nk);
      rgb[ch] = v < 0 ? 0 : v;
    }
    for (int ch = 0; ch < 3; ++ch) pixels[p * 3 + size_t(ch)] = uint8_t(rgb[ch]);
  }
  pixels.resize(n * 3);
}

}  // namespace

RgbImage decode_jpeg(const uint8_t* bytes, size_t size, const std::string& source) {
  Handle tj(tjInitDecompress(), tjDestroy);
  if (!tj) throw Error(source + ": cannot start the JPEG decoder: " + tjGetErrorStr2(nullptr));
  unsigned char* data = const_cast<unsigned char*>(bytes);
  int w = 0, h = 0, subsampling = 0, colorspace = 0;
  // (A header cut short can come back without an error and with no size.)
  const bool failed =
      tjDecompressHeader3(tj.get(), data, static_cast<unsigned long>(size), &w, &h, &subsampling, &colorspace) != 0;
  if (failed || w <= 0 || h <= 0)
    throw BadImage(source + ": corrupt or truncated JPEG header: " +
                   (failed ? tjGetErrorStr2(tj.get()) : "no image size before the data ends"));
  check_image_size(h, w, source);
  const bool cmyk = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
  const size_t n = size_t(h) * size_t(w);
  std::vector<uint8_t> pixels(n * (cmyk ? 4 : 3));
  if (tjDecompress2(tj.get(), data, static_cast<unsigned long>(size), pixels.data(), w, 0, h,
                    cmyk ? TJPF_CMYK : TJPF_RGB, 0) != 0) {
    const std::string message = tjGetErrorStr2(tj.get());
    // libjpeg's warnings about damaged data it decoded anyway ("Corrupt JPEG data: 3
    // extraneous bytes before marker") PIL ignores too; a file that ends early PIL refuses
    // ("image file is truncated"), and so does this.
    const bool truncated = message.find("Premature end") != std::string::npos;
    if (tjGetErrorCode(tj.get()) != TJERR_WARNING || truncated)
      throw BadImage(source + (truncated ? ": truncated JPEG: " : ": corrupt JPEG: ") + message);
  }
  if (cmyk) cmyk_to_rgb_in_place(pixels, n);
  return RgbImage{h, w, std::move(pixels)};
}

}  // namespace dpcore::data
