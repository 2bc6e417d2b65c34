#include "train/schedule/recipe.h"

namespace dpcore::train {

std::optional<Recipe> model_recipe(const std::string& model) {
  if (model != "resnet8" && model != "resnet20") return std::nullopt;
  Recipe r;
  r.epochs = 10, r.batch = 128;
  r.sgd = SgdConfig{0.1, 0.9, 0.0, 5e-4, true};  // lr, momentum, dampening, weight decay, nesterov
  r.lr_schedule = "onecycle";
  r.warmup_fraction = 0.15;
  r.augment = "none";
  return r;
}

}  // namespace dpcore::train
