#include "train/step/loss_scaling.h"

#include "kernels/error.h"
#include "train/step/step.h"

namespace dpcore::train {

std::unique_ptr<GradScaler> make_loss_scaler(const layers::Model& model) {
  if (model.precision() != DType::Float16) return nullptr;
  return std::make_unique<GradScaler>();
}

double backward_seed(int64_t counted, const GradScaler* scaler) {
  return gradient_scale(counted) * (scaler ? double(scaler->get_scale()) : 1.0);
}

bool scaled_step(GradScaler& scaler, Optimizer& optimizer, const Tensor& grads) {
  const bool stepped = scaler.step(optimizer, grads);
  scaler.update();
  return !stepped;
}

void check_replicas_agree_on_overflow(const std::vector<char>& overflowed, int64_t step) {
  for (size_t r = 1; r < overflowed.size(); ++r)
    DPCORE_CHECK(overflowed[r] == overflowed[0], "--precision fp16: at step ", step, " replica ", r,
                 overflowed[r] ? " found" : " did not find",
                 " an Inf or NaN in its gradients and replica 0 did not: their reduced gradients differ");
}

}  // namespace dpcore::train
