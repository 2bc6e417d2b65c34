// Direct convolution on AVX-512 (see conv2d_direct.h for when it is used).
//
// The trick that keeps the inner loops plain vector code is the flat padded plane. Each
// input plane is copied, with its zero padding, into a row-major [H + 2*pad_h, Wp] block
// (Wp = W + 2*pad_w), and the output is computed at every flat position j = p*Wp + q,
// including the S-1 columns q >= Q that do not exist (they are dropped when the result is
// copied out). Then the input value under tap (r, s) of output j is always at j + r*Wp + s:
// one unaligned vector load gives 16 consecutive outputs' inputs for a tap, whatever the
// row boundaries. What that costs is (S-1)/Wp of wasted lanes (7% at 28x28, 22% at 7x7).
//
// Forward, per image and block of KB output channels by JB vectors of 16 outputs: the
// KB*JB accumulators stay in registers over every (c, r, s); each step loads JB input
// vectors and broadcasts KB weights (8 x 3 = 24 accumulators: 24 FMAs per 3 vector loads
// and 8 scalar broadcasts, so the loads never limit the FMAs).
//
// Backward data is the forward of dy with the kernel flipped and its channels swapped:
// dx[c, h, w] = sum_{k, r, s} dy[k, h + pad_h - r, w + pad_w - s] * w[k, c, r, s], a
// stride-1 convolution of dy padded by R-1-pad_h and S-1-pad_w.
//
// Backward weight vectorises over output channels instead: dy is transposed to
// dyt[pixel][k], and each (c, r, s) gets dW[k..k+15, c, r, s] += dyt[pixel][k..k+15] *
// x[c, pixel * stride + (r, s)], one FMA with a broadcast input, at each output pixel that
// exists (so any stride).
// For a 3x3 kernel, 3 input channels' nine taps stay in registers (27 accumulators per 1
// vector load and 27 broadcasts). Each image's sums start from zero and are then added to
// the thread's running sums, so no float sum runs longer than one image's pixels.
//
// The sums run in a fixed order (channel, then tap, for each output; pixel by pixel, then
// image by image for the weight gradient), so results are the same bits run to run, for
// any thread count in the forward and backward data and for a given one in the weight
// gradient, like the im2col path. They differ from the im2col path's last bits.
#include "kernels/cpu/conv2d_direct.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/relu.h"
#include "kernels/cpu/vector_variants.h"

#define DPCORE_AVX512 __attribute__((target("avx512f")))

namespace dpcore::kernels::cpu {

namespace {

constexpr int64_t kVectorFloats = 16;  // floats per AVX-512 register

std::atomic<bool> direct_enabled{true};

int64_t round_up(int64_t v, int64_t multiple) { return (v + multiple - 1) / multiple * multiple; }

bool cpu_has_avx512() { return vector_width() == VectorWidth::Avx512; }

// A stride-1 convolution of C planes H x W into K planes P x Q, on flat padded planes (the
// weight gradient, which reads its inputs pixel by pixel, also takes other strides).
struct Geometry {
  int64_t C, H, W, K, R, S, pad_h, pad_w, P, Q;
  int64_t stride_h = 1, stride_w = 1;  // other than 1 only in the weight gradient
  int64_t Wp;       // padded row width
  int64_t vectors;  // 16-float vectors covering the P*Wp flat outputs
  int64_t plane;    // floats per padded input plane: the padded rows, then zeros that the
                    // last vectors' taps read; a multiple of 16
  Geometry(int64_t C_, int64_t H_, int64_t W_, int64_t K_, int64_t R_, int64_t S_, int64_t ph, int64_t pw)
      : C(C_), H(H_), W(W_), K(K_), R(R_), S(S_), pad_h(ph), pad_w(pw) {
    P = H + 2 * pad_h - R + 1;
    Q = W + 2 * pad_w - S + 1;
    Wp = W + 2 * pad_w;
    vectors = (P * Wp + kVectorFloats - 1) / kVectorFloats;
    plane = round_up(vectors * kVectorFloats + (R - 1) * Wp + S - 1, kVectorFloats);
  }
  int64_t out_flat() const { return vectors * kVectorFloats; }
};

Geometry forward_geometry(const Conv2dShape& s) { return {s.C, s.H, s.W, s.K, s.R, s.S, s.pad_h, s.pad_w}; }

// dy [K, P, Q] -> dx [C, H, W]: the forward's output planes become the input planes.
Geometry backward_data_geometry(const Conv2dShape& s) {
  return {s.K, s.P, s.Q, s.C, s.R, s.S, s.R - 1 - s.pad_h, s.S - 1 - s.pad_w};
}

// Copies the C planes of one image (x[c, h, w]) into padded planes `plane` floats apart,
// zeros around them and after them.
void pad_planes(const Geometry& g, const float* x, int64_t channels, int64_t stride, float* out) {
  for (int64_t c = 0; c < channels; ++c) {
    float* dst = out + c * stride;
    std::fill(dst, dst + g.plane, 0.0f);
    for (int64_t h = 0; h < g.H; ++h)
      std::copy_n(x + (c * g.H + h) * g.W, g.W, dst + (h + g.pad_h) * g.Wp + g.pad_w);
  }
}

// ---- forward ----

// out[k][j] for k in [k0, k0 + KB), j in [j0, j0 + 16*JB): bias plus the sum over (c, r, s)
// of wt[c][r][s][k] * xpad[c][j + r*Wp + s]. A kernel size known at compile time (FR x FS,
// 3x3) unrolls the taps; FR = FS = 0 takes g.R x g.S at run time.
template <int KB, int JB, int FR, int FS>
DPCORE_AVX512 inline void forward_block(const Geometry& g, const float* xpad, const float* wt, const float* bias,
                                        int64_t k0, int64_t j0, float* out) {
  const int64_t R = FR ? FR : g.R, S = FS ? FS : g.S;
  __m512 acc[KB][JB];
#pragma GCC unroll 8
  for (int kk = 0; kk < KB; ++kk) {
    const __m512 b = _mm512_set1_ps(bias ? bias[k0 + kk] : 0.0f);
#pragma GCC unroll 4
    for (int jj = 0; jj < JB; ++jj) acc[kk][jj] = b;
  }
  for (int64_t c = 0; c < g.C; ++c) {
    const float* xc = xpad + c * g.plane + j0;
    const float* wc = wt + c * R * S * g.K + k0;
#pragma GCC unroll 3
    for (int64_t r = 0; r < R; ++r)
#pragma GCC unroll 3
      for (int64_t s = 0; s < S; ++s) {
        const float* xs = xc + r * g.Wp + s;
        const float* ws = wc + (r * S + s) * g.K;
        __m512 xv[JB];
#pragma GCC unroll 4
        for (int jj = 0; jj < JB; ++jj) xv[jj] = _mm512_loadu_ps(xs + jj * kVectorFloats);
#pragma GCC unroll 8
        for (int kk = 0; kk < KB; ++kk) {
          const __m512 wv = _mm512_set1_ps(ws[kk]);
#pragma GCC unroll 4
          for (int jj = 0; jj < JB; ++jj) acc[kk][jj] = _mm512_fmadd_ps(wv, xv[jj], acc[kk][jj]);
        }
      }
  }
#pragma GCC unroll 8
  for (int kk = 0; kk < KB; ++kk)
#pragma GCC unroll 4
    for (int jj = 0; jj < JB; ++jj)
      _mm512_storeu_ps(out + (k0 + kk) * g.out_flat() + j0 + jj * kVectorFloats, acc[kk][jj]);
}

template <int KB, int FR, int FS>
DPCORE_AVX512 void forward_channels(const Geometry& g, const float* xpad, const float* wt, const float* bias,
                                    int64_t k0, float* out) {
  constexpr int JB = 3;
  int64_t v = 0;
  for (; v + JB <= g.vectors; v += JB) forward_block<KB, JB, FR, FS>(g, xpad, wt, bias, k0, v * kVectorFloats, out);
  for (; v < g.vectors; ++v) forward_block<KB, 1, FR, FS>(g, xpad, wt, bias, k0, v * kVectorFloats, out);
}

template <int FR, int FS>
DPCORE_AVX512 void forward_all_channels(const Geometry& g, const float* xpad, const float* wt, const float* bias,
                                        float* out) {
  constexpr int KB = 8;
  int64_t k = 0;
  for (; k + KB <= g.K; k += KB) forward_channels<KB, FR, FS>(g, xpad, wt, bias, k, out);
  for (; k < g.K; ++k) forward_channels<1, FR, FS>(g, xpad, wt, bias, k, out);
}

// out[K][out_flat] of one image's padded planes.
DPCORE_AVX512 void forward_image(const Geometry& g, const float* xpad, const float* wt, const float* bias,
                                 float* out) {
  if (g.R == 3 && g.S == 3) return forward_all_channels<3, 3>(g, xpad, wt, bias, out);
  forward_all_channels<0, 0>(g, xpad, wt, bias, out);
}

// Runs the convolution of every image of x [N, C, H, W] into y [N, K, P, Q], with the
// weights already as wt[c][r][s][k].
void convolve_images(const Geometry& g, int64_t N, const float* x, const float* wt, const float* bias, bool relu,
                     float* y) {
  const int threads = int(std::min<int64_t>(kernel_threads(), N));
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    float* xpad = thread_scratch<float>(g.C * g.plane, 0);
    float* out = thread_scratch<float>(g.K * g.out_flat(), 1);
    pad_planes(g, x + n * g.C * g.H * g.W, g.C, g.plane, xpad);
    forward_image(g, xpad, wt, bias, out);
    float* y_n = y + n * g.K * g.P * g.Q;
    for (int64_t k = 0; k < g.K; ++k)
      for (int64_t p = 0; p < g.P; ++p) {
        const float* src = out + k * g.out_flat() + p * g.Wp;
        float* dst = y_n + (k * g.P + p) * g.Q;
        if (relu) {
#pragma omp simd
          for (int64_t q = 0; q < g.Q; ++q) dst[q] = relu_value(src[q]);
        } else {
          std::copy_n(src, g.Q, dst);
        }
      }
  }
}

// ---- backward weight (16 output channels per vector; see the top of the file) ----

// acc for channels [c0, c0 + CB) (xc = their first padded plane) and the TR x TS taps from
// (r0, s0), over one image's pixels, added into gacc[channel][tap r*S + s][16 lanes].
template <int CB, int TR, int TS>
DPCORE_AVX512 inline void weight_image_block(const Geometry& g, const float* dyt, int64_t ldk, const float* xc,
                                             int64_t r0, int64_t s0, float* gacc) {
  constexpr int taps = TR * TS;
  __m512 acc[CB][taps];
#pragma GCC unroll 3
  for (int ci = 0; ci < CB; ++ci)
#pragma GCC unroll 9
    for (int t = 0; t < taps; ++t) acc[ci][t] = _mm512_setzero_ps();
  for (int64_t p = 0; p < g.P; ++p) {
    const float* xrow = xc + (p * g.stride_h + r0) * g.Wp + s0;
    const float* drow = dyt + p * g.Q * ldk;
    for (int64_t q = 0; q < g.Q; ++q) {
      const __m512 d = _mm512_loadu_ps(drow + q * ldk);
#pragma GCC unroll 3
      for (int ci = 0; ci < CB; ++ci)
#pragma GCC unroll 3
        for (int r = 0; r < TR; ++r)
#pragma GCC unroll 3
          for (int s = 0; s < TS; ++s)
            acc[ci][r * TS + s] =
                _mm512_fmadd_ps(d, _mm512_set1_ps(xrow[ci * g.plane + r * g.Wp + s + q * g.stride_w]),
                                acc[ci][r * TS + s]);
    }
  }
  const int64_t RS = g.R * g.S;
#pragma GCC unroll 3
  for (int ci = 0; ci < CB; ++ci)
#pragma GCC unroll 3
    for (int r = 0; r < TR; ++r)
#pragma GCC unroll 3
      for (int s = 0; s < TS; ++s) {
        float* sum = gacc + (ci * RS + (r0 + r) * g.S + s0 + s) * kVectorFloats;
        _mm512_storeu_ps(sum, _mm512_add_ps(_mm512_loadu_ps(sum), acc[ci][r * TS + s]));
      }
}

// One image's weight gradient for channels [c0, c0 + CB): a 3x3 kernel keeps all nine taps
// in registers (3 channels: 27 accumulators); any other goes one tap at a time.
template <int CB>
DPCORE_AVX512 void weight_image_channels(const Geometry& g, const float* dyt, int64_t ldk, const float* xc,
                                         float* gacc) {
  if (g.R == 3 && g.S == 3) return weight_image_block<CB, 3, 3>(g, dyt, ldk, xc, 0, 0, gacc);
  for (int64_t r = 0; r < g.R; ++r)
    for (int64_t s = 0; s < g.S; ++s) weight_image_block<CB, 1, 1>(g, dyt, ldk, xc, r, s, gacc);
}

// gacc[k-vector][c][tap][16] += the weight gradient of one image (padded planes xpad,
// dyt[pixel][ldk]); gbias[k-vector][16] += its bias gradient when gbias is given.
DPCORE_AVX512 void weight_grad_image(const Geometry& g, const float* xpad, const float* dyt, int64_t ldk,
                                     float* gacc, float* gbias) {
  const int64_t RS = g.R * g.S;
  const bool three = g.R == 3 && g.S == 3;
  for (int64_t kv = 0; kv < ldk / kVectorFloats; ++kv) {
    const float* d = dyt + kv * kVectorFloats;
    float* gk = gacc + kv * g.C * RS * kVectorFloats;
    int64_t c = 0;
    if (three) {
      for (; g.C - c >= 3; c += 3) weight_image_channels<3>(g, d, ldk, xpad + c * g.plane, gk + c * RS * kVectorFloats);
    } else {
      for (; g.C - c >= 8; c += 8) weight_image_channels<8>(g, d, ldk, xpad + c * g.plane, gk + c * RS * kVectorFloats);
    }
    for (; c < g.C; ++c) weight_image_channels<1>(g, d, ldk, xpad + c * g.plane, gk + c * RS * kVectorFloats);
    if (gbias) {
      __m512 acc = _mm512_setzero_ps();
      for (int64_t j = 0; j < g.P * g.Q; ++j) acc = _mm512_add_ps(acc, _mm512_loadu_ps(d + j * ldk));
      _mm512_storeu_ps(gbias + kv * kVectorFloats, _mm512_add_ps(_mm512_loadu_ps(gbias + kv * kVectorFloats), acc));
    }
  }
}

// out[j * ld + k] = in[k * cols + j] for the rows x cols matrix in, by 16 x 16 tiles so
// that the strided side of every tile stays within 16 cache lines (a plain row-by-row
// loop stores each value to another line and took most of a weight-gradient call).
void transpose(const float* in, int64_t rows, int64_t cols, float* out, int64_t ld) {
  for (int64_t k0 = 0; k0 < rows; k0 += kVectorFloats)
    for (int64_t j0 = 0; j0 < cols; j0 += kVectorFloats)
      for (int64_t k = k0; k < std::min(k0 + kVectorFloats, rows); ++k)
        for (int64_t j = j0; j < std::min(j0 + kVectorFloats, cols); ++j) out[j * ld + k] = in[k * cols + j];
}

}  // namespace

void set_direct_conv2d(bool enabled) { direct_enabled.store(enabled, std::memory_order_relaxed); }

namespace {

// Below this many multiply-adds per output (or weight-gradient) value the copies around the
// direct kernels cost more than they save: a first layer of 1 channel x 3x3 (9) runs faster
// as im2col + GEMM (0.57 against 0.86 ms at batch 128, 1x28x28 to 16 channels, one thread).
constexpr int64_t kMinDirectDepth = 32;
// The forward-style passes block 8 output channels per register tile; with fewer (the
// backward data of a first layer: 1 or 3 image channels) the tiles are single channels
// and im2col + GEMM was 1.5-2.3x faster (docs/benchmarks.md, "Kernels").
constexpr int64_t kMinDirectOutputChannels = 8;

bool direct_stride1(const Conv2dShape& s) {
  return s.stride_h == 1 && s.stride_w == 1 && s.P > 0 && s.Q > 0 && cpu_has_avx512() &&
         direct_enabled.load(std::memory_order_relaxed);
}

}  // namespace

bool direct_conv2d_forward_applies(const Conv2dShape& s) {
  return direct_stride1(s) && s.C * s.R * s.S >= kMinDirectDepth && s.K >= kMinDirectOutputChannels;
}

bool direct_conv2d_backward_data_applies(const Conv2dShape& s) {
  return direct_stride1(s) && s.K * s.R * s.S >= kMinDirectDepth && s.C >= kMinDirectOutputChannels &&
         s.pad_h <= s.R - 1 && s.pad_w <= s.S - 1;
}

bool direct_conv2d_backward_weight_applies(const Conv2dShape& s) {
  return s.P > 0 && s.Q > 0 && cpu_has_avx512() && direct_enabled.load(std::memory_order_relaxed) &&
         s.C * s.R * s.S >= kMinDirectDepth;
}

void direct_conv2d_forward(const Conv2dShape& s, const float* x, const float* w, const float* bias, bool relu,
                           float* y) {
  const Geometry g = forward_geometry(s);
  std::vector<float> wt(size_t(s.w_size()));  // wt[c][r][s][k] = w[k][c][r][s]
  for (int64_t k = 0; k < s.K; ++k)
    for (int64_t crs = 0; crs < s.C * s.R * s.S; ++crs) wt[size_t(crs * s.K + k)] = w[k * s.C * s.R * s.S + crs];
  convolve_images(g, s.N, x, wt.data(), bias, relu, y);
}

void direct_conv2d_backward_data(const Conv2dShape& s, const float* dy, const float* w, float* dx) {
  const Geometry g = backward_data_geometry(s);
  // Input channels k of dy, output channels c of dx: wt[k][r][s][c] = w[k][c][R-1-r][S-1-s].
  std::vector<float> wt(size_t(s.w_size()));
  for (int64_t k = 0; k < s.K; ++k)
    for (int64_t c = 0; c < s.C; ++c)
      for (int64_t r = 0; r < s.R; ++r)
        for (int64_t q = 0; q < s.S; ++q)
          wt[size_t(((k * s.R + r) * s.S + q) * s.C + c)] =
              w[((k * s.C + c) * s.R + (s.R - 1 - r)) * s.S + (s.S - 1 - q)];
  convolve_images(g, s.N, dy, wt.data(), nullptr, false, dx);
}

void direct_conv2d_weight_grad(const Conv2dShape& s, const float* x, const float* dy, Range range, int64_t depth,
                               float* grad) {
  Geometry g = forward_geometry(s);  // its padded planes; the output and the strides are s's
  g.P = s.P, g.Q = s.Q, g.stride_h = s.stride_h, g.stride_w = s.stride_w;
  const int64_t RS = s.R * s.S, pixels = s.P * s.Q;
  const int64_t ldk = round_up(s.K, kVectorFloats);  // dyt's row: K channels, zeros up to a whole vector
  const bool bias = depth > s.C * RS;
  // Sums per thread, one lane per output channel: gacc[k-vector][c][tap][16], gbias[k-vector][16].
  float* gacc = thread_scratch<float>(ldk * s.C * RS + (bias ? ldk : 0), 0);
  float* gbias = bias ? gacc + ldk * s.C * RS : nullptr;
  std::fill(gacc, gacc + ldk * s.C * RS + (bias ? ldk : 0), 0.0f);
  // (Slot 2 holds the caller's grad: conv2d_backward_weight's partial sums.)
  float* xpad = thread_scratch<float>(s.C * g.plane + pixels * ldk, 1);
  float* dyt = xpad + s.C * g.plane;
  std::fill(dyt, dyt + pixels * ldk, 0.0f);  // the lanes past K stay zero
  for (int64_t n = range.begin; n < range.end; ++n) {
    pad_planes(g, x + n * s.C * s.H * s.W, s.C, g.plane, xpad);
    const float* dy_n = dy + n * s.K * pixels;
    transpose(dy_n, s.K, pixels, dyt, ldk);
    weight_grad_image(g, xpad, dyt, ldk, gacc, gbias);
  }
  for (int64_t k = 0; k < s.K; ++k) {
    const int64_t kv = k / kVectorFloats, lane = k % kVectorFloats;
    for (int64_t crs = 0; crs < s.C * RS; ++crs)
      grad[k * depth + crs] = gacc[(kv * s.C * RS + crs) * kVectorFloats + lane];
    if (bias) grad[k * depth + depth - 1] = gbias[k];
  }
}

}  // namespace dpcore::kernels::cpu
