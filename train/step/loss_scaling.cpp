#include "train/step/loss_scaling.h"

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

}  // namespace dpcore::train
