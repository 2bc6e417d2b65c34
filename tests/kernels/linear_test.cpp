// Linear fast paths (BLAS) against the loop-nest reference.
#include <gtest/gtest.h>

#include <sstream>

#include "kernel_checks.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/naive.h"

namespace dpcore::testing {
namespace {

namespace cpu = kernels::cpu;
using kernels::LinearShape;

std::vector<LinearShape> linear_shapes() {
  return {
      {1, 7, 3},       // batch 1
      {5, 33, 17},     // odd sizes
      {64, 128, 10},   // the fashioncnn classifier
      {64, 300, 70},   // large enough to split the product by columns across threads
      {200, 120, 48},  // taller than wide: split by rows
  };
}

std::string describe(const LinearShape& s, int threads) {
  std::ostringstream os;
  os << "N " << s.N << ", in " << s.in << ", out " << s.out << ", " << threads << " threads";
  return os.str();
}

template <class T>
class LinearTest : public ::testing::Test {};
TYPED_TEST_SUITE(LinearTest, KernelTypes);

TYPED_TEST(LinearTest, ForwardMatchesReference) {
  using T = TypeParam;
  for (const LinearShape& s : linear_shapes()) {
    for (int threads : kernel_thread_counts()) {
      SCOPED_TRACE(describe(s, threads));
      ScopedKernelThreads scope(threads);
      auto x = random_vector<T>(s.N * s.in, 1), w = random_vector<T>(s.out * s.in, 2), b = random_vector<T>(s.out, 3);
      for (const T* bias : {static_cast<const T*>(b.data()), static_cast<const T*>(nullptr)}) {
        auto y = nan_filled<T>(s.N * s.out), expected = nan_filled<T>(s.N * s.out);
        cpu::linear_forward(s, x.data(), w.data(), bias, y.data());
        cpu::naive::linear_forward(s, x.data(), w.data(), bias, expected.data());
        EXPECT_KERNEL_CLOSE(T, y, expected) << (bias ? "with bias" : "without bias");
      }
    }
  }
}

TYPED_TEST(LinearTest, BackwardDataMatchesReference) {
  using T = TypeParam;
  for (const LinearShape& s : linear_shapes()) {
    for (int threads : kernel_thread_counts()) {
      SCOPED_TRACE(describe(s, threads));
      ScopedKernelThreads scope(threads);
      auto dy = random_vector<T>(s.N * s.out, 4), w = random_vector<T>(s.out * s.in, 5);
      auto dx = nan_filled<T>(s.N * s.in), expected = nan_filled<T>(s.N * s.in);
      cpu::linear_backward_data(s, dy.data(), w.data(), dx.data());
      cpu::naive::linear_backward_data(s, dy.data(), w.data(), expected.data());
      EXPECT_KERNEL_CLOSE(T, dx, expected);
    }
  }
}

TYPED_TEST(LinearTest, BackwardWeightOverwritesOrAccumulates) {
  using T = TypeParam;
  for (const LinearShape& s : linear_shapes()) {
    for (int threads : kernel_thread_counts()) {
      SCOPED_TRACE(describe(s, threads));
      ScopedKernelThreads scope(threads);
      auto x = random_vector<T>(s.N * s.in, 6), dy = random_vector<T>(s.N * s.out, 7);
      auto dw = nan_filled<T>(s.out * s.in), db = nan_filled<T>(s.out);
      auto expected_dw = nan_filled<T>(s.out * s.in), expected_db = nan_filled<T>(s.out);
      cpu::linear_backward_weight(s, x.data(), dy.data(), dw.data(), db.data(), false);
      cpu::naive::linear_backward_weight(s, x.data(), dy.data(), expected_dw.data(), expected_db.data(), false);
      EXPECT_KERNEL_CLOSE(T, dw, expected_dw);
      EXPECT_KERNEL_CLOSE(T, db, expected_db);

      // accumulate = true adds the same gradient on top of what is there.
      const auto dw_before = random_vector<T>(s.out * s.in, 8), db_before = random_vector<T>(s.out, 9);
      auto acc_dw = dw_before, acc_db = db_before;
      cpu::linear_backward_weight(s, x.data(), dy.data(), acc_dw.data(), acc_db.data(), true);
      for (size_t i = 0; i < dw.size(); ++i) dw[i] += dw_before[i];
      for (size_t i = 0; i < db.size(); ++i) db[i] += db_before[i];
      EXPECT_KERNEL_CLOSE(T, acc_dw, dw);
      EXPECT_KERNEL_CLOSE(T, acc_db, db);
    }
  }
}

TYPED_TEST(LinearTest, BackwardWeightWithoutBiasLeavesNoBiasGradient) {
  using T = TypeParam;
  const LinearShape s{5, 33, 17};
  auto x = random_vector<T>(s.N * s.in, 10), dy = random_vector<T>(s.N * s.out, 11);
  auto dw = nan_filled<T>(s.out * s.in), expected = nan_filled<T>(s.out * s.in);
  cpu::linear_backward_weight(s, x.data(), dy.data(), dw.data(), static_cast<T*>(nullptr), false);
  cpu::naive::linear_backward_weight(s, x.data(), dy.data(), expected.data(), static_cast<T*>(nullptr), false);
  EXPECT_KERNEL_CLOSE(T, dw, expected);
}

}  // namespace
}  // namespace dpcore::testing
