#include "engine/sgd.h"

#include <cmath>

#include "engine/backend.h"

namespace dpcore {

namespace {
void check_rate(const char* what, double value) {
  DPCORE_CHECK(std::isfinite(value) && value >= 0, "sgd: ", what, " ", value, " must be a finite number >= 0");
}
}  // namespace

Sgd::Sgd(FlatParameters& params, const SgdConfig& config) : Optimizer(params), config_(config) {
  check_rate("learning rate", config.lr);
  check_rate("momentum", config.momentum);
  check_rate("weight decay", config.weight_decay);
  DPCORE_CHECK(!config.nesterov || (config.momentum > 0 && config.dampening == 0),
               "sgd: nesterov momentum requires a momentum > 0 and zero dampening (as in PyTorch)");
  if (config.momentum > 0) {
    momentum_ = Tensor::zeros({params.total()}, params.dtype(), params.device());
  }
}

void Sgd::apply(Tensor& values) {
  Tensor momentum = momentum_;  // undefined without momentum
  backend_for(values.device()).sgd_step(config_, steps_taken() == 0, values, params_.grads(), momentum);
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

std::vector<double> Sgd::hyper_parameters() const {
  return {config_.lr, config_.momentum, config_.dampening, config_.weight_decay, double(config_.nesterov)};
}

std::vector<OptimizerState> Sgd::state() const {
  if (!momentum_.defined()) return {};
  return {{"momentum", momentum_}};
}

}  // namespace dpcore
