// dropout on every backend (tests/support/op_backends.h). Its masks come from Philox, not
// PyTorch's generator (docs/differences.md), so what is tested is the rule itself:
//   * bit for bit the loop-nest reference (kernels/naive/dropout.cpp, one Philox call per
//     element), on every backend and thread count, so the CPU and the GPU draw the same
//     masks and none depends on how the work is split;
//   * splitting a batch of 6 samples into calls of 2 and 4 (a replica's first_sample)
//     gives the masks of the whole batch;
//   * the statistics: the kept fraction within a binomial bound over 2^17 elements, every
//     kept value exactly x * (1 / (1 - p)) and every dropped one exactly 0, a new mask for
//     another step, seed or sample;
//   * p = 0 is the identity, p = 1 zeroes everything (x * 0: NaN stays NaN, as in PyTorch).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "support/op_backends.h"

namespace dpcore::testing {
namespace {

using kernels::DropoutConfig;

struct DropoutCase {
  int64_t samples, sample_size;
  int offset;  // elements; misaligns every pointer for float4
};

// Sample sizes that are and are not multiples of Philox's four words, a batch long enough
// for the CPU's threads (2^15 elements) and several grid strides of a small GPU grid.
const DropoutCase kCases[] = {{0, 5, 0},   {1, 1, 0},   {3, 7, 1},      {6, 1003, 0},
                              {2, 4096, 3}, {5, 20001, 2}, {64, 1024, 0}};

std::string describe(const DropoutCase& c, double p, int threads) {
  return std::to_string(c.samples) + " x " + std::to_string(c.sample_size) + ", offset " + std::to_string(c.offset) +
         ", p = " + std::to_string(p) + threads_label(threads);
}

template <class B>
class DropoutTest : public OpTest<B> {};
TYPED_TEST_SUITE(DropoutTest, KernelBackends, BackendName);

TYPED_TEST(DropoutTest, BitForBitTheReferenceOnAnyThreadCount) {
  using B = TypeParam;
  using T = typename B::Scalar;
  for (const DropoutCase& c : kCases) {
    const int64_t n = c.samples * c.sample_size;
    if (!B::runs_elements(n + c.offset)) continue;
    const auto x = random_vector<T>(size_t(n + c.offset), 31);
    typename B::template Array<T> dev_x(x);
    // and the edges of the threshold: 2^-34 keeps every word (threshold 2^32), 1 - 2^-34
    // none (threshold 0) though its scale 1 / (1 - p) = 2^34 is finite
    for (double p : {0.0, 0.1, 0.5, 1.0, std::ldexp(1.0, -34), 1.0 - std::ldexp(1.0, -34)}) {
      const DropoutConfig cfg{p, 0x0123456789abcdefull, 7 + (uint64_t(1) << 33), 11};
      std::vector<T> want = HostArray<T>(static_cast<size_t>(n + c.offset)).download();  // the arrays' padding
      naive::dropout<T>(cfg, c.samples, c.sample_size, x.data() + c.offset, want.data() + c.offset);
      for (int threads : B::thread_counts()) {
        SCOPED_TRACE(describe(c, p, threads));
        ScopedKernelThreads scope(threads);
        typename B::template Array<T> dev_y(static_cast<size_t>(n + c.offset));
        B::dropout(cfg, c.samples, c.sample_size, dev_x.get() + c.offset, dev_y.get() + c.offset);
        EXPECT_TRUE(bitwise_equal(dev_y.download(), want));
      }
    }
  }
}

// A replica given samples 2..5 of a batch of 6 (first_sample = 2) draws their masks as the
// whole batch does.
TYPED_TEST(DropoutTest, SplittingTheBatchKeepsTheMasks) {
  using B = TypeParam;
  using T = typename B::Scalar;
  const int64_t sample_size = 1001, n = 6 * sample_size, first_part = 2 * sample_size;
  const auto x = random_vector<T>(size_t(n), 32);
  typename B::template Array<T> dev_x(x), whole(static_cast<size_t>(n)), split(static_cast<size_t>(n));
  const DropoutConfig cfg{0.3, 99, 5, 0};
  B::dropout(cfg, 6, sample_size, dev_x.get(), whole.get());
  B::dropout(DropoutConfig{cfg.p, cfg.seed, cfg.step, 0}, 2, sample_size, dev_x.get(), split.get());
  B::dropout(DropoutConfig{cfg.p, cfg.seed, cfg.step, 2}, 4, sample_size, dev_x.get() + first_part,
             split.get() + first_part);
  EXPECT_TRUE(bitwise_equal(split.download(), whole.download()));
}

// Kept count of n Bernoulli(1 - p) draws: within 6 standard deviations, sqrt(n p (1 - p)),
// of n (1 - p) (a false failure has probability ~2e-9). Inputs in [0.5, 1.5] are never 0,
// so an element is kept exactly where its output is not 0.
TYPED_TEST(DropoutTest, KeptFractionAndValuesFollowTheBinomial) {
  using B = TypeParam;
  using T = typename B::Scalar;
  const int64_t samples = 32, sample_size = 4096, n = samples * sample_size;  // 2^17 elements
  if (!B::runs_elements(n)) return;
  const auto x = random_vector<T>(size_t(n), 33, 0.5, 1.5);
  typename B::template Array<T> dev_x(x);
  for (double p : {0.1, 0.5, 0.9}) {
    SCOPED_TRACE("p = " + std::to_string(p));
    const DropoutConfig cfg{p, 2026, 3, 0};
    const size_t size = static_cast<size_t>(n);
    typename B::template Array<T> dev_y(size), dev_other_step(size), dev_other_seed(size);
    B::dropout(cfg, samples, sample_size, dev_x.get(), dev_y.get());
    B::dropout(DropoutConfig{p, cfg.seed, cfg.step + 1, 0}, samples, sample_size, dev_x.get(), dev_other_step.get());
    B::dropout(DropoutConfig{p, cfg.seed + 1, cfg.step, 0}, samples, sample_size, dev_x.get(), dev_other_seed.get());
    const std::vector<T> y = dev_y.download(), other_step = dev_other_step.download(),
                         other_seed = dev_other_seed.download();
    const T scale = T(1) / T(1 - p);
    int64_t kept = 0, same_as_other_step = 0, same_as_other_seed = 0, same_as_next_sample = 0;
    for (int64_t i = 0; i < n; ++i) {
      const bool keep = y[size_t(i)] != T(0);
      kept += keep;
      if (keep) ASSERT_EQ(y[size_t(i)], x[size_t(i)] * scale) << i;
      same_as_other_step += keep == (other_step[size_t(i)] != T(0));
      same_as_other_seed += keep == (other_seed[size_t(i)] != T(0));
      if (i + sample_size < n) same_as_next_sample += keep == (y[size_t(i + sample_size)] != T(0));
    }
    const double expected = double(n) * (1 - p), sd = std::sqrt(double(n) * p * (1 - p));
    EXPECT_LE(std::abs(double(kept) - expected), 6 * sd) << kept << " of " << n << " kept";
    // Independent masks agree on a fraction (1 - p)^2 + p^2 of the elements, not all.
    const double agree = (1 - p) * (1 - p) + p * p, agree_sd = std::sqrt(double(n) * agree * (1 - agree));
    EXPECT_LE(std::abs(double(same_as_other_step) - agree * double(n)), 6 * agree_sd) << "another step";
    EXPECT_LE(std::abs(double(same_as_other_seed) - agree * double(n)), 6 * agree_sd) << "another seed";
    const double pairs = double(n - sample_size);
    EXPECT_LE(std::abs(double(same_as_next_sample) - agree * pairs), 6 * std::sqrt(pairs * agree * (1 - agree)))
        << "the next sample";
  }
}

// p = 0 returns x bit for bit (even NaN); p = 1 multiplies everything by 0, as PyTorch does
// (NaN and inf give NaN, every finite value gives a zero).
TYPED_TEST(DropoutTest, ZeroAndOneAreTheIdentityAndZeros) {
  using B = TypeParam;
  using T = typename B::Scalar;
  const T inf = std::numeric_limits<T>::infinity();
  std::vector<T> x = random_vector<T>(1000, 34);
  x[3] = std::numeric_limits<T>::quiet_NaN();
  x[4] = -inf;
  typename B::template Array<T> dev_x(x), kept(x.size()), zeroed(x.size());
  B::dropout(DropoutConfig{0.0, 1, 1, 0}, 10, 100, dev_x.get(), kept.get());
  B::dropout(DropoutConfig{1.0, 1, 1, 0}, 10, 100, dev_x.get(), zeroed.get());
  EXPECT_TRUE(bitwise_equal(kept.download(), x));
  const std::vector<T> z = zeroed.download();
  for (size_t i = 0; i < x.size(); ++i) {
    if (i == 3 || i == 4)
      EXPECT_TRUE(std::isnan(z[i])) << i;
    else
      EXPECT_EQ(z[i], T(0)) << i;
  }
}

}  // namespace
}  // namespace dpcore::testing
