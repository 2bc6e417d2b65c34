// avg_pool2d (forward and backward, padding counted in the divisor or not) and global
// average pooling on every backend (tests/support/op_backends.h) against the loop-nest
// reference of kernels/naive, on one table of shapes each; PyTorch's divisor rules on a
// hand-made plane; bit-identical reruns. Global pooling's reference is avg_pool2d with the
// window the whole plane.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "kernels/naive/naive.h"
#include "support/op_backends.h"
#include "support/pool_cases.h"

namespace dpcore::testing {
namespace {

using kernels::Pool2dShape;

// Global pooling of x[N,C,H,W] as the reference sees it: one window over the whole plane.
Pool2dShape whole_plane(int64_t N, int64_t C, int64_t H, int64_t W) { return pool_shape(N, C, H, W, H, W, 1, 1, 0, 0); }

const PoolCase kCases[] = {
    {"2x2_stride2", pool_shape(2, 3, 8, 8, 2, 2, 2, 2, 0, 0)},
    {"odd_input_floor", pool_shape(1, 2, 7, 9, 2, 2, 2, 2, 0, 0)},  // the last row and column belong to no window
    {"3x3_stride2_pad1_overlap", pool_shape(3, 2, 9, 6, 3, 3, 2, 2, 1, 1)},
    {"3x3_stride2_pad1_overlap_odd", pool_shape(1, 2, 7, 9, 3, 3, 2, 2, 1, 1)},
    {"3x3_stride1_pad1_overlap", pool_shape(2, 1, 6, 5, 3, 3, 1, 1, 1, 1)},
    {"5x5_stride2_pad2", pool_shape(1, 3, 9, 10, 5, 5, 2, 2, 2, 2)},
    {"nonsquare_per_axis", pool_shape(2, 1, 5, 8, 3, 2, 1, 2, 1, 0)},  // per-axis kernel, stride, padding
    {"nonsquare_2x4_stride3x1_pad1x2", pool_shape(2, 3, 11, 10, 2, 4, 3, 1, 1, 2)},
    {"stride_beyond_kernel_gaps", pool_shape(2, 2, 9, 10, 2, 2, 3, 3, 0, 0)},  // inputs between windows get 0
    {"1x1_stride2", pool_shape(2, 4, 7, 7, 1, 1, 2, 2, 0, 0)},
    {"window_is_the_plane", pool_shape(2, 3, 5, 7, 5, 7, 1, 1, 0, 0)},
    {"parallel_planes_3x3_stride2_pad1", pool_shape(4, 64, 32, 32, 3, 3, 2, 2, 1, 1)},
};

struct GlobalCase {
  const char* name;
  int64_t N, C, H, W;
};

const GlobalCase kGlobalCases[] = {
    {"1x1", 2, 3, 1, 1},
    {"resnet_imagenet_7x7", 4, 16, 7, 7},
    {"resnet_cifar_8x8", 4, 16, 8, 8},
    {"odd_5x9", 3, 5, 5, 9},
    {"odd_13x11", 2, 3, 13, 11},
    {"plane_above_a_warp_33x35", 2, 2, 33, 35},
    {"single_plane", 1, 1, 6, 6},
    {"parallel_planes_7x7", 32, 128, 7, 7},
};

std::string describe(const std::string& name, const Pool2dShape& s, bool count_include_pad, int threads = 0) {
  std::ostringstream os;
  os << name << ": x[" << s.N << "," << s.C << "," << s.H << "," << s.W << "] kernel " << s.kernel_h << "x"
     << s.kernel_w << " stride " << s.stride_h << "x" << s.stride_w << " pad " << s.pad_h << "x" << s.pad_w
     << (count_include_pad ? ", count_include_pad" : ", real elements only") << threads_label(threads);
  return os.str();
}

template <class B>
class AvgPool2dTest : public OpTest<B> {
 protected:
  using T = typename B::Scalar;
  // The backend's kernels on host values, into outputs that start as NaN.
  static std::vector<T> forward(const Pool2dShape& s, bool count_include_pad, const std::vector<T>& x) {
    typename B::template Array<T> dev_x(x), y(s.y_size());
    B::avg_pool2d_forward(s, count_include_pad, dev_x.get(), y.get());
    return y.download();
  }
  static std::vector<T> backward(const Pool2dShape& s, bool count_include_pad, const std::vector<T>& dy) {
    typename B::template Array<T> dev_dy(dy), dx(s.x_size());
    B::avg_pool2d_backward(s, count_include_pad, dev_dy.get(), dx.get());
    return dx.download();
  }
  static std::vector<T> global_forward(const Pool2dShape& s, const std::vector<T>& x) {
    typename B::template Array<T> dev_x(x), y(s.N * s.C);
    B::global_avg_pool2d_forward(s.N * s.C, s.H * s.W, dev_x.get(), y.get());
    return y.download();
  }
  static std::vector<T> global_backward(const Pool2dShape& s, const std::vector<T>& dy) {
    typename B::template Array<T> dev_dy(dy), dx(s.x_size());
    B::global_avg_pool2d_backward(s.N * s.C, s.H * s.W, dev_dy.get(), dx.get());
    return dx.download();
  }
};
TYPED_TEST_SUITE(AvgPool2dTest, KernelBackends, BackendName);

TYPED_TEST(AvgPool2dTest, ForwardAndBackwardMatchReference) {
  using B = TypeParam;
  using T = typename B::Scalar;
  for (const PoolCase& c : kCases) {
    const Pool2dShape& s = c.shape;
    if (!B::runs_elements(s.x_size())) continue;
    const auto x = random_vector<T>(s.x_size(), 1);
    const auto dy = random_vector<T>(s.y_size(), 2);
    for (bool count_include_pad : {true, false}) {
      auto want_y = nan_filled<T>(s.y_size());
      auto want_dx = nan_filled<T>(s.x_size());
      naive::avg_pool2d_forward(s, count_include_pad, x.data(), want_y.data());
      naive::avg_pool2d_backward(s, count_include_pad, dy.data(), want_dx.data());
      for (int threads : B::thread_counts()) {
        SCOPED_TRACE(describe(c.name, s, count_include_pad, threads));
        ScopedKernelThreads scope(threads);
        EXPECT_OP_CLOSE(B, TestFixture::forward(s, count_include_pad, x), want_y);
        EXPECT_OP_CLOSE(B, TestFixture::backward(s, count_include_pad, dy), want_dx);
      }
    }
  }
}

TYPED_TEST(AvgPool2dTest, GlobalMatchesReference) {
  using B = TypeParam;
  using T = typename B::Scalar;
  for (const GlobalCase& c : kGlobalCases) {
    const Pool2dShape s = whole_plane(c.N, c.C, c.H, c.W);
    if (!B::runs_elements(s.x_size())) continue;
    // Values around an offset, so each mean is far from zero and a plane summed short of
    // an element, or divided wrongly, fails clearly.
    const auto x = random_vector<T>(s.x_size(), 3, 0.5, 1.5);
    const auto dy = random_vector<T>(s.y_size(), 4);
    auto want_y = nan_filled<T>(s.y_size());
    auto want_dx = nan_filled<T>(s.x_size());
    naive::avg_pool2d_forward(s, true, x.data(), want_y.data());
    naive::avg_pool2d_backward(s, true, dy.data(), want_dx.data());
    for (int threads : B::thread_counts()) {
      SCOPED_TRACE(describe(c.name, s, true, threads));
      ScopedKernelThreads scope(threads);
      EXPECT_OP_CLOSE(B, TestFixture::global_forward(s, x), want_y);
      EXPECT_OP_CLOSE(B, TestFixture::global_backward(s, dy), want_dx);
    }
  }
}

// Global pooling of 1x1 planes passes values and gradients through unchanged.
TYPED_TEST(AvgPool2dTest, GlobalPoolOfOneByOnePlanesIsTheIdentity) {
  using T = typename TypeParam::Scalar;
  const Pool2dShape s = whole_plane(3, 5, 1, 1);
  const auto x = random_vector<T>(s.x_size(), 5);
  EXPECT_TRUE(bitwise_equal(TestFixture::global_forward(s, x), x));
  EXPECT_TRUE(bitwise_equal(TestFixture::global_backward(s, x), x));
}

// PyTorch's divisors on a 3x3 plane of ones, 3x3 windows, stride 2, padding 1: each
// window holds 4 real elements of 9 taps. count_include_pad divides by 9 (the padding
// counts as zeros), otherwise by 4; an input's gradient adds the share of every window
// holding it: the centre is in all four, an edge in two, a corner in one.
TYPED_TEST(AvgPool2dTest, DivisorCountsThePaddingOrOnlyRealElements) {
  using B = TypeParam;
  using T = typename B::Scalar;
  const Pool2dShape s = pool_shape(1, 1, 3, 3, 3, 3, 2, 2, 1, 1);
  ASSERT_EQ(s.P, 2);
  ASSERT_EQ(s.Q, 2);
  const std::vector<T> ones(9, T(1)), dy(4, T(1));
  EXPECT_OP_CLOSE(B, TestFixture::forward(s, true, ones), std::vector<T>(4, T(4.0 / 9.0)));
  EXPECT_OP_CLOSE(B, TestFixture::forward(s, false, ones), std::vector<T>(4, T(1)));
  const double corner = 1, edge = 2, centre = 4;  // windows holding each input
  auto grad = [](double windows, double divisor) { return T(windows / divisor); };
  EXPECT_OP_CLOSE(B, TestFixture::backward(s, true, dy),
                  (std::vector<T>{grad(corner, 9), grad(edge, 9), grad(corner, 9),
                                  grad(edge, 9), grad(centre, 9), grad(edge, 9),
                                  grad(corner, 9), grad(edge, 9), grad(corner, 9)}));
  EXPECT_OP_CLOSE(B, TestFixture::backward(s, false, dy),
                  (std::vector<T>{grad(corner, 4), grad(edge, 4), grad(corner, 4),
                                  grad(edge, 4), grad(centre, 4), grad(edge, 4),
                                  grad(corner, 4), grad(edge, 4), grad(corner, 4)}));
}

// Every output element has one writer that adds in a fixed order: reruns give the same
// bits (overlapping windows, and planes larger than a warp for global pooling).
TYPED_TEST(AvgPool2dTest, RerunsAreBitIdentical) {
  using B = TypeParam;
  using T = typename B::Scalar;
  const Pool2dShape s = pool_shape(4, 8, 17, 15, 3, 3, 2, 1, 1, 1);
  const auto x = random_vector<T>(s.x_size(), 6);
  const auto dy = random_vector<T>(s.y_size(), 7);
  for (bool count_include_pad : {true, false}) {
    SCOPED_TRACE(describe("overlap", s, count_include_pad));
    EXPECT_TRUE(bitwise_equal(TestFixture::forward(s, count_include_pad, x),
                              TestFixture::forward(s, count_include_pad, x)));
    EXPECT_TRUE(bitwise_equal(TestFixture::backward(s, count_include_pad, dy),
                              TestFixture::backward(s, count_include_pad, dy)));
  }
  const Pool2dShape g = whole_plane(4, 8, 17, 15);
  const auto gy = random_vector<T>(g.y_size(), 8);
  EXPECT_TRUE(bitwise_equal(TestFixture::global_forward(g, x), TestFixture::global_forward(g, x)));
  EXPECT_TRUE(bitwise_equal(TestFixture::global_backward(g, gy), TestFixture::global_backward(g, gy)));
}

}  // namespace
}  // namespace dpcore::testing
