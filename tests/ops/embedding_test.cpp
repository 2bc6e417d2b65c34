// embedding on every backend (tests/support/op_backends.h): the forward gather bit for bit
// against the loop-nest reference; the backward's scatter-add against the reference within
// the error bound of a fixed summation order (support/scatter_sum_bound.h), overwriting and
// accumulating, padding_idx rows at zero, and the same bits on every rerun and thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "support/op_backends.h"
#include "support/scatter_sum_bound.h"

namespace dpcore::testing {
namespace {

template <class B>
class EmbeddingTest : public OpTest<B> {};
TYPED_TEST_SUITE(EmbeddingTest, KernelBackends, BackendName);

// n ids into a [vocab, dim] table; ids drawn from the first `used` rows (the rest never
// occur, and must get a zero gradient), or with `used` 1 all the last row. Cases: a single
// id, several tiles of the CUDA sort (256 positions) with many repeats, more table rows
// than one scan chunk (256), a vocabulary mostly unused, one id everywhere (a group
// spanning every tile), no ids at all.
struct EmbeddingCase {
  int64_t n, vocab, used, dim, padding_idx;
};
const EmbeddingCase kCases[] = {{1, 1, 1, 1, -1},      {7, 5, 5, 3, -1},    {300, 10, 10, 17, 3},
                                {1000, 50, 50, 64, 0}, {2000, 7, 7, 5, 6},  {37, 1000, 1000, 8, -1},
                                {600, 3, 1, 4, -1},    {700, 300, 300, 9, 299}, {0, 4, 4, 3, -1}};

std::string describe(const EmbeddingCase& c, int threads) {
  return "n " + std::to_string(c.n) + ", vocab " + std::to_string(c.vocab) + ", dim " + std::to_string(c.dim) +
         ", padding_idx " + std::to_string(c.padding_idx) + threads_label(threads);
}

std::vector<int64_t> random_ids(const EmbeddingCase& c) {
  std::mt19937_64 rng(11);
  std::vector<int64_t> ids(c.n);
  for (auto& id : ids) id = c.used == 1 ? c.vocab - 1 : int64_t(rng() % uint64_t(c.used));
  return ids;
}

TYPED_TEST(EmbeddingTest, ForwardGathersTheRows) {
  using B = TypeParam;
  using T = typename B::Scalar;
  for (const EmbeddingCase& c : kCases) {
    const auto ids = random_ids(c);
    const auto weight = random_vector<T>(c.vocab * c.dim, 1);
    std::vector<T> want(c.n * c.dim);
    naive::embedding_forward<T>(c.n, c.dim, ids.data(), weight.data(), want.data());
    typename B::template Array<int64_t> dev_ids(ids);
    typename B::template Array<T> dev_weight(weight);
    for (int threads : B::thread_counts()) {
      SCOPED_TRACE(describe(c, threads));
      ScopedKernelThreads scope(threads);
      typename B::template Array<T> y(c.n * c.dim);
      B::embedding_forward(c.n, c.vocab, c.dim, dev_ids.get(), dev_weight.get(), y.get());
      EXPECT_TRUE(bitwise_equal(y.download(), want));  // a copy: nothing to round
    }
  }
}

TYPED_TEST(EmbeddingTest, BackwardSumsRepeatedIdsOverwritingOrAccumulating) {
  using B = TypeParam;
  using T = typename B::Scalar;
  for (const EmbeddingCase& c : kCases) {
    const auto ids = random_ids(c);
    const auto dy = random_vector<T>(c.n * c.dim, 2);
    const auto before = random_vector<T>(c.vocab * c.dim, 3);
    std::vector<T> want(c.vocab * c.dim), want_acc = before;
    naive::embedding_backward<T>(c.n, c.vocab, c.dim, ids.data(), dy.data(), c.padding_idx, want.data(), false);
    naive::embedding_backward<T>(c.n, c.vocab, c.dim, ids.data(), dy.data(), c.padding_idx, want_acc.data(), true);
    typename B::template Array<int64_t> dev_ids(ids);
    typename B::template Array<T> dev_dy(dy);
    std::vector<T> first;  // the bits of the first run, which every other run must repeat
    for (int threads : B::thread_counts()) {
      SCOPED_TRACE(describe(c, threads));
      ScopedKernelThreads scope(threads);
      typename B::template Array<T> dw(c.vocab * c.dim), acc(before);
      B::embedding_backward(c.n, c.vocab, c.dim, dev_ids.get(), dev_dy.get(), c.padding_idx, dw.get(), false);
      B::embedding_backward(c.n, c.vocab, c.dim, dev_ids.get(), dev_dy.get(), c.padding_idx, acc.get(), true);
      const std::vector<T> got = dw.download();
      expect_scatter_sum_within_bound(got, want, c.vocab, c.dim, ids, dy);
      // Accumulating adds the same sum onto the earlier contents: the reference's sum has
      // the earlier value as one more term, which the bound's u * |sum| covers.
      expect_scatter_sum_within_bound(acc.download(), want_acc, c.vocab, c.dim, ids, dy);
      if (c.padding_idx >= 0)
        for (int64_t d = 0; d < c.dim; ++d) ASSERT_EQ(got[c.padding_idx * c.dim + d], T(0)) << "padding row";
      if constexpr (B::kCuda) {
        // The CUDA kernel adds in float in increasing position order, whatever its grid: a
        // host float loop in that order gives the same bits.
        std::vector<T> in_order(c.vocab * c.dim, T(0));
        for (int64_t p = 0; p < c.n; ++p)
          if (ids[p] != c.padding_idx)
            for (int64_t d = 0; d < c.dim; ++d) in_order[ids[p] * c.dim + d] += dy[p * c.dim + d];
        EXPECT_TRUE(bitwise_equal(got, in_order)) << "sums in increasing position order";
      }
      typename B::template Array<T> again(c.vocab * c.dim);
      B::embedding_backward(c.n, c.vocab, c.dim, dev_ids.get(), dev_dy.get(), c.padding_idx, again.get(), false);
      EXPECT_TRUE(bitwise_equal(again.download(), got)) << "a rerun";
      if (first.empty()) first = got;
      EXPECT_TRUE(bitwise_equal(got, first)) << "against the first thread count";
    }
  }
}

}  // namespace
}  // namespace dpcore::testing
