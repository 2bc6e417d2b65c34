// torchvision 0.14's transforms (engine/data/image/image_transforms.h, image_resize.h) against
// torchvision itself (tests/data/torchvision_transforms.py, one Python process per test):
// Resize, CenterCrop, F.resized_crop and the flip pixel for pixel, ToTensor and Normalize bit
// for bit, and RandomResizedCrop's box logic fed the same draws as torchvision's get_params.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/data/bytes.h"
#include "engine/data/image/image_decode.h"
#include "engine/data/image/image_resize.h"
#include "engine/data/image/image_transforms.h"
#include "engine/random.h"
#include "rgb_file.h"
#include "support/error_of.h"
#include "support/test_support.h"

namespace dpcore::data {
namespace {

using nlohmann::json;
using testing::error_of;

std::string fixture(const std::string& name) { return testing::source_dir() + "/tests/fixtures/images/" + name; }

// Uniform noise: every weight of a filter shows in the result.
RgbImage noise_image(int64_t h, int64_t w, uint64_t seed) {
  Generator g(seed);
  RgbImage im{h, w, std::vector<uint8_t>(size_t(h * w * 3))};
  for (uint8_t& b : im.pixels) b = uint8_t(g.below(256));
  return im;
}

// Steps between 0 and 255 next to each other: the clipping of the sums shows.
RgbImage edges_image(int64_t h, int64_t w) {
  RgbImage im{h, w, std::vector<uint8_t>(size_t(h * w * 3))};
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int64_t c = 0; c < 3; ++c) im.pixels[size_t((y * w + x) * 3 + c)] = ((x / 3 + y / 2 + c) % 2) ? 255 : 0;
  return im;
}

std::string describe_difference(const RgbImage& got, const RgbImage& want) {
  if (got.h != want.h || got.w != want.w)
    return "size " + std::to_string(got.w) + " x " + std::to_string(got.h) + ", torchvision's " +
           std::to_string(want.w) + " x " + std::to_string(want.h);
  size_t differing = 0, first = 0;
  int largest = 0;
  for (size_t i = got.pixels.size(); i-- > 0;)
    if (got.pixels[i] != want.pixels[i]) {
      ++differing, first = i;
      largest = std::max(largest, std::abs(int(got.pixels[i]) - int(want.pixels[i])));
    }
  if (differing == 0) return "";
  return std::to_string(differing) + " bytes differ, by up to " + std::to_string(largest) + "; the first, byte " +
         std::to_string(first) + ": " + std::to_string(got.pixels[first]) + " vs " + std::to_string(want.pixels[first]);
}

// Runs torchvision_transforms.py once on `cases`; the images it wrote are read with image().
class Torchvision : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::python_can_import("torchvision"))
      GTEST_SKIP() << testing::kTorchPython << " cannot import torchvision (Debian package python3-torchvision)";
  }
  // An input for the cases: written as a .rgb file, or a fixture's path.
  std::string input(const std::string& name, const RgbImage& im) {
    const std::string path = dir_.file(name + ".rgb");
    write_rgb_file(path, im);
    return path;
  }
  std::string run(const json& cases) {
    std::ofstream(dir_.file("cases.json")) << cases.dump();
    const testing::ScriptResult r = testing::run_python_script(
        "tests/data/torchvision_transforms.py", "'" + dir_.file("cases.json") + "' '" + dir_.path() + "'");
    EXPECT_EQ(r.status, 0) << r.output;
    return r.output;
  }
  RgbImage image(const std::string& name) const {
    std::optional<RgbImage> im = read_rgb_file(dir_.file(name + ".rgb"));
    EXPECT_TRUE(im.has_value()) << "torchvision wrote no " << name;
    return im ? *im : RgbImage{};
  }
  testing::TempDir dir_;
};

struct Input {
  std::string path;
  RgbImage image;
};

std::vector<Input> inputs(const std::function<std::string(const std::string&, const RgbImage&)>& write) {
  std::vector<Input> out;
  for (const char* name : {"rgb.jpg", "rgb_5x3.png", "palette.png"})
    out.push_back({fixture(name), decode_image_file(fixture(name))});
  const std::vector<std::pair<std::string, RgbImage>> generated = {
      {"noise_61x97", noise_image(61, 97, 1)}, {"noise_256x171", noise_image(256, 171, 2)},
      {"edges_40x40", edges_image(40, 40)},   {"noise_1x9", noise_image(1, 9, 3)}};
  for (const auto& [name, im] : generated) out.push_back({write(name, im), im});
  return out;
}

TEST_F(Torchvision, ResizeIsPilsAntialiasedBilinearPixelForPixel) {
  // Down and up, by integer and odd factors, both forms; a shorter side of 1; a size that
  // does not change; an axis that grows while the other shrinks.
  const std::vector<ResizeSize> sizes = {{4, 0},  {7, 0},   {1, 0},   {100, 0}, {33, 0}, {5, 9},
                                         {61, 97}, {200, 150}, {13, 31}, {1, 1},  {3, 250}};
  const std::vector<Input> in = inputs([this](const std::string& n, const RgbImage& im) { return input(n, im); });
  json cases = json::array();
  for (size_t i = 0; i < in.size(); ++i)
    for (size_t s = 0; s < sizes.size(); ++s) {
      const ResizeSize& z = sizes[s];
      cases.push_back({{"name", "r" + std::to_string(i) + "_" + std::to_string(s)}, {"op", "resize"},
                       {"input", in[i].path}, {"size", z.shorter_side() ? json(z.h) : json({z.h, z.w})}});
    }
  run(cases);
  for (size_t i = 0; i < in.size(); ++i)
    for (size_t s = 0; s < sizes.size(); ++s) {
      SCOPED_TRACE(in[i].path + " to " + std::to_string(sizes[s].h) + "," + std::to_string(sizes[s].w));
      EXPECT_EQ(describe_difference(resize(in[i].image, sizes[s]), image("r" + std::to_string(i) + "_" +
                                                                           std::to_string(s))), "");
    }
}

TEST_F(Torchvision, CenterCropRoundsAndPadsAsTorchvision) {
  // Odd and even margins (Python's round of x.5 goes to even), crops larger than the image on
  // one side or both (zero padding, the odd pixel after), the whole image.
  const std::vector<Extent> sizes = {{4, 4}, {6, 11}, {3, 8}, {20, 30}, {7, 12}, {2, 200}, {61, 97}, {1, 1}};
  const std::vector<Input> in = inputs([this](const std::string& n, const RgbImage& im) { return input(n, im); });
  json cases = json::array();
  for (size_t i = 0; i < in.size(); ++i)
    for (size_t s = 0; s < sizes.size(); ++s)
      cases.push_back({{"name", "c" + std::to_string(i) + "_" + std::to_string(s)}, {"op", "center_crop"},
                       {"input", in[i].path}, {"size", {sizes[s].h, sizes[s].w}}});
  run(cases);
  for (size_t i = 0; i < in.size(); ++i)
    for (size_t s = 0; s < sizes.size(); ++s) {
      SCOPED_TRACE(in[i].path + " to " + std::to_string(sizes[s].h) + " x " + std::to_string(sizes[s].w));
      EXPECT_EQ(describe_difference(center_crop(in[i].image, sizes[s]),
                                    image("c" + std::to_string(i) + "_" + std::to_string(s))), "");
    }
}

TEST_F(Torchvision, ResizedCropAndFlipAreTorchvisions) {
  const RgbImage im = noise_image(256, 171, 4);
  const std::string path = input("noise", im);
  const std::vector<std::pair<CropBox, Extent>> crops = {
      {{0, 0, 256, 171}, {224, 224}}, {{10, 20, 100, 50}, {32, 32}}, {{255, 170, 1, 1}, {5, 3}},
      {{3, 7, 201, 33}, {64, 48}}};
  json cases = json::array({{{"name", "flip"}, {"op", "hflip"}, {"input", path}}});
  for (size_t k = 0; k < crops.size(); ++k) {
    const CropBox& b = crops[k].first;
    cases.push_back({{"name", "rc" + std::to_string(k)}, {"op", "resized_crop"}, {"input", path},
                     {"box", {b.top, b.left, b.h, b.w}}, {"size", {crops[k].second.h, crops[k].second.w}}});
  }
  run(cases);
  EXPECT_EQ(describe_difference(flip_horizontal(im), image("flip")), "");
  for (size_t k = 0; k < crops.size(); ++k) {
    SCOPED_TRACE(k);
    const RgbImage got = resize_bilinear(crop(im, crops[k].first), crops[k].second.h, crops[k].second.w);
    EXPECT_EQ(describe_difference(got, image("rc" + std::to_string(k))), "");
  }
}

TEST_F(Torchvision, ToTensorAndNormalizeAreBitIdentical) {
  const RgbImage noise = noise_image(13, 17, 5);
  const std::vector<std::pair<std::string, RgbImage>> in = {{fixture("rgb.jpg"), decode_image_file(fixture("rgb.jpg"))},
                                                            {input("noise", noise), noise}};
  const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
  json cases = json::array();
  for (size_t i = 0; i < in.size(); ++i)
    cases.push_back({{"name", "t" + std::to_string(i)}, {"op", "tensor"}, {"input", in[i].first},
                     {"mean", {0.485, 0.456, 0.406}}, {"std", {0.229, 0.224, 0.225}}});
  run(cases);
  for (size_t i = 0; i < in.size(); ++i) {
    const RgbImage& im = in[i].second;
    std::vector<float> got(size_t(3 * im.h * im.w));
    to_tensor(im, got.data());
    normalize_tensor(got.data(), im.h * im.w, mean, std);
    const std::vector<uint8_t> bytes = read_file_bytes(dir_.file("t" + std::to_string(i) + ".f32"));
    ASSERT_EQ(bytes.size(), got.size() * sizeof(float));
    std::vector<float> want(got.size());
    std::memcpy(want.data(), bytes.data(), bytes.size());
    for (size_t k = 0; k < got.size(); ++k) ASSERT_EQ(got[k], want[k]) << in[i].first << " value " << k;
  }
}

// dpcore's Generator, recording what it returned for the script to replay; the uniform draws
// begin with `scripted` (values chosen to land on a rounding tie) when it is given.
struct RecordingDraws {
  Generator generator;
  std::vector<double> scripted;
  std::vector<double> uniforms;
  std::vector<int64_t> randints, highs;
  double uniform(double lo, double hi) {
    const size_t k = uniforms.size();
    return uniforms.emplace_back(k < scripted.size() ? scripted[k] : generator.uniform(lo, hi));
  }
  uint64_t below(uint64_t n) {
    highs.push_back(int64_t(n));
    return uint64_t(randints.emplace_back(int64_t(generator.below(n))));
  }
};

TEST_F(Torchvision, RandomResizedCropBoxIsGetParamsOnTheSameDraws) {
  struct Case {
    int64_t h, w;
    ResizedCropRange range;
    std::vector<double> scripted;
  };
  // The defaults on several shapes; ranges that make most tries fail; ranges that make all
  // ten fail, for each branch of the fallback (too tall, too wide, ratio in range).
  const std::vector<Case> shapes = {
      {7, 11, {}},       {224, 224, {}},  {375, 500, {}},           {300, 30, {}},
      {30, 300, {}},     {1, 1, {}},      {64, 64, {0.9, 1.0, 3.0 / 4.0, 4.0 / 3.0}},
      {50, 80, {0.5, 1.0, 0.2, 5.0}},     {301, 30, {2.0, 3.0, 3.0, 5.0}},
      {30, 301, {2.0, 3.0, 0.1, 0.2}},    {100, 120, {2.0, 3.0, 0.5, 2.0}},
      // A crop of sqrt(100 * 0.0625) = 2.5 pixels a side, Python's round takes it to 2; then a
      // first try too wide (ratio e^1), the second fits.
      {10, 10, {0.0, 1.0, 0.25, 4.0}, {0.0625, 0.0}},  {10, 10, {0.0, 1.0, 0.25, 4.0}, {0.99, 1.0, 0.0625, 0.0}}};
  json cases = json::array();
  std::vector<RecordingDraws> draws;
  std::vector<CropBox> boxes;
  for (size_t k = 0; k < shapes.size(); ++k)
    for (uint64_t seed = 0; seed < 20; ++seed) {
      const Case& c = shapes[k];
      RecordingDraws d{Generator(seed), c.scripted, {}, {}, {}};
      boxes.push_back(random_resized_crop_box(c.h, c.w, c.range, d));
      cases.push_back({{"name", std::to_string(k) + "/" + std::to_string(seed)}, {"op", "crop_params"},
                       {"h", c.h}, {"w", c.w}, {"scale", {c.range.scale_lo, c.range.scale_hi}},
                       {"ratio", {c.range.ratio_lo, c.range.ratio_hi}}, {"uniforms", d.uniforms},
                       {"randints", d.randints}});
      draws.push_back(std::move(d));
    }
  std::istringstream lines(run(cases));
  size_t i = 0, fallbacks = 0;
  for (std::string line; std::getline(lines, line) && i < boxes.size(); ++i) {
    const json want = json::parse(line);
    SCOPED_TRACE(want["name"].get<std::string>());
    const CropBox& b = boxes[i];
    EXPECT_EQ(json({b.top, b.left, b.h, b.w}), want["box"]);
    EXPECT_EQ(want["uniforms_used"], draws[i].uniforms.size());
    EXPECT_EQ(want["randints_used"], draws[i].randints.size());
    EXPECT_EQ(want["randint_highs"], json(draws[i].highs));
    const ResizedCropRange& r = shapes[i / 20].range;
    for (size_t t = 0; t < want["uniform_ranges"].size(); t += 2) {
      EXPECT_EQ(want["uniform_ranges"][t], json({r.scale_lo, r.scale_hi}));
      // torchvision takes the logarithms of the ratios in float32.
      EXPECT_NEAR(want["uniform_ranges"][t + 1][0].get<double>(), std::log(r.ratio_lo), 1e-6);
      EXPECT_NEAR(want["uniform_ranges"][t + 1][1].get<double>(), std::log(r.ratio_hi), 1e-6);
    }
    fallbacks += draws[i].randints.empty();
  }
  EXPECT_EQ(i, boxes.size());
  EXPECT_GE(fallbacks, 60u);  // the three cases where no try can fit, at least
}

}  // namespace
}  // namespace dpcore::data
