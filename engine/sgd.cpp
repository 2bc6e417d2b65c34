#include "engine/sgd.h"

#include <cmath>

#include "engine/backend.h"
#include "engine/seconds_since.h"
#include "engine/trace.h"

namespace dpcore {

namespace {
void check_rate(const char* what, double value) {
  DPCORE_CHECK(std::isfinite(value) && value >= 0, "sgd: ", what, " ", value, " must be a finite number >= 0");
}
}  // namespace

Sgd::Sgd(FlatParameters& params, const SgdConfig& config) : params_(params), config_(config) {
  check_rate("learning rate", config.lr);
  check_rate("momentum", config.momentum);
  check_rate("weight decay", config.weight_decay);
  DPCORE_CHECK(!config.nesterov || (config.momentum > 0 && config.dampening == 0),
               "sgd: nesterov momentum requires a momentum > 0 and zero dampening (as in PyTorch)");
  if (config.momentum > 0) {
    momentum_ = Tensor::zeros({params.total()}, params.dtype(), params.device());
  }
}

void Sgd::step() {
  const SteadyClock::time_point started = SteadyClock::now();
  Tensor values = params_.values();
  Tensor momentum = momentum_;  // undefined without momentum
  trace::Span span("optimizer", [&] {
    return trace::Label{"optimizer step", {{"parameters", values.numel()}, {"lr", config_.lr}}};
  });
  backend_for(values.device()).sgd_step(config_, steps_ == 0, values, params_.grads(), momentum);
  ++steps_;
  last_step_seconds_ = seconds_since(started);
}

void Sgd::set_lr(double lr) {
  check_rate("learning rate", lr);
  config_.lr = lr;
}

void Sgd::set_momentum(double momentum) {
  check_rate("momentum", momentum);
  if (momentum == config_.momentum) return;
  DPCORE_CHECK(momentum > 0 && config_.momentum > 0, "sgd: momentum can change only between values > 0 (from ",
               config_.momentum, " to ", momentum, ")");
  config_.momentum = momentum;
}

void Sgd::restore(const Tensor& momentum, int64_t steps) {
  DPCORE_CHECK(steps >= 0, "sgd: negative step count ", steps);
  if (momentum_.defined()) {
    DPCORE_CHECK(momentum.defined() && momentum.numel() == momentum_.numel(), "sgd: momentum buffer ",
                 momentum.str(), " does not match the model's ", momentum_.str());
    momentum_.copy_(momentum.to(momentum_.device()).view(momentum_.shape()));
  }
  steps_ = steps;
}

void Sgd::set_steps_taken(int64_t steps) {
  DPCORE_CHECK(steps >= 0, "sgd: negative step count ", steps);
  steps_ = steps;
}

}  // namespace dpcore
