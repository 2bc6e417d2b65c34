// The token-balanced split of a text batch (train/step/split.h): contiguous runs whose largest
// token count is the least any contiguous split reaches, checked against every split of
// small batches; Splitter uses it for text batches under --split even.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "train/step/split.h"

namespace dpcore::train {
namespace {

int64_t largest_run(const std::vector<int64_t>& lengths, const std::vector<int64_t>& sizes) {
  int64_t row = 0, largest = 0;
  for (int64_t s : sizes) {
    largest = std::max(largest, std::accumulate(lengths.begin() + row, lengths.begin() + row + s, int64_t(0)));
    row += s;
  }
  return largest;
}

// The least largest run over every way of cutting the samples into `parts` non-empty runs.
int64_t best_by_search(const std::vector<int64_t>& lengths, size_t from, int parts) {
  const size_t n = lengths.size();
  if (parts == 1) return std::accumulate(lengths.begin() + int64_t(from), lengths.end(), int64_t(0));
  int64_t best = INT64_MAX, first = 0;
  for (size_t end = from + 1; end + size_t(parts - 1) <= n; ++end) {
    first += lengths[end - 1];
    best = std::min(best, std::max(first, best_by_search(lengths, end, parts - 1)));
  }
  return best;
}

TEST(TokenSplit, TheLargestRunIsTheLeastAnySplitReaches) {
  std::mt19937_64 rng(26);
  for (int trial = 0; trial < 300; ++trial) {
    const int parts = 2 + int(rng() % 3);
    const size_t n = size_t(parts) + rng() % 8;
    std::vector<int64_t> lengths(n);
    for (int64_t& l : lengths) l = 3 + int64_t(rng() % 60);
    const std::vector<int64_t> sizes = token_balanced_sizes(lengths.data(), int64_t(n), parts);
    ASSERT_EQ(sizes.size(), size_t(parts));
    EXPECT_EQ(std::accumulate(sizes.begin(), sizes.end(), int64_t(0)), int64_t(n));
    for (int64_t s : sizes) EXPECT_GE(s, 1) << "trial " << trial;
    EXPECT_EQ(largest_run(lengths, sizes), best_by_search(lengths, 0, parts)) << "trial " << trial;
    EXPECT_EQ(token_balanced_sizes(lengths.data(), int64_t(n), parts), sizes);  // deterministic
  }
}

TEST(TokenSplit, EqualLengthsSplitAsSamplesAndLongTextsGetFewerCompanions) {
  const std::vector<int64_t> equal(8, 10);
  EXPECT_EQ(token_balanced_sizes(equal.data(), 8, 2), (std::vector<int64_t>{4, 4}));
  // One long text: its replica gets it alone, the other the seven short ones.
  const std::vector<int64_t> one_long = {70, 10, 10, 10, 10, 10, 10, 10};
  EXPECT_EQ(token_balanced_sizes(one_long.data(), 8, 2), (std::vector<int64_t>{1, 7}));
  // Fewer samples than replicas: one each, the rest empty.
  const std::vector<int64_t> two = {5, 9};
  EXPECT_EQ(token_balanced_sizes(two.data(), 2, 3), (std::vector<int64_t>{1, 1, 0}));
  EXPECT_EQ(token_balanced_sizes(two.data(), 0, 2), (std::vector<int64_t>{0, 0}));
}

TEST(TokenSplit, TheSplitterBalancesTextBatchesUnderEvenOnly) {
  const std::vector<int64_t> lengths = {40, 30, 5, 5, 5, 5, 5, 5, 5, 5};
  const std::vector<int64_t> labels(lengths.size(), 0);
  data::Batch batch;
  batch.size = int64_t(lengths.size()), batch.labels = labels.data(), batch.lengths = lengths.data();
  EXPECT_EQ(Splitter("even", 2).shares(batch, 0, 10), (std::vector<int64_t>{2, 8}));  // 70 and 40 tokens
  EXPECT_EQ(Splitter("even", 2).shares(batch, 2, 8), (std::vector<int64_t>{4, 4}));  // a micro-batch's rows
  EXPECT_EQ(Splitter("weights:1,1", 2).shares(batch, 0, 10), (std::vector<int64_t>{5, 5}));
  batch.lengths = nullptr;  // images: samples
  EXPECT_EQ(Splitter("even", 2).shares(batch, 0, 10), (std::vector<int64_t>{5, 5}));
}

}  // namespace
}  // namespace dpcore::train
