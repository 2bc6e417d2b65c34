// softmax(x + mask) over the last dimension, with and without causal, on every backend
// (tests/support/op_backends.h): the forward and the backward against the float64 loop
// nests of kernels/naive, for each broadcast the mask accepts (kernels/softmax_mask.h),
// masks with -inf entries, causal with as many, fewer and more queries than keys, logits of
// 1e4 (a naive exp overflows), and rows masked everywhere, which are NaN as in PyTorch.
//
// Tolerance, with u = 2^-24: the CPU computes float in float (double in double).
// y_j = e_j / total, e_j = expf((x_j + mask_j) - max): the two roundings of the logit move
// exp's argument by at most u (|l_j| + |l_j - max|), which is e_j's relative error (logits
// within +-5 here, so 15 u; for the logits of 1e4 the entries far below the max, where
// that is large, are e^-t times t u <= u / e of the row); libmvec's expf adds at most 3 ulp
// (kernels/cpu/float_blocks.h); the total is a float sum of positive terms in 16 lanes,
// cols/16 + 1 additions per lane and 4 in the tree (cols <= 100: 11 u of the total); then
// 1/total and the product, one rounding each: some 31 u, 2e-6 of each entry. The backward's
// dot product is a float lane sum as well, within 11 u of sum |dy y| <= max |dy|. The CUDA
// kernel's expf is within 2 ulp and its row sums add at most cols/32 + 5 float terms per
// lane and tree level (cols <= 100: 9 additions). Both are within the FP32 tolerance, 1e-5
// of the rms of the reference (EXPECT_OP_CLOSE; 1e-12 in double).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "support/op_backends.h"

namespace dpcore::testing {
namespace {

struct SoftmaxCase {
  std::vector<int64_t> x;
  std::vector<int64_t> mask;  // empty: no mask
  bool causal;
  double magnitude = 3.0;     // logits uniform in +-magnitude
};

const SoftmaxCase kCases[] = {
    {{1, 1}, {}, false},                       // one entry: y = 1
    {{13, 10}, {}, false},
    {{3, 100}, {}, false, 1e4},
    {{9, 70}, {70}, false},                    // one mask row for every row
    {{2, 3, 5, 7}, {2, 3, 5, 7}, false},       // the same shape
    {{2, 3, 5, 7}, {2, 1, 1, 7}, false},       // a key mask per batch
    {{2, 3, 5, 7}, {2, 3, 1, 7}, false},       // per batch and head
    {{2, 3, 5, 7}, {5, 7}, true},              // shared by batch and heads, with causal
    {{2, 2, 4, 6}, {}, true},                  // causal, fewer queries than keys
    {{1, 2, 6, 4}, {}, true},                  // causal, more queries than keys
    {{2, 4, 33, 65}, {2, 1, 1, 65}, true},     // rows that are not a multiple of a block's 8
};

std::string describe(const SoftmaxCase& c, int threads) {
  return "x " + shape_str(c.x) + (c.mask.empty() ? "" : ", mask " + shape_str(c.mask)) + (c.causal ? ", causal" : "") +
         threads_label(threads);
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Uniform in [-2, 2] with every fifth entry -inf (masked), never the first of a row, so
// that no row is masked everywhere unless a test asks for it.
template <class T>
std::vector<T> random_mask(const std::vector<int64_t>& shape, uint64_t seed) {
  std::vector<T> mask = random_vector<T>(numel(shape), seed, -2.0, 2.0);
  for (size_t i = 0; i < mask.size(); ++i)
    if (i % 5 == 3 && i % shape.back() != 0) mask[i] = -std::numeric_limits<T>::infinity();
  return mask;
}

template <class B>
class SoftmaxTest : public OpTest<B> {};
TYPED_TEST_SUITE(SoftmaxTest, KernelBackends, BackendName);

TYPED_TEST(SoftmaxTest, ForwardAndBackwardMatchReference) {
  using B = TypeParam;
  using T = typename B::Scalar;
  for (const SoftmaxCase& c : kCases) {
    const int64_t n = numel(c.x);
    if (!B::runs_elements(n)) continue;
    const kernels::SoftmaxShape s = kernels::softmax_shape(c.x, c.mask.empty() ? nullptr : &c.mask, c.causal);
    const auto x = random_vector<T>(n, 1, -c.magnitude, c.magnitude), dy = random_vector<T>(n, 2);
    const std::vector<T> mask = c.mask.empty() ? std::vector<T>() : random_mask<T>(c.mask, 3);
    auto want_y = nan_filled<T>(n), want_dx = nan_filled<T>(n);
    naive::softmax_forward<T>(s, x.data(), c.mask.empty() ? nullptr : mask.data(), want_y.data());
    naive::softmax_backward<T>(s.rows, s.cols, dy.data(), want_y.data(), want_dx.data());
    typename B::template Array<T> dev_x(x), dev_dy(dy), dev_mask(mask), ref_y(want_y);
    for (int threads : B::thread_counts()) {
      SCOPED_TRACE(describe(c, threads));
      ScopedKernelThreads scope(threads);
      typename B::template Array<T> y(n), dx(n);
      B::softmax_forward(s, dev_x.get(), c.mask.empty() ? nullptr : dev_mask.get(), y.get());
      const std::vector<T> got_y = y.download();
      EXPECT_OP_CLOSE(B, got_y, want_y);
      for (int64_t r = 0; r < s.rows; ++r) {  // every row a distribution
        double total = 0.0;
        for (int64_t j = 0; j < s.cols; ++j) total += double(got_y[r * s.cols + j]);
        ASSERT_NEAR(total, 1.0, 1e-5) << "row " << r;
      }
      B::softmax_backward(s.rows, s.cols, dev_dy.get(), ref_y.get(), dx.get());  // from the reference's y
      EXPECT_OP_CLOSE(B, dx.download(), want_dx);
    }
  }
}

// Causal alone leaves exactly the keys j <= i of query i (top-left), and a row whose every
// entry is masked is NaN, forward and backward (PyTorch's softmax of all -inf).
TYPED_TEST(SoftmaxTest, CausalAndFullyMaskedRows) {
  using B = TypeParam;
  using T = typename B::Scalar;
  const std::vector<int64_t> x_shape = {2, 1, 3, 5}, mask_shape = {2, 1, 1, 5};
  const kernels::SoftmaxShape causal = kernels::softmax_shape(x_shape, nullptr, true);
  const auto x = random_vector<T>(30, 4, -3.0, 3.0);
  typename B::template Array<T> dev_x(x), y(30);
  B::softmax_forward(causal, dev_x.get(), nullptr, y.get());
  const std::vector<T> got = y.download();
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t j = 0; j < 5; ++j)
      EXPECT_EQ(got[r * 5 + j] == T(0), j > r % 3) << "row " << r << " key " << j;

  // Batch 0's keys all -inf: its rows are NaN; batch 1's are untouched.
  std::vector<T> mask(10, T(0));
  for (int j = 0; j < 5; ++j) mask[j] = -std::numeric_limits<T>::infinity();
  const kernels::SoftmaxShape masked = kernels::softmax_shape(x_shape, &mask_shape, false);
  typename B::template Array<T> dev_mask(mask), y2(30), dx(30), dev_dy(random_vector<T>(30, 5));
  B::softmax_forward(masked, dev_x.get(), dev_mask.get(), y2.get());
  B::softmax_backward(6, 5, dev_dy.get(), y2.get(), dx.get());
  const std::vector<T> got2 = y2.download(), got_dx = dx.download();
  for (int64_t i = 0; i < 30; ++i) {
    EXPECT_EQ(std::isnan(got2[i]), i < 15) << "element " << i;
    EXPECT_EQ(std::isnan(got_dx[i]), i < 15) << "element " << i;
  }
}

}  // namespace
}  // namespace dpcore::testing
