// One Adam / AdamW step over whole flat buffers in ONE launch: parameters, gradients and
// both moment buffers share one layout, and each element's update is independent, so a
// grid-stride loop with float4 accesses runs at memory bandwidth.
//
// Every operation is rounded on its own (__fmul_rn, __fadd_rn, __fdiv_rn, __fsqrt_rn: no
// fused multiply-add, no approximate division or square root), exactly like the CPU
// reference kernels/cpu/adam.cpp, so both give the same bits:
//   Adam: g = grad + wd*p;   AdamW: p = p * (1 - lr*wd);   (where decay_mask says so)
//   m = beta1*m + (1-beta1)*g;  v = beta2*v + ((1-beta2)*g)*g;
//   p = p + (neg_step_size * m) / (sqrt(v) / bias_correction2_sqrt + eps)
#include "kernels/error.h"
#include "kernels/cuda_runtime/check.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.cuh"

namespace dpcore::kernels::cuda {

namespace {

struct AdamArgs {
  float wd, keep, beta1, beta2, rest1, rest2, eps, neg_step_size, bias_correction2_sqrt;  // rest = 1 - beta
  bool l2, decoupled, first_step;
};

// One element: updates *m and *v and returns the new parameter. On the first step m and v
// are not read (PyTorch's zeros, bit for bit: 0 * beta is +0).
__device__ __forceinline__ float adam_update(const AdamArgs& a, bool decays, float p, float g, float* m, float* v) {
  if (a.l2 && decays) g = __fadd_rn(g, __fmul_rn(a.wd, p));  // weight decay is skipped at 0, as in PyTorch
  if (a.decoupled && decays) p = __fmul_rn(p, a.keep);
  const float new_m = __fadd_rn(a.first_step ? 0.f : __fmul_rn(a.beta1, *m), __fmul_rn(a.rest1, g));
  const float new_v = __fadd_rn(a.first_step ? 0.f : __fmul_rn(a.beta2, *v), __fmul_rn(__fmul_rn(a.rest2, g), g));
  *m = new_m;
  *v = new_v;
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(new_v), a.bias_correction2_sqrt), a.eps);
  return __fadd_rn(p, __fdiv_rn(__fmul_rn(a.neg_step_size, new_m), denom));
}

__global__ void adam_kernel(int64_t n, AdamArgs a, float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                            const uint32_t* decay_mask, bool vec) {
  const int64_t first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x, stride = int64_t(gridDim.x) * blockDim.x;
  int64_t done = 0;
  if (vec) {
    const int64_t n4 = n / 4;
    for (int64_t i = first; i < n4; i += stride) {
      float4 p = reinterpret_cast<float4*>(param)[i];
      const float4 g = reinterpret_cast<const float4*>(grad)[i];
      const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
      float4 m = a.first_step ? zero : reinterpret_cast<float4*>(exp_avg)[i];
      float4 v = a.first_step ? zero : reinterpret_cast<float4*>(exp_avg_sq)[i];
      p.x = adam_update(a, adam_decays(decay_mask, 4 * i), p.x, g.x, &m.x, &v.x);
      p.y = adam_update(a, adam_decays(decay_mask, 4 * i + 1), p.y, g.y, &m.y, &v.y);
      p.z = adam_update(a, adam_decays(decay_mask, 4 * i + 2), p.z, g.z, &m.z, &v.z);
      p.w = adam_update(a, adam_decays(decay_mask, 4 * i + 3), p.w, g.w, &m.w, &v.w);
      reinterpret_cast<float4*>(param)[i] = p;
      reinterpret_cast<float4*>(exp_avg)[i] = m;
      reinterpret_cast<float4*>(exp_avg_sq)[i] = v;
    }
    done = n4 * 4;
  }
  for (int64_t i = done + first; i < n; i += stride) {
    param[i] = adam_update(a, adam_decays(decay_mask, i), param[i], grad[i], exp_avg + i, exp_avg_sq + i);
  }
}

}  // namespace

void adam_step(int64_t n, const AdamConfig& cfg, int64_t step, float* param, const float* grad, float* exp_avg,
               float* exp_avg_sq, const uint32_t* decay_mask, cudaStream_t stream) {
  const AdamStepScalars s = prepare_adam_step(cfg, step, exp_avg, exp_avg_sq);
  if (n == 0) return;
  // The hyper-parameters and the step's scalars are rounded to float once, as the CPU kernel does.
  AdamArgs a{};
  a.l2 = cfg.weight_decay != 0.0 && !cfg.decoupled;
  a.decoupled = cfg.weight_decay != 0.0 && cfg.decoupled;
  a.first_step = step == 1;
  a.wd = float(cfg.weight_decay), a.keep = float(s.decay_keep);
  a.beta1 = float(cfg.beta1), a.beta2 = float(cfg.beta2), a.rest1 = float(1.0 - cfg.beta1), a.rest2 = float(1.0 - cfg.beta2);
  a.eps = float(cfg.eps), a.neg_step_size = float(s.neg_step_size), a.bias_correction2_sqrt = float(s.bias_correction2_sqrt);
  const bool vec = aligned16(param) && aligned16(grad) && aligned16(exp_avg) && aligned16(exp_avg_sq);
  launch("adam_kernel", adam_kernel, blocks_for((n + 3) / 4, kElementwiseThreads), kElementwiseThreads, stream, n, a,
         param, grad, exp_avg, exp_avg_sq, decay_mask, vec);
}

}  // namespace dpcore::kernels::cuda
