// An image folder through --transform and --val-transform (engine/data/image/image_folder.h,
// engine/data/spec.h): deterministic transforms made at load, random ones made per batch by
// the loader, each sample the transform of its own file with the draws of (seed, epoch, its
// index) whatever the worker count or a seek; and the errors of the combinations.
#include <gtest/gtest.h>

#include <filesystem>

#include "engine/data/image/image_decode.h"
#include "engine/data/image/image_folder.h"
#include "engine/data/loader.h"
#include "engine/data/spec.h"
#include "support/error_of.h"
#include "support/test_support.h"

namespace dpcore::data {
namespace {

namespace fs = std::filesystem;
using testing::error_of;

std::string fixture(const std::string& name) { return testing::source_dir() + "/tests/fixtures/images/" + name; }

// A folder of images of three sizes (11 x 7, 5 x 3, and 11 x 7 grey) in two classes.
void write_folder(const std::string& root) {
  const std::vector<std::pair<std::string, std::string>> files = {
      {"a/1.png", "rgb.png"}, {"a/2.png", "rgb_5x3.png"}, {"b/1.jpg", "rgb.jpg"},
      {"b/2.png", "grey.png"}, {"b/3.png", "palette.png"}, {"b/4.png", "rgb_5x3.png"}};
  for (const auto& [to, from] : files) {
    fs::create_directories((fs::path(root) / to).parent_path());
    fs::copy_file(fixture(from), fs::path(root) / to);
  }
}

std::vector<float> transformed(const TransformSpec& spec, const std::string& path, const TransformKey& key) {
  std::vector<float> out;
  Extent e;
  apply_transforms(spec, decode_image_file(path), key, out, e);
  return out;
}

TEST(ImageFolderTransform, ResizeAndCropAreMadeAtLoadForImagesOfAnySize) {
  testing::TempDir dir;
  write_folder(dir.path());
  const TransformSpec spec = parse_transform_spec("--val-transform", "Resize(4),CenterCrop((4,5)),ToTensor()");
  const Dataset d = load_image_folder(dir.path(), {2}, "mixed", &spec);
  EXPECT_EQ(describe(d), "6 x 3 x 4 x 5, 2 classes");
  EXPECT_FALSE(d.source);
  const ImageFolderListing listing = list_image_folder(dir.path());
  for (int64_t i = 0; i < d.n; ++i)
    EXPECT_EQ(std::vector<float>(d.image(i), d.image(i) + d.sample_size()),
              transformed(spec, listing.paths[size_t(i)], {}))
        << listing.paths[size_t(i)];
}

// Every batch of two epochs, as the loader gives them.
std::vector<std::vector<float>> batches(const Dataset& d, int64_t batch, LoaderPosition from = {}) {
  LoaderOptions o;
  o.batch_size = batch;
  o.seed = 11;
  DataLoader loader(d, o, from);
  std::vector<std::vector<float>> out;
  Batch b;
  while (loader.position().epoch < 2) {
    if (!loader.next(b)) continue;
    out.emplace_back(b.images, b.images + b.size * b.sample_numel());
  }
  return out;
}

TEST(ImageFolderTransform, RandomTransformsAreMadePerBatchFromTheImagesIndexAndEpoch) {
  testing::TempDir dir;
  write_folder(dir.path());
  const TransformSpec spec =
      parse_transform_spec("--transform", "RandomResizedCrop(6),RandomHorizontalFlip(),ToTensor(),Normalize(imagenet)");
  const Dataset one = load_image_folder(dir.path(), {1}, "one worker", &spec);
  const Dataset three = load_image_folder(dir.path(), {3}, "three workers", &spec);
  ASSERT_TRUE(one.source);
  EXPECT_TRUE(one.images.empty());
  EXPECT_EQ(describe(one), "6 x 3 x 6 x 6, 2 classes");
  const auto want = batches(one, 4);
  EXPECT_EQ(batches(three, 4), want);
  // Resumed at the second epoch's first batch: the same batches from there.
  const auto resumed = batches(three, 4, {1, 0});
  EXPECT_EQ(resumed, std::vector<std::vector<float>>(want.begin() + 2, want.end()));
  // Each sample is its own file's transform with the draws of (seed, epoch, file index).
  const ImageFolderListing listing = list_image_folder(dir.path());
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    const std::vector<int64_t> order = sample_order(one.n, true, 11, epoch);
    for (size_t k = 0; k < order.size(); ++k) {
      const std::vector<float>& b = want[size_t(epoch) * 2 + k / 4];
      const size_t sample = size_t(one.sample_size());
      EXPECT_EQ(std::vector<float>(b.begin() + long((k % 4) * sample), b.begin() + long((k % 4 + 1) * sample)),
                transformed(spec, listing.paths[size_t(order[k])], {11, epoch, order[k]}))
          << epoch << " " << k;
    }
  }
  EXPECT_NE(want[0], want[2]);  // the epochs draw differently
}

TEST(ImageFolderTransform, TheFlagsThroughLoadData) {
  testing::TempDir dir;
  write_folder(dir.path());
  const std::string data = "imagefolder:" + dir.path();
  // Without --val-transform the test set gets ToTensor() and --transform's Normalize: its
  // images must then have one size.
  testing::TempDir val_dir;
  const std::string val = val_dir.path();
  for (const char* f : {"a", "b"}) {
    fs::create_directories(val + "/" + f);
    fs::copy_file(fixture("rgb.png"), val + "/" + f + "/1.png");
  }
  DataSplits s = load_data(
      parse_data_specs(data, "imagefolder:" + val, {2, false, "RandomResizedCrop((7,11)),ToTensor(),Normalize(imagenet)"}),
      true);
  EXPECT_TRUE(s.train.source);
  EXPECT_FALSE(s.normalized);  // the transforms' Normalize, not the train set's statistics
  ASSERT_FALSE(s.test.source);
  const TransformSpec normalized = parse_transform_spec("--val-transform", "ToTensor(),Normalize(imagenet)");
  EXPECT_EQ(s.test.images, load_image_folder(val, {}, "val", &normalized).images);
  // A transform without random steps is made at load, for the train set as for the test set.
  const std::string fixed = "Resize((3,3)),ToTensor(),Normalize(imagenet)";
  s = load_data(parse_data_specs(data, "", {2, false, fixed, fixed}), true);
  EXPECT_FALSE(s.train.source);
  EXPECT_EQ(s.train.images, s.test.images);
  const TransformSpec resized = parse_transform_spec("--val-transform", "Resize((3,3)),ToTensor(),Normalize(imagenet)");
  EXPECT_EQ(s.test.images, load_image_folder(dir.path(), {}, "resized", &resized).images);
  s = load_data(parse_data_specs(data, "", {2, false, "RandomResizedCrop(2),ToTensor()", "Resize(2),CenterCrop(2),ToTensor()"}),
                true);
  EXPECT_EQ(describe(s.test), "6 x 3 x 2 x 2, 2 classes");
}

TEST(ImageFolderTransform, ErrorsNameTheFlagAndTheProblem) {
  testing::TempDir dir;
  write_folder(dir.path());
  const std::string data = "imagefolder:" + dir.path();
  const std::string sized = error_of([&] {
    load_data(parse_data_specs(data, "", {2, false, "Resize(4),RandomHorizontalFlip(),ToTensor()"}), true);
  });
  EXPECT_NE(sized.find("--transform \"Resize(4),RandomHorizontalFlip(),ToTensor()\": its random steps give images "
                       "of differing sizes"),
            std::string::npos)
      << sized;
  const std::string unsized = error_of([&] { load_data(parse_data_specs(data, "", {2, false, "ToTensor()"}), true); });
  EXPECT_NE(unsized.find("images of different sizes need a --transform with Resize"), std::string::npos) << unsized;
  const std::string not_images =
      error_of([&] { parse_data_specs("fashion-mnist", "", {2, false, "", "CenterCrop(2),ToTensor()"}); });
  EXPECT_NE(not_images.find("--val-transform \"CenterCrop(2),ToTensor()\" needs --data imagefolder:DIR"),
            std::string::npos)
      << not_images;
  const std::string bad = error_of([&] { parse_data_specs(data, "", {2, false, "Resize(0),ToTensor()"}); });
  EXPECT_NE(bad.find("--transform \"Resize(0),ToTensor()\": Resize: size \"0\""), std::string::npos) << bad;
  const TransformSpec spec = parse_transform_spec("--transform", "RandomResizedCrop(4),ToTensor()");
  const Dataset d = load_image_folder(dir.path(), {}, "lazy", &spec);
  LoaderOptions o;
  o.augment = parse_augment("flip");
  const std::string augmented = error_of([&] { DataLoader loader(d, o); });
  EXPECT_NE(augmented.find("--augment \"flip\" and a random --transform together"), std::string::npos) << augmented;
}

}  // namespace
}  // namespace dpcore::data
