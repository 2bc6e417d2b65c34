// The 16-bit matrix products of issue 27 (kernels/cpu/half/gemm_half.h) beside float32
// sgemm on the same shapes, 1 and 2 threads, in one run; part of cpu_kernels_bench:
//   cpu_kernels_bench --benchmark_filter=GemmHalf
// path 0: float32 in and out through OpenBLAS (gemm_parallel), the reference;
// path 1: bfloat16 in and out, the convert path (widen, OpenBLAS sgemm, round);
// path 2: bfloat16 in and out, the AVX512-BF16 kernel (skipped where the CPU lacks it);
// path 3: float16 in and out, the convert path (F16C widening);
// path 4: bfloat16 in and out, the AMX kernel (skipped where the CPU or kernel lacks it).
// GFLOP/s count 2 M N K per product whatever the path.
#include <benchmark/benchmark.h>

#include <iterator>
#include <vector>

#include "bench/cpu_bench_support.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/half/gemm_half.h"

namespace {

namespace cpu = dpcore::kernels::cpu;
using dpcore::kernels::BFloat16;
using dpcore::kernels::Float16;

struct HalfGemmShape {
  const char* name;
  int64_t M, N, K;
  bool trans_a, trans_b;
};
// bert-tiny's linear layers over batch 32 x sequence 128 (x W^T), a weight gradient
// (dy^T x, summing over the 4096 tokens), and a square product.
const HalfGemmShape kShapes[] = {
    {"bert-tiny intermediate 4096x128->512", 4096, 512, 128, false, true},
    {"bert-tiny output 4096x512->128", 4096, 128, 512, false, true},
    {"bert-tiny intermediate dW 512x128 over 4096", 512, 128, 4096, true, false},
    {"square 1024", 1024, 1024, 1024, false, false},
};

template <class H>
std::vector<H> narrowed(const std::vector<float>& f) {
  std::vector<H> h(f.size());
  cpu::cast(int64_t(f.size()), f.data(), h.data());
  return h;
}

void BM_GemmHalf(benchmark::State& state) {
  const HalfGemmShape& s = kShapes[state.range(0)];
  const int path = int(state.range(2));
  dpcore::bench::prepare(state, int(state.range(1)), s.name);
  if (path == 2 && !cpu::cpu_has_avx512_bf16()) {
    state.SkipWithError("this CPU has no AVX512-BF16");
    return;
  }
  if (path == 4 && !cpu::cpu_has_amx_bf16()) {
    state.SkipWithError("this CPU (or its kernel) gives no AMX tiles");
    return;
  }
  const int64_t lda = s.trans_a ? s.M : s.K, ldb = s.trans_b ? s.K : s.N;
  const std::vector<float> a = dpcore::bench::random_floats(s.M * s.K), b = dpcore::bench::random_floats(s.K * s.N);
  std::vector<float> c(size_t(s.M * s.N));
  const auto a16 = narrowed<BFloat16>(a), b16 = narrowed<BFloat16>(b);
  const auto ah = narrowed<Float16>(a), bh = narrowed<Float16>(b);
  std::vector<BFloat16> c16(c.size());
  std::vector<Float16> ch(c.size());
  const cpu::HalfGemmPath before = cpu::half_gemm_path();
  if (path == 1) cpu::set_half_gemm_path(cpu::HalfGemmPath::Convert);
  if (path == 2) cpu::set_half_gemm_path(cpu::HalfGemmPath::Avx512Bf16);
  if (path == 4) cpu::set_half_gemm_path(cpu::HalfGemmPath::AmxBf16);
  for (auto _ : state) {
    if (path == 0) {
      cpu::gemm_parallel(s.trans_a, s.trans_b, s.M, s.N, s.K, 1.f, a.data(), lda, b.data(), ldb, 0.f, c.data(), s.N);
    } else if (path == 3) {
      cpu::gemm_half(s.trans_a, s.trans_b, s.M, s.N, s.K, 1.f, ah.data(), lda, 0, bh.data(), ldb, 0, 0.f, ch.data(),
                     s.N, 0, 1);
    } else {
      cpu::gemm_half(s.trans_a, s.trans_b, s.M, s.N, s.K, 1.f, a16.data(), lda, 0, b16.data(), ldb, 0, 0.f,
                     c16.data(), s.N, 0, 1);
    }
    benchmark::ClobberMemory();
  }
  cpu::set_half_gemm_path(before);
  dpcore::bench::report_flops(state, 2.0 * s.M * s.N * s.K);
}

// {shape, threads, path}: the paths of one shape and thread count one after another, so
// that they see about the same machine.
void half_gemm_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"shape", "threads", "path"});
  for (int64_t shape = 0; shape < int64_t(std::size(kShapes)); ++shape)
    for (int64_t threads : {1, 2})
      for (int64_t path : {0, 1, 2, 3, 4}) b->Args({shape, threads, path});
  b->UseRealTime()->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_GemmHalf)->Apply(half_gemm_args);

}  // namespace
