// Augmentation in the loader thread (engine/data/augment.h): the --augment syntax and its
// errors, the crop and flip transforms against their definition, the distribution of the
// draws, reproducibility across prefetch, batch size, seek and restart, and that none
// leaves the loader's batches bit for bit as they were.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "engine/data/augment.h"
#include "engine/data/loader.h"
#include "engine/data/normalize.h"
#include "support/error_of.h"

namespace dpcore::data {
namespace {

using testing::error_of;

// n samples of c x h x w (h, w <= 9, c <= 9) whose pixel (ch, r, col) of sample s is
// 1 + 1000 s + 100 ch + 10 r + col: every value says where it came from. The pad values are
// negative, so they never equal an image pixel, and differ per channel.
Dataset coded(int64_t n, int64_t c, int64_t h, int64_t w) {
  Dataset d;
  d.name = "coded";
  d.n = n, d.c = c, d.h = h, d.w = w;
  d.num_classes = 3;
  for (int64_t s = 0; s < n; ++s) {
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t r = 0; r < h; ++r)
        for (int64_t col = 0; col < w; ++col) d.images.push_back(float(1 + 1000 * s + 100 * ch + 10 * r + col));
    d.labels.push_back(s % 3);
  }
  for (int64_t ch = 0; ch < c; ++ch) d.zero_value.push_back(-1.5f - float(ch));
  return d;
}

float pixel(const Dataset& d, int64_t s, int64_t ch, int64_t r, int64_t col) {
  return d.image(s)[(ch * d.h + r) * d.w + col];
}

// Sample s augmented with `draw`, straight from the definition: the image padded by `pad`
// pixels of zero_value[ch] on every side, the h x w window at (dy, dx), then reversed along
// W when flipping.
std::vector<float> reference(const Dataset& d, int64_t s, int64_t pad, const AugmentDraw& draw) {
  std::vector<float> out;
  for (int64_t ch = 0; ch < d.c; ++ch)
    for (int64_t i = 0; i < d.h; ++i)
      for (int64_t j = 0; j < d.w; ++j) {
        const int64_t cropped_col = draw.flip ? d.w - 1 - j : j;
        const int64_t r = i + draw.dy - pad, col = cropped_col + draw.dx - pad;  // in the unpadded image
        const bool inside = r >= 0 && r < d.h && col >= 0 && col < d.w;
        out.push_back(inside ? pixel(d, s, ch, r, col) : d.zero_of_channel(ch));
      }
  return out;
}

std::vector<float> apply(const Dataset& d, int64_t s, int64_t pad, const AugmentDraw& draw) {
  std::vector<float> out(size_t(d.sample_size()), std::nanf(""));
  augment_sample(d.image(s), out.data(), d.c, d.h, d.w, pad, draw, d.zero_value.data());
  return out;
}

LoaderOptions options(const std::string& augment, int64_t batch = 8, int prefetch = 2, uint64_t seed = 11) {
  LoaderOptions o;
  o.batch_size = batch;
  o.prefetch = prefetch;
  o.seed = seed;
  o.augment = parse_augment(augment);
  return o;
}

// The bytes of each batch the loader returns over `epochs` epochs, keyed by (epoch, index).
using Batches = std::map<std::pair<int64_t, int64_t>, std::vector<float>>;

Batches read_batches(DataLoader& loader, int epochs) {
  Batches out;
  Batch b;
  for (int e = 0; e < epochs; ++e)
    while (loader.next(b)) out[{b.epoch, b.index}].assign(b.images, b.images + b.size * b.sample_numel());
  return out;
}

// Every sample of `epochs` epochs in the order they came, concatenated: independent of how
// they were cut into batches.
std::vector<float> stream(DataLoader& loader, int epochs) {
  std::vector<float> all;
  for (const auto& [where, images] : read_batches(loader, epochs)) all.insert(all.end(), images.begin(), images.end());
  return all;
}

TEST(Augment, ParsesTheDocumentedForms) {
  struct Case {
    const char* text;
    int64_t pad;
    bool flip;
    const char* canonical;
  };
  for (const Case& c : {Case{"none", 0, false, "none"}, Case{"crop:4", 4, false, "crop:4"}, Case{"flip", 0, true, "flip"},
                        Case{"crop:4,flip", 4, true, "crop:4,flip"}, Case{"flip,crop:12", 12, true, "crop:12,flip"}}) {
    const Augment a = parse_augment(c.text);
    EXPECT_EQ(a.crop_pad, c.pad) << c.text;
    EXPECT_EQ(a.flip, c.flip) << c.text;
    EXPECT_EQ(a.none(), std::string(c.text) == "none") << c.text;
    EXPECT_EQ(describe(a), c.canonical);
    EXPECT_EQ(a.text, c.text);
  }
  EXPECT_TRUE(LoaderOptions().augment.none()) << "the loader's default is no augmentation";
}

TEST(Augment, BadValuesAreErrorsNamingTheFlagAndTheText) {
  struct Case {
    std::string text, says;
  };
  const std::vector<Case> cases = {
      {"crop:abc", "PAD \"abc\" of crop:PAD is not a positive integer"},
      {"crop:-1", "PAD \"-1\" of crop:PAD is not a positive integer"},
      {"crop:0", "PAD \"0\" of crop:PAD is not a positive integer"},
      {"crop:", "PAD \"\" of crop:PAD is not a positive integer"},
      {"crop:4x", "PAD \"4x\" of crop:PAD is not a positive integer"},
      {"crop:99999999999999999999", "is not a positive integer"},
      {"crop", "crop needs its padding, crop:PAD"},
      {"blur", "unknown augmentation \"blur\"; expected none, crop:PAD, flip or crop:PAD,flip"},
      {"Flip", "unknown augmentation \"Flip\""},
      {"", "unknown augmentation \"\""},
      {"crop:4,,flip", "unknown augmentation \"\""},
      {"flip,flip", "flip is given twice"},
      {"crop:2,crop:3", "crop is given twice"},
      {"none,flip", "none cannot be combined"},
  };
  for (const Case& c : cases) {
    const std::string message = error_of([&] { parse_augment(c.text); });
    EXPECT_NE(message.find("--augment \"" + c.text + "\": "), std::string::npos) << message;
    EXPECT_NE(message.find(c.says), std::string::npos) << message;
  }
}

TEST(Augment, PadMustBeSmallerThanTheImage) {
  const Dataset d = coded(4, 1, 6, 5);
  for (const char* text : {"crop:5", "crop:6", "crop:40,flip"}) {
    const std::string message = error_of([&] { DataLoader loader(d, options(text)); });
    EXPECT_NE(message.find("--augment \"" + std::string(text) + "\": PAD"), std::string::npos) << message;
    EXPECT_NE(message.find("6 x 5 images of coded"), std::string::npos) << message;
  }
  EXPECT_NO_THROW(DataLoader(d, options("crop:4,flip")));
}

TEST(Augment, CropMovesTheContentByTheOffsetAndFillsTheBorderWithThePadValue) {
  const Dataset d = coded(2, 2, 6, 5);
  const int64_t pad = 2;
  for (int64_t dy = 0; dy <= 2 * pad; ++dy)
    for (int64_t dx = 0; dx <= 2 * pad; ++dx) {
      const std::vector<float> out = apply(d, 1, pad, {dy, dx, false});
      int64_t border = 0;
      for (int64_t ch = 0; ch < d.c; ++ch)
        for (int64_t i = 0; i < d.h; ++i)
          for (int64_t j = 0; j < d.w; ++j) {
            const float got = out[size_t((ch * d.h + i) * d.w + j)];
            // The content moved by (dy - pad, dx - pad): output (i, j) shows image (i + dy - pad, j + dx - pad).
            const int64_t r = i + dy - pad, col = j + dx - pad;
            if (r >= 0 && r < d.h && col >= 0 && col < d.w) {
              EXPECT_EQ(got, pixel(d, 1, ch, r, col)) << dy << "," << dx << " at " << ch << "," << i << "," << j;
            } else {
              EXPECT_EQ(got, d.zero_value[size_t(ch)]) << dy << "," << dx << " at " << ch << "," << i << "," << j;
              ++border;
            }
          }
      // The border is what the shift uncovers: h*w minus the (h - |oy|) x (w - |ox|) kept.
      const int64_t kept = (d.h - std::abs(dy - pad)) * (d.w - std::abs(dx - pad));
      EXPECT_EQ(border, d.c * (d.h * d.w - kept)) << dy << "," << dx;
    }
  // The centred crop is the image itself.
  EXPECT_EQ(apply(d, 1, pad, {pad, pad, false}), std::vector<float>(d.image(1), d.image(1) + d.sample_size()));
}

TEST(Augment, FlipReversesEveryRow) {
  const Dataset d = coded(1, 3, 4, 7);
  const std::vector<float> flipped = apply(d, 0, 0, {0, 0, true});
  for (int64_t ch = 0; ch < d.c; ++ch)
    for (int64_t i = 0; i < d.h; ++i)
      for (int64_t j = 0; j < d.w; ++j)
        EXPECT_EQ(flipped[size_t((ch * d.h + i) * d.w + j)], pixel(d, 0, ch, i, d.w - 1 - j));
  // With a crop, the flip reverses the rows of the cropped image (crop first, then flip).
  for (int64_t dy = 0; dy <= 6; ++dy)
    for (int64_t dx = 0; dx <= 6; ++dx) {
      const std::vector<float> cropped = apply(d, 0, 3, {dy, dx, false}), both = apply(d, 0, 3, {dy, dx, true});
      for (int64_t row = 0; row < d.c * d.h; ++row)
        for (int64_t j = 0; j < d.w; ++j)
          EXPECT_EQ(both[size_t(row * d.w + j)], cropped[size_t(row * d.w + d.w - 1 - j)]) << dy << "," << dx;
      EXPECT_EQ(both, reference(d, 0, 3, {dy, dx, true}));
    }
}

TEST(Augment, OffsetsAndFlipsAreUniform) {
  // N = 25000 draws (500 positions x 50 epochs) of crop:2,flip. The count of an outcome of
  // probability p is Binomial(N, p), standard deviation sqrt(N p (1 - p)): 63.2 around 5000
  // for one of the 5 offsets, 31.0 around 1000 for one of the 25 (dy, dx) pairs, 79.1 around
  // 12500 for a flip. A correct generator lands within 6 standard deviations except with
  // probability ~2e-9 per count; a wrong range (4 or 6 offsets: counts 6250 or ~4167) or
  // dy tied to dx (pairs off the diagonal never occur) is more than 13 deviations away.
  const Augment a = parse_augment("crop:2,flip");
  const int64_t n = 25000;
  std::vector<int64_t> dy(5), dx(5), pairs(25);
  int64_t flips = 0;
  for (int64_t epoch = 0; epoch < 50; ++epoch)
    for (int64_t position = 0; position < 500; ++position) {
      const AugmentDraw d = draw_augment(a, 3, epoch, position);
      ASSERT_TRUE(d.dy >= 0 && d.dy <= 4 && d.dx >= 0 && d.dx <= 4) << d.dy << "," << d.dx;
      ++dy[size_t(d.dy)], ++dx[size_t(d.dx)], ++pairs[size_t(d.dy * 5 + d.dx)];
      flips += d.flip;
    }
  auto bound = [&](double p) { return 6 * std::sqrt(double(n) * p * (1 - p)); };
  for (int v = 0; v < 5; ++v) {
    EXPECT_NEAR(double(dy[size_t(v)]), n / 5.0, bound(0.2)) << "dy = " << v;
    EXPECT_NEAR(double(dx[size_t(v)]), n / 5.0, bound(0.2)) << "dx = " << v;
  }
  for (int v = 0; v < 25; ++v) EXPECT_NEAR(double(pairs[size_t(v)]), n / 25.0, bound(0.04)) << "pair " << v;
  EXPECT_NEAR(double(flips), n / 2.0, bound(0.5));
  // flip alone draws only the flip.
  int64_t alone = 0;
  for (int64_t position = 0; position < n; ++position) {
    const AugmentDraw d = draw_augment(parse_augment("flip"), 3, 0, position);
    EXPECT_EQ(d.dy, 0);
    EXPECT_EQ(d.dx, 0);
    alone += d.flip;
  }
  EXPECT_NEAR(double(alone), n / 2.0, bound(0.5));
}

TEST(Augment, DrawsArePinnedAcrossPlatformsAndVersions) {
  // Resuming a checkpoint recomputes the draws, so the documented derivation (mt19937_64 seeded
  // with derive_seed(derive_seed(derive_seed(seed, kAugmentStream), epoch), position),
  // uniform_below) must never change. These are what it gave when it was written.
  const Augment a = parse_augment("crop:4,flip");
  std::string got;
  for (int64_t position = 0; position < 6; ++position) {
    const AugmentDraw d = draw_augment(a, 0, 1, position);
    got += std::to_string(d.dy) + "," + std::to_string(d.dx) + (d.flip ? "f " : " ");
  }
  EXPECT_EQ(got, "4,4 1,8f 6,3 4,3f 7,0f 3,7f ");
}

TEST(Augment, LoaderBatchesAreTheDocumentedTransformOfTheirSamples) {
  const Dataset d = coded(37, 2, 6, 5);
  const LoaderOptions o = options("crop:2,flip");
  DataLoader loader(d, o);
  Batch b;
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    const std::vector<int64_t> order = sample_order(d.n, true, o.seed, epoch);
    int64_t position = 0;
    while (loader.next(b)) {
      for (int64_t i = 0; i < b.size; ++i, ++position) {
        const int64_t s = order[size_t(position)];
        const std::vector<float> want = reference(d, s, 2, draw_augment(o.augment, o.seed, epoch, position));
        EXPECT_EQ(std::vector<float>(b.images + i * d.sample_size(), b.images + (i + 1) * d.sample_size()), want)
            << "epoch " << epoch << " position " << position;
        EXPECT_EQ(b.labels[i], d.labels[size_t(s)]) << "labels are never augmented";
      }
    }
    EXPECT_EQ(position, d.n);
  }
}

TEST(Augment, SameSeedAndEpochGiveTheSameSamplesWhateverThePrefetchAndBatchSize) {
  const Dataset d = coded(37, 2, 6, 5);
  DataLoader shallow(d, options("crop:2,flip", 8, 1)), deep(d, options("crop:2,flip", 8, 4)),
      other_batch(d, options("crop:2,flip", 5, 2));
  const Batches a = read_batches(shallow, 3), b = read_batches(deep, 3);
  EXPECT_EQ(a.size(), 15u);  // 5 batches x 3 epochs
  EXPECT_EQ(a, b);
  std::vector<float> all_a;
  for (const auto& [where, images] : a) all_a.insert(all_a.end(), images.begin(), images.end());
  EXPECT_EQ(stream(other_batch, 3), all_a);
}

TEST(Augment, SeekAndRestartReproduceTheAugmentedBatchesOfAnUninterruptedRun) {
  const Dataset d = coded(37, 2, 6, 5);
  DataLoader straight(d, options("crop:2,flip"));
  const Batches all = read_batches(straight, 3);

  // A run that read a little, then seeks to where a checkpoint stopped.
  DataLoader moved(d, options("crop:2,flip"));
  Batch b;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(moved.next(b));
  moved.seek({1, 2});
  // A run restarted from that checkpoint (the constructor's start position).
  DataLoader restarted(d, options("crop:2,flip"), {1, 2});
  for (DataLoader* loader : {&moved, &restarted}) {
    Batches rest;
    while (loader->next(b)) rest[{b.epoch, b.index}].assign(b.images, b.images + b.size * d.sample_size());
    const Batches rest_more = read_batches(*loader, 1);
    rest.insert(rest_more.begin(), rest_more.end());
    EXPECT_EQ(rest, Batches(all.find({1, 2}), all.end()));
  }
  // Seeking back to the start repeats epoch 0.
  moved.seek({0, 0});
  EXPECT_EQ(read_batches(moved, 1), Batches(all.begin(), all.find({1, 0})));
}

TEST(Augment, EpochsAndSeedsDrawDifferently) {
  // In file order, so that any difference comes from the augmentation. Of the 50 equally
  // likely (dy, dx, flip) outcomes of crop:2,flip, a sample repeats its epoch-0 outcome with
  // probability 1/50: about 0.74 of the 37 samples, and 10 or more with probability < 1e-9.
  const Dataset d = coded(37, 2, 6, 5);
  LoaderOptions o = options("crop:2,flip", 37);
  o.shuffle = false;
  LoaderOptions other_seed = o;
  other_seed.seed = 12;
  DataLoader loader(d, o), reseeded(d, other_seed);
  const Batches seen = read_batches(loader, 2), other = read_batches(reseeded, 1);
  auto same_samples = [&](const std::vector<float>& x, const std::vector<float>& y) {
    int same = 0;
    for (int64_t s = 0; s < d.n; ++s)
      same += std::memcmp(x.data() + s * d.sample_size(), y.data() + s * d.sample_size(),
                          size_t(d.sample_size()) * sizeof(float)) == 0;
    return same;
  };
  const std::vector<float>& epoch0 = seen.at({0, 0});
  EXPECT_LT(same_samples(epoch0, seen.at({1, 0})), 10) << "epoch 1 repeats epoch 0's draws";
  EXPECT_LT(same_samples(epoch0, other.at({0, 0})), 10) << "seed 12 repeats seed 11's draws";
}

TEST(Augment, NoneIsBitIdenticalToTheUnaugmentedLoader) {
  Dataset d = coded(37, 2, 6, 5);
  normalize(d, channel_stats(d));
  LoaderOptions plain;
  plain.batch_size = 8;
  plain.seed = 11;
  DataLoader unaugmented(d, plain), none(d, options("none"));
  const Batches a = read_batches(unaugmented, 2), b = read_batches(none, 2);
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [where, images] : a) {
    const std::vector<float>& other = b.at(where);
    ASSERT_EQ(images.size(), other.size());
    EXPECT_EQ(std::memcmp(images.data(), other.data(), images.size() * sizeof(float)), 0);
    // ... and both are the dataset's samples, copied as they are.
    const std::vector<int64_t> order = sample_order(d.n, true, 11, where.first);
    for (size_t i = 0; i < images.size() / size_t(d.sample_size()); ++i) {
      const int64_t s = order[size_t(where.second * 8) + i];
      EXPECT_EQ(std::memcmp(images.data() + i * size_t(d.sample_size()), d.image(s),
                            size_t(d.sample_size()) * sizeof(float)),
                0);
    }
  }
}

TEST(Augment, PaddingIsTheNormalisedValueOfARawZeroPixel) {
  // Pixels in [0, 1] with some exact zeros, as loaded; channel 1 is brighter.
  Dataset d = coded(20, 2, 6, 5);
  d.zero_value.clear();
  for (size_t i = 0; i < d.images.size(); ++i) {
    const bool channel1 = (i / 30) % 2 == 1;
    d.images[i] = i % 7 == 0 ? 0.0f : float((i * 37) % 101) / 100.0f * (channel1 ? 1.0f : 0.5f);
  }
  const ChannelStats stats = channel_stats(d);
  Dataset raw = d;
  normalize(d, stats);
  ASSERT_EQ(d.zero_value.size(), 2u);
  for (int64_t ch = 0; ch < 2; ++ch)
    EXPECT_EQ(d.zero_value[size_t(ch)], float((0.0 - stats.mean[size_t(ch)]) / stats.std[size_t(ch)]));
  EXPECT_NE(d.zero_value[0], d.zero_value[1]);
  // A pixel that was 0 is now exactly the pad value: the padding is what PyTorch's
  // Normalize makes of RandomCrop's zero fill.
  for (size_t i = 0; i < raw.images.size(); ++i)
    if (raw.images[i] == 0.0f) EXPECT_EQ(d.images[i], d.zero_value[(i / 30) % 2]) << i;
  // The loader pads with it: a crop through the loader equals normalising the crop of the raw image.
  const LoaderOptions o = options("crop:2,flip", 20);
  DataLoader normalized_loader(d, o), raw_loader(raw, o);
  Batch nb, rb;
  ASSERT_TRUE(normalized_loader.next(nb));
  ASSERT_TRUE(raw_loader.next(rb));
  const std::vector<int64_t> order = sample_order(d.n, true, o.seed, 0);
  int64_t shifted = 0;
  for (int64_t i = 0; i < rb.size; ++i) {
    // Unnormalised data is padded with 0.
    const AugmentDraw draw = draw_augment(o.augment, o.seed, 0, i);
    EXPECT_EQ(std::vector<float>(rb.images + i * 60, rb.images + (i + 1) * 60),
              reference(raw, order[size_t(i)], 2, draw));
    shifted += draw.dy != 2 || draw.dx != 2;
  }
  EXPECT_GT(shifted, 0) << "some crop must have padded something";
  for (int64_t k = 0; k < nb.size * d.sample_size(); ++k) {
    const int64_t ch = (k / 30) % 2;
    EXPECT_EQ(nb.images[k], float((double(rb.images[k]) - stats.mean[size_t(ch)]) / stats.std[size_t(ch)])) << k;
  }
}

}  // namespace
}  // namespace dpcore::data
