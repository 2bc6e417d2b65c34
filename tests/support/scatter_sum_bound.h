// The error bound of a scatter-add such as embedding's backward: out[v, :] sums the rows
// dy[p, :] of the count(v) positions p with ids[p] == v. Added in any fixed order in T, the
// error of a sum is at most (count(v) - 1) * u * sum |dy| (recursive summation), plus
// u * |want| for the reference's own rounding to T (and for earlier contents it was added
// onto); u is T's unit roundoff.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace dpcore::testing {

template <class T>
void expect_scatter_sum_within_bound(const std::vector<T>& got, const std::vector<T>& want, int64_t vocab,
                                     int64_t dim, const std::vector<int64_t>& ids, const std::vector<T>& dy) {
  ASSERT_EQ(got.size(), size_t(vocab * dim));
  ASSERT_EQ(want.size(), size_t(vocab * dim));
  const double u = std::numeric_limits<T>::epsilon() / 2;
  std::vector<double> count(vocab, 0.0), abs_sum(vocab * dim, 0.0);
  for (size_t p = 0; p < ids.size(); ++p) {
    count[ids[p]] += 1;
    for (int64_t d = 0; d < dim; ++d) abs_sum[ids[p] * dim + d] += std::abs(double(dy[p * dim + d]));
  }
  for (int64_t v = 0; v < vocab; ++v)
    for (int64_t d = 0; d < dim; ++d) {
      const int64_t i = v * dim + d;
      const double bound = count[v] * u * abs_sum[i] + 2 * u * std::abs(double(want[i]));
      ASSERT_LE(std::abs(double(got[i]) - double(want[i])), bound) << "row " << v << ", column " << d;
    }
}

}  // namespace dpcore::testing
