// One torch.optim.SGD step over a flat parameter buffer. The hyper-parameters are rounded
// to T once and each operation is rounded as in PyTorch's single-tensor path:
//   g = grad + wd*p;  buf = first ? g : mu*buf + (1-dampening)*g;  g = nesterov ? g + mu*buf : buf;
//   p = p - lr*g
#include "kernels/error.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/parallel.h"

namespace dpcore::kernels::cpu {

template <class T>
void sgd_step(int64_t n, const SgdConfig& cfg, bool first_step, T* param, const T* grad, T* momentum) {
  const bool use_momentum = cfg.momentum != 0.0, use_decay = cfg.weight_decay != 0.0;
  DPCORE_CHECK(!use_momentum || momentum, "sgd_step: momentum ", cfg.momentum, " needs a momentum buffer");
  DPCORE_CHECK(!cfg.nesterov || (use_momentum && cfg.dampening == 0.0),
               "sgd_step: nesterov needs momentum > 0 and dampening 0 (got momentum ", cfg.momentum, ", dampening ",
               cfg.dampening, ")");
  const T lr = T(cfg.lr), wd = T(cfg.weight_decay), mu = T(cfg.momentum), keep = T(1.0 - cfg.dampening);
  // The flags are loop-invariant: the compiler unswitches them, leaving straight vector loops.
#pragma omp parallel for simd num_threads(kernel_threads()) if (n >= kMinParallelElements) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    T g = grad[i];
    if (use_decay) g = g + wd * param[i];  // skipped at 0, as in PyTorch: 0 * inf would be NaN
    if (use_momentum) {
      T buf = first_step ? g : mu * momentum[i] + keep * g;
      momentum[i] = buf;
      g = cfg.nesterov ? g + mu * buf : buf;
    }
    param[i] = param[i] - lr * g;
  }
}

template void sgd_step<float>(int64_t, const SgdConfig&, bool, float*, const float*, float*);
template void sgd_step<double>(int64_t, const SgdConfig&, bool, double*, const double*, double*);

}  // namespace dpcore::kernels::cpu
