// One torch.optim.Adam / AdamW step over a flat parameter buffer and its two moment
// buffers. The hyper-parameters and the step's scalars are rounded to T once and each
// operation is rounded as in PyTorch's single-tensor path (kernels/cpu/kernels.h):
//   Adam: g = grad + wd*p;   AdamW: p = p * (1 - lr*wd);   (where decay_mask says so)
//   m = beta1*m + (1-beta1)*g;  v = beta2*v + ((1-beta2)*g)*g;
//   p = p + (neg_step_size * m) / (sqrt(v) / bias_correction2_sqrt + eps)
#include <cmath>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/parallel.h"

namespace dpcore::kernels::cpu {

template <class T>
void adam_step(int64_t n, const AdamConfig& cfg, int64_t step, T* param, const T* grad, T* exp_avg, T* exp_avg_sq,
               const uint32_t* decay_mask) {
  const AdamStepScalars s = prepare_adam_step(cfg, step, exp_avg, exp_avg_sq);
  // Weight decay is skipped at 0, as in PyTorch: 0 * inf would be NaN.
  const bool l2 = cfg.weight_decay != 0.0 && !cfg.decoupled, decoupled = cfg.weight_decay != 0.0 && cfg.decoupled;
  // The first step does not read the moments: PyTorch's zeros, bit for bit (0*beta is +0).
  const bool first = step == 1;
  const T wd = T(cfg.weight_decay), keep = T(s.decay_keep), beta1 = T(cfg.beta1), beta2 = T(cfg.beta2),
          rest1 = T(1.0 - cfg.beta1), rest2 = T(1.0 - cfg.beta2), eps = T(cfg.eps),
          neg_step_size = T(s.neg_step_size), bias_correction2_sqrt = T(s.bias_correction2_sqrt);
  // The flags are loop-invariant: the compiler unswitches them, leaving straight vector loops.
#pragma omp parallel for simd num_threads(kernel_threads()) if (n >= kMinParallelElements) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    T p = param[i], g = grad[i];
    const bool decays = adam_decays(decay_mask, i);
    if (l2 && decays) g = g + wd * p;
    if (decoupled && decays) p = p * keep;
    const T m = (first ? T(0) : beta1 * exp_avg[i]) + rest1 * g;
    const T v = (first ? T(0) : beta2 * exp_avg_sq[i]) + (rest2 * g) * g;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    const T denom = std::sqrt(v) / bias_correction2_sqrt + eps;
    param[i] = p + (neg_step_size * m) / denom;
  }
}

template void adam_step<float>(int64_t, const AdamConfig&, int64_t, float*, const float*, float*, float*,
                               const uint32_t*);
template void adam_step<double>(int64_t, const AdamConfig&, int64_t, double*, const double*, double*, double*,
                                const uint32_t*);

}  // namespace dpcore::kernels::cpu
