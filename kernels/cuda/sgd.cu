// One SGD step over whole flat buffers in ONE launch (PyTorch's fused=True idea: Caffe
// and darknet take several passes per tensor). Each element's update is independent, so a
// grid-stride loop with float4 accesses runs at memory bandwidth.
//
// Every operation is rounded on its own (__fmul_rn, __fadd_rn: no fused multiply-add),
// exactly like the CPU reference kernels/cpu/sgd.cpp, so both give the same bits:
//   g = grad + wd*p;  buf = first ? g : mu*buf + (1-dampening)*g;  g = nesterov ? g + mu*buf : buf;  p = p - lr*g
#include "kernels/error.h"
#include "kernels/cuda_runtime/check.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.cuh"

namespace dpcore::kernels::cuda {

namespace {

struct SgdArgs {
  float lr, wd, mu, keep;  // keep = 1 - dampening
  bool use_decay, use_momentum, nesterov, first_step;
};

__device__ __forceinline__ float sgd_update(const SgdArgs& a, float p, float g, float* buf) {
  if (a.use_decay) g = __fadd_rn(g, __fmul_rn(a.wd, p));  // skipped at 0, as in PyTorch: 0 * inf would be NaN
  if (a.use_momentum) {
    const float b = a.first_step ? g : __fadd_rn(__fmul_rn(a.mu, *buf), __fmul_rn(a.keep, g));
    *buf = b;
    g = a.nesterov ? __fadd_rn(g, __fmul_rn(a.mu, b)) : b;
  }
  return __fsub_rn(p, __fmul_rn(a.lr, g));
}

__global__ void sgd_kernel(int64_t n, SgdArgs a, float* param, const float* grad, float* momentum, bool vec) {
  const int64_t first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x, stride = int64_t(gridDim.x) * blockDim.x;
  int64_t done = 0;
  if (vec) {
    const int64_t n4 = n / 4;
    for (int64_t i = first; i < n4; i += stride) {
      float4 p = reinterpret_cast<float4*>(param)[i];
      const float4 g = reinterpret_cast<const float4*>(grad)[i];
      float4 b = a.use_momentum ? reinterpret_cast<float4*>(momentum)[i] : make_float4(0.f, 0.f, 0.f, 0.f);
      p.x = sgd_update(a, p.x, g.x, &b.x);
      p.y = sgd_update(a, p.y, g.y, &b.y);
      p.z = sgd_update(a, p.z, g.z, &b.z);
      p.w = sgd_update(a, p.w, g.w, &b.w);
      reinterpret_cast<float4*>(param)[i] = p;
      if (a.use_momentum) reinterpret_cast<float4*>(momentum)[i] = b;
    }
    done = n4 * 4;
  }
  for (int64_t i = done + first; i < n; i += stride) {
    float unused = 0.f;
    param[i] = sgd_update(a, param[i], grad[i], a.use_momentum ? momentum + i : &unused);
  }
}

}  // namespace

void sgd_step(int64_t n, const SgdConfig& cfg, bool first_step, float* param, const float* grad, float* momentum,
              cudaStream_t stream) {
  SgdArgs a{};
  a.use_momentum = cfg.momentum != 0.0;
  a.use_decay = cfg.weight_decay != 0.0;
  DPCORE_CHECK(!a.use_momentum || momentum, "sgd_step: momentum ", cfg.momentum, " needs a momentum buffer");
  DPCORE_CHECK(!cfg.nesterov || (a.use_momentum && cfg.dampening == 0.0),
               "sgd_step: nesterov needs momentum > 0 and dampening 0 (got momentum ", cfg.momentum, ", dampening ",
               cfg.dampening, ")");
  if (n == 0) return;
  // The hyper-parameters are rounded to float once, as the CPU kernel does.
  a.lr = float(cfg.lr), a.wd = float(cfg.weight_decay), a.mu = float(cfg.momentum), a.keep = float(1.0 - cfg.dampening);
  a.nesterov = cfg.nesterov;
  a.first_step = first_step;
  const bool vec = aligned16(param) && aligned16(grad) && (!a.use_momentum || aligned16(momentum));
  launch("sgd_kernel", sgd_kernel, blocks_for((n + 3) / 4, kElementwiseThreads), kElementwiseThreads, stream, n, a, param, grad,
                                                                                              momentum, vec);
}

}  // namespace dpcore::kernels::cuda
