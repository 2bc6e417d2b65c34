// Masked-LM inputs and targets (engine/data/mlm_masking.h): BERT's 15% / 80-10-10 rule, drawn per
// (seed, epoch, sample), and the loader's masked batches (engine/data/loader.h).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "engine/data/loader.h"
#include "engine/data/mlm_masking.h"
#include "engine/random.h"
#include "kernels/index_check.h"
#include "support/error_of.h"

namespace dpcore::data {
namespace {

using testing::error_of;

constexpr int64_t kPad = 0, kCls = 2, kSep = 3, kMask = 4, kVocab = 1000;
constexpr int64_t kIgnore = kernels::kDefaultIgnoreIndex;

MlmMasking masking(uint64_t seed = 7) {
  MlmMasking m;
  m.mask_id = kMask, m.vocab_size = kVocab, m.special_ids = {kCls, kSep, kPad}, m.seed = seed;
  return m;
}

// n texts [CLS] w... [SEP] of 3 to 40 tokens, the words ordinary ids in [5, kVocab).
Dataset token_texts(int64_t n) {
  Dataset d;
  d.name = "texts";
  d.n = n, d.num_classes = 2, d.max_len = 40, d.vocab_size = kVocab, d.pad_id = kPad;
  Generator g(11);
  d.token_offsets.push_back(0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t words = 1 + int64_t(g.below(38));
    d.token_ids.push_back(kCls);
    for (int64_t w = 0; w < words; ++w) d.token_ids.push_back(5 + int64_t(g.below(kVocab - 5)));
    d.token_ids.push_back(kSep);
    d.token_offsets.push_back(int64_t(d.token_ids.size()));
    d.labels.push_back(i % 2);
  }
  return d;
}

struct Masked {
  std::vector<int64_t> ids, targets;
  bool operator==(const Masked& o) const { return ids == o.ids && targets == o.targets; }
};

Masked masked(const MlmMasking& m, const Dataset& d, int64_t epoch, int64_t sample) {
  Masked r{std::vector<int64_t>(d.ids(sample), d.ids(sample) + d.length(sample)),
           std::vector<int64_t>(size_t(d.length(sample)))};
  mask_tokens(m, epoch, sample, r.ids.data(), d.length(sample), r.targets.data());
  return r;
}

// The count k of n Bernoulli(p) draws lies within 5 standard deviations of n p: the bound is
// passed by a correct rule with probability 1 - 6e-7.
void expect_binomial(int64_t k, int64_t n, double p, const char* what) {
  const double sigma = std::sqrt(double(n) * p * (1 - p));
  EXPECT_LT(std::abs(double(k) - double(n) * p), 5 * sigma) << what << ": " << k << " of " << n << ", expected p " << p;
}

TEST(MlmMasking, RatesAreBertsWithinFiveSigmaAndSpecialTokensAreNeverChosen) {
  const Dataset d = token_texts(5000);  // about 100k ordinary tokens
  const MlmMasking m = masking();
  int64_t ordinary = 0, chosen = 0, to_mask = 0, unchanged = 0, random_other = 0;
  double random_sum = 0;
  for (int64_t s = 0; s < d.n; ++s) {
    const Masked r = masked(m, d, 0, s);
    for (int64_t t = 0; t < d.length(s); ++t) {
      const int64_t original = d.ids(s)[t];
      if (original == kCls || original == kSep) {
        EXPECT_EQ(r.ids[size_t(t)], original);
        EXPECT_EQ(r.targets[size_t(t)], kIgnore);
        continue;
      }
      ++ordinary;
      if (r.targets[size_t(t)] == kIgnore) {
        EXPECT_EQ(r.ids[size_t(t)], original);
        continue;
      }
      EXPECT_EQ(r.targets[size_t(t)], original);
      ++chosen;
      const int64_t id = r.ids[size_t(t)];
      ASSERT_TRUE(id >= 0 && id < kVocab) << id;
      if (id == kMask) ++to_mask;
      else if (id == original) ++unchanged;
      else ++random_other, random_sum += double(id);
    }
  }
  ASSERT_GT(ordinary, 90000);
  expect_binomial(chosen, ordinary, kMlmProbability, "chosen");
  // A random replacement is [MASK] or the original id with probability 1/V each.
  const double random_hit = kMlmRandomShare / double(kVocab);
  expect_binomial(to_mask, chosen, kMlmMaskShare + random_hit, "[MASK]");
  expect_binomial(unchanged, chosen, 1 - kMlmMaskShare - kMlmRandomShare + random_hit, "unchanged");
  expect_binomial(random_other, chosen, kMlmRandomShare - 2 * random_hit, "random");
  // The random ids are uniform over the vocabulary: their mean is (V - 1) / 2 within 5 standard
  // errors (the uniform's standard deviation is V / sqrt(12)).
  const double mean_error = double(kVocab) / std::sqrt(12.0 * double(random_other));
  EXPECT_LT(std::abs(random_sum / double(random_other) - double(kVocab - 1) / 2), 5 * mean_error);
}

TEST(MlmMasking, MasksDependOnSeedEpochAndSampleOnly) {
  const Dataset d = token_texts(50);
  const MlmMasking m = masking(7);
  int64_t other_epoch = 0, other_seed = 0;
  for (int64_t s = 0; s < d.n; ++s) {
    EXPECT_EQ(masked(m, d, 3, s), masked(m, d, 3, s));
    other_epoch += !(masked(m, d, 3, s) == masked(m, d, 4, s));
    other_seed += !(masked(m, d, 3, s) == masked(masking(8), d, 3, s));
  }
  EXPECT_GT(other_epoch, 40);  // a sample without a chosen token in either is the same
  EXPECT_GT(other_seed, 40);
}

TEST(MlmMasking, TheEvaluationKeyGivesTheSameMasksEveryEpochAndOthersThanTraining) {
  const Dataset d = token_texts(50);
  MlmMasking eval = masking();
  eval.fixed = true;
  int64_t unlike_training = 0;
  for (int64_t s = 0; s < d.n; ++s) {
    EXPECT_EQ(masked(eval, d, 0, s), masked(eval, d, 5, s));
    unlike_training += !(masked(eval, d, 0, s) == masked(masking(), d, 0, s));
  }
  EXPECT_GT(unlike_training, 40);
}

// Every sample of every batch of `epochs` epochs: its masked ids (without the padding) and its
// targets, checking that the padding's targets are ignored.
std::map<std::pair<int64_t, int64_t>, Masked> loaded(const Dataset& d, LoaderOptions o, int64_t epochs,
                                                     LoaderPosition from = {}) {
  std::map<std::pair<int64_t, int64_t>, Masked> out;  // by (epoch, sample)
  DataLoader loader(d, o, from);
  std::vector<int64_t> order;
  for (int64_t e = from.epoch; e < epochs; ++e) {
    order = sample_order(d.n, o.shuffle, o.seed, e);
    if (o.bucket_by_length) bucket_by_length(order, d, o.batch_size * kBucketBatches);
    for (Batch b; loader.next(b);) {
      const int64_t t = b.sample[0];
      EXPECT_EQ(b.labels_per_sample, t);
      for (int64_t i = 0; i < b.size; ++i) {
        const int64_t s = order[size_t(b.index * o.batch_size + i)];
        const int64_t len = b.lengths[i];
        const int64_t* ids = b.ids + i * t;
        const int64_t* targets = b.labels + i * t;
        for (int64_t k = len; k < t; ++k) EXPECT_EQ(targets[k], kIgnore);
        out[{e, s}] = Masked{std::vector<int64_t>(ids, ids + len), std::vector<int64_t>(targets, targets + len)};
      }
    }
  }
  return out;
}

// Two loaders whose batches hold other samples, in other orders, prepared at other depths: each
// sample's masks are the same (the replicas share a loader's batch, so they cannot change them).
TEST(MlmMasking, TheLoadersMasksOfASampleDoNotDependOnItsBatchOrderOrAResume) {
  const Dataset d = token_texts(60);
  LoaderOptions a;
  a.batch_size = 8, a.seed = 3, a.mlm = masking(3);
  LoaderOptions b = a;
  b.batch_size = 5, b.shuffle = false, b.bucket_by_length = true, b.prefetch = 1;
  const auto by_a = loaded(d, a, 2), by_b = loaded(d, b, 2);
  ASSERT_EQ(by_a.size(), size_t(2 * d.n));
  for (const auto& [key, m] : by_a) {
    EXPECT_EQ(m, by_b.at(key)) << "epoch " << key.first << " sample " << key.second;
    EXPECT_EQ(m, masked(a.mlm, d, key.first, key.second));
  }
  // Resumed in the middle of epoch 1 (0-based): the rest of the batches as before.
  const auto resumed = loaded(d, a, 2, {1, 3});
  EXPECT_EQ(resumed.size(), size_t(d.n - 3 * 8));
  for (const auto& [key, m] : resumed) EXPECT_EQ(m, by_a.at(key));
}

TEST(MlmMasking, TheLoaderRefusesMaskingImages) {
  Dataset images;
  images.name = "pictures";
  images.n = 2, images.c = images.h = images.w = 1, images.num_classes = 2;
  images.images = {0, 1};
  images.labels = {0, 1};
  LoaderOptions o;
  o.mlm = masking();
  EXPECT_NE(error_of([&] { DataLoader loader(images, o); }).find("--task mlm: pictures is not text"),
            std::string::npos);
}

TEST(MlmMasking, TheDatasetsVocabularyGivesTheMaskingOrWithoutMaskIsRefusedNamed) {
  Dataset d = token_texts(3);
  d.mask_id = kMask, d.special_ids = {kCls, kSep, kPad}, d.vocab = "words/vocab.txt";
  const MlmMasking m = mlm_masking_of(d, 5, true);
  EXPECT_EQ(m.mask_id, kMask);
  EXPECT_EQ(m.vocab_size, kVocab);
  EXPECT_EQ(m.special_ids, d.special_ids);
  EXPECT_EQ(m.seed, 5u);
  EXPECT_TRUE(m.fixed);
  d.mask_id = -1;
  EXPECT_EQ(error_of([&] { mlm_masking_of(d, 5, false); }),
            "--task mlm: the vocabulary words/vocab.txt has no [MASK] token");
}

}  // namespace
}  // namespace dpcore::data
