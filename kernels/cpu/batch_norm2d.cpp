// batch_norm2d with PyTorch's semantics: per-channel statistics, normalisation, and the
// backward's per-channel sums and input gradient. Each channel's sums run on one thread,
// in double and in index order, so they are the same bits for every thread count; the
// variance is centred (a second pass over x - mean), so a large mean does not cancel it.
#include <cmath>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/parallel.h"

namespace dpcore::kernels::cpu {

namespace {

// Calls f(i) for the flat index i of every value of channel c, in index order: the
// channel's H*W contiguous values in each of the N images.
template <class F>
void for_channel(const BatchNorm2dShape& s, int64_t c, F f) {
  const int64_t plane = s.H * s.W;
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t i = (n * s.C + c) * plane, end = i + plane; i < end; ++i) f(i);
}

bool parallel(const BatchNorm2dShape& s) { return s.x_size() >= kMinParallelElements; }

}  // namespace

template <class T>
void batch_norm2d_stats(const BatchNorm2dShape& s, const T* x, T* mean, T* var) {
  const double count = double(s.count());
#pragma omp parallel for num_threads(kernel_threads()) if (parallel(s)) schedule(static)
  for (int64_t c = 0; c < s.C; ++c) {
    double sum = 0.0;
    for_channel(s, c, [&](int64_t i) { sum += double(x[i]); });
    const double m = sum / count;
    double squares = 0.0;
    for_channel(s, c, [&](int64_t i) {
      const double d = double(x[i]) - m;
      squares += d * d;
    });
    mean[c] = T(m);
    var[c] = T(squares / count);
  }
}

template <class T>
void batch_norm2d_finalize(const BatchNorm2dShape& s, const T* mean, const T* var, double eps, double momentum,
                           T* invstd, T* running_mean, T* running_var) {
  const double count = double(s.count());
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
    double dy_total = 0.0, dy_centred = 0.0;
    for_channel(s, c, [&](int64_t i) {
      dy_total += double(dy[i]);
      dy_centred += double(dy[i]) * (double(x[i]) - m);
    });
    const T total = T(dy_total), total_xhat = T(dy_centred * double(invstd[c]));
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
  const double count = double(s.count());
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
                                               const T*, const T*, const T*, T*);
DPCORE_INSTANTIATE(float)
DPCORE_INSTANTIATE(double)
#undef DPCORE_INSTANTIATE

}  // namespace dpcore::kernels::cpu
