// The --transform spec (engine/data/image/transform_spec.h): what it parses to, every error
// naming the flag, the step and the value, and the random steps' draws being a function of
// (seed, epoch, image index) alone, whatever the order or thread the images go through.
#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include "engine/data/image/image_resize.h"
#include "engine/data/image/transform_spec.h"
#include "engine/random.h"
#include "support/error_of.h"

namespace dpcore::data {
namespace {

using Kind = TransformStep::Kind;
using testing::error_of;

RgbImage noise_image(int64_t h, int64_t w, uint64_t seed) {
  Generator g(seed);
  RgbImage im{h, w, std::vector<uint8_t>(size_t(h * w * 3))};
  for (uint8_t& b : im.pixels) b = uint8_t(g.below(256));
  return im;
}

TEST(TransformSpec, TheIssuesTrainingAndValidationSpecs) {
  const TransformSpec train = parse_transform_spec(
      "--transform", "RandomResizedCrop(224), RandomHorizontalFlip(), ToTensor(), Normalize(imagenet)");
  ASSERT_EQ(train.steps.size(), 4u);
  EXPECT_EQ(train.steps[0].kind, Kind::random_resized_crop);
  EXPECT_EQ(train.steps[0].size, (Extent{224, 224}));
  EXPECT_EQ(train.steps[0].range.scale_lo, 0.08);
  EXPECT_EQ(train.steps[0].range.ratio_hi, 4.0 / 3.0);
  EXPECT_EQ(train.steps[1].kind, Kind::random_horizontal_flip);
  EXPECT_EQ(train.steps[1].p, 0.5);
  EXPECT_EQ(train.steps[3].mean[1], 0.456f);
  EXPECT_EQ(train.steps[3].std[2], 0.225f);
  EXPECT_TRUE(train.random());
  EXPECT_TRUE(train.normalizes());

  const TransformSpec val = parse_transform_spec("--val-transform", "Resize(256),CenterCrop(224),ToTensor()");
  ASSERT_EQ(val.steps.size(), 3u);
  EXPECT_TRUE(val.steps[0].resize.shorter_side());
  EXPECT_EQ(val.steps[0].resize.h, 256);
  EXPECT_EQ(val.steps[1].size, (Extent{224, 224}));
  EXPECT_FALSE(val.random());
  EXPECT_FALSE(val.normalizes());

  const TransformSpec keyed = parse_transform_spec(
      "--transform", "Resize((64,48)),RandomResizedCrop(size=(32,16),ratio=(0.5,2),scale=(0.5,1)),"
                     "RandomHorizontalFlip(p=0.25),ToTensor(),Normalize(mean=(0.5,0.5,0.5),std=(0.25,0.5,1))");
  EXPECT_EQ(keyed.steps[0].resize.h, 64);
  EXPECT_EQ(keyed.steps[0].resize.w, 48);
  EXPECT_EQ(keyed.steps[1].size, (Extent{32, 16}));
  EXPECT_EQ(keyed.steps[1].range.scale_lo, 0.5);
  EXPECT_EQ(keyed.steps[1].range.ratio_lo, 0.5);
  EXPECT_EQ(keyed.steps[1].range.ratio_hi, 2.0);
  EXPECT_EQ(keyed.steps[2].p, 0.25);
  EXPECT_EQ(keyed.steps[4].std[0], 0.25f);
}

TEST(TransformSpec, ErrorsNameTheFlagTheStepAndTheValue) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"Rotate(30),ToTensor()", "unknown transform \"Rotate\""},
      {"ToTensor", "expected '(' after ToTensor"},
      {"Resize(0),ToTensor()", "Resize: size \"0\" is not a whole number of pixels"},
      {"Resize(2.5),ToTensor()", "Resize: size \"2.5\" is not a whole number"},
      {"Resize((1,2,3)),ToTensor()", "Resize: size \"(1,2,3)\" is not a size"},
      {"Resize(big),ToTensor()", "Resize: size \"big\" is not a size"},
      {"Resize(),ToTensor()", "Resize needs its size"},
      {"CenterCrop(4,5),ToTensor()", "CenterCrop takes 1 argument (size), got 2"},
      {"RandomResizedCrop(8,scale=(1,0.5)),ToTensor()", "scale \"(1,0.5)\" is not a range with 0 < lo <= hi"},
      {"RandomResizedCrop(8,ratio=3),ToTensor()", "ratio \"3\" is not a range (lo,hi)"},
      {"RandomResizedCrop(8,zoom=3),ToTensor()", "RandomResizedCrop has no argument \"zoom\""},
      {"RandomResizedCrop(8,size=9),ToTensor()", "RandomResizedCrop: size is given twice"},
      {"RandomHorizontalFlip(1.5),ToTensor()", "RandomHorizontalFlip: p \"1.5\" is not a probability in [0, 1]"},
      {"ToTensor(1)", "ToTensor takes 0 arguments (it takes none), got 1"},
      {"ToTensor(),Normalize(cifar)", "Normalize: mean \"cifar\" is not imagenet or three numbers"},
      {"ToTensor(),Normalize(mean=(0.5,0.5,0.5),std=(1,0,1))", "Normalize: std \"(1,0,1)\" has a value that is not positive"},
      {"ToTensor(),Normalize(mean=(0.5,0.5))", "mean \"(0.5,0.5)\" is not three numbers"},
      {"ToTensor(),Normalize(imagenet,(1,1,1))", "Normalize(imagenet) takes no std"},
      {"Resize(8)", "no ToTensor()"},
      {"ToTensor(),Resize(8)", "Resize after ToTensor()"},
      {"Normalize(imagenet),ToTensor()", "Normalize before ToTensor()"},
      {"ToTensor(),ToTensor()", "ToTensor() is given twice"},
      {"ToTensor(),Normalize(imagenet),Normalize(imagenet)", "Normalize after Normalize"},
      {"Resize((8,x)),ToTensor()", "Resize: \"x\" in a tuple is not a number"},
      {"Resize(8,ToTensor()", "expected ')' to close Resize(...)"},
      {"ToTensor())", "unexpected text after the last transform"},
      {"", "expected a transform"},
  };
  for (const auto& [text, problem] : cases) {
    SCOPED_TRACE(text);
    const std::string message = error_of([&] { parse_transform_spec("--transform", text); });
    EXPECT_NE(message.find("--transform \"" + text + "\": "), std::string::npos) << message;
    EXPECT_NE(message.find(problem), std::string::npos) << message;
  }
}

TEST(TransformSpec, StepsRunInOrderOnTheImage) {
  const RgbImage im = noise_image(40, 30, 1);
  const TransformSpec spec =
      parse_transform_spec("--val-transform", "Resize(20),CenterCrop((12,10)),ToTensor(),Normalize(imagenet)");
  std::vector<float> got;
  Extent extent;
  apply_transforms(spec, im, {}, got, extent);
  EXPECT_EQ(extent, (Extent{12, 10}));
  const RgbImage want_image = center_crop(resize_bilinear(im, 26, 20), {12, 10});  // int(20 * 40 / 30) = 26
  std::vector<float> want(size_t(3 * 12 * 10));
  to_tensor(want_image, want.data());
  const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
  normalize_tensor(want.data(), 12 * 10, mean, std);
  EXPECT_EQ(got, want);
}

// The tensors of images 0..n-1 at `epoch`, computed in `order` on `threads` threads.
std::vector<std::vector<float>> transformed(const TransformSpec& spec, const std::vector<RgbImage>& images,
                                            int64_t epoch, const std::vector<size_t>& order, size_t threads) {
  std::vector<std::vector<float>> out(images.size());
  std::vector<std::thread> pool;
  for (size_t t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (size_t k = t; k < order.size(); k += threads) {
        Extent e;
        apply_transforms(spec, images[order[k]], {7, epoch, int64_t(order[k])}, out[order[k]], e);
      }
    });
  for (std::thread& th : pool) th.join();
  return out;
}

TEST(TransformSpec, DrawsDependOnSeedEpochAndImageIndexOnly) {
  const TransformSpec spec =
      parse_transform_spec("--transform", "RandomResizedCrop(8),RandomHorizontalFlip(),ToTensor()");
  const std::vector<RgbImage> images(16, noise_image(24, 32, 2));  // one image: only the draws differ
  std::vector<size_t> in_order(images.size()), shuffled(images.size());
  for (size_t i = 0; i < images.size(); ++i) in_order[i] = i;
  shuffled = in_order;
  std::reverse(shuffled.begin(), shuffled.end());
  std::swap(shuffled[3], shuffled[11]);
  const auto one_thread = transformed(spec, images, 2, in_order, 1);
  EXPECT_EQ(transformed(spec, images, 2, shuffled, 3), one_thread);
  EXPECT_EQ(transformed(spec, images, 2, in_order, 4), one_thread);
  // The images differ from one another and from the next epoch's: the draws are drawn.
  size_t distinct_in_epoch = 0, differing_next_epoch = 0;
  const auto next_epoch = transformed(spec, images, 3, in_order, 2);
  for (size_t i = 0; i < images.size(); ++i) {
    distinct_in_epoch += i > 0 && one_thread[i] != one_thread[i - 1];
    differing_next_epoch += one_thread[i] != next_epoch[i];
  }
  EXPECT_GE(distinct_in_epoch, 12u);
  EXPECT_GE(differing_next_epoch, 12u);
}

}  // namespace
}  // namespace dpcore::data
