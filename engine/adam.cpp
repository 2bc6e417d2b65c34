#include "engine/adam.h"

#include <chrono>
#include <cmath>

#include "engine/backend.h"
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
}

void Adam::step() {
  const auto started = std::chrono::steady_clock::now();
  Tensor values = params_.values();
  trace::Span span("optimizer", [&] {
    return trace::Label{"optimizer step", {{"parameters", values.numel()}, {"lr", config_.lr}}};
  });
  backend_for(values.device()).adam_step(config_, steps_ + 1, values, params_.grads(), exp_avg_, exp_avg_sq_);
  ++steps_;
  last_step_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
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
