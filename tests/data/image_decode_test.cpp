// The JPEG and PNG decoders against PIL's Image.open(f).convert("RGB") on the fixtures of
// tests/fixtures/images (make_fixtures.py there): every pixel identical, and the broken
// files refused with an error naming them.
#include <gtest/gtest.h>
#include <zlib.h>

#include <fstream>
#include <iterator>

#include "engine/data/bytes.h"
#include "engine/data/image/image_decode.h"
#include "rgb_file.h"
#include "support/error_of.h"
#include "support/test_support.h"

namespace dpcore::data {
namespace {

using testing::error_of;

std::string fixture(const std::string& name) { return testing::source_dir() + "/tests/fixtures/images/" + name; }

const std::vector<std::string> kDecodable = {
    "rgb.png",        "grey.png",          "grey1.png",      "grey2.png",          "grey_alpha.png",
    "rgba.png",       "palette.png",       "palette_trns.png", "grey16.png",       "rgb16.png",
    "rgba16.png",     "rgb_interlaced.png", "rgb.jpg",       "rgb444.jpg",         "grey.jpg",
    "progressive.jpg", "cmyk.jpg",         "exif_rotated.jpg", "extraneous_bytes.jpg"};

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// PIL's RGB image of each file, from one run of tests/data/pil_rgb.py.
class PilReference : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::python_can_import("PIL"))
      GTEST_SKIP() << testing::kTorchPython << " cannot import PIL (Debian package python3-pil)";
    std::string args = "'" + dir_.path() + "'";
    for (const std::string& name : kDecodable) args += " '" + fixture(name) + "'";
    const testing::ScriptResult r = testing::run_python_script("tests/data/pil_rgb.py", args);
    ASSERT_EQ(r.status, 0) << r.output;
  }

  // (ok, image): ok is false when PIL could not load the file.
  std::pair<bool, RgbImage> pil(const std::string& name) const {
    std::optional<RgbImage> im = read_rgb_file(dir_.file(name + ".rgb"));
    return {im.has_value(), im ? std::move(*im) : RgbImage{}};
  }
  testing::TempDir dir_;
};

TEST_F(PilReference, EveryDecodableFileIsPixelIdenticalToPilConvertRgb) {
  for (const std::string& name : kDecodable) {
    SCOPED_TRACE(name);
    const auto [loaded, want] = pil(name);
    ASSERT_TRUE(loaded) << "PIL could not load " << name << ": " << read_text(dir_.file(name + ".error"));
    const RgbImage got = decode_image_file(fixture(name));
    ASSERT_EQ(got.w, want.w);
    ASSERT_EQ(got.h, want.h);
    ASSERT_EQ(got.pixels.size(), size_t(got.w * got.h * 3));
    size_t differing = 0, first = 0;
    for (size_t i = got.pixels.size(); i-- > 0;)
      if (got.pixels[i] != want.pixels[i]) ++differing, first = i;
    EXPECT_EQ(differing, 0u) << "first at byte " << first << ": " << int(got.pixels[first]) << " vs PIL's "
                             << int(want.pixels[first]);
  }
}

TEST(ImageDecode, ExifOrientationIsIgnoredAsTorchvisionIgnoresIt) {
  // The rotated file holds the same 11 x 7 pixels with an Orientation tag of 6 (rotate 90
  // degrees to display): decoded as stored, not rotated to 7 x 11.
  const RgbImage rotated = decode_image_file(fixture("exif_rotated.jpg"));
  const RgbImage plain = decode_image_file(fixture("rgb.jpg"));
  EXPECT_EQ(rotated.w, 11);
  EXPECT_EQ(rotated.h, 7);
  EXPECT_EQ(rotated.pixels, plain.pixels);
}

TEST(ImageDecode, FormatComesFromTheBytesNotTheName) {
  const std::vector<uint8_t> jpeg = read_file_bytes(fixture("rgb.jpg"));
  EXPECT_EQ(sniff_image_format(jpeg.data(), jpeg.size()), ImageFormat::jpeg);
  testing::TempDir dir;
  std::ofstream(dir.file("really_a_jpeg.png"), std::ios::binary).write(reinterpret_cast<const char*>(jpeg.data()),
                                                                          std::streamsize(jpeg.size()));
  EXPECT_EQ(decode_image_file(dir.file("really_a_jpeg.png")).pixels, decode_image_file(fixture("rgb.jpg")).pixels);
}

TEST(ImageDecode, BadFilesAreBadImageErrorsNamingTheFile) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"truncated.jpg", "truncated JPEG"},
      {"truncated.png", "truncated PNG"},
      {"corrupt.png", "corrupt PNG"},
      {"not_an_image.png", "not a JPEG or PNG file"},
      {"image.bmp", "not a JPEG or PNG file"},
  };
  for (const auto& [name, problem] : cases) {
    SCOPED_TRACE(name);
    try {
      decode_image_file(fixture(name));
      ADD_FAILURE() << "decoded";
    } catch (const BadImage& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(fixture(name) + ": "), std::string::npos) << message;
      EXPECT_NE(message.find(problem), std::string::npos) << message;
    }
  }
}

TEST(ImageDecode, EmptyFileAndAHeaderOnlyAreBadImages) {
  const std::vector<uint8_t> png = read_file_bytes(fixture("rgb.png"));
  const std::vector<uint8_t> jpeg = read_file_bytes(fixture("rgb.jpg"));
  EXPECT_THROW(decode_image(png.data(), 0, "empty"), BadImage);
  const std::string png_message = error_of([&] { decode_image(png.data(), 8, "signature.png"); });
  EXPECT_NE(png_message.find("signature.png: corrupt PNG: truncated PNG"), std::string::npos) << png_message;
  const std::string jpeg_message = error_of([&] { decode_image(jpeg.data(), 3, "magic.jpg"); });
  EXPECT_NE(jpeg_message.find("magic.jpg: corrupt or truncated JPEG header"), std::string::npos) << jpeg_message;
}

void put_be(std::vector<uint8_t>& bytes, size_t at, uint32_t value, int size) {
  for (int i = 0; i < size; ++i) bytes[at + size_t(i)] = uint8_t(value >> (8 * (size - 1 - i)));
}

TEST(ImageDecode, HeadersAskingForHugeImagesAreRefusedBeforeAllocating) {
  // IHDR's width and height (bytes 16..23) made 12000 x 12000 and its CRC (29..32) redone:
  // 432 MB of pixels (within PIL's limit) that a 200-byte file cannot hold.
  std::vector<uint8_t> png = read_file_bytes(fixture("rgb.png"));
  put_be(png, 16, 12000, 4);
  put_be(png, 20, 12000, 4);
  put_be(png, 29, uint32_t(crc32(0, png.data() + 12, 17)), 4);
  const std::string png_message = error_of([&] { decode_image(png.data(), png.size(), "huge.png"); });
  EXPECT_NE(png_message.find("huge.png: corrupt PNG: truncated PNG: the file is too short for its image size"),
            std::string::npos)
      << png_message;
  // The baseline frame header (FF C0, length, precision, then height and width) made
  // 65000 x 65000: beyond PIL's limit of 2 x 89478485 pixels.
  std::vector<uint8_t> jpeg = read_file_bytes(fixture("rgb.jpg"));
  size_t sof = 2;
  while (sof + 1 < jpeg.size() && !(jpeg[sof] == 0xFF && jpeg[sof + 1] == 0xC0)) ++sof;
  ASSERT_LT(sof + 9, jpeg.size());
  put_be(jpeg, sof + 5, 65000, 2);
  put_be(jpeg, sof + 7, 65000, 2);
  const std::string jpeg_message = error_of([&] { decode_image(jpeg.data(), jpeg.size(), "huge.jpg"); });
  EXPECT_NE(jpeg_message.find("huge.jpg: image size 65000 x 65000 is empty or larger than 178956970 pixels"),
            std::string::npos)
      << jpeg_message;
}

}  // namespace
}  // namespace dpcore::data
