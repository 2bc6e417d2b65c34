// The hand CUDA kernels of issue 24 on BERT's shapes (float32, no TF32), part of
// cuda_kernels_bench and timed as the rest of it (bench/cuda_bench_support.h). The shapes
// are in the names ("key:value" parts), so bench/compare_gpu.py runs PyTorch on the same.
//   attention, fused against the explicit path (batched_matmul, hand or cuBLAS
//   strided-batched, + softmax): TFLOP/s counted with the explicit formula
//   layer_norm, gelu, softmax, AdamW: GB/s beside a device copy of as many bytes
//   cuda_kernels_bench --benchmark_filter='attention|layer_norm|gelu|softmax_|adamw'
#include <cmath>
#include <string>
#include <vector>

#include "bench/cuda_bench_support.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda_libraries/cublas_linear.h"

namespace dpcore::bench {
namespace {

namespace hand = kernels::cuda;
using kernels::AttentionShape;
using kernels::BatchedMatmulShape;

std::string key(const char* name, int64_t value) { return std::string("/") + name + ":" + std::to_string(value); }

// ---- attention, [B, H, T, d], no mask ----
// fused: hand::attention_forward / attention_backward (FlashAttention-2 tiling).
// explicit_hand, explicit_cublas: the explicit formula of our own kernels, the batched
// products by the hand sgemm_strided_batched or by cuBLAS's:
//   forward   qs = q * scale; S = qs k^T; P = softmax(S); o = P v
//   backward  (P kept by the forward) dv = P^T do; dP = do v^T; dS = softmax_backward(dP, P);
//             dq = (dS k) * scale; dk = dS^T qs
// All three are counted with the explicit formula: forward 4 B H T^2 d flops (Q K^T and
// P V), backward 8 B H T^2 d (dP, dv, dq, dk); the fused backward's recomputation of Q K^T
// (2 B H T^2 d more) is not counted. Bytes at least: forward reads q, k, v and writes o and
// lse; backward reads q, k, v, o, lse, do and writes dq, dk, dv.
struct AttentionCase {
  const char* model;
  int64_t B, H, T, d;
};
const AttentionCase kAttentionCases[] = {
    {"bert-tiny", 32, 2, 128, 64}, {"bert-mini", 32, 4, 128, 64}, {"bert-mini T512", 8, 4, 512, 64},
    {"bert-mini T2048", 8, 4, 2048, 64},
};

struct ExplicitAttention {
  AttentionShape s;
  hand::BatchedSgemmFn gemm;
  BatchedMatmulShape scores, values, grad_v, grad_p, grad_q, grad_k;
  Buffer qs, logits, p, dp, ds;
  ExplicitAttention(const AttentionShape& a, hand::BatchedSgemmFn g)
      : s(a),
        gemm(g),
        scores{a.B * a.H, a.Tq, a.Tk, a.d, false, true},
        values{a.B * a.H, a.Tq, a.d, a.Tk, false, false},
        grad_v{a.B * a.H, a.Tk, a.d, a.Tq, true, false},
        grad_p{a.B * a.H, a.Tq, a.Tk, a.d, false, true},
        grad_q{a.B * a.H, a.Tq, a.d, a.Tk, false, false},
        grad_k{a.B * a.H, a.Tk, a.d, a.Tq, true, false},
        qs(a.q_size()),
        logits(scores.c_size()),
        p(scores.c_size()),
        dp(scores.c_size()),
        ds(scores.c_size()) {}

  void forward(const float* q, const float* k, const float* v, float* o) {
    hand::scale(s.q_size(), float(s.scale), q, qs.f(), nullptr);
    hand::batched_matmul(scores, qs.f(), k, logits.f(), nullptr, gemm);
    hand::softmax_forward(kernels::softmax_shape({s.B * s.H, s.Tq, s.Tk}, nullptr, false), logits.f(), nullptr,
                          p.f(), nullptr);
    hand::batched_matmul(values, p.f(), v, o, nullptr, gemm);
  }
  void backward(const float* k, const float* v, const float* dout, float* dq, float* dk, float* dv) {
    hand::batched_matmul(grad_v, p.f(), dout, dv, nullptr, gemm);
    hand::batched_matmul(grad_p, dout, v, dp.f(), nullptr, gemm);
    hand::softmax_backward(s.B * s.H * s.Tq, s.Tk, dp.f(), p.f(), ds.f(), nullptr);
    hand::batched_matmul(grad_q, ds.f(), k, dq, nullptr, gemm);
    hand::scale(s.q_size(), float(s.scale), dq, dq, nullptr);
    hand::batched_matmul(grad_k, ds.f(), qs.f(), dk, nullptr, gemm);
  }
};

void register_attention(const AttentionCase& c) {
  AttentionShape s;
  s.B = c.B, s.H = c.H, s.Tq = s.Tk = c.T, s.d = c.d, s.scale = 1.0 / std::sqrt(double(c.d));
  const std::string shape = key("B", c.B) + key("H", c.H) + key("T", c.T) + key("d", c.d);
  const double forward_flops = 4.0 * s.B * s.H * s.Tq * s.Tk * s.d;
  const double q = 4.0 * s.q_size(), kv = 4.0 * s.kv_size(), lse = 4.0 * s.rows();
  const Work forward{forward_flops, 2 * q + 2 * kv + lse}, backward{2 * forward_flops, 4 * q + 4 * kv + lse};
  add("attention_fwd/fused" + shape, [=](benchmark::State& state) {
    Buffer bq(s.q_size()), bk(s.kv_size()), bv(s.kv_size()), bo(s.q_size()), blse(s.rows());
    run_timed(state, forward,
              [&] { hand::attention_forward<float>(s, bq.f(), bk.f(), bv.f(), nullptr, bo.f(), blse.f(), nullptr); });
  });
  add("attention_bwd/fused" + shape, [=](benchmark::State& state) {
    Buffer bq(s.q_size()), bk(s.kv_size()), bv(s.kv_size()), bo(s.q_size()), blse(s.rows()), bdo(s.q_size()),
        row_dot(s.rows()), bdq(s.q_size()), bdk(s.kv_size()), bdv(s.kv_size());
    hand::attention_forward<float>(s, bq.f(), bk.f(), bv.f(), nullptr, bo.f(), blse.f(), nullptr);
    run_timed(state, backward, [&] {
      hand::attention_backward<float>(s, bq.f(), bk.f(), bv.f(), nullptr, bo.f(), blse.f(), bdo.f(), row_dot.f(), bdq.f(),
                               bdk.f(), bdv.f(), nullptr);
    });
  });
  struct Engine {
    const char* name;
    hand::BatchedSgemmFn gemm;
  };
  for (Engine e : {Engine{"explicit_hand", hand::sgemm_strided_batched},
                   Engine{"explicit_cublas", kernels::cuda_libraries::cublas::sgemm_strided_batched}}) {
    add(std::string("attention_fwd/") + e.name + shape, [=](benchmark::State& state) {
      Buffer bq(s.q_size()), bk(s.kv_size()), bv(s.kv_size()), bo(s.q_size());
      ExplicitAttention explicit_path(s, e.gemm);
      run_timed(state, forward, [&] { explicit_path.forward(bq.f(), bk.f(), bv.f(), bo.f()); });
    });
    add(std::string("attention_bwd/") + e.name + shape, [=](benchmark::State& state) {
      Buffer bq(s.q_size()), bk(s.kv_size()), bv(s.kv_size()), bo(s.q_size()), bdo(s.q_size()), bdq(s.q_size()),
          bdk(s.kv_size()), bdv(s.kv_size());
      ExplicitAttention explicit_path(s, e.gemm);
      explicit_path.forward(bq.f(), bk.f(), bv.f(), bo.f());
      run_timed(state, backward,
                [&] { explicit_path.backward(bk.f(), bv.f(), bdo.f(), bdq.f(), bdk.f(), bdv.f()); });
    });
  }
}

// ---- memory-bound kernels, each against a device copy of its bytes (measure_copy) ----

// layer_norm over [rows, cols], affine, eps 1e-12 (BERT's): batch 32 x T 128 rows at
// bert-tiny's and bert-mini's hidden sizes, and 16384 x 1024 (bert-large's hidden at
// batch 32 x T 512). Bytes at least: forward reads x, weight, bias and writes y, mean, rstd:
// 4 (2 rows cols + 2 cols + 2 rows); backward reads dy, x, weight, mean, rstd and writes
// dx, dweight, dbias: 4 (3 rows cols + 3 cols + 2 rows).
void register_layer_norm(int64_t rows, int64_t cols) {
  const std::string shape = key("rows", rows) + key("cols", cols);
  const double n = double(rows) * cols;
  add("layer_norm_fwd" + shape, [=](benchmark::State& state) {
    Buffer x(rows * cols), w(cols), b(cols), y(rows * cols), mean(rows), rstd(rows);
    run_timed(state, {0, 4.0 * (2 * n + 2 * cols + 2 * rows)}, [&] {
      hand::layer_norm_forward(rows, cols, x.f(), w.f(), b.f(), 1e-12f, y.f(), mean.f(), rstd.f(), nullptr);
    }, false, true);
  });
  add("layer_norm_bwd" + shape, [=](benchmark::State& state) {
    Buffer x(rows * cols), w(cols), b(cols), y(rows * cols), mean(rows), rstd(rows), dy(rows * cols),
        dx(rows * cols), dw(cols), db(cols);
    hand::layer_norm_forward(rows, cols, x.f(), w.f(), b.f(), 1e-12f, y.f(), mean.f(), rstd.f(), nullptr);
    run_timed(state, {0, 4.0 * (3 * n + 3 * cols + 2 * rows)}, [&] {
      hand::layer_norm_backward(rows, cols, dy.f(), x.f(), w.f(), mean.f(), rstd.f(), dx.f(), dw.f(), db.f(), false,
                                nullptr);
    }, false, true);
  });
}

// gelu over n elements, both forms: bert-tiny's and bert-mini's intermediate activations
// (512, 1024 over 32 x 128 tokens) and 64M (bandwidth-bound). Bytes at least: forward
// reads x, writes y: 8 n; backward reads dy and x, writes dx: 12 n.
void register_gelu(int64_t n) {
  struct Form {
    const char* name;
    kernels::GeluApproximate form;
  };
  for (Form f : {Form{"none", kernels::GeluApproximate::None}, Form{"tanh", kernels::GeluApproximate::Tanh}}) {
    const std::string suffix = std::string("/") + f.name + key("n", n);
    add("gelu_fwd" + suffix, [=](benchmark::State& state) {
      Buffer x(n), y(n);
      run_timed(state, {0, 8.0 * n}, [&] { hand::gelu_forward(f.form, n, x.f(), y.f(), nullptr); }, false, true);
    });
    add("gelu_bwd" + suffix, [=](benchmark::State& state) {
      Buffer dy(n), x(n), dx(n);
      run_timed(state, {0, 12.0 * n}, [&] { hand::gelu_backward(f.form, n, dy.f(), x.f(), dx.f(), nullptr); }, false,
                true);
    });
  }
}

// softmax over the last dimension of [rows, cols], no mask: the attention scores of the
// attention cases above, as rows of T. Bytes at least: forward 8 rows cols (x in, y out);
// backward 12 rows cols (dy and y in, dx out).
void register_softmax(const AttentionCase& c) {
  const int64_t rows = c.B * c.H * c.T, cols = c.T;
  const std::string shape = key("rows", rows) + key("cols", cols);
  const double n = double(rows) * cols;
  add("softmax_fwd" + shape, [=](benchmark::State& state) {
    Buffer x(rows * cols), y(rows * cols);
    const auto s = kernels::softmax_shape({rows, cols}, nullptr, false);
    run_timed(state, {0, 8.0 * n}, [&] { hand::softmax_forward(s, x.f(), nullptr, y.f(), nullptr); }, false, true);
  });
  add("softmax_bwd" + shape, [=](benchmark::State& state) {
    Buffer dy(rows * cols), y(rows * cols), dx(rows * cols);
    run_timed(state, {0, 12.0 * n}, [&] { hand::softmax_backward(rows, cols, dy.f(), y.f(), dx.f(), nullptr); },
              false, true);
  });
}

// One AdamW step (lr 1e-4, betas 0.9 0.999, eps 1e-8, weight decay 0.01 on every element:
// no mask) over the parameters of BertForSequenceClassification with 2 labels: bert-tiny
// 4,386,178, bert-mini 11,171,074, bert-base 109,483,778. From step 2 on (step 1 reads no
// moments). Bytes at least: param, grad, exp_avg, exp_avg_sq read, three written: 28 n.
void register_adamw(int64_t n) {
  add("adamw" + key("n", n), [=](benchmark::State& state) {
    Buffer param(n), grad(n), exp_avg(n), exp_avg_sq(n);
    hand::fill<float>(n, 0.f, exp_avg_sq.f(), nullptr);  // a second moment is >= 0
    kernels::AdamConfig cfg;
    cfg.lr = 1e-4, cfg.weight_decay = 0.01, cfg.decoupled = true;
    int64_t step = 1;
    run_timed(state, {0, 28.0 * n}, [&] {
      hand::adam_step(n, cfg, ++step, param.f(), grad.f(), exp_avg.f(), exp_avg_sq.f(), nullptr, nullptr);
    }, false, true);
  });
}

}  // namespace

void register_transformer_kernels() {
  for (const AttentionCase& c : kAttentionCases) register_attention(c);
  for (int64_t cols : {128, 256}) register_layer_norm(32 * 128, cols);
  register_layer_norm(32 * 512, 1024);
  for (int64_t n : {int64_t(32) * 128 * 512, int64_t(32) * 128 * 1024, int64_t(64) << 20}) register_gelu(n);
  for (const AttentionCase& c : kAttentionCases) register_softmax(c);
  for (int64_t n : {4386178, 11171074, 109483778}) register_adamw(n);
}

}  // namespace dpcore::bench
