// batch_norm2d's kernels (statistics, finalize, apply, backward sums, input gradient) on
// every backend (tests/support/op_backends.h), run in the op's order, against a float64
// reference written here from PyTorch's documented formulas (torch.nn.BatchNorm2d; the
// kernels' own split into steps plays no part in it): training with and without running
// statistics, eval, affine or not, the weight and bias gradients overwritten and
// accumulated, outputs pre-filled with NaN, on one table of shapes; and the same bits on
// every run and thread count.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "support/op_backends.h"

namespace dpcore::testing {
namespace {

using kernels::BatchNorm2dShape;

constexpr double kEps = 1e-5, kMomentum = 0.1;

BatchNorm2dShape bn_shape(int64_t N, int64_t C, int64_t H, int64_t W) {
  BatchNorm2dShape s;
  s.N = N, s.C = C, s.H = H, s.W = W;
  return s;
}

struct BnCase {
  const char* name;
  BatchNorm2dShape shape;
  double offset;  // added to x: a mean large against the spread
};

const BnCase kCases[] = {
    {"resnet_block", bn_shape(4, 8, 6, 6), 0},
    {"one_image", bn_shape(1, 3, 5, 7), 0},            // N = 1, several values per plane
    {"one_channel", bn_shape(5, 1, 3, 3), 0},
    {"one_value_per_plane", bn_shape(6, 4, 1, 1), 0},  // H*W = 1 (after global pooling)
    {"two_values_per_channel", bn_shape(2, 3, 1, 1), 0},  // the smallest training batch
    {"odd_sizes", bn_shape(3, 5, 7, 9), 0},
    {"large_mean", bn_shape(4, 3, 5, 5), 30},  // E[x^2] - E[x]^2 in float would cancel
    {"large_mean_long_channels", bn_shape(8, 2, 32, 32), 30},
    {"many_channels", bn_shape(8, 64, 16, 16), 0},
    {"long_channels", bn_shape(32, 2, 64, 32), 0},  // 65536 values per channel
};

enum class Mode { Training, TrainingWithoutRunningStats, Eval };
const char* mode_name(Mode m) {
  return m == Mode::Training ? "training" : m == Mode::TrainingWithoutRunningStats ? "training, no running stats" : "eval";
}
bool is_training(Mode m) { return m != Mode::Eval; }

std::string describe(const BnCase& c, Mode mode, bool affine, int threads) {
  std::ostringstream os;
  const BatchNorm2dShape& s = c.shape;
  os << c.name << ": x[" << s.N << "," << s.C << "," << s.H << "," << s.W << "] " << mode_name(mode)
     << (affine ? ", affine" : ", not affine") << threads_label(threads);
  return os.str();
}

template <class T>
struct Inputs {
  std::vector<T> x, weight, bias, running_mean, running_var, dy, dweight_before, dbias_before;
};

template <class T>
Inputs<T> make_inputs(const BnCase& c) {
  const BatchNorm2dShape& s = c.shape;
  const size_t n = size_t(s.x_size()), C = size_t(s.C);
  Inputs<T> in;
  in.x = random_vector<T>(n, 1, c.offset - 1.0, c.offset + 1.0);
  in.weight = random_vector<T>(C, 2, 0.5, 1.5);
  in.bias = random_vector<T>(C, 3);
  in.running_mean = random_vector<T>(C, 4, -0.5, 0.5);
  in.running_var = random_vector<T>(C, 5, 0.5, 2.0);
  in.dy = random_vector<T>(n, 6);
  in.dweight_before = random_vector<T>(C, 7);
  in.dbias_before = random_vector<T>(C, 8);
  return in;
}

// What the kernels must give, in float64 from the inputs' values.
struct Want {
  std::vector<double> mean, invstd, running_mean, running_var, y, dweight, dbias, dx;
  double dx_terms_rms = 0;  // of weight * invstd * dy, the size of the terms dx is the difference of
};

template <class T>
Want reference(const BatchNorm2dShape& s, Mode mode, bool affine, const Inputs<T>& in) {
  const int64_t C = s.C, plane = s.H * s.W;
  const double n = double(s.count());
  auto at = [&](int64_t b, int64_t c, int64_t i) { return size_t((b * C + c) * plane + i); };
  Want want;
  want.y.resize(in.x.size());
  want.dx.resize(in.x.size());
  for (int64_t c = 0; c < C; ++c) {
    double sum = 0;
    for (int64_t b = 0; b < s.N; ++b)
      for (int64_t i = 0; i < plane; ++i) sum += double(in.x[at(b, c, i)]);
    const double batch_mean = sum / n;
    double squares = 0;
    for (int64_t b = 0; b < s.N; ++b)
      for (int64_t i = 0; i < plane; ++i) squares += std::pow(double(in.x[at(b, c, i)]) - batch_mean, 2);
    const double batch_var = squares / n;
    const double mean = is_training(mode) ? batch_mean : double(in.running_mean[c]);
    const double var = is_training(mode) ? batch_var : double(in.running_var[c]);
    const double invstd = 1.0 / std::sqrt(var + kEps);
    const double w = affine ? double(in.weight[c]) : 1.0, b_ = affine ? double(in.bias[c]) : 0.0;
    want.mean.push_back(mean);
    want.invstd.push_back(invstd);
    if (mode == Mode::Training) {
      want.running_mean.push_back((1 - kMomentum) * double(in.running_mean[c]) + kMomentum * batch_mean);
      want.running_var.push_back((1 - kMomentum) * double(in.running_var[c]) + kMomentum * batch_var * n / (n - 1));
    } else {
      want.running_mean.push_back(double(in.running_mean[c]));
      want.running_var.push_back(double(in.running_var[c]));
    }
    double sum_dy = 0, sum_dy_xhat = 0;
    for (int64_t b = 0; b < s.N; ++b)
      for (int64_t i = 0; i < plane; ++i) {
        const size_t k = at(b, c, i);
        const double xhat = (double(in.x[k]) - mean) * invstd;
        want.y[k] = xhat * w + b_;
        sum_dy += double(in.dy[k]);
        sum_dy_xhat += double(in.dy[k]) * xhat;
      }
    want.dweight.push_back(sum_dy_xhat);
    want.dbias.push_back(sum_dy);
    for (int64_t b = 0; b < s.N; ++b)
      for (int64_t i = 0; i < plane; ++i) {
        const size_t k = at(b, c, i);
        const double xhat = (double(in.x[k]) - mean) * invstd;
        want.dx[k] = is_training(mode) ? w * invstd / n * (n * double(in.dy[k]) - sum_dy - xhat * sum_dy_xhat)
                                       : double(in.dy[k]) * w * invstd;
        want.dx_terms_rms += std::pow(w * invstd * double(in.dy[k]), 2);
      }
  }
  want.dx_terms_rms = std::sqrt(want.dx_terms_rms / double(in.dy.size()));
  return want;
}

template <class T>
std::vector<T> plus(const std::vector<T>& a, const std::vector<T>& b) {
  std::vector<T> sum(a.size());
  for (size_t i = 0; i < a.size(); ++i) sum[i] = a[i] + b[i];
  return sum;
}

// Largest |got - want| / max(|want|, scale): scaled_error with a floor given from outside.
template <class T>
double error_at_scale(const std::vector<T>& got, const std::vector<double>& want, double scale) {
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(double(got[i]))) return INFINITY;
    worst = std::max(worst, std::abs(double(got[i]) - want[i]) / std::max(std::abs(want[i]), scale));
  }
  return worst;
}

template <class T>
std::vector<T> rounded(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

template <class B>
class BatchNorm2dTest : public OpTest<B> {
 protected:
  using T = typename B::Scalar;

  struct Got {
    std::vector<T> mean, invstd, running_mean, running_var, y, dweight, dbias, dx;
  };

  // The op's sequence of kernel calls (engine/ops/batch_norm2d.cpp) on backend B. The
  // weight and bias gradients are accumulated onto dweight_before / dbias_before, or
  // written over NaN.
  static Got run(const BatchNorm2dShape& s, Mode mode, bool affine, bool accumulate, const Inputs<T>& in) {
    using Array = typename B::template Array<T>;
    const int64_t C = s.C;
    Array x(in.x), dy(in.dy), weight(in.weight), bias(in.bias), y(s.x_size()), dx(s.x_size());
    Array running_mean(in.running_mean), running_var(in.running_var), invstd(C);
    // eval normalises with a copy of the running mean, as the op does.
    Array mean(mode == Mode::Eval ? in.running_mean : nan_filled<T>(size_t(C)));
    Array dweight(accumulate ? in.dweight_before : nan_filled<T>(size_t(C)));
    Array dbias(accumulate ? in.dbias_before : nan_filled<T>(size_t(C)));
    const T* w = affine ? weight.get() : nullptr;
    if (is_training(mode)) {
      Array var(C);
      B::batch_norm2d_stats(s, x.get(), mean.get(), var.get());
      const bool tracked = mode == Mode::Training;
      B::batch_norm2d_finalize(s, mean.get(), var.get(), kEps, kMomentum, invstd.get(),
                               tracked ? running_mean.get() : nullptr, tracked ? running_var.get() : nullptr);
    } else {
      B::batch_norm2d_finalize(s, mean.get(), running_var.get(), kEps, 0.0, invstd.get(), nullptr, nullptr);
    }
    B::batch_norm2d_apply(s, x.get(), mean.get(), invstd.get(), w, affine ? bias.get() : nullptr, y.get());
    // Training needs the sums for dx; eval only for the weight and bias gradients.
    Array sum_dy(C), sum_dy_xhat(C);
    T* sums_dy = is_training(mode) ? sum_dy.get() : nullptr;
    T* sums_dy_xhat = is_training(mode) ? sum_dy_xhat.get() : nullptr;
    B::batch_norm2d_backward_reduce(s, dy.get(), x.get(), mean.get(), invstd.get(), sums_dy, sums_dy_xhat,
                                    affine ? dweight.get() : nullptr, affine ? dbias.get() : nullptr, accumulate);
    B::batch_norm2d_backward_apply(s, dy.get(), x.get(), mean.get(), invstd.get(), w, sums_dy, sums_dy_xhat, dx.get());
    return Got{mean.download(),  invstd.download(), running_mean.download(), running_var.download(),
               y.download(),     dweight.download(), dbias.download(),       dx.download()};
  }

  // The largest error of each kind over a test's cases, printed for the record.
  struct Worst {
    double forward = 0, statistics = 0, backward = 0;
    void print(const char* what) const {
      std::printf("[ errors   ] %s on %s, largest scaled error vs float64: y %.2e, mean/invstd/running %.2e, "
                  "dx/dweight/dbias %.2e\n",
                  what, B::name().c_str(), forward, statistics, backward);
    }
  };

  // Checks every output against the reference (scaled_error within the backend's
  // tolerance) and records the errors.
  static void expect_close(const Got& got, const Want& want, Mode mode, bool affine, const Inputs<T>& in,
                           bool accumulated, Worst& worst) {
    auto record = [&](double error, const char* what, double& worst_of_kind) {
      worst_of_kind = std::max(worst_of_kind, error);
      EXPECT_LE(error, B::tolerance()) << what;
    };
    auto check = [&](const std::vector<T>& g, const std::vector<double>& w, const char* what, double& worst_of_kind) {
      record(scaled_error(g, rounded<T>(w)), what, worst_of_kind);
    };
    check(got.y, want.y, "y", worst.forward);
    check(got.invstd, want.invstd, "invstd", worst.statistics);
    if (is_training(mode)) check(got.mean, want.mean, "mean", worst.statistics);
    if (mode == Mode::Training) {
      check(got.running_mean, want.running_mean, "running_mean", worst.statistics);
      check(got.running_var, want.running_var, "running_var", worst.statistics);
    } else {
      EXPECT_EQ(got.running_mean, in.running_mean) << "running_mean must not change";
      EXPECT_EQ(got.running_var, in.running_var) << "running_var must not change";
    }
    // dx is a difference of terms the size of weight * invstd * dy, which cancel where a
    // channel has two values (dx is then eps / var times them): measured against them.
    ASSERT_EQ(got.dx.size(), want.dx.size());
    double rms = 0;
    for (double v : want.dx) rms += v * v;
    rms = std::sqrt(rms / double(want.dx.size()));
    record(error_at_scale(got.dx, want.dx, std::max(rms, want.dx_terms_rms)), "dx", worst.backward);
    if (!affine) return;
    std::vector<double> dweight = want.dweight, dbias = want.dbias;
    if (accumulated)
      for (size_t c = 0; c < dweight.size(); ++c)
        dweight[c] += double(in.dweight_before[c]), dbias[c] += double(in.dbias_before[c]);
    check(got.dweight, dweight, "dweight", worst.backward);
    check(got.dbias, dbias, "dbias", worst.backward);
  }
};
TYPED_TEST_SUITE(BatchNorm2dTest, KernelBackends, BackendName);

TYPED_TEST(BatchNorm2dTest, MatchesFloat64Reference) {
  using B = TypeParam;
  using T = typename B::Scalar;
  typename TestFixture::Worst worst;
  for (const BnCase& c : kCases) {
    const BatchNorm2dShape& s = c.shape;
    if (!B::runs_elements(s.x_size())) continue;
    const Inputs<T> in = make_inputs<T>(c);
    for (Mode mode : {Mode::Training, Mode::TrainingWithoutRunningStats, Mode::Eval})
      for (bool affine : {true, false}) {
        const Want want = reference(s, mode, affine, in);
        for (int threads : B::thread_counts()) {
          SCOPED_TRACE(describe(c, mode, affine, threads));
          ScopedKernelThreads scope(threads);
          TestFixture::expect_close(TestFixture::run(s, mode, affine, false, in), want, mode, affine, in, false, worst);
        }
      }
  }
  worst.print("training and eval");
}

// accumulate = true adds the weight and bias gradients onto what is there: exactly the
// previous contents plus what accumulate = false writes.
TYPED_TEST(BatchNorm2dTest, WeightAndBiasGradientsOverwriteOrAccumulate) {
  using B = TypeParam;
  using T = typename B::Scalar;
  typename TestFixture::Worst worst;
  for (const BnCase& c : kCases) {
    const BatchNorm2dShape& s = c.shape;
    if (!B::runs_elements(s.x_size())) continue;
    const Inputs<T> in = make_inputs<T>(c);
    for (Mode mode : {Mode::Training, Mode::Eval}) {
      SCOPED_TRACE(describe(c, mode, true, 0));
      const Want want = reference(s, mode, true, in);
      const auto fresh = TestFixture::run(s, mode, true, false, in);
      const auto accumulated = TestFixture::run(s, mode, true, true, in);
      TestFixture::expect_close(accumulated, want, mode, true, in, true, worst);
      EXPECT_TRUE(bitwise_equal(accumulated.dweight, plus(in.dweight_before, fresh.dweight)));
      EXPECT_TRUE(bitwise_equal(accumulated.dbias, plus(in.dbias_before, fresh.dbias)));
    }
  }
  worst.print("accumulated");
}

// Fixed reduction orders: the same bits on every run and, on the CPU, every thread count.
TYPED_TEST(BatchNorm2dTest, SameBitsOnEveryRunAndThreadCount) {
  using B = TypeParam;
  using T = typename B::Scalar;
  for (const BnCase& c : kCases) {
    const BatchNorm2dShape& s = c.shape;
    if (!B::runs_elements(s.x_size())) continue;
    const Inputs<T> in = make_inputs<T>(c);
    std::vector<std::vector<T>> first;
    for (int threads : B::thread_counts())
      for (int repeat = 0; repeat < 2; ++repeat) {
        SCOPED_TRACE(describe(c, Mode::Training, true, threads) + ", run " + std::to_string(repeat + 1));
        ScopedKernelThreads scope(threads);
        const auto got = TestFixture::run(s, Mode::Training, true, false, in);
        const std::vector<std::vector<T>> all = {got.mean, got.invstd, got.running_mean, got.running_var,
                                                 got.y,    got.dweight, got.dbias,       got.dx};
        if (first.empty()) first = all;
        for (size_t k = 0; k < all.size(); ++k) EXPECT_TRUE(bitwise_equal(all[k], first[k])) << "output " << k;
      }
  }
}

// A constant channel has variance 0: y = bias exactly and invstd = 1 / sqrt(eps), as in PyTorch.
TYPED_TEST(BatchNorm2dTest, ConstantChannelNormalisesToTheBias) {
  using B = TypeParam;
  using T = typename B::Scalar;
  const BatchNorm2dShape s = bn_shape(3, 2, 2, 3);
  Inputs<T> in = make_inputs<T>(BnCase{"constant", s, 0});
  std::fill(in.x.begin(), in.x.end(), T(0.75));
  const auto got = TestFixture::run(s, Mode::Training, true, false, in);
  for (int64_t i = 0; i < s.x_size(); ++i) EXPECT_EQ(got.y[size_t(i)], in.bias[size_t((i / 6) % 2)]) << i;
  for (T v : got.invstd) EXPECT_NEAR(double(v), 1.0 / std::sqrt(kEps), 1e-6 / std::sqrt(kEps));
}

// ---- The steps a synchronised batch norm adds: the replicas' statistics combined into the
// group's, and finalize and backward_apply with the group's count. ----

// x[N,3,H,W] for the combination, free of ties: channel 0 in [-1, 1), channel 1 at 1000 with
// a spread of 1 (a mean 1000 times its spread: float keeps it to 2^-24 * 1000 = 6e-5, and a
// combination through E[x^2] - E[x]^2 in float would lose the variance entirely), channel 2
// at -5 with a spread of 3.
template <class T>
std::vector<T> combine_input(const BatchNorm2dShape& s) {
  const double offset[] = {0.0, 1000.0, -5.0}, spread[] = {1.0, 1.0, 3.0};
  const std::vector<double> u = random_vector<double>(size_t(s.x_size()), 21);
  std::vector<T> x(u.size());
  const int64_t plane = s.H * s.W;
  for (size_t i = 0; i < x.size(); ++i) {
    const int64_t c = (int64_t(i) / plane) % s.C;
    x[i] = T(offset[c] + spread[c] * u[i]);
  }
  return x;
}

// Float64 two-pass statistics of images [first, first + images) of x: count, mean, biased
// variance per channel.
template <class T>
void float64_stats(const BatchNorm2dShape& s, const std::vector<T>& x, int64_t first, int64_t images,
                   std::vector<double>& mean, std::vector<double>& var) {
  const int64_t plane = s.H * s.W;
  const double n = double(images * plane);
  mean.assign(size_t(s.C), 0.0), var.assign(size_t(s.C), 0.0);
  for (int64_t c = 0; c < s.C; ++c) {
    double sum = 0, squares = 0;
    for (int64_t b = first; b < first + images; ++b)
      for (int64_t i = 0; i < plane; ++i) sum += double(x[size_t((b * s.C + c) * plane + i)]);
    const double m = sum / n;
    for (int64_t b = first; b < first + images; ++b)
      for (int64_t i = 0; i < plane; ++i) squares += std::pow(double(x[size_t((b * s.C + c) * plane + i)]) - m, 2);
    mean[size_t(c)] = m, var[size_t(c)] = squares / n;
  }
}

// x split along N into replicas of uneven sizes, one of them empty (an empty replica's
// statistics are 0 / 0; it must add nothing); each replica's statistics from the stats
// kernel, packed as the allgather gives them and combined, against the float64 statistics
// of the whole x.
TYPED_TEST(BatchNorm2dTest, CombineStatsMatchesTheWholeBatch) {
  using B = TypeParam;
  using T = typename B::Scalar;
  using Array = typename B::template Array<T>;
  const BatchNorm2dShape whole = bn_shape(9, 3, 4, 5);
  const int64_t C = whole.C, plane = whole.H * whole.W;
  const std::vector<T> x = combine_input<T>(whole);
  std::vector<double> want_mean, want_var;
  float64_stats(whole, x, 0, whole.N, want_mean, want_var);

  const std::vector<std::vector<int64_t>> splits = {{9}, {2, 7}, {4, 0, 5}, {0, 1, 3, 5}};
  double worst_alone = 0, worst_mean = 0, worst_var = 0, worst_large_mean_var = 0;
  for (const std::vector<int64_t>& images : splits) {
    const int64_t R = int64_t(images.size());
    std::ostringstream label;
    label << "x[9,3,4,5] split along N into";
    for (int64_t n : images) label << " " << n;
    SCOPED_TRACE(label.str());

    // Replica r's block of the gathered statistics: count[C], mean[C], var[C].
    std::vector<T> gathered(size_t(R * 3 * C), std::numeric_limits<T>::quiet_NaN());
    int64_t first = 0;
    for (int64_t r = 0; r < R; ++r) {
      const BatchNorm2dShape piece = bn_shape(images[size_t(r)], C, whole.H, whole.W);
      T* block = gathered.data() + r * 3 * C;
      std::fill(block, block + C, T(piece.count()));
      if (piece.count() > 0) {
        const auto begin = x.begin() + first * C * plane;
        Array x_piece(std::vector<T>(begin, begin + piece.x_size())), mean(C), var(C);
        B::batch_norm2d_stats(piece, x_piece.get(), mean.get(), var.get());
        const std::vector<T> m = mean.download(), v = var.download();
        std::copy(m.begin(), m.end(), block + C);
        std::copy(v.begin(), v.end(), block + 2 * C);
      }
      first += piece.N;
    }
    Array gathered_array(gathered), mean(C), var(C);
    B::batch_norm2d_combine_stats(whole, R, gathered_array.get(), mean.get(), var.get());
    const std::vector<T> got_mean = mean.download(), got_var = var.download();

    // The combination alone: in double from the values it was given, rounded to T once.
    std::vector<double> exact_mean(static_cast<size_t>(C)), exact_var(static_cast<size_t>(C));
    // Its error bounds against the whole batch: replica r's statistics carry the stats
    // kernel's error, |dm_r| <= tol * (|m_r| + s_r) (s_r = sqrt(v_r), the channel's spread)
    // and |dv_r| <= tol * v_r. The group's mean is a weighted average of the m_r, so
    // |dmean| <= tol * max_r (|m_r| + s_r). Its variance sum_r n_r (v_r + d_r^2) / N,
    // d_r = m_r - mean, moves by at most tol * (var + 2 sum_r n_r |d_r| (|m_r| + s_r) / N) to
    // first order (a shift of the mean moves it by 2 dmean sum_r n_r d_r / N = 0); twice
    // these bounds leave room for the final rounding and the second-order terms. For the
    // channel at 1000 the second term is the float storage of the replicas' means.
    std::vector<double> mean_bound(static_cast<size_t>(C)), var_bound(static_cast<size_t>(C));
    const double tol = B::tolerance();
    for (int64_t c = 0; c < C; ++c) {
      double total = 0, weighted = 0, squares = 0, centred = 0, scale = 0;
      auto count = [&](int64_t r) { return double(gathered[size_t(r * 3 * C + c)]); };
      auto m = [&](int64_t r) { return double(gathered[size_t(r * 3 * C + C + c)]); };
      auto v = [&](int64_t r) { return double(gathered[size_t(r * 3 * C + 2 * C + c)]); };
      for (int64_t r = 0; r < R; ++r)
        if (count(r) > 0) total += count(r), weighted += count(r) * m(r);
      const double group_mean = weighted / total;
      for (int64_t r = 0; r < R; ++r) {
        if (count(r) == 0) continue;
        const double d = m(r) - group_mean, size = std::abs(m(r)) + std::sqrt(v(r));
        squares += count(r) * (v(r) + d * d);
        centred += count(r) * std::abs(d) * size;
        scale = std::max(scale, size);
      }
      exact_mean[size_t(c)] = group_mean, exact_var[size_t(c)] = squares / total;
      mean_bound[size_t(c)] = 2 * tol * scale;
      var_bound[size_t(c)] = 2 * tol * (want_var[size_t(c)] + 2 * centred / total);
    }
    const double alone = std::max(error_at_scale(got_mean, exact_mean, 0), error_at_scale(got_var, exact_var, 0));
    EXPECT_LE(alone, B::rounding_tolerance()) << "the combination alone, against float64 from its input";
    worst_alone = std::max(worst_alone, alone);

    for (int64_t c = 0; c < C; ++c) {
      SCOPED_TRACE("channel " + std::to_string(c));
      const double mean_error = std::abs(double(got_mean[size_t(c)]) - want_mean[size_t(c)]);
      const double var_error = std::abs(double(got_var[size_t(c)]) - want_var[size_t(c)]);
      EXPECT_LE(mean_error, mean_bound[size_t(c)])
          << "mean " << got_mean[size_t(c)] << ", want " << want_mean[size_t(c)];
      EXPECT_LE(var_error, var_bound[size_t(c)]) << "var " << got_var[size_t(c)] << ", want " << want_var[size_t(c)];
      // The mean relative to the channel's scale |mean| + spread (channel 0's mean is near 0).
      worst_mean = std::max(worst_mean, mean_error / (std::abs(want_mean[size_t(c)]) + std::sqrt(want_var[size_t(c)])));
      worst_var = std::max(worst_var, var_error / want_var[size_t(c)]);
      if (c == 1) worst_large_mean_var = std::max(worst_large_mean_var, var_error / want_var[size_t(c)]);
    }
  }
  std::printf("[ errors   ] combine_stats on %s, largest relative error vs float64: the combination alone %.2e; "
              "against the whole batch mean %.2e (of |mean| + spread), var %.2e (channel at 1000: var %.2e)\n",
              B::name().c_str(), worst_alone, worst_mean, worst_var, worst_large_mean_var);
}

// finalize with the group's count: the running variance takes the unbiased var * n / (n - 1)
// with n = group_count, not this replica's count() (6 here: 6/5 against 27/26 moves the
// running variance by 1.6% of momentum * var); group_count = count() is bit for bit
// group_count = 0.
TYPED_TEST(BatchNorm2dTest, FinalizeTakesTheGroupCount) {
  using B = TypeParam;
  using T = typename B::Scalar;
  using Array = typename B::template Array<T>;
  BatchNorm2dShape s = bn_shape(2, 3, 1, 3);
  const int64_t C = s.C;
  const std::vector<T> mean = random_vector<T>(size_t(C), 31), var = random_vector<T>(size_t(C), 32, 0.5, 2.0);
  const std::vector<T> running_mean = random_vector<T>(size_t(C), 33, -0.5, 0.5);
  const std::vector<T> running_var = random_vector<T>(size_t(C), 34, 0.5, 2.0);
  auto finalize = [&](int64_t group_count) {
    s.group_count = group_count;
    Array m(mean), v(var), invstd(C), rm(running_mean), rv(running_var);
    B::batch_norm2d_finalize(s, m.get(), v.get(), kEps, kMomentum, invstd.get(), rm.get(), rv.get());
    return std::vector<std::vector<T>>{invstd.download(), rm.download(), rv.download()};
  };
  const int64_t n = 27;
  const auto got = finalize(n);
  std::vector<double> want_invstd, want_rm, want_rv;
  for (size_t c = 0; c < size_t(C); ++c) {
    want_invstd.push_back(1.0 / std::sqrt(double(var[c]) + kEps));
    want_rm.push_back((1 - kMomentum) * double(running_mean[c]) + kMomentum * double(mean[c]));
    want_rv.push_back((1 - kMomentum) * double(running_var[c]) + kMomentum * double(var[c]) * n / (n - 1.0));
  }
  EXPECT_LE(error_at_scale(got[0], want_invstd, 0), B::tolerance()) << "invstd";
  EXPECT_LE(error_at_scale(got[1], want_rm, 0), B::tolerance()) << "running_mean";
  EXPECT_LE(error_at_scale(got[2], want_rv, 0), B::tolerance()) << "running_var with n = group_count = " << n;
  std::printf("[ errors   ] finalize with group_count on %s, largest relative error vs float64: running_var %.2e\n",
              B::name().c_str(), error_at_scale(got[2], want_rv, 0));
  const auto own = finalize(0), own_named = finalize(s.count());
  for (size_t k = 0; k < own.size(); ++k) EXPECT_TRUE(bitwise_equal(own_named[k], own[k])) << "output " << k;
}

// backward_apply with the group's count and (allreduced) sums: dx = weight * invstd * (dy -
// sum_dy / n - xhat * sum_dy_xhat / n) with n = group_count; group_count = count() is bit for
// bit group_count = 0.
TYPED_TEST(BatchNorm2dTest, BackwardApplyTakesTheGroupCount) {
  using B = TypeParam;
  using T = typename B::Scalar;
  using Array = typename B::template Array<T>;
  BatchNorm2dShape s = bn_shape(3, 4, 2, 3);  // 18 values per channel on this replica
  const int64_t C = s.C, plane = s.H * s.W, n = 18 + 11 + 30;
  const size_t size = size_t(s.x_size());
  const std::vector<T> x = random_vector<T>(size, 41), dy = random_vector<T>(size, 42);
  const std::vector<T> mean = random_vector<T>(size_t(C), 43, -0.2, 0.2);
  const std::vector<T> invstd = random_vector<T>(size_t(C), 44, 0.5, 2.0);
  const std::vector<T> weight = random_vector<T>(size_t(C), 45, 0.5, 1.5);
  // The group's sums: of n values each, so sum_dy / n and sum_dy_xhat / n are of order 1.
  const std::vector<T> sum_dy = random_vector<T>(size_t(C), 46, -0.5 * n, 0.5 * n);
  const std::vector<T> sum_dy_xhat = random_vector<T>(size_t(C), 47, -0.5 * n, 0.5 * n);
  auto backward_apply = [&](int64_t group_count) {
    s.group_count = group_count;
    Array x_in(x), dy_in(dy), mean_in(mean), invstd_in(invstd), weight_in(weight), sum_dy_in(sum_dy),
        sum_dy_xhat_in(sum_dy_xhat), dx(size);
    B::batch_norm2d_backward_apply(s, dy_in.get(), x_in.get(), mean_in.get(), invstd_in.get(), weight_in.get(),
                                   sum_dy_in.get(), sum_dy_xhat_in.get(), dx.get());
    return dx.download();
  };
  const std::vector<T> got = backward_apply(n);
  std::vector<double> want(size);
  double terms = 0;  // rms of weight * invstd * dy, the size of the terms dx is the difference of
  for (size_t i = 0; i < size; ++i) {
    const size_t c = size_t((int64_t(i) / plane) % C);
    const double k = double(weight[c]) * double(invstd[c]);
    const double xhat = (double(x[i]) - double(mean[c])) * double(invstd[c]);
    want[i] = k * (double(dy[i]) - double(sum_dy[c]) / n - xhat * double(sum_dy_xhat[c]) / n);
    terms += std::pow(k * double(dy[i]), 2);
  }
  terms = std::sqrt(terms / double(size));
  const double error = error_at_scale(got, want, terms);
  EXPECT_LE(error, B::tolerance()) << "dx with n = group_count = " << n;
  std::printf("[ errors   ] backward_apply with group_count on %s, largest scaled error vs float64: dx %.2e\n",
              B::name().c_str(), error);
  EXPECT_TRUE(bitwise_equal(backward_apply(s.count()), backward_apply(0)));
}

}  // namespace
}  // namespace dpcore::testing
