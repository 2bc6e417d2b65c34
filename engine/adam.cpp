#include "engine/adam.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/backend.h"

namespace dpcore {

namespace {
void check_rate(const char* what, double value) {
  DPCORE_CHECK(std::isfinite(value) && value >= 0, "adam: ", what, " ", value, " must be a finite number >= 0");
}
// torch.optim.Adam's rule: 0 <= beta < 1 (at 1 the bias correction divides by zero).
void check_beta(const char* what, double value) {
  DPCORE_CHECK(value >= 0 && value < 1, "adam: ", what, " ", value, " must be in [0, 1)");
}
// One bit per element of the layout, set where the tensor decays (kernels/adam_config.h);
// undefined when weight decay is off or applies to every tensor, so the kernel reads none.
Tensor decay_mask(const FlatParameters& params, double weight_decay) {
  const auto& entries = params.entries();
  const bool all = std::all_of(entries.begin(), entries.end(), [](const auto& e) { return e.weight_decay; });
  if (weight_decay == 0 || all) return Tensor();
  std::vector<uint32_t> bits(size_t(kernels::adam_mask_words(params.total())), 0u);
  for (const auto& e : entries) {
    if (!e.weight_decay) continue;
    for (int64_t i = e.offset; i < e.offset + e.numel; ++i)
      bits[size_t(i / kernels::kAdamMaskBits)] |= 1u << (i % kernels::kAdamMaskBits);
  }
  std::vector<int32_t> words(bits.size());
  std::memcpy(words.data(), bits.data(), bits.size() * sizeof(uint32_t));
  return Tensor::from_vector(words, {int64_t(words.size())}, params.device());
}
}  // namespace

Adam::Adam(FlatParameters& params, const AdamConfig& config) : Optimizer(params), config_(config) {
  check_rate("learning rate", config.lr);
  check_beta("beta1", config.beta1);
  check_beta("beta2", config.beta2);
  check_rate("eps", config.eps);
  check_rate("weight decay", config.weight_decay);
  exp_avg_ = Tensor::zeros({params.total()}, params.dtype(), params.device());
  exp_avg_sq_ = Tensor::zeros({params.total()}, params.dtype(), params.device());
  decay_mask_ = decay_mask(params, config.weight_decay);
}

void Adam::apply(Tensor& values) {
  backend_for(values.device()).adam_step(config_, steps_taken() + 1, values, params_.grads(), exp_avg_, exp_avg_sq_,
                                             decay_mask_);
}

void Adam::set_lr(double lr) {
  check_rate("learning rate", lr);
  config_.lr = lr;
}

void Adam::set_momentum(double momentum) {
  check_beta("beta1", momentum);
  config_.beta1 = momentum;
}

std::vector<double> Adam::hyper_parameters() const {
  return {config_.lr, config_.beta1, config_.beta2, config_.eps, config_.weight_decay, double(config_.decoupled)};
}

std::vector<OptimizerState> Adam::state() const { return {{"exp_avg", exp_avg_}, {"exp_avg_sq", exp_avg_sq_}}; }

}  // namespace dpcore
