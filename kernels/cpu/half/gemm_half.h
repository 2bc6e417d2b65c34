// Matrix products with 16-bit inputs (bfloat16 or float16) accumulated in float32: what
// autocast runs linear layers, batched matmuls and convolutions in (issue 27,
// docs/mixed-precision.md). Three implementations of one contract, selectable, so that
// each is tested on every machine that can run it:
//   * Convert: each operand widened to float32 (exact: every 16-bit value is a float32),
//     then OpenBLAS's sgemm. Runs anywhere; float16 is widened with F16C where the CPU
//     has it. The products of two widened values are exact in float32 (8 + 8 or 11 + 11
//     significant bits), so this is "16-bit inputs, float32 accumulation" to the letter.
//   * Avx512Bf16 (bfloat16 only): the hand kernel of gemm_avx512_bf16.cpp on vdpbf16ps,
//     which multiplies pairs of bfloat16 exactly and adds them into float32 lanes.
//   * AmxBf16 (bfloat16 only): the same file's kernel on AMX tiles (tdpbf16ps: the same
//     arithmetic, a 16 x 16 x 32 block per instruction), on CPUs with AMX (Intel's
//     Sapphire Rapids on) whose kernel lets the process use the tiles.
// All sum in float32 and in a fixed order that depends on the shape only (not on the
// thread count or timing), so each is bit-reproducible; they differ from each other in
// that order, within the error bound the tests use (K units of float32 rounding on the sum
// of |a b|), and vdpbf16ps and tdpbf16ps flush subnormal inputs and results to zero.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/half_types.h"

namespace dpcore::kernels::cpu {

enum class HalfGemmPath { Convert, Avx512Bf16, AmxBf16 };
const char* half_gemm_path_name(HalfGemmPath path);  // "convert", "avx512-bf16", "amx-bf16"

// Whether this CPU has AVX512-BF16 (vdpbf16ps) and the AVX-512 F/BW/VL the kernel uses.
bool cpu_has_avx512_bf16();
// Whether this CPU has AMX's tiles and tdpbf16ps (and AVX512-BF16, whose packing the AMX
// kernel shares), and the operating system let this process use the tiles.
bool cpu_has_amx_bf16();
// The path bfloat16 products take: the first of AmxBf16 and Avx512Bf16 that the CPU has,
// unless set otherwise (float16 always converts). set_half_gemm_path on a path the CPU
// lacks fails naming the missing instructions. Process-wide; set it before the work, not
// during.
HalfGemmPath half_gemm_path();
void set_half_gemm_path(HalfGemmPath path);

// C = alpha * op(A) op(B) + beta * C over `batch` matrix triples, row-major, matrix i at
// A + i * stride_a, B + i * stride_b, C + i * stride_c (the contract of gemm.h and of
// cublasGemmStridedBatchedEx); In is BFloat16 or Float16. Out float: beta applies and
// beta == 0 never reads C. Out == In: each element rounded once, to nearest even, from its
// float32 result; beta must be 0 or 1 (1: the old C, widened, added before the rounding).
// Threads share out the output blocks (OpenMP, the kernel thread count).
template <class In, class Out>
void gemm_half(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const In* A, int64_t lda,
               int64_t stride_a, const In* B, int64_t ldb, int64_t stride_b, float beta, Out* C, int64_t ldc,
               int64_t stride_c, int64_t batch);

// The vdpbf16ps kernel itself (gemm_avx512_bf16.cpp), one matrix, Out float or BFloat16
// (gemm_half's contract); called by gemm_half on the Avx512Bf16 path. Requires
// cpu_has_avx512_bf16().
template <class Out>
void gemm_bf16_avx512(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const BFloat16* A,
                      int64_t lda, const BFloat16* B, int64_t ldb, float beta, Out* C, int64_t ldc);
// The AMX kernel (the same file), the same contract, on the AmxBf16 path. Requires
// cpu_has_amx_bf16().
template <class Out>
void gemm_bf16_amx(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const BFloat16* A,
                   int64_t lda, const BFloat16* B, int64_t ldb, float beta, Out* C, int64_t ldc);

// y[i] = x[i] converted: float32 to BFloat16 / Float16 rounded to nearest even (NaN kept a
// quiet NaN: kernels/half_types.h), 16-bit to float32 exactly. One pass over the array,
// shared out over the threads: the low-precision copy of the master weights is one call.
template <class From, class To>
void cast(int64_t n, const From* x, To* y);
// cast's conversions on the calling thread alone (vectorised, the same bits), for kernels
// that share out their own work and convert a piece at a time.
template <class From, class To>
void cast_on_this_thread(int64_t n, const From* x, To* y);

// y[i] = a[i] + b[i] for H = BFloat16 or Float16: each sum formed in float32 and rounded
// once to nearest even (y may alias a or b). The reduction step of a 16-bit allreduce
// (--grad-dtype bf16), as NCCL's kernels sum 16-bit buffers; the CUDA kernel's bits.
template <class H>
void add_half(int64_t n, const H* a, const H* b, H* y);

// relu on 16-bit arrays (H = BFloat16 or Float16), natively: relu commutes with rounding,
// so each output is the float32 relu of the widened value, rounded (exactly) back: the
// conversion path's bits in one pass, without float32 temporaries. Backward masks dy with
// the forward's output y, as relu_backward does (relu.h's rules).
template <class H>
void relu_forward_half(int64_t n, const H* x, H* y);
template <class H>
void relu_backward_half(int64_t n, const H* dy, const H* y, H* dx);

// y = alpha * x on 16-bit arrays: each product formed in float32 (float32's alpha, as the
// float32 kernel scale<float> forms it) and rounded once (kernels/cpu/elementwise.cpp).
template <class H>
void scale_half(int64_t n, float alpha, const H* x, H* y);

}  // namespace dpcore::kernels::cpu
