// Synthetic data, the --data flag and per-channel normalisation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "engine/data/fashion_mnist.h"
#include "engine/data/spec.h"
#include "support/error_of.h"

namespace dpcore::data {
namespace {

using testing::error_of;

TEST(Synthetic, SameSeedsSameData) {
  SyntheticShape shape{3, 4, 5, 7};
  Dataset a = make_synthetic(shape, 50, 1, 2, "a");
  Dataset b = make_synthetic(shape, 50, 1, 2, "b");
  Dataset c = make_synthetic(shape, 50, 1, 3, "c");
  EXPECT_EQ(a.images, b.images);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_NE(a.images, c.images);
  EXPECT_EQ(describe(a), "50 x 3 x 4 x 5, 7 classes");
  EXPECT_NO_THROW(check_dataset(a));
  for (float x : a.images) ASSERT_TRUE(x >= 0.0f && x <= 1.0f) << x;
  std::vector<int> seen(7, 0);
  for (int64_t y : a.labels) seen[size_t(y)] = 1;
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), 7) << "50 uniform labels over 7 classes should hit each";
}

// Nearest class mean, with means from the train set: a test set classified well by it
// is one a network can learn.
double nearest_mean_accuracy(const Dataset& train, const Dataset& test) {
  const int64_t k = train.num_classes, s = train.sample_size();
  std::vector<double> mean(size_t(k * s), 0.0);
  std::vector<double> count(size_t(k), 0.0);
  for (int64_t i = 0; i < train.n; ++i) {
    const int64_t y = train.labels[size_t(i)];
    count[size_t(y)] += 1;
    for (int64_t j = 0; j < s; ++j) mean[size_t(y * s + j)] += train.image(i)[j];
  }
  for (int64_t y = 0; y < k; ++y)
    for (int64_t j = 0; j < s; ++j) mean[size_t(y * s + j)] /= std::max(1.0, count[size_t(y)]);
  int64_t correct = 0;
  for (int64_t i = 0; i < test.n; ++i) {
    int64_t best = -1;
    double best_d = INFINITY;
    for (int64_t y = 0; y < k; ++y) {
      double d = 0;
      for (int64_t j = 0; j < s; ++j) d += std::pow(test.image(i)[j] - mean[size_t(y * s + j)], 2);
      if (d < best_d) best_d = d, best = y;
    }
    correct += best == test.labels[size_t(i)];
  }
  return double(correct) / double(test.n);
}

TEST(Synthetic, TestSetIsLearnableFromTrainSet) {
  DataSpec spec = parse_data_spec("synthetic:1,8,8,10,2000");
  Dataset train = load_split(spec, Split::train), test = load_split(spec, Split::test);
  EXPECT_EQ(train.n, 2000);
  EXPECT_EQ(test.n, 400);
  EXPECT_NE(train.images, std::vector<float>(test.images.begin(), test.images.end()));
  EXPECT_GT(nearest_mean_accuracy(train, test), 0.95);
  // Chance is 10%: with unrelated class patterns the same classifier would be near it.
  DataSpec other = spec;
  other.seed = spec.seed + 1;
  EXPECT_LT(nearest_mean_accuracy(train, load_split(other, Split::test)), 0.3);
}

TEST(DataSpec, ParsesEveryForm) {
  DataSpec s = parse_data_spec("fashion-mnist");
  EXPECT_EQ(s.kind, DataSpec::Kind::fashion_mnist);
  EXPECT_EQ(s.dir, kFashionMnistDir);
  s = parse_data_spec("fashion-mnist:/some/dir:with-colon");
  EXPECT_EQ(s.kind, DataSpec::Kind::fashion_mnist);
  EXPECT_EQ(s.dir, "/some/dir:with-colon");
  s = parse_data_spec("cifar10:data/cifar-10-batches-bin");
  EXPECT_EQ(s.kind, DataSpec::Kind::cifar10);
  EXPECT_EQ(s.dir, "data/cifar-10-batches-bin");
  s = parse_data_spec("imagefolder:photos/train");
  EXPECT_EQ(s.kind, DataSpec::Kind::image_folder);
  EXPECT_EQ(s.dir, "photos/train");
  EXPECT_EQ(s.val_dir, "");
  s = parse_data_specs("imagefolder:photos/train", "imagefolder:photos/val", {2, true});
  EXPECT_EQ(s.dir, "photos/train");
  EXPECT_EQ(s.val_dir, "photos/val");
  EXPECT_EQ(s.images.workers, 2);
  EXPECT_TRUE(s.images.skip_bad_images);
  s = parse_data_spec("synthetic:3,32,16,10,500");
  EXPECT_EQ(s.kind, DataSpec::Kind::synthetic);
  EXPECT_EQ(s.text, "synthetic:3,32,16,10,500");
  EXPECT_EQ(s.shape.c, 3);
  EXPECT_EQ(s.shape.h, 32);
  EXPECT_EQ(s.shape.w, 16);
  EXPECT_EQ(s.shape.classes, 10);
  EXPECT_EQ(s.n, 500);
}

TEST(DataSpec, BadValuesNameTheFlagValueAndTheProblem) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"mnist", "unknown dataset \"mnist\"; expected fashion-mnist, fashion-mnist:DIR, cifar10:DIR, "
                "synthetic:C,H,W,CLASSES,N, imagefolder:DIR, fortunes-lang, fortunes-topic, text:FILE.tsv or "
                "text:DIR"},
      {"imagefolder", "imagefolder needs a directory"},
      {"imagefolder:", "imagefolder needs a directory"},
      {"", "unknown dataset \"\""},
      {"fashion-mnist:", "empty directory"},
      {"cifar10", "cifar10 needs a directory"},
      {"cifar10:", "cifar10 needs a directory"},
      {"synthetic", "synthetic needs its sizes"},
      {"synthetic:1,28,28,10", "synthetic takes 5 numbers C,H,W,CLASSES,N, got 4"},
      {"synthetic:1,28,28,10,100,5", "got 6"},
      {"synthetic:1,28,x,10,100", "W \"x\" is not a positive integer"},
      {"synthetic:1,28,28,10,-5", "N \"-5\" is not a positive integer"},
      {"synthetic:1,28,28,10,0", "N \"0\" is not a positive integer"},
      {"synthetic:1,28,28,10,12abc", "N \"12abc\""},
      {"synthetic:1,28,28,1,100", "CLASSES must be at least 2"},
      {"synthetic:1,28,28,10,99999999999999999999", "is not a positive integer"},
  };
  for (const auto& c : cases) {
    const std::string& value = c.first;
    const std::string& problem = c.second;
    const std::string message = error_of([&] { parse_data_spec(value); });
    EXPECT_NE(message.find("--data \"" + value + "\""), std::string::npos) << message;
    EXPECT_NE(message.find(problem), std::string::npos) << value << ": " << message;
  }
}

TEST(DataSpec, ValDataIsAnImageFolderBesideAnImageFolder) {
  const std::string not_a_folder = error_of([] { parse_data_specs("imagefolder:a", "cifar10:b", {}); });
  EXPECT_NE(not_a_folder.find("--val-data \"cifar10:b\": expected imagefolder:DIR"), std::string::npos) << not_a_folder;
  const std::string empty = error_of([] { parse_data_specs("imagefolder:a", "imagefolder:", {}); });
  EXPECT_NE(empty.find("--val-data \"imagefolder:\": expected imagefolder:DIR"), std::string::npos) << empty;
  const std::string other = error_of([] { parse_data_specs("fashion-mnist", "imagefolder:b", {}); });
  EXPECT_NE(other.find("--val-data \"imagefolder:b\" needs --data imagefolder:DIR (--data \"fashion-mnist\" has a test "
                       "set of its own)"),
            std::string::npos)
      << other;
}

TEST(DataSpec, SyntheticTooLargeIsAnErrorNotABadAlloc) {
  DataSpec spec = parse_data_spec("synthetic:3,100000,100000,10,100000");
  const std::string message = error_of([&] { load_split(spec, Split::train); });
  EXPECT_NE(message.find("too large"), std::string::npos) << message;
}

TEST(Normalize, TrainChannelsHaveMeanZeroStdOne) {
  DataSplits s = load_data(parse_data_spec("synthetic:3,6,5,4,300"), true);
  ASSERT_TRUE(s.normalized);
  ASSERT_EQ(s.stats.mean.size(), 3u);
  ChannelStats after = channel_stats(s.train);
  for (int ch = 0; ch < 3; ++ch) {
    EXPECT_NEAR(after.mean[size_t(ch)], 0.0, 1e-6) << ch;
    EXPECT_NEAR(after.std[size_t(ch)], 1.0, 1e-6) << ch;
  }
}

TEST(Normalize, TestSetUsesTrainStatistics) {
  const DataSpec spec = parse_data_spec("synthetic:2,4,4,3,200");
  DataSplits raw = load_data(spec, false);
  DataSplits norm = load_data(spec, true);
  EXPECT_FALSE(raw.normalized);
  EXPECT_TRUE(raw.stats.mean.empty());
  // Without normalisation the pixels are exactly the loaded ones, in [0, 1].
  EXPECT_EQ(raw.train.images, load_split(spec, Split::train).images);
  const int64_t plane = 16;
  for (int64_t i = 0; i < raw.test.n; ++i)
    for (int64_t ch = 0; ch < 2; ++ch)
      for (int64_t p = 0; p < plane; ++p) {
        const float x = raw.test.image(i)[ch * plane + p];
        const double expect = (x - norm.stats.mean[size_t(ch)]) / norm.stats.std[size_t(ch)];
        ASSERT_FLOAT_EQ(norm.test.image(i)[ch * plane + p], float(expect));
      }
  // The test set's own statistics differ from the train set's, so it is not exactly standardised.
  ChannelStats test_stats = channel_stats(norm.test);
  EXPECT_NE(test_stats.mean[0], 0.0);
}

TEST(Normalize, ConstantChannelIsAnError) {
  Dataset d = make_synthetic({2, 2, 2, 2}, 10, 1, 2, "flat");
  for (int64_t i = 0; i < d.n; ++i)
    for (int p = 4; p < 8; ++p) d.images[size_t(i * 8 + p)] = 0.5f;
  const std::string message = error_of([&] { channel_stats(d); });
  EXPECT_NE(message.find("flat: channel 1 is constant"), std::string::npos) << message;
}

TEST(Normalize, RealFashionMnistStatistics) {
  if (!std::filesystem::exists(std::string(kFashionMnistDir) + "/train-images-idx3-ubyte.gz") &&
      !std::filesystem::exists(std::string(kFashionMnistDir) + "/train-images-idx3-ubyte"))
    GTEST_SKIP() << "Fashion-MNIST is not installed in " << kFashionMnistDir
                 << " (Debian package dataset-fashion-mnist)";
  DataSplits s = load_data(parse_data_spec("fashion-mnist"), true);
  // The values everyone quotes for Fashion-MNIST's train set: mean 0.2860, std 0.3530.
  EXPECT_NEAR(s.stats.mean[0], 0.2860, 5e-4);
  EXPECT_NEAR(s.stats.std[0], 0.3530, 5e-4);
  ChannelStats after = channel_stats(s.train);
  EXPECT_NEAR(after.mean[0], 0.0, 1e-6);
  EXPECT_NEAR(after.std[0], 1.0, 1e-6);
}

}  // namespace
}  // namespace dpcore::data
