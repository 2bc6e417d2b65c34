// batch_norm2d with PyTorch's semantics: per-channel statistics (and their combination
// over a synchronised batch norm's replicas), normalisation, and the backward's
// per-channel sums and input gradient. Each channel's sums run on one thread, in double,
// in a fixed order (kPlaneLanes running sums, see channel_sums), so they are the same bits for
// every thread count; the variance is centred (a second pass over x - mean), so a large
// mean does not cancel it.
//
// 16-bit activations (X = BFloat16 or Float16, statistics float): the same bodies, each
// value widened in registers as it is read (stored_values.h), so the bits are the float32
// kernel's on the widened input, each 16-bit output rounded once, without a float32 copy
// of the tensor. The sums and the 16-bit passes are built per vector width
// (vector_variants.h: the conversions vectorise only with the wide registers). The file is
// compiled without fused multiply-adds (kernels/cpu/CMakeLists.txt), so that the AVX-512
// build, which has them, rounds each product as the baseline build does.
#include <cmath>
#include <cstring>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/stored_values.h"
#include "kernels/cpu/vector_variants.h"
#include "kernels/error.h"

namespace dpcore::kernels::cpu {

namespace {

// Running sums per channel. One double accumulator would make every addition wait for the
// previous one (a serial chain the compiler may not reorder); kPlaneLanes independent ones let
// it use vector registers, and the order stays fixed: lane j adds the values j, j + kPlaneLanes,
// ... of each H*W plane (the plane's tail into lanes 0, 1, ...), image after image, and the
// lanes are added in order at the end.
constexpr int kPlaneLanes = 16;

// kPlaneLanes doubles as one vector (GCC's vector extensions: two zmm registers where the build
// has AVX-512, eight SSE2 pairs on the baseline; two or more, so that consecutive blocks'
// additions do not wait for each other). Its arithmetic is IEEE per lane, so the bits are
// the scalar loop's; written out, because GCC's own vectoriser keeps the widening of
// 16-bit values to double in 16-byte registers.
typedef double Lanes __attribute__((vector_size(kPlaneLanes * sizeof(double))));
typedef float LaneFloats __attribute__((vector_size(kPlaneLanes * sizeof(float))));
typedef uint32_t LaneWords __attribute__((vector_size(kPlaneLanes * sizeof(uint32_t))));
typedef uint16_t LaneHalves __attribute__((vector_size(kPlaneLanes * sizeof(uint16_t))));

// kPlaneLanes values from p, widened exactly to double. (Through a reference, not returned: a
// returned vector's calling convention would depend on the build's ISA.)
inline void load_lanes(const double* p, Lanes& out) { std::memcpy(&out, p, sizeof out); }
inline void load_lanes(const float* p, Lanes& out) {
  LaneFloats f;
  std::memcpy(&f, p, sizeof f);
  out = __builtin_convertvector(f, Lanes);
}
inline void load_lanes(const BFloat16* p, Lanes& out) {
  LaneHalves halves;
  std::memcpy(&halves, p, sizeof halves);
  const LaneWords words = __builtin_convertvector(halves, LaneWords) << 16;  // bfloat16: float32's top half
  LaneFloats f;
  std::memcpy(&f, &words, sizeof f);
  out = __builtin_convertvector(f, Lanes);
}
inline void load_lanes(const Float16* p, Lanes& out) {
  LaneFloats f;
  for (int j = 0; j < kPlaneLanes; ++j) f[j] = to_float(p[j]);
  out = __builtin_convertvector(f, Lanes);
}

// The terms the sums add, of the values of a channel from i (the pointers are its first
// plane's): the statistics' values and squared deviations, one term each (a), and the
// backward's dy and dy * (x - mean) (a, b); `block` adds kPlaneLanes values' terms to the lanes,
// `one` one value's to lane sums a and b.
template <class X>
struct Values {
  const X* x;
  void block(int64_t i, Lanes& a, Lanes&) const {
    Lanes v;
    load_lanes(x + i, v);
    a += v;
  }
  void one(int64_t i, double& a, double&) const { a += double(value(x[i])); }
};
template <class X>
struct SquaredDeviations {
  const X* x;
  double mean;
  void block(int64_t i, Lanes& a, Lanes&) const {
    Lanes v;
    load_lanes(x + i, v);
    const Lanes d = v - mean;
    a += d * d;
  }
  void one(int64_t i, double& a, double&) const {
    const double d = double(value(x[i])) - mean;
    a += d * d;
  }
};
template <class X>
struct GradientSums {
  const X* dy;
  const X* x;
  double mean;
  void block(int64_t i, Lanes& a, Lanes& b) const {
    Lanes g, v;
    load_lanes(dy + i, g);
    load_lanes(x + i, v);
    a += g;
    b += g * (v - mean);
  }
  void one(int64_t i, double& a, double& b) const {
    const double g = double(value(dy[i]));
    a += g;
    b += g * (double(value(x[i])) - mean);
  }
};
template <class Term>
constexpr int kTerms = 1;
template <class X>
constexpr int kTerms<GradientSums<X>> = 2;

// The sums of term's terms over the channel's N planes of H*W values, s.C planes apart, in
// the lanes' order.
template <class Term>
DPCORE_VECTOR_LOOP void channel_sums_loop(const BatchNorm2dShape& s, const Term& term, double* sums) {
  const int64_t plane = s.H * s.W, whole = plane / kPlaneLanes * kPlaneLanes, stride = s.C * plane;
  Lanes first = {}, second = {};
  for (int64_t n = 0; n < s.N; ++n) {
    const int64_t base = n * stride;
    for (int64_t i = 0; i < whole; i += kPlaneLanes) term.block(base + i, first, second);
    for (int64_t i = whole; i < plane; ++i) term.one(base + i, first[i - whole], second[i - whole]);
  }
  double total_first = 0.0, total_second = 0.0;
  for (int j = 0; j < kPlaneLanes; ++j) total_first += first[j], total_second += second[j];
  sums[0] = total_first;
  if constexpr (kTerms<Term> == 2) sums[1] = total_second;
}

// Built per vector width (vector_variants.h) for float32 and 16-bit activations; float64
// (the gradient checks') on the baseline.
template <class Term>
void channel_sums(const BatchNorm2dShape& s, const Term& term, double* sums) {
  channel_sums_loop(s, term, sums);
}
#define DPCORE_WIDE_CHANNEL_SUMS(Term, X, suffix)                                                                 \
  DPCORE_VECTOR_LOOP void suffix##_loop(const BatchNorm2dShape& s, const Term<X>& term, double* sums) {           \
    channel_sums_loop(s, term, sums);                                                                             \
  }                                                                                                               \
  DPCORE_VECTOR_VARIANTS(suffix, (const BatchNorm2dShape& s, const Term<X>& term, double* sums), (s, term, sums)) \
  void channel_sums(const BatchNorm2dShape& s, const Term<X>& term, double* sums) { suffix(s, term, sums); }
#define DPCORE_WIDE_CHANNEL_SUMS_OF(X, suffix)                                    \
  DPCORE_WIDE_CHANNEL_SUMS(Values, X, sum_values_##suffix)                        \
  DPCORE_WIDE_CHANNEL_SUMS(SquaredDeviations, X, sum_squared_deviations_##suffix) \
  DPCORE_WIDE_CHANNEL_SUMS(GradientSums, X, sum_gradients_##suffix)
DPCORE_WIDE_CHANNEL_SUMS_OF(float, f32)
DPCORE_WIDE_CHANNEL_SUMS_OF(BFloat16, bf16)
DPCORE_WIDE_CHANNEL_SUMS_OF(Float16, fp16)
#undef DPCORE_WIDE_CHANNEL_SUMS_OF
#undef DPCORE_WIDE_CHANNEL_SUMS

bool parallel(const BatchNorm2dShape& s) { return s.x_size() >= kMinParallelElements; }

// One H*W plane of each elementwise pass, S-typed constants of its channel.
template <class X, class S>
DPCORE_VECTOR_LOOP void apply_loop(int64_t n, const X* x, S m, S scale, S shift, X* y) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = stored<X>((value(x[i]) - m) * scale + shift);
}
// Training: dx = scale * (dy - dy_mean - (x - m) * centred_coef); eval passes zeros for the two.
template <class X, class S>
DPCORE_VECTOR_LOOP void backward_apply_loop(int64_t n, const X* dy, const X* x, S m, S scale, S dy_mean,
                                            S centred_coef, X* dx) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i)
    dx[i] = stored<X>(scale * (value(dy[i]) - dy_mean - (value(x[i]) - m) * centred_coef));
}

#define DPCORE_HALF_PLANE_LOOPS(H, suffix)                                                                           \
  DPCORE_VECTOR_LOOP void apply_##suffix##_loop(int64_t n, const H* x, float m, float scale, float shift, H* y) {    \
    apply_loop(n, x, m, scale, shift, y);                                                                            \
  }                                                                                                                  \
  DPCORE_VECTOR_VARIANTS(apply_##suffix, (int64_t n, const H* x, float m, float scale, float shift, H* y),          \
                         (n, x, m, scale, shift, y))                                                                 \
  DPCORE_VECTOR_LOOP void backward_apply_##suffix##_loop(int64_t n, const H* dy, const H* x, float m, float scale,  \
                                                         float dy_mean, float centred_coef, H* dx) {                 \
    backward_apply_loop(n, dy, x, m, scale, dy_mean, centred_coef, dx);                                              \
  }                                                                                                                  \
  DPCORE_VECTOR_VARIANTS(backward_apply_##suffix,                                                                    \
                         (int64_t n, const H* dy, const H* x, float m, float scale, float dy_mean, float centred_coef, \
                          H* dx),                                                                                    \
                         (n, dy, x, m, scale, dy_mean, centred_coef, dx))                                            \
  void apply_plane(int64_t n, const H* x, float m, float scale, float shift, H* y) {                                 \
    apply_##suffix(n, x, m, scale, shift, y);                                                                        \
  }                                                                                                                  \
  void backward_apply_plane(int64_t n, const H* dy, const H* x, float m, float scale, float dy_mean,                \
                            float centred_coef, H* dx) {                                                             \
    backward_apply_##suffix(n, dy, x, m, scale, dy_mean, centred_coef, dx);                                          \
  }
DPCORE_HALF_PLANE_LOOPS(BFloat16, bf16)
DPCORE_HALF_PLANE_LOOPS(Float16, fp16)
#undef DPCORE_HALF_PLANE_LOOPS

// float and double: the loops as they are, built for the baseline.
template <class T>
void apply_plane(int64_t n, const T* x, T m, T scale, T shift, T* y) {
  apply_loop(n, x, m, scale, shift, y);
}
template <class T>
void backward_apply_plane(int64_t n, const T* dy, const T* x, T m, T scale, T dy_mean, T centred_coef, T* dx) {
  backward_apply_loop(n, dy, x, m, scale, dy_mean, centred_coef, dx);
}

}  // namespace

template <class X, class S>
void batch_norm2d_stats(const BatchNorm2dShape& s, const X* x, S* mean, S* var) {
  const double count = double(s.count());
#pragma omp parallel for num_threads(kernel_threads()) if (parallel(s)) schedule(static)
  for (int64_t c = 0; c < s.C; ++c) {
    const int64_t first = c * s.H * s.W;  // channel c's first value
    double sum = 0.0, squares = 0.0;
    channel_sums(s, Values<X>{x + first}, &sum);
    const double m = sum / count;
    channel_sums(s, SquaredDeviations<X>{x + first, m}, &squares);
    mean[c] = S(m);
    var[c] = S(squares / count);
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

template <class X, class S>
void batch_norm2d_apply(const BatchNorm2dShape& s, const X* x, const S* mean, const S* invstd, const S* weight,
                        const S* bias, X* y) {
  const int64_t plane = s.H * s.W;
#pragma omp parallel for num_threads(kernel_threads()) if (parallel(s)) schedule(static)
  for (int64_t p = 0; p < s.N * s.C; ++p) {
    const int64_t c = p % s.C;
    const S scale = S(double(invstd[c]) * (weight ? double(weight[c]) : 1.0));
    apply_plane(plane, x + p * plane, mean[c], scale, bias ? bias[c] : S(0), y + p * plane);
  }
}

template <class X, class S>
void batch_norm2d_backward_reduce(const BatchNorm2dShape& s, const X* dy, const X* x, const S* mean, const S* invstd,
                                  S* sum_dy, S* sum_dy_xhat, S* dweight, S* dbias, bool accumulate) {
#pragma omp parallel for num_threads(kernel_threads()) if (parallel(s)) schedule(static)
  for (int64_t c = 0; c < s.C; ++c) {
    const double m = double(mean[c]);
    const int64_t first = c * s.H * s.W;
    double sums[2];
    channel_sums(s, GradientSums<X>{dy + first, x + first, m}, sums);
    const S total = S(sums[0]), total_xhat = S(sums[1] * double(invstd[c]));
    if (sum_dy) sum_dy[c] = total;
    if (sum_dy_xhat) sum_dy_xhat[c] = total_xhat;
    if (dweight) dweight[c] = accumulate ? dweight[c] + total_xhat : total_xhat;
    if (dbias) dbias[c] = accumulate ? dbias[c] + total : total;
  }
}

template <class X, class S>
void batch_norm2d_backward_apply(const BatchNorm2dShape& s, const X* dy, const X* x, const S* mean, const S* invstd,
                                 const S* weight, const S* sum_dy, const S* sum_dy_xhat, X* dx) {
  const int64_t plane = s.H * s.W;
  const double count = double(s.stats_count());
#pragma omp parallel for num_threads(kernel_threads()) if (parallel(s)) schedule(static)
  for (int64_t p = 0; p < s.N * s.C; ++p) {
    const int64_t c = p % s.C;
    const double k = double(invstd[c]) * (weight ? double(weight[c]) : 1.0);
    // Training: dx = k * (dy - sum_dy / n - xhat * sum_dy_xhat / n), xhat = (x - mean) * invstd.
    // Eval (no sums): the statistics are constants, dx = k * dy.
    const S dy_mean = sum_dy ? S(double(sum_dy[c]) / count) : S(0);
    const S centred_coef = sum_dy ? S(double(invstd[c]) * double(sum_dy_xhat[c]) / count) : S(0);
    backward_apply_plane(plane, dy + p * plane, x + p * plane, mean[c], S(k), dy_mean, centred_coef, dx + p * plane);
  }
}

// The activation-typed steps for X (statistics S), and the statistics-only ones for T.
#define DPCORE_INSTANTIATE_ACTIVATIONS(X, S)                                                                         \
  template void batch_norm2d_stats<X, S>(const BatchNorm2dShape&, const X*, S*, S*);                                \
  template void batch_norm2d_apply<X, S>(const BatchNorm2dShape&, const X*, const S*, const S*, const S*, const S*, \
                                         X*);                                                                       \
  template void batch_norm2d_backward_reduce<X, S>(const BatchNorm2dShape&, const X*, const X*, const S*, const S*, \
                                                   S*, S*, S*, S*, bool);                                           \
  template void batch_norm2d_backward_apply<X, S>(const BatchNorm2dShape&, const X*, const X*, const S*, const S*,  \
                                                  const S*, const S*, const S*, X*);
#define DPCORE_INSTANTIATE_STATISTICS(T)                                                                            \
  template void batch_norm2d_finalize<T>(const BatchNorm2dShape&, const T*, const T*, double, double, T*, T*, T*); \
  template void batch_norm2d_combine_stats<T>(const BatchNorm2dShape&, int64_t, const T*, T*, T*);
DPCORE_INSTANTIATE_ACTIVATIONS(float, float)
DPCORE_INSTANTIATE_ACTIVATIONS(double, double)
DPCORE_INSTANTIATE_ACTIVATIONS(BFloat16, float)
DPCORE_INSTANTIATE_ACTIVATIONS(Float16, float)
DPCORE_INSTANTIATE_STATISTICS(float)
DPCORE_INSTANTIATE_STATISTICS(double)
#undef DPCORE_INSTANTIATE_ACTIVATIONS
#undef DPCORE_INSTANTIATE_STATISTICS

}  // namespace dpcore::kernels::cpu
