// The CPU kernels of issue 24 on BERT's shapes (float32), 1 and 2 threads; part of
// cpu_kernels_bench. The arguments are the shapes themselves, so a benchmark's name says
// what it ran (bench/compare_cpu_ops.py reads them from there to run PyTorch on the same).
//   attention, fused against explicit: GFLOP/s counted with the explicit formula
//   layer_norm, gelu, softmax, dropout, AdamW: GB/s beside a copy of as many bytes, in the same run
//   cpu_kernels_bench --benchmark_filter='Attention|LayerNorm|Gelu|Softmax|Dropout|AdamW'
#include <benchmark/benchmark.h>

#include <omp.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "bench/cpu_bench_support.h"
#include "kernels/cpu/kernels.h"

namespace {

namespace cpu = dpcore::kernels::cpu;
using dpcore::bench::random_floats;
using dpcore::bench::report_flops;
using dpcore::kernels::AttentionShape;
using dpcore::kernels::BatchedMatmulShape;
using Clock = std::chrono::steady_clock;

constexpr int64_t kThreadCounts[] = {1, 2};

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// ---- attention, [B, H, T, d], no mask ----
// fused 1: the op (cpu::attention_forward / attention_backward, FlashAttention-2 blocked).
// fused 0: the explicit formula composed of our own kernels, as PyTorch's math path does it:
//   forward   qs = q * scale; S = qs k^T; P = softmax(S); o = P v
//   backward  (P kept by the forward) dv = P^T do; dP = do v^T; dS = softmax_backward(dP, P);
//             dq = (dS k) * scale; dk = dS^T qs
// Both are counted with the explicit formula: forward 4 B H T^2 d flops (Q K^T and P V),
// backward 8 B H T^2 d (dP, dv, dq, dk). The fused backward does 2 B H T^2 d more, the
// product Q K^T it recomputes instead of keeping P, not counted: GFLOP/s is useful work.
struct AttentionBuffers {
  AttentionShape s;
  std::vector<float> q, k, v, o, dout, dq, dk, dv;
  explicit AttentionBuffers(const AttentionShape& shape)
      : s(shape), q(random_floats(s.q_size())), k(random_floats(s.kv_size())), v(random_floats(s.kv_size())),
        o(s.q_size()), dout(random_floats(s.q_size())), dq(s.q_size()), dk(s.kv_size()), dv(s.kv_size()) {}
};

AttentionShape attention_shape(const benchmark::State& state) {
  AttentionShape s;
  s.B = state.range(0), s.H = state.range(1), s.Tq = s.Tk = state.range(2), s.d = state.range(3);
  s.scale = 1.0 / std::sqrt(double(s.d));
  return s;
}

double attention_forward_flops(const AttentionShape& s) { return 4.0 * s.B * s.H * s.Tq * s.Tk * s.d; }

// The explicit path's products over the B*H heads, and its probabilities P [B*H, T, T].
struct ExplicitAttention {
  const AttentionShape s;
  const BatchedMatmulShape scores, values, grad_v, grad_p, grad_q, grad_k;
  std::vector<float> qs, logits, p, dp, ds;
  explicit ExplicitAttention(const AttentionShape& a)
      : s(a),
        scores{a.B * a.H, a.Tq, a.Tk, a.d, false, true},   // S = qs k^T
        values{a.B * a.H, a.Tq, a.d, a.Tk, false, false},  // o = P v
        grad_v{a.B * a.H, a.Tk, a.d, a.Tq, true, false},   // dv = P^T do
        grad_p{a.B * a.H, a.Tq, a.Tk, a.d, false, true},   // dP = do v^T
        grad_q{a.B * a.H, a.Tq, a.d, a.Tk, false, false},  // dq = dS k
        grad_k{a.B * a.H, a.Tk, a.d, a.Tq, true, false},   // dk = dS^T qs
        qs(a.q_size()), logits(scores.c_size()), p(scores.c_size()), dp(scores.c_size()), ds(scores.c_size()) {}

  void forward(const float* q, const float* k, const float* v, float* o) {
    cpu::scale(s.q_size(), float(s.scale), q, qs.data());
    cpu::batched_matmul(scores, qs.data(), k, logits.data());
    cpu::softmax_forward(dpcore::kernels::softmax_shape({s.B * s.H, s.Tq, s.Tk}, nullptr, false), logits.data(),
                         static_cast<const float*>(nullptr), p.data());
    cpu::batched_matmul(values, p.data(), v, o);
  }
  void backward(const float* k, const float* v, const float* dout, float* dq, float* dk, float* dv) {
    cpu::batched_matmul(grad_v, p.data(), dout, dv);
    cpu::batched_matmul(grad_p, dout, v, dp.data());
    cpu::softmax_backward(s.B * s.H * s.Tq, s.Tk, dp.data(), p.data(), ds.data());
    cpu::batched_matmul(grad_q, ds.data(), k, dq);
    cpu::scale(s.q_size(), float(s.scale), dq, dq);
    cpu::batched_matmul(grad_k, ds.data(), qs.data(), dk);
  }
};

const char* attention_label(const benchmark::State& state) {
  return state.range(5) ? "fused" : "explicit: batched_matmul + softmax + batched_matmul";
}

void BM_AttentionForward(benchmark::State& state) {
  AttentionBuffers a(attention_shape(state));
  dpcore::bench::prepare(state, int(state.range(4)), attention_label(state));
  if (state.range(5)) {
    std::vector<float> lse(a.s.rows());
    for (auto _ : state) {
      cpu::attention_forward(a.s, a.q.data(), a.k.data(), a.v.data(), static_cast<const float*>(nullptr),
                             a.o.data(), lse.data());
      benchmark::ClobberMemory();
    }
  } else {
    ExplicitAttention e(a.s);
    for (auto _ : state) {
      e.forward(a.q.data(), a.k.data(), a.v.data(), a.o.data());
      benchmark::ClobberMemory();
    }
  }
  report_flops(state, attention_forward_flops(a.s));
}

void BM_AttentionBackward(benchmark::State& state) {
  AttentionBuffers a(attention_shape(state));
  dpcore::bench::prepare(state, int(state.range(4)), attention_label(state));
  if (state.range(5)) {
    std::vector<float> lse(a.s.rows());
    std::vector<double> row_dot(a.s.rows());
    cpu::attention_forward(a.s, a.q.data(), a.k.data(), a.v.data(), static_cast<const float*>(nullptr),
                           a.o.data(), lse.data());
    for (auto _ : state) {
      cpu::attention_backward(a.s, a.q.data(), a.k.data(), a.v.data(), static_cast<const float*>(nullptr),
                              a.o.data(), lse.data(), a.dout.data(), row_dot.data(), a.dq.data(), a.dk.data(),
                              a.dv.data());
      benchmark::ClobberMemory();
    }
  } else {
    ExplicitAttention e(a.s);
    e.forward(a.q.data(), a.k.data(), a.v.data(), a.o.data());
    for (auto _ : state) {
      e.backward(a.k.data(), a.v.data(), a.dout.data(), a.dq.data(), a.dk.data(), a.dv.data());
      benchmark::ClobberMemory();
    }
  }
  report_flops(state, 2 * attention_forward_flops(a.s));
}

// bert-tiny (2 heads) and bert-mini (4 heads) at sequence length 128, batch 32, and
// bert-mini's heads at T = 512 (batch 8, so that the explicit path's S, P, dP and dS are
// 32 MiB each).
// Each shape and thread count runs fused, then explicit, back to back.
void attention_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"B", "H", "T", "d", "threads", "fused"});
  for (const auto& shape : {std::vector<int64_t>{32, 2, 128, 64}, {32, 4, 128, 64}, {8, 4, 512, 64}})
    for (int64_t threads : kThreadCounts)
      for (int64_t fused : {1, 0}) b->Args({shape[0], shape[1], shape[2], shape[3], threads, fused});
  b->UseRealTime()->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_AttentionForward)->Apply(attention_args);
BENCHMARK(BM_AttentionBackward)->Apply(attention_args);

// ---- memory-bound kernels against the machine's copy bandwidth ----
// A parallel memcpy of `bytes` over the kernels' thread count, in equal contiguous parts.
class Copy {
 public:
  explicit Copy(size_t bytes) : src_(bytes, 1), dst_(bytes) {}
  void operator()(int threads) {
    const size_t n = src_.size();
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int t = 0; t < threads; ++t) {
      const size_t begin = n * t / threads, end = n * (t + 1) / threads;
      std::memcpy(dst_.data() + begin, src_.data() + begin, end - begin);
    }
    benchmark::DoNotOptimize(dst_.data());
  }

 private:
  std::vector<char> src_, dst_;
};

// Times `kernel` (the iteration time: manual) and, after it in every iteration, a copy that
// moves as many bytes as the kernel must move at least (`bytes`: bytes / 2 read, bytes / 2
// written) on the same threads, timed apart, so that both see the machine at the same
// moment and their working sets are the same size. Counters: GB/s = bytes / kernel time,
// copy_GB/s = bytes / copy time, frac_copy_bw = the first over the second.
void run_against_copy(benchmark::State& state, int threads, double bytes, const std::function<void()>& kernel) {
  Copy copy(size_t(bytes / 2));
  kernel();  // first touch of the outputs
  copy(threads);
  double kernel_s = 0.0, copy_s = 0.0;
  for (auto _ : state) {
    const auto start = Clock::now();
    kernel();
    benchmark::ClobberMemory();
    const double t = seconds_since(start);
    state.SetIterationTime(t);
    kernel_s += t;
    const auto copy_start = Clock::now();
    copy(threads);
    copy_s += seconds_since(copy_start);
  }
  const double runs = double(state.iterations());
  state.counters["GB/s"] = bytes * runs / kernel_s / 1e9;
  state.counters["copy_GB/s"] = bytes * runs / copy_s / 1e9;
  state.counters["frac_copy_bw"] = copy_s / kernel_s;
}

void manual_time(benchmark::internal::Benchmark* b) { b->UseManualTime()->Unit(benchmark::kMicrosecond); }

// layer_norm over [rows, cols] (rows = batch 32 x T 128), affine. Bytes at least: forward
// reads x, weight, bias and writes y, mean, rstd: 4 (2 rows cols + 2 cols + 2 rows);
// backward reads dy, x, weight, mean, rstd and writes dx, dweight, dbias:
// 4 (3 rows cols + 3 cols + 2 rows).
struct LayerNormBuffers {
  int64_t rows, cols;
  std::vector<float> x, weight, bias, y, mean, rstd, dy, dx, dweight, dbias;
  explicit LayerNormBuffers(const benchmark::State& state)
      : rows(state.range(0)), cols(state.range(1)), x(random_floats(rows * cols)), weight(random_floats(cols)),
        bias(random_floats(cols)), y(rows * cols), mean(rows), rstd(rows), dy(random_floats(rows * cols)),
        dx(rows * cols), dweight(cols), dbias(cols) {}
  void forward() {
    cpu::layer_norm_forward(rows, cols, x.data(), weight.data(), bias.data(), 1e-12, y.data(), mean.data(),
                            rstd.data());
  }
};

void BM_LayerNormForward(benchmark::State& state) {
  LayerNormBuffers l(state);
  const int threads = int(state.range(2));
  dpcore::bench::prepare(state, threads, "eps 1e-12 (BERT's)");
  run_against_copy(state, threads, 4.0 * (2 * l.rows * l.cols + 2 * l.cols + 2 * l.rows), [&] { l.forward(); });
}

void BM_LayerNormBackward(benchmark::State& state) {
  LayerNormBuffers l(state);
  const int threads = int(state.range(2));
  dpcore::bench::prepare(state, threads, "dx, dweight, dbias");
  l.forward();
  run_against_copy(state, threads, 4.0 * (3 * l.rows * l.cols + 3 * l.cols + 2 * l.rows), [&] {
    cpu::layer_norm_backward(l.rows, l.cols, l.dy.data(), l.x.data(), l.weight.data(), l.mean.data(),
                             l.rstd.data(), l.dx.data(), l.dweight.data(), l.dbias.data(), false);
  });
}

// bert-tiny's hidden 128 and bert-mini's 256, over batch 32 x T 128 rows.
void layer_norm_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"rows", "cols", "threads"});
  for (int64_t cols : {128, 256})
    for (int64_t threads : kThreadCounts) b->Args({32 * 128, cols, threads});
  manual_time(b);
}
BENCHMARK(BM_LayerNormForward)->Apply(layer_norm_args);
BENCHMARK(BM_LayerNormBackward)->Apply(layer_norm_args);

// gelu over n elements (form 0: approximate="none", erf; 1: "tanh"). Bytes at least: forward
// reads x, writes y: 8 n; backward reads dy and x, writes dx: 12 n.
dpcore::kernels::GeluApproximate gelu_form(const benchmark::State& state) {
  return state.range(0) ? dpcore::kernels::GeluApproximate::Tanh : dpcore::kernels::GeluApproximate::None;
}
const char* gelu_label(const benchmark::State& state) { return state.range(0) ? "tanh" : "none (erf)"; }

void BM_GeluForward(benchmark::State& state) {
  const int64_t n = state.range(1);
  const int threads = int(state.range(2));
  dpcore::bench::prepare(state, threads, gelu_label(state));
  auto x = random_floats(n);
  std::vector<float> y(n);
  run_against_copy(state, threads, 8.0 * n, [&] { cpu::gelu_forward(gelu_form(state), n, x.data(), y.data()); });
}

void BM_GeluBackward(benchmark::State& state) {
  const int64_t n = state.range(1);
  const int threads = int(state.range(2));
  dpcore::bench::prepare(state, threads, gelu_label(state));
  auto x = random_floats(n), dy = random_floats(n);
  std::vector<float> dx(n);
  run_against_copy(state, threads, 12.0 * n,
                   [&] { cpu::gelu_backward(gelu_form(state), n, dy.data(), x.data(), dx.data()); });
}

// The intermediate activations of bert-tiny (512) and bert-mini (1024) over 32 x 128 tokens.
void gelu_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"form", "n", "threads"});
  for (int64_t form : {0, 1})
    for (int64_t intermediate : {512, 1024})
      for (int64_t threads : kThreadCounts) b->Args({form, 32 * 128 * intermediate, threads});
  manual_time(b);
}
BENCHMARK(BM_GeluForward)->Apply(gelu_args);
BENCHMARK(BM_GeluBackward)->Apply(gelu_args);

// softmax over the last dimension of [rows, cols], no mask. Bytes at least: forward reads x,
// writes y: 8 rows cols; backward reads dy and y, writes dx: 12 rows cols.
void BM_SoftmaxForward(benchmark::State& state) {
  const int64_t rows = state.range(0), cols = state.range(1);
  const int threads = int(state.range(2));
  dpcore::bench::prepare(state, threads, "no mask");
  const auto shape = dpcore::kernels::softmax_shape({rows, cols}, nullptr, false);
  auto x = random_floats(rows * cols);
  std::vector<float> y(rows * cols);
  run_against_copy(state, threads, 8.0 * rows * cols, [&] {
    cpu::softmax_forward(shape, x.data(), static_cast<const float*>(nullptr), y.data());
  });
}

void BM_SoftmaxBackward(benchmark::State& state) {
  const int64_t rows = state.range(0), cols = state.range(1);
  const int threads = int(state.range(2));
  dpcore::bench::prepare(state, threads, "from the output");
  auto dy = random_floats(rows * cols), y = random_floats(rows * cols);
  std::vector<float> dx(rows * cols);
  run_against_copy(state, threads, 12.0 * rows * cols,
                   [&] { cpu::softmax_backward(rows, cols, dy.data(), y.data(), dx.data()); });
}

// The attention scores of bert-tiny [32, 2, 128, 128] and bert-mini [32, 4, 128, 128], and
// of the T = 512 attention case above [8, 4, 512, 512], as rows of T.
void softmax_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"rows", "cols", "threads"});
  for (const auto& shape : {std::vector<int64_t>{32 * 2 * 128, 128}, {32 * 4 * 128, 128}, {8 * 4 * 512, 512}})
    for (int64_t threads : kThreadCounts) b->Args({shape[0], shape[1], threads});
  manual_time(b);
}
BENCHMARK(BM_SoftmaxForward)->Apply(softmax_args);
BENCHMARK(BM_SoftmaxBackward)->Apply(softmax_args);

// dropout (p 0.1) over [samples, sample_size]: bert-tiny's hidden states [32, 128 x 128]
// and attention probabilities [32, 2 x 128 x 128]. The backward is the same kernel on dy.
// Bytes at least: reads x, writes y: 8 n.
void BM_Dropout(benchmark::State& state) {
  const int64_t samples = state.range(0), sample_size = state.range(1), n = samples * sample_size;
  const int threads = int(state.range(2));
  dpcore::bench::prepare(state, threads, "p 0.1");
  auto x = random_floats(n);
  std::vector<float> y(n);
  dpcore::kernels::DropoutConfig cfg{0.1, 2026, 0, 0};
  run_against_copy(state, threads, 8.0 * n, [&] {
    ++cfg.step;  // a new mask every iteration, as in training
    cpu::dropout(cfg, samples, sample_size, x.data(), y.data());
  });
}
void dropout_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"samples", "sample_size", "threads"});
  for (int64_t sample_size : {128 * 128, 2 * 128 * 128})
    for (int64_t threads : kThreadCounts) b->Args({32, sample_size, threads});
  manual_time(b);
}
BENCHMARK(BM_Dropout)->Apply(dropout_args);

// One AdamW step (lr 1e-4, betas 0.9 0.999, eps 1e-8, weight decay 0.01) over a flat
// buffer of n parameters: those of BertForSequenceClassification with 2 labels, bert-tiny
// 4,386,178 and bert-mini 11,171,074; masked 0: every element decays (no mask), 1: a decay
// mask as training passes one (Hugging Face's groups: here every 64th run of 32 elements
// does not decay). Bytes at least: reads param, grad, exp_avg, exp_avg_sq and writes param,
// exp_avg, exp_avg_sq: 28 n. From step 2 on (step 1 reads no moments).
void BM_AdamW(benchmark::State& state) {
  const int64_t n = state.range(0);
  const int threads = int(state.range(1));
  std::vector<uint32_t> mask;
  if (state.range(2)) {
    mask.assign(size_t(dpcore::kernels::adam_mask_words(n)), ~0u);
    for (size_t w = 0; w < mask.size(); w += 64) mask[w] = 0;
  }
  dpcore::bench::prepare(state, threads, n < 8000000 ? "bert-tiny" : "bert-mini");
  auto param = random_floats(n), grad = random_floats(n), exp_avg = random_floats(n), exp_avg_sq = random_floats(n);
  for (float& v : exp_avg_sq) v = std::fabs(v);
  dpcore::kernels::AdamConfig cfg;
  cfg.lr = 1e-4, cfg.weight_decay = 0.01, cfg.decoupled = true;
  int64_t step = 1;
  run_against_copy(state, threads, 28.0 * n, [&] {
    cpu::adam_step(n, cfg, ++step, param.data(), grad.data(), exp_avg.data(), exp_avg_sq.data(),
                   mask.empty() ? nullptr : mask.data());
  });
}
BENCHMARK(BM_AdamW)
    ->ArgNames({"n", "threads", "masked"})
    ->ArgsProduct({{4386178, 11171074}, {1, 2}, {0, 1}})
    ->Apply(manual_time);

}  // namespace
