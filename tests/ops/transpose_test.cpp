// transpose on every backend (tests/support/op_backends.h): each case's output, which starts
// as NaN, must equal the loop-nest reference of kernels/naive EXACTLY (pure data movement,
// so any difference is a wrong index, and a NaN left over an element never written). The
// cases cover the head split of attention ([N, T, H, d] dims 1 and 2), the outer and inner
// dimensions of size 1, a swap of the first and last dimensions, and inner runs shorter
// than a warp.
#include <gtest/gtest.h>

#include <vector>

#include "support/op_backends.h"

namespace dpcore::testing {
namespace {

const kernels::TransposeShape kCases[] = {
    // outer, a, mid, b, inner
    {2, 5, 1, 3, 8},    // [N, T, H, d] -> [N, H, T, d], as attention splits heads
    {3, 4, 1, 2, 64},   // bert-tiny's head size
    {1, 7, 1, 6, 1},    // a matrix transpose
    {1, 3, 5, 4, 2},    // dims 0 and 2 of [3, 5, 4, 2]: a middle part
    {2, 1, 3, 9, 1},    // a dimension of size 1
    {4, 33, 1, 3, 5},   // runs shorter than a warp, counts that are not a block multiple
};

template <class B>
class TransposeTest : public OpTest<B> {};
TYPED_TEST_SUITE(TransposeTest, KernelBackends, BackendName);

TYPED_TEST(TransposeTest, EqualsTheReferenceExactly) {
  using B = TypeParam;
  using T = typename B::Scalar;
  for (const kernels::TransposeShape& s : kCases) {
    SCOPED_TRACE(::testing::Message() << "[" << s.outer << ", " << s.a << ", " << s.mid << ", " << s.b << ", "
                                      << s.inner << "]");
    const int64_t n = s.numel();
    if (!B::runs_elements(n)) continue;
    const auto x = random_vector<T>(size_t(n), 31);
    std::vector<T> want(static_cast<size_t>(n));
    naive::transpose<T>(s, x.data(), want.data());
    typename B::template Array<T> dev_x(x);
    for (int threads : B::thread_counts()) {
      SCOPED_TRACE(threads_label(threads));
      ScopedKernelThreads scope(threads);
      typename B::template Array<T> dev_y(static_cast<size_t>(n));
      B::transpose(s, dev_x.get(), dev_y.get());
      EXPECT_EQ(dev_y.download(), want);
    }
  }
}

}  // namespace
}  // namespace dpcore::testing
