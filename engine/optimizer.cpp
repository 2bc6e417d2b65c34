#include "engine/optimizer.h"

#include "engine/adam.h"
#include "engine/backend.h"
#include "engine/seconds_since.h"
#include "engine/sgd.h"
#include "engine/trace.h"

namespace dpcore {

void Optimizer::step() {
  const SteadyClock::time_point started = SteadyClock::now();
  Tensor values = params_.values();
  trace::Span span("optimizer", [&] {
    return trace::Label{"optimizer step", {{"parameters", values.numel()}, {"lr", lr()}}};
  });
  if (clip_grad_norm_ >= 0) clip_gradients();
  apply(values);
  ++steps_;
  last_step_seconds_ = seconds_since(started);
}

Tensor Optimizer::state(const std::string& name) const {
  for (const OptimizerState& s : state()) {
    if (s.name == name) return s.tensor;
  }
  return Tensor();
}

void Optimizer::restore(const std::vector<Tensor>& given, int64_t steps) {
  DPCORE_CHECK(steps >= 0, name(), ": negative step count ", steps);
  const std::vector<OptimizerState> own = state();
  DPCORE_CHECK(given.size() == own.size(), name(), ": ", given.size(), " state tensors given, but this optimizer has ",
               own.size());
  for (size_t i = 0; i < own.size(); ++i) {
    const Tensor& g = given[i];
    DPCORE_CHECK(g.defined() && g.numel() == own[i].tensor.numel(), name(), ": ", own[i].name, " buffer ",
                 g.defined() ? g.str() : std::string("(none)"), " does not match the model's ", own[i].tensor.str());
  }
  for (size_t i = 0; i < own.size(); ++i) {
    Tensor t = own[i].tensor;
    t.copy_(given[i].to(t.device()).view(t.shape()));
  }
  steps_ = steps;
}

void Optimizer::set_clip_grad_norm(double max_norm) {
  DPCORE_CHECK(std::isfinite(max_norm), name(), ": gradient clipping norm ", max_norm, " must be finite");
  clip_grad_norm_ = max_norm;
  if (max_norm >= 0 && !sum_of_squares_.defined()) {
    sum_of_squares_ = Tensor::zeros({1}, params_.dtype(), params_.device());
  }
}

void Optimizer::clip_gradients() {
  Tensor grads = params_.grads();
  trace::Span span("optimizer", [&] {
    return trace::Label{"clip gradient norm", {{"max_norm", clip_grad_norm_}}};
  });
  Backend& backend = backend_for(grads.device());
  backend.sum_of_squares(grads, sum_of_squares_);
  // As clip_grad_norm_: the norm, then max_norm / (norm + 1e-6) clamped to 1, in float.
  const float norm = std::sqrt(float(sum_of_squares_.item()));
  const float coefficient = float(clip_grad_norm_) / (norm + 1e-6f);
  last_grad_norm_ = norm;
  if (coefficient < 1.0f) backend.scale(double(coefficient), grads, grads);
}

void Optimizer::set_steps_taken(int64_t steps) {
  DPCORE_CHECK(steps >= 0, name(), ": negative step count ", steps);
  steps_ = steps;
}

std::unique_ptr<Optimizer> make_optimizer(FlatParameters& params, const OptimizerConfig& config) {
  std::unique_ptr<Optimizer> optimizer;
  if (config.kind == OptimizerConfig::Kind::Adam) {
    optimizer = std::make_unique<Adam>(params, config.adam);
  } else {
    optimizer = std::make_unique<Sgd>(params, config.sgd);
  }
  if (config.clip_grad_norm >= 0) optimizer->set_clip_grad_norm(config.clip_grad_norm);
  return optimizer;
}

}  // namespace dpcore
