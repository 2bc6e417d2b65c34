#include "engine/grad_scaler.h"

#include <cmath>

#include "engine/backend.h"
#include "engine/ops.h"

namespace dpcore {

GradScaler::GradScaler(const GradScalerConfig& config) : config_(config) {
  DPCORE_CHECK(config.init_scale > 0 && std::isfinite(float(config.init_scale)),
               "GradScaler: init_scale must be a positive float32, got ", config.init_scale);
  DPCORE_CHECK(config.growth_factor > 1.0, "GradScaler: growth_factor must be > 1, got ", config.growth_factor);
  DPCORE_CHECK(config.backoff_factor > 0.0 && config.backoff_factor < 1.0,
               "GradScaler: backoff_factor must be in (0, 1), got ", config.backoff_factor);
  DPCORE_CHECK(config.growth_interval > 0 && config.growth_interval <= INT32_MAX,
               "GradScaler: growth_interval must be a positive int32, got ", config.growth_interval);
  state_ = {float(config.init_scale), 0};
}

Tensor GradScaler::scale(const Tensor& loss) const { return ops::scale(loss, double(state_.scale)); }

bool GradScaler::unscale(const Tensor& grads) {
  DPCORE_CHECK(stage_ == Stage::Ready, "GradScaler: unscale() has already been called since the last update()");
  if (!found_inf_flag_.defined() || found_inf_flag_.device() != grads.device() || found_inf_flag_.dtype() != grads.dtype())
    found_inf_flag_ = Tensor::empty({1}, grads.dtype(), grads.device());
  found_inf_flag_.zero_();
  // PyTorch: the reciprocal in double, rounded to float32 (exact for a power of two).
  const float inv_scale = float(1.0 / double(state_.scale));
  Tensor in_place = grads;  // a handle: unscaled where it lies
  backend_for(grads.device()).unscale_and_check_finite(inv_scale, in_place, found_inf_flag_);
  found_inf_ = found_inf_flag_.item() != 0.0;
  stage_ = Stage::Unscaled;
  return found_inf_;
}

void GradScaler::set_found_inf_anywhere(bool any) {
  DPCORE_CHECK(stage_ == Stage::Unscaled, "GradScaler: set_found_inf_anywhere() before unscale()");
  DPCORE_CHECK(any || !found_inf_, "GradScaler: this process found an Inf or NaN, but the processes together did not");
  found_inf_ = any;
}

bool GradScaler::step(Optimizer& optimizer, const Tensor& grads) {
  if (stage_ == Stage::Ready) unscale(grads);
  if (found_inf_) return false;
  optimizer.step();
  return true;
}

void GradScaler::update() {
  DPCORE_CHECK(stage_ == Stage::Unscaled, "GradScaler: update() without an unscale() or step() since the last one");
  // _amp_update_scale_: float32 scale times the double factor, rounded back to float32.
  if (found_inf_) {
    state_.scale = float(double(state_.scale) * config_.backoff_factor);
    state_.growth_tracker = 0;
  } else if (state_.growth_tracker + 1 == config_.growth_interval) {
    const float grown = float(double(state_.scale) * config_.growth_factor);
    if (std::isfinite(grown)) state_.scale = grown;
    state_.growth_tracker = 0;
  } else {
    ++state_.growth_tracker;
  }
  stage_ = Stage::Ready;
  found_inf_ = false;
}

void GradScaler::load_state(const GradScalerState& state) {
  DPCORE_CHECK(std::isfinite(state.scale) && state.scale > 0, "GradScaler: a saved scale of ", state.scale,
               " is not a finite positive number");
  DPCORE_CHECK(state.growth_tracker >= 0 && state.growth_tracker < config_.growth_interval,
               "GradScaler: a saved growth tracker of ", state.growth_tracker, " is outside [0, growth_interval = ",
               config_.growth_interval, ")");
  state_ = state;
  stage_ = Stage::Ready;
  found_inf_ = false;
}

}  // namespace dpcore
