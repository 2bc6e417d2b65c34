#include "engine/adam.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/backend.h"
#include "engine/seconds_since.h"
#include "engine/trace.h"

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
void check_state(const char* what, const Tensor& given, const Tensor& own) {
  DPCORE_CHECK(given.defined() && given.numel() == own.numel(), "adam: ", what, " buffer ",
               given.defined() ? given.str() : std::string("(none)"), " does not match the model's ", own.str());
}
}  // namespace

Adam::Adam(FlatParameters& params, const AdamConfig& config) : params_(params), config_(config) {
  check_rate("learning rate", config.lr);
  check_beta("beta1", config.beta1);
  check_beta("beta2", config.beta2);
  check_rate("eps", config.eps);
  check_rate("weight decay", config.weight_decay);
  exp_avg_ = Tensor::zeros({params.total()}, params.dtype(), params.device());
  exp_avg_sq_ = Tensor::zeros({params.total()}, params.dtype(), params.device());
  decay_mask_ = decay_mask(params, config.weight_decay);
}

void Adam::step() {
  const SteadyClock::time_point started = SteadyClock::now();
  Tensor values = params_.values();
  trace::Span span("optimizer", [&] {
    return trace::Label{"optimizer step", {{"parameters", values.numel()}, {"lr", config_.lr}}};
  });
  backend_for(values.device()).adam_step(config_, steps_ + 1, values, params_.grads(), exp_avg_, exp_avg_sq_,
                                             decay_mask_);
  ++steps_;
  last_step_seconds_ = seconds_since(started);
}

void Adam::set_lr(double lr) {
  check_rate("learning rate", lr);
  config_.lr = lr;
}

void Adam::restore(const Tensor& exp_avg, const Tensor& exp_avg_sq, int64_t steps) {
  DPCORE_CHECK(steps >= 0, "adam: negative step count ", steps);
  check_state("exp_avg", exp_avg, exp_avg_);
  check_state("exp_avg_sq", exp_avg_sq, exp_avg_sq_);
  exp_avg_.copy_(exp_avg.to(exp_avg_.device()).view(exp_avg_.shape()));
  exp_avg_sq_.copy_(exp_avg_sq.to(exp_avg_sq_.device()).view(exp_avg_sq_.shape()));
  steps_ = steps;
}

}  // namespace dpcore
