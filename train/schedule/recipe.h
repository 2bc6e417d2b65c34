// The training defaults a reference model comes with: what `dpcore train --model NAME` uses
// for every flag the user does not give, so that the model reaches its documented accuracy
// with no flags at all (README). The plain CNNs keep the global defaults; the ResNets use
// the recipe the PyTorch reference reached 92.97% with on Fashion-MNIST in 10
// epochs: SGD with Nesterov momentum 0.9 and weight decay 5e-4, batch 128, one-cycle to
// 0.1 with a 15% warm-up, no augmentation (crop and flip cost accuracy in 10 epochs: 91.2%).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "engine/sgd.h"

namespace dpcore::train {

struct Recipe {
  int64_t epochs = 0, batch = 0;
  SgdConfig sgd;
  std::string lr_schedule;
  double warmup_fraction = 0;  // of the run's optimizer steps
  std::string augment;
};

// The recipe of a reference model, or nothing (the global defaults apply).
std::optional<Recipe> model_recipe(const std::string& model);

}  // namespace dpcore::train
