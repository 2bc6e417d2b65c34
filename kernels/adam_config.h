// The hyper-parameters of an Adam or AdamW step, shared by the CPU and CUDA adam_step
// kernels and the optimizer (engine/adam.h), and the per-step scalars both kernels derive.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/error.h"

namespace dpcore::kernels {

// Hyper-parameters of torch.optim.Adam (decoupled = false: weight decay is an L2 term added
// to the gradient) and torch.optim.AdamW (decoupled = true: the parameter is scaled by
// 1 - lr*weight_decay before the update). kernels/cpu/kernels.h spells the update out.
struct AdamConfig {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool decoupled = false;
};

// Weight decay per element: bit i % 32 of word i / 32 of a mask says whether element i
// decays (ParamSpec::weight_decay of the tensor it belongs to); no mask, every element does.
constexpr int64_t kAdamMaskBits = 32;
inline int64_t adam_mask_words(int64_t n) { return (n + kAdamMaskBits - 1) / kAdamMaskBits; }
#ifdef __CUDACC__
__host__ __device__
#endif
inline bool adam_decays(const uint32_t* mask, int64_t i) {
  return !mask || ((mask[i / kAdamMaskBits] >> (i % kAdamMaskBits)) & 1u);
}

// The scalars of step number `step` (1 for the first), in double as PyTorch's Python
// computes them; each kernel rounds them to its element type once.
struct AdamStepScalars {
  double neg_step_size;          // -lr / (1 - beta1^step)
  double bias_correction2_sqrt;  // sqrt(1 - beta2^step)
  double decay_keep;             // AdamW: 1 - lr * weight_decay
};

// The scalars of a step, after checking what a kernel needs: a step number >= 1 and both
// moment buffers (non-null even when there are no elements).
inline AdamStepScalars prepare_adam_step(const AdamConfig& cfg, int64_t step, const void* exp_avg,
                                         const void* exp_avg_sq) {
  DPCORE_CHECK(step >= 1, "adam_step: step number ", step, " must be >= 1 (1 is the first step)");
  DPCORE_CHECK(exp_avg && exp_avg_sq, "adam_step: needs both moment buffers (exp_avg and exp_avg_sq)");
  const double s = double(step);
  return {-(cfg.lr / (1 - std::pow(cfg.beta1, s))), std::sqrt(1 - std::pow(cfg.beta2, s)),
          1 - cfg.lr * cfg.weight_decay};
}

}  // namespace dpcore::kernels
