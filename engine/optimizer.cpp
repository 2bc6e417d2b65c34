#include "engine/optimizer.h"

#include "engine/adam.h"
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

void Optimizer::set_steps_taken(int64_t steps) {
  DPCORE_CHECK(steps >= 0, name(), ": negative step count ", steps);
  steps_ = steps;
}

std::unique_ptr<Optimizer> make_optimizer(FlatParameters& params, const OptimizerConfig& config) {
  if (config.kind == OptimizerConfig::Kind::Adam) return std::make_unique<Adam>(params, config.adam);
  return std::make_unique<Sgd>(params, config.sgd);
}

}  // namespace dpcore
