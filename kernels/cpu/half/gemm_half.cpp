// gemm_half's two paths (gemm_half.h) and the 16-bit casts. The Convert path widens the
// operands into float32 scratch and calls OpenBLAS through gemm_parallel; the Avx512Bf16
// path is gemm_avx512_bf16.cpp.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <type_traits>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/half/gemm_half.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vector_variants.h"
#include "kernels/error.h"

namespace dpcore::kernels::cpu {

namespace {

std::atomic<HalfGemmPath>& chosen_path() {
  static std::atomic<HalfGemmPath> path{cpu_has_amx_bf16()      ? HalfGemmPath::AmxBf16
                                        : cpu_has_avx512_bf16() ? HalfGemmPath::Avx512Bf16
                                                                : HalfGemmPath::Convert};
  return path;
}

bool cpu_has_f16c() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("f16c");
}

// float16 to float32 eight at a time with F16C's vcvtph2ps (exact, as float16_to_float).
__attribute__((target("f16c,avx"))) void widen_f16c(int64_t n, const Float16* x, float* y) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
  for (; i < n; ++i) y[i] = float16_to_float(x[i]);
}

// The bfloat16 loops below are integer shifts, adds and selects that GCC vectorises; built
// for AVX-512, AVX2 and the baseline (vector_variants.h), they run about twice as fast as
// the baseline's 16-byte vectors on this machine, with the same bits on every CPU (no
// floating-point arithmetic is involved).

// n contiguous 16-bit values to float32 (exact), on the calling thread.
DPCORE_VECTOR_LOOP void widen_loop(int64_t n, const BFloat16* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = bfloat16_to_float(x[i]);  // a shift
}
DPCORE_VECTOR_VARIANTS(widen, (int64_t n, const BFloat16* x, float* y), (n, x, y))
// n float32 values rounded to bfloat16 (kernels/half_types.h's rounding), on the calling thread.
DPCORE_VECTOR_LOOP void narrow_loop(int64_t n, const float* x, BFloat16* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = float_to_bfloat16(x[i]);
}
DPCORE_VECTOR_VARIANTS(narrow, (int64_t n, const float* x, BFloat16* y), (n, x, y))
void widen(int64_t n, const Float16* x, float* y) {
  static const bool f16c = cpu_has_f16c();
  if (f16c) {
    widen_f16c(n, x, y);
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = float16_to_float(x[i]);
  }
}

// A stored rows x cols matrix with row length ld, widened into a compact float32 copy.
template <class In>
void widen_matrix(int64_t rows, int64_t cols, const In* x, int64_t ld, float* y) {
  for (int64_t r = 0; r < rows; ++r) widen(cols, x + r * ld, y + r * cols);
}

// Scratch kept per thread between calls (a training step asks for the same sizes each time).
float* scratch(size_t n, int slot) {
  thread_local std::vector<float> buffers[3];
  std::vector<float>& b = buffers[slot];
  if (b.size() < n) b.resize(n);
  return b.data();
}

// One matrix product on the calling thread's share (gemm_parallel shares out the blocks
// when called outside a parallel region).
template <class In, class Out>
void gemm_one(HalfGemmPath path, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
              const In* A, int64_t lda, const In* B, int64_t ldb, float beta, Out* C, int64_t ldc) {
  constexpr bool float_out = std::is_same_v<Out, float>;
  if constexpr (std::is_same_v<In, BFloat16>) {
    if (path == HalfGemmPath::Avx512Bf16) {
      gemm_bf16_avx512(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
      return;
    }
    if (path == HalfGemmPath::AmxBf16) {
      gemm_bf16_amx(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
      return;
    }
  }
  // The float32 result: C itself, or scratch that is rounded into C at the end.
  float* c = nullptr;
  int64_t c_ld = ldc;
  if constexpr (float_out) {
    c = C;
  } else {
    c = scratch(size_t(M * N), 2), c_ld = N;
    if (beta != 0.f)
      for (int64_t r = 0; r < M; ++r) widen(N, C + r * ldc, c + r * N);
  }
  const int64_t a_rows = trans_a ? K : M, a_cols = trans_a ? M : K;
  const int64_t b_rows = trans_b ? N : K, b_cols = trans_b ? K : N;
  float* a = scratch(size_t(a_rows * a_cols), 0);
  float* b = scratch(size_t(b_rows * b_cols), 1);
  widen_matrix(a_rows, a_cols, A, lda, a);
  widen_matrix(b_rows, b_cols, B, ldb, b);
  gemm_parallel(trans_a, trans_b, M, N, K, alpha, a, a_cols, b, b_cols, beta, c, c_ld);
  if constexpr (!float_out)
    for (int64_t r = 0; r < M; ++r)
      for (int64_t j = 0; j < N; ++j) C[r * ldc + j] = from_float<Out>(c[r * N + j]);
}

}  // namespace

const char* half_gemm_path_name(HalfGemmPath path) {
  switch (path) {
    case HalfGemmPath::Avx512Bf16: return "avx512-bf16";
    case HalfGemmPath::AmxBf16: return "amx-bf16";
    case HalfGemmPath::Convert: break;
  }
  return "convert";
}

HalfGemmPath half_gemm_path() { return chosen_path().load(); }

void set_half_gemm_path(HalfGemmPath path) {
  DPCORE_CHECK(path != HalfGemmPath::Avx512Bf16 || cpu_has_avx512_bf16(),
        "the bfloat16 GEMM path avx512-bf16 needs a CPU with AVX512-BF16 (vdpbf16ps) and AVX-512 F, BW and VL; "
        "this one lacks them: use convert");
  DPCORE_CHECK(path != HalfGemmPath::AmxBf16 || cpu_has_amx_bf16(),
        "the bfloat16 GEMM path amx-bf16 needs a CPU with AMX tiles and AMX-BF16 (tdpbf16ps), AVX512-BF16, and a "
        "kernel that lets the process use the tiles (Linux 5.16 or later); this machine lacks them: use avx512-bf16 "
        "or convert");
  chosen_path().store(path);
}

template <class In, class Out>
void gemm_half(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const In* A, int64_t lda,
               int64_t stride_a, const In* B, int64_t ldb, int64_t stride_b, float beta, Out* C, int64_t ldc,
               int64_t stride_c, int64_t batch) {
  if constexpr (!std::is_same_v<Out, float>)
    DPCORE_CHECK(beta == 0.f || beta == 1.f, "gemm_half: a 16-bit output takes beta 0 or 1, got ", beta);
  if (M == 0 || N == 0 || batch == 0) return;
  const HalfGemmPath path = half_gemm_path();
  // A batch of several matrices is shared out by matrix (each on one thread, so the
  // product inside runs single-threaded); one matrix shares out its own blocks.
  parallel_for_each(batch, omp_in_parallel() ? 1 : kernel_threads(), [&](int64_t i) {
    gemm_one(path, trans_a, trans_b, M, N, K, alpha, A + i * stride_a, lda, B + i * stride_b, ldb, beta,
             C + i * stride_c, ldc);
  });
}

template <class From, class To>
void cast_on_this_thread(int64_t n, const From* x, To* y) {
  if constexpr (std::is_same_v<From, float> && std::is_same_v<To, BFloat16>) {
    narrow(n, x, y);
  } else if constexpr (std::is_same_v<From, float>) {
    for (int64_t i = 0; i < n; ++i) y[i] = from_float<To>(x[i]);
  } else if constexpr (std::is_same_v<From, BFloat16>) {
    widen(n, x, y);
  } else {
    // Not F16C's vcvtph2ps, which quiets a signalling NaN: a cast keeps every bit
    // pattern as it is (kernels/half_types.h). The GEMM's widening may use F16C, where
    // a NaN operand gives NaN results either way.
    for (int64_t i = 0; i < n; ++i) y[i] = float16_to_float(x[i]);
  }
}

template <class From, class To>
void cast(int64_t n, const From* x, To* y) {
  for_element_chunks(n, [&](int64_t begin, int64_t end) { cast_on_this_thread(end - begin, x + begin, y + begin); });
}

#define DPCORE_GEMM_HALF(In, Out)                                                                                 \
  template void gemm_half<In, Out>(bool, bool, int64_t, int64_t, int64_t, float, const In*, int64_t, int64_t,   \
                                   const In*, int64_t, int64_t, float, Out*, int64_t, int64_t, int64_t);
DPCORE_GEMM_HALF(BFloat16, float)
DPCORE_GEMM_HALF(BFloat16, BFloat16)
DPCORE_GEMM_HALF(Float16, float)
DPCORE_GEMM_HALF(Float16, Float16)
#undef DPCORE_GEMM_HALF
#define DPCORE_CAST(From, To)                                                    \
  template void cast<From, To>(int64_t, const From*, To*);                       \
  template void cast_on_this_thread<From, To>(int64_t, const From*, To*);
DPCORE_CAST(float, BFloat16)
DPCORE_CAST(float, Float16)
DPCORE_CAST(BFloat16, float)
DPCORE_CAST(Float16, float)
#undef DPCORE_CAST

}  // namespace dpcore::kernels::cpu
