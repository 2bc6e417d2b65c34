// The mean over the tokens, [N, T, E] -> [N, E]: a sequence classifier's pooling.
#pragma once

#include <memory>
#include <string>

#include "layers/module.h"

namespace dpcore::layers {

// x.mean(dim=1) in torch: every token counts, padding included (a mean over the attended
// tokens needs the key padding mask, which Module::forward does not carry). Computed as
// the batched product of [N, 1, T] weights 1/T with x, so the sum is of x_t * (1/T)
// rather than torch's (sum of x_t) / T: equal to rounding.
class MeanPool : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  Shape output_shape(const Shape& input) const override;
  std::string describe() const override { return "meanpool"; }
  std::unique_ptr<Module> clone() const override { return std::make_unique<MeanPool>(); }
};

}  // namespace dpcore::layers
