// batch_norm2d with PyTorch's semantics: per-channel statistics (and their combination
// over a synchronised batch norm's replicas), normalisation, and the backward's
// per-channel sums and input gradient. Each channel's sums run on one thread, in double,
// in a fixed order (kLanes running sums, see channel_sums), so they are the same bits for
// every thread count; the variance is centred (a second pass over x - mean), so a large
// mean does not cancel it.
#include <array>
#include <cmath>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/parallel.h"
#include "kernels/error.h"

namespace dpcore::kernels::cpu {

namespace {

// Running sums per channel. One double accumulator would make every addition wait for the
// previous one (a serial chain the compiler may not reorder); kLanes independent ones let
// it use vector registers, and the order stays fixed: lane j adds the values j, j + kLanes,
// ... of each H*W plane (the plane's tail into lanes 0, 1, ...), image after image, and the
// lanes are added in order at the end.
constexpr int kLanes = 8;

// The sums over channel c's values i (flat indices) of each of f(i)'s `Sums` terms:
// f(i, acc) adds its terms to acc[0..Sums).
template <int Sums, class F>
std::array<double, Sums> channel_sums(const BatchNorm2dShape& s, int64_t c, F f) {
  double lanes[Sums][kLanes] = {};
  const int64_t plane = s.H * s.W, whole = plane / kLanes * kLanes;
  for (int64_t n = 0; n < s.N; ++n) {
    const int64_t base = (n * s.C + c) * plane;
    for (int64_t i = 0; i < whole; i += kLanes) {
      for (int j = 0; j < kLanes; ++j) {
        double terms[Sums];
        f(base + i + j, terms);
        for (int k = 0; k < Sums; ++k) lanes[k][j] += terms[k];
      }
    }
    for (int64_t i = whole; i < plane; ++i) {
      double terms[Sums];
      f(base + i, terms);
      for (int k = 0; k < Sums; ++k) lanes[k][i - whole] += terms[k];
    }
  }
  std::array<double, Sums> total{};
  for (int k = 0; k < Sums; ++k)
    for (int j = 0; j < kLanes; ++j) total[size_t(k)] += lanes[k][j];
  return total;
}

bool parallel(const BatchNorm2dShape& s) { return s.x_size() >= kMinParallelElements; }

}  // namespace

template <class T>
void batch_norm2d_stats(const BatchNorm2dShape& s, const T* x, T* mean, T* var) {
  const double count = double(s.count());
#pragma omp parallel for num_threads(kernel_threads()) if (parallel(s)) schedule(static)
  for (int64_t c = 0; c < s.C; ++c) {
    const double m = channel_sums<1>(s, c, [&](int64_t i, double* t) { t[0] = double(x[i]); })[0] / count;
    const double squares = channel_sums<1>(s, c, [&](int64_t i, double* t) {
      const double d = double(x[i]) - m;
      t[0] = d * d;
    })[0];
    mean[c] = T(m);
    var[c] = T(squares / count);
  }
}

template <class T>
void batch_norm2d_combine_stats(const BatchNorm2dShape& s, int64_t replicas, const T* gathered, T* mean, T* var) {
  DPCORE_CHECK(replicas > 0, "batch_norm2d combine_stats: ", replicas, " replicas for ", s.C,
               " channels; expected at least one");
  const int64_t C = s.C, stride = 3 * C;
  for (int64_t c = 0; c < C; ++c) {
    // Replica r's count, mean and biased variance of channel c; an empty replica's mean and
    // variance (0 / 0) are skipped, not multiplied by 0.
    auto count = [&](int64_t r) { return double(gathered[r * stride + c]); };
    auto mean_of = [&](int64_t r) { return double(gathered[r * stride + C + c]); };
    auto var_of = [&](int64_t r) { return double(gathered[r * stride + 2 * C + c]); };
    double total = 0.0, weighted = 0.0;
    for (int64_t r = 0; r < replicas; ++r)
      if (count(r) != 0.0) total += count(r), weighted += count(r) * mean_of(r);
    const double m = weighted / total;
    double squares = 0.0;
    for (int64_t r = 0; r < replicas; ++r) {
      if (count(r) == 0.0) continue;
      const double d = mean_of(r) - m;
      squares += count(r) * (var_of(r) + d * d);
    }
    mean[c] = T(m);
    var[c] = T(squares / total);
  }
}

template <class T>
void batch_norm2d_finalize(const BatchNorm2dShape& s, const T* mean, const T* var, double eps, double momentum,
                           T* invstd, T* running_mean, T* running_var) {
  const double count = double(s.stats_count());
  for (int64_t c = 0; c < s.C; ++c) {
    invstd[c] = T(1.0 / std::sqrt(double(var[c]) + eps));
    if (!running_mean) continue;
    running_mean[c] = T((1.0 - momentum) * double(running_mean[c]) + momentum * double(mean[c]));
    running_var[c] = T((1.0 - momentum) * double(running_var[c]) + momentum * double(var[c]) * count / (count - 1.0));
  }
}

template <class T>
void batch_norm2d_apply(const BatchNorm2dShape& s, const T* x, const T* mean, const T* invstd, const T* weight,
                        const T* bias, T* y) {
  const int64_t plane = s.H * s.W;
#pragma omp parallel for num_threads(kernel_threads()) if (parallel(s)) schedule(static)
  for (int64_t p = 0; p < s.N * s.C; ++p) {
    const int64_t c = p % s.C;
    const T m = mean[c], shift = bias ? bias[c] : T(0);
    const T scale = T(double(invstd[c]) * (weight ? double(weight[c]) : 1.0));
#pragma omp simd
    for (int64_t i = p * plane; i < (p + 1) * plane; ++i) y[i] = (x[i] - m) * scale + shift;
  }
}

template <class T>
void batch_norm2d_backward_reduce(const BatchNorm2dShape& s, const T* dy, const T* x, const T* mean, const T* invstd,
                                  T* sum_dy, T* sum_dy_xhat, T* dweight, T* dbias, bool accumulate) {
#pragma omp parallel for num_threads(kernel_threads()) if (parallel(s)) schedule(static)
  for (int64_t c = 0; c < s.C; ++c) {
    const double m = double(mean[c]);
    const auto sums = channel_sums<2>(s, c, [&](int64_t i, double* t) {
      t[0] = double(dy[i]);
      t[1] = double(dy[i]) * (double(x[i]) - m);
    });
    const T total = T(sums[0]), total_xhat = T(sums[1] * double(invstd[c]));
    if (sum_dy) sum_dy[c] = total;
    if (sum_dy_xhat) sum_dy_xhat[c] = total_xhat;
    if (dweight) dweight[c] = accumulate ? dweight[c] + total_xhat : total_xhat;
    if (dbias) dbias[c] = accumulate ? dbias[c] + total : total;
  }
}

template <class T>
void batch_norm2d_backward_apply(const BatchNorm2dShape& s, const T* dy, const T* x, const T* mean, const T* invstd,
                                 const T* weight, const T* sum_dy, const T* sum_dy_xhat, T* dx) {
  const int64_t plane = s.H * s.W;
  const double count = double(s.stats_count());
#pragma omp parallel for num_threads(kernel_threads()) if (parallel(s)) schedule(static)
  for (int64_t p = 0; p < s.N * s.C; ++p) {
    const int64_t c = p % s.C;
    const double k = double(invstd[c]) * (weight ? double(weight[c]) : 1.0);
    // Training: dx = k * (dy - sum_dy / n - xhat * sum_dy_xhat / n), xhat = (x - mean) * invstd.
    // Eval (no sums): the statistics are constants, dx = k * dy.
    const T scale = T(k), m = mean[c];
    const T dy_mean = sum_dy ? T(double(sum_dy[c]) / count) : T(0);
    const T centred_coef = sum_dy ? T(double(invstd[c]) * double(sum_dy_xhat[c]) / count) : T(0);
#pragma omp simd
    for (int64_t i = p * plane; i < (p + 1) * plane; ++i) dx[i] = scale * (dy[i] - dy_mean - (x[i] - m) * centred_coef);
  }
}

#define DPCORE_INSTANTIATE(T)                                                                                       \
  template void batch_norm2d_stats<T>(const BatchNorm2dShape&, const T*, T*, T*);                                 \
  template void batch_norm2d_finalize<T>(const BatchNorm2dShape&, const T*, const T*, double, double, T*, T*, T*); \
  template void batch_norm2d_apply<T>(const BatchNorm2dShape&, const T*, const T*, const T*, const T*, const T*,   \
                                      T*);                                                                        \
  template void batch_norm2d_backward_reduce<T>(const BatchNorm2dShape&, const T*, const T*, const T*, const T*,   \
                                                T*, T*, T*, T*, bool);                                            \
  template void batch_norm2d_backward_apply<T>(const BatchNorm2dShape&, const T*, const T*, const T*, const T*,    \
                                               const T*, const T*, const T*, T*);                           \
  template void batch_norm2d_combine_stats<T>(const BatchNorm2dShape&, int64_t, const T*, T*, T*);
DPCORE_INSTANTIATE(float)
DPCORE_INSTANTIATE(double)
#undef DPCORE_INSTANTIATE

}  // namespace dpcore::kernels::cpu
