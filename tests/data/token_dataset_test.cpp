// Text made token ids for training (engine/data/text/token_dataset.h) and the batches the
// loader makes of them: padded to the longest text of each batch, optionally bucketed by
// length (engine/data/loader.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "engine/data/loader.h"
#include "engine/data/spec.h"
#include "engine/data/text/text_files.h"
#include "engine/data/text/token_dataset.h"
#include "support/error_of.h"
#include "support/test_support.h"

namespace dpcore::data::text {
namespace {

using testing::error_of;
using testing::TempDir;

WordPieceTokenizer committed_tokenizer() { return WordPieceTokenizer(Vocab::read(kDefaultVocab)); }

// Texts of 1 to 12 words, so that the token lengths differ; labels by the text's parity.
TextDataset texts_of_many_lengths(int64_t n) {
  TextDataset t;
  t.name = "lengths";
  t.class_names = {"even", "odd"};
  for (int64_t i = 0; i < n; ++i) {
    std::string text = "word";
    for (int64_t w = 0; w < (i * 7) % 12; ++w) text += " the";
    t.texts.push_back(text);
    t.labels.push_back(i % 2);
    t.sources.push_back("lengths line " + std::to_string(i + 1));
  }
  return t;
}

TEST(TokenDataset, EachTextIsItsEncodingAndItsLabel) {
  const WordPieceTokenizer tok = committed_tokenizer();
  const TextDataset t = texts_of_many_lengths(20);
  const Dataset d = tokenize_dataset(t, tok, 128, false);
  ASSERT_TRUE(d.tokens());
  EXPECT_EQ(d.n, 20);
  EXPECT_EQ(d.num_classes, 2);
  EXPECT_EQ(d.class_names, t.class_names);
  EXPECT_EQ(d.vocab_size, tok.vocab().size());
  EXPECT_EQ(d.pad_id, tok.vocab().id_of(kPadToken));
  for (int64_t i = 0; i < d.n; ++i) {
    const std::vector<int64_t> want = tok.encode(t.texts[size_t(i)], 128, false);
    EXPECT_EQ(std::vector<int64_t>(d.ids(i), d.ids(i) + d.length(i)), want) << i;
    EXPECT_EQ(d.labels[size_t(i)], t.labels[size_t(i)]);
  }
  int64_t shortest = 1000, longest = 0;
  for (int64_t i = 0; i < d.n; ++i) shortest = std::min(shortest, d.length(i)), longest = std::max(longest, d.length(i));
  EXPECT_LT(shortest, longest);
  EXPECT_EQ(describe(d), "20 texts of " + std::to_string(shortest) + " to " + std::to_string(longest) +
                             " tokens, 2 classes");
}

TEST(TokenDataset, ALongTextIsRefusedNamingItsLineUnlessTruncated) {
  const WordPieceTokenizer tok = committed_tokenizer();
  const TextDataset t = texts_of_many_lengths(4);  // text 1 (line 2) the first longer than 8 tokens
  ASSERT_LE(tok.encode(t.texts[0], 128, false).size(), 8u);
  const size_t n = tok.encode(t.texts[1], 128, false).size();
  ASSERT_GT(n, 8u);
  const std::string e = error_of([&] { tokenize_dataset(t, tok, 8, false); });
  EXPECT_NE(e.find("lengths line 2: a text of " + std::to_string(n) + " tokens"), std::string::npos) << e;
  EXPECT_NE(e.find("maximum length 8"), std::string::npos) << e;
  const Dataset d = tokenize_dataset(t, tok, 8, true);
  EXPECT_EQ(d.length(1), 8);
  EXPECT_EQ(d.ids(1)[7], tok.vocab().id_of(kSepToken));
}

TEST(TokenDataset, TheTsvReaderNamesTheFileAndLineOfALongText) {
  TempDir dir;
  const std::string path = dir.path() + "/long.tsv";
  const std::string long_text = "one two three four five six seven eight nine ten";
  std::ofstream(path) << "a\tshort\nb\t" << long_text << "\n";
  const size_t n = committed_tokenizer().encode(long_text, 128, false).size();
  TextOptions options;
  options.max_len = 6;
  DataSpec spec = parse_data_specs("text:" + path, "", {}, options);
  // The long text is in one of the two splits; loading both finds it.
  const std::string e = error_of([&] { load_data(spec, false); });
  EXPECT_NE(e.find(path + " line 2: a text of " + std::to_string(n) + " tokens"), std::string::npos) << e;
}

// A class whose every text falls in the test split (by the hash split, docs/text.md) was
// never seen in training: the data is refused, naming the class.
TEST(TokenDataset, ATestClassTheTrainSplitLacksIsRefusedNamingIt) {
  std::string only_test;
  for (int i = 0; only_test.empty(); ++i) {
    const std::string text = "rare text " + std::to_string(i);
    if (in_test_split(duplicate_key(text))) only_test = text;
  }
  TempDir dir;
  const std::string path = dir.path() + "/unseen.tsv";
  std::ofstream file(path);
  for (int i = 0; i < 40; ++i) file << "common\tcommon text " << i << "\n";
  file << "rare\t" << only_test << "\n";
  file.close();
  const std::string e = error_of([&] { load_data(parse_data_specs("text:" + path, "", {}), false); });
  EXPECT_NE(e.find("has label \"rare\", which no text of the train split has"), std::string::npos) << e;
}

// An epoch's batches, copied (a batch's memory is valid until the next call).
struct TokenBatch {
  int64_t size = 0, T = 0;
  std::vector<int64_t> ids, labels;
};
std::vector<TokenBatch> all_batches(DataLoader& loader) {
  std::vector<TokenBatch> out;
  for (Batch b; loader.next(b);) {
    EXPECT_TRUE(b.token_ids());
    EXPECT_EQ(b.sample.size(), 1u);
    out.push_back({b.size, b.sample[0], {b.ids, b.ids + b.size * b.sample_numel()}, {b.labels, b.labels + b.size}});
  }
  return out;
}

TEST(TokenBatches, ArePaddedToTheLongestTextOfTheBatch) {
  const Dataset d = tokenize_dataset(texts_of_many_lengths(23), committed_tokenizer(), 128, false);
  LoaderOptions o;
  o.batch_size = 5, o.shuffle = true, o.seed = 7;
  DataLoader loader(d, o);
  const std::vector<int64_t> order = sample_order(d.n, true, 7, 0);
  std::vector<int64_t> widths;
  int64_t row = 0;
  for (const TokenBatch& b : all_batches(loader)) {
    const int64_t T = b.T;
    int64_t longest = 0;
    for (int64_t i = 0; i < b.size; ++i) longest = std::max(longest, d.length(order[size_t(row + i)]));
    EXPECT_EQ(T, longest);
    for (int64_t i = 0; i < b.size; ++i) {
      const int64_t s = order[size_t(row + i)];
      for (int64_t t = 0; t < T; ++t)
        EXPECT_EQ(b.ids[size_t(i * T + t)], t < d.length(s) ? d.ids(s)[t] : d.pad_id) << "sample " << s << " token " << t;
      EXPECT_EQ(b.labels[size_t(i)], d.labels[size_t(s)]);
    }
    widths.push_back(T);
    row += b.size;
  }
  EXPECT_EQ(row, d.n);
  EXPECT_GT(*std::max_element(widths.begin(), widths.end()), *std::min_element(widths.begin(), widths.end()));
}

TEST(TokenBatches, BucketingSortsEachWindowOfTheSeededOrderByLength) {
  const Dataset d = tokenize_dataset(texts_of_many_lengths(230), committed_tokenizer(), 128, false);
  std::vector<int64_t> order = sample_order(d.n, true, 3, 1);
  const std::vector<int64_t> shuffled = order;
  bucket_by_length(order, d, 100);
  for (size_t begin = 0; begin < order.size(); begin += 100) {
    const size_t end = std::min(order.size(), begin + 100);
    std::vector<int64_t> want(shuffled.begin() + begin, shuffled.begin() + end);
    std::stable_sort(want.begin(), want.end(), [&](int64_t a, int64_t b) { return d.length(a) < d.length(b); });
    EXPECT_EQ(std::vector<int64_t>(order.begin() + begin, order.begin() + end), want) << begin;
  }
  LoaderOptions o;
  o.batch_size = 2, o.seed = 3, o.bucket_by_length = true;  // windows of 100 samples
  DataLoader loader(d, o, {1, 0});
  int64_t row = 0, padding = 0;
  for (const TokenBatch& b : all_batches(loader)) {
    for (int64_t i = 0; i < b.size; ++i) EXPECT_EQ(b.labels[size_t(i)], d.labels[size_t(order[size_t(row + i)])]);
    for (int64_t i = 0; i < b.size; ++i) padding += b.T - d.length(order[size_t(row + i)]);
    row += b.size;
  }
  EXPECT_EQ(row, d.n);
  EXPECT_LT(padding, d.n);  // sorted windows: at most the few window edges pad
}

TEST(TokenBatches, AugmentationAndImagesAreRefusedInWords) {
  const Dataset d = tokenize_dataset(texts_of_many_lengths(4), committed_tokenizer(), 128, false);
  LoaderOptions o;
  o.augment = parse_augment("flip");
  EXPECT_NE(error_of([&] { DataLoader l(d, o); }).find("is text (token ids); augmentation is for images"),
            std::string::npos);
}

}  // namespace
}  // namespace dpcore::data::text
