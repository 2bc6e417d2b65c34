// One torch.optim.Adam / AdamW step over a flat parameter buffer and its two moment
// buffers. The hyper-parameters and the step's scalars are rounded to T once and each
// operation is rounded as in PyTorch's single-tensor path (kernels/cpu/kernels.h):
//   Adam: g = grad + wd*p;   AdamW: p = p * (1 - lr*wd);   (where decay_mask says so)
//   m = beta1*m + (1-beta1)*g;  v = beta2*v + ((1-beta2)*g)*g;
//   p = p + (neg_step_size * m) / (sqrt(v) / bias_correction2_sqrt + eps)
// Every operation is IEEE-rounded on its own (this file is compiled with -ffp-contract=off:
// no multiply-add is fused), so the float loop can run at any vector width with the same
// bits: it is built for AVX-512, AVX2 and the baseline (vector_variants.h), and
// -fno-math-errno lets sqrt vectorise (vsqrtps is correctly rounded, as sqrtss is).
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vector_variants.h"

namespace dpcore::kernels::cpu {

namespace {

// A step's operands and scalars, rounded to T once.
template <class T>
struct AdamUpdate {
  T* param;
  const T* grad;
  T* exp_avg;
  T* exp_avg_sq;
  const uint32_t* decay_mask;
  T wd, keep, beta1, beta2, rest1, rest2, eps, neg_step_size, bias_correction2_sqrt;
  // Weight decay is skipped at 0, as in PyTorch: 0 * inf would be NaN. The first step does
  // not read the moments: PyTorch's zeros, bit for bit (0*beta is +0).
  bool l2, decoupled, first;
};

// Elements [begin, end), every one decaying as kL2 and kDecoupled say: the step's flags
// fixed at compile time, so that the loop holds no branch and vectorises. The operands are
// copied into locals so that the stores cannot be taken to change them.
template <bool kL2, bool kDecoupled, bool kFirst, class T>
DPCORE_VECTOR_LOOP void adam_run(int64_t begin, int64_t end, const AdamUpdate<T>& u) {
  T* const param = u.param;
  const T* const grad = u.grad;
  T* const exp_avg = u.exp_avg;
  T* const exp_avg_sq = u.exp_avg_sq;
  const T wd = u.wd, keep = u.keep, beta1 = u.beta1, beta2 = u.beta2, rest1 = u.rest1, rest2 = u.rest2, eps = u.eps,
          neg_step_size = u.neg_step_size, bias_correction2_sqrt = u.bias_correction2_sqrt;
  for (int64_t i = begin; i < end; ++i) {
    T p = param[i], g = grad[i];
    if constexpr (kL2) g = g + wd * p;
    if constexpr (kDecoupled) p = p * keep;
    // The first step adds the moments' zero state, +0 (which turns a -0 term into +0, as
    // PyTorch's zeros do), without reading the buffers.
    const T m = (kFirst ? T(0) : beta1 * exp_avg[i]) + rest1 * g;
    const T v = (kFirst ? T(0) : beta2 * exp_avg_sq[i]) + (rest2 * g) * g;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    const T denom = std::sqrt(v) / bias_correction2_sqrt + eps;
    param[i] = p + (neg_step_size * m) / denom;
  }
}

// Elements [begin, end), begin a multiple of kAdamMaskBits, with weight decay kL2 or
// kDecoupled where the mask says. A mask marks whole tensors, so its words come in long
// runs of all ones (decaying weights) and all zeros (biases, norms): each run is one
// branch-free loop; a word that mixes both (where two tensors meet) goes element by element.
template <bool kL2, bool kDecoupled, bool kFirst, class T>
DPCORE_VECTOR_LOOP void adam_masked(int64_t begin, int64_t end, const AdamUpdate<T>& u) {
  const uint32_t* mask = u.decay_mask;
  int64_t i = begin;
  while (i < end) {
    const uint32_t word = mask[i / kAdamMaskBits];
    int64_t next = std::min(end, i + kAdamMaskBits);
    if (word == ~0u || word == 0u) {
      while (next < end && mask[next / kAdamMaskBits] == word) next = std::min(end, next + kAdamMaskBits);
      if (word) {
        adam_run<kL2, kDecoupled, kFirst>(i, next, u);
      } else {
        adam_run<false, false, kFirst>(i, next, u);
      }
    } else {
      for (int64_t e = i; e < next; ++e) {
        if ((word >> (e - i)) & 1u) {
          adam_run<kL2, kDecoupled, kFirst>(e, e + 1, u);
        } else {
          adam_run<false, false, kFirst>(e, e + 1, u);
        }
      }
    }
    i = next;
  }
}

// The instance for the step's flags (a mask matters only with weight decay).
template <class T>
DPCORE_VECTOR_LOOP void adam_range_any(int64_t begin, int64_t end, const AdamUpdate<T>& u) {
  const bool masked = u.decay_mask && (u.l2 || u.decoupled);
  auto with = [&](auto l2, auto decoupled, auto first) {
    constexpr bool kL2 = decltype(l2)::value, kDecoupled = decltype(decoupled)::value, kFirst = decltype(first)::value;
    if (masked) {
      adam_masked<kL2, kDecoupled, kFirst>(begin, end, u);
    } else {
      adam_run<kL2, kDecoupled, kFirst>(begin, end, u);
    }
  };
  using Yes = std::true_type;
  using No = std::false_type;
  auto by_first = [&](auto l2, auto decoupled) { u.first ? with(l2, decoupled, Yes{}) : with(l2, decoupled, No{}); };
  if (u.l2) {
    by_first(Yes{}, No{});
  } else if (u.decoupled) {
    by_first(No{}, Yes{});
  } else {
    by_first(No{}, No{});
  }
}
DPCORE_VECTOR_LOOP void adam_float_loop(int64_t begin, int64_t end, const AdamUpdate<float>& u) {
  adam_range_any(begin, end, u);
}
DPCORE_VECTOR_VARIANTS(adam_float, (int64_t begin, int64_t end, const AdamUpdate<float>& u), (begin, end, u))
void adam_range(int64_t begin, int64_t end, const AdamUpdate<float>& u) { adam_float(begin, end, u); }
void adam_range(int64_t begin, int64_t end, const AdamUpdate<double>& u) { adam_range_any(begin, end, u); }

}  // namespace

template <class T>
void adam_step(int64_t n, const AdamConfig& cfg, int64_t step, T* param, const T* grad, T* exp_avg, T* exp_avg_sq,
               const uint32_t* decay_mask) {
  const AdamStepScalars s = prepare_adam_step(cfg, step, exp_avg, exp_avg_sq);
  const AdamUpdate<T> u{param,
                        grad,
                        exp_avg,
                        exp_avg_sq,
                        decay_mask,
                        T(cfg.weight_decay),
                        T(s.decay_keep),
                        T(cfg.beta1),
                        T(cfg.beta2),
                        T(1.0 - cfg.beta1),
                        T(1.0 - cfg.beta2),
                        T(cfg.eps),
                        T(s.neg_step_size),
                        T(s.bias_correction2_sqrt),
                        cfg.weight_decay != 0.0 && !cfg.decoupled,
                        cfg.weight_decay != 0.0 && cfg.decoupled,
                        step == 1};
  // Contiguous shares of whole mask words, one per thread: each element's update is
  // independent of the others.
  const int parts = n >= kMinParallelElements ? kernel_threads() : 1;
#pragma omp parallel for num_threads(parts) if (parts > 1) schedule(static)
  for (int part = 0; part < parts; ++part) {
    const Range words = split_range(adam_mask_words(n), parts, part);
    adam_range(words.begin * kAdamMaskBits, std::min(n, words.end * kAdamMaskBits), u);
  }
}

template void adam_step<float>(int64_t, const AdamConfig&, int64_t, float*, const float*, float*, float*,
                               const uint32_t*);
template void adam_step<double>(int64_t, const AdamConfig&, int64_t, double*, const double*, double*, double*,
                                const uint32_t*);

}  // namespace dpcore::kernels::cpu
