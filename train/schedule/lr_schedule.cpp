#include "train/schedule/lr_schedule.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "kernels/error.h"

namespace dpcore::train {

namespace {

constexpr double kPi = 3.141592653589793;  // Python's math.pi
// OneCycleLR's defaults.
constexpr double kDivFactor = 25, kFinalDivFactor = 1e4, kMaxMomentum = 0.95, kBaseMomentum = 0.85;

const char* const kSyntax =
    "constant, step:EPOCHS:GAMMA (EPOCHS a whole number of at least 1, GAMMA a finite number > 0), cosine, "
    "onecycle or linear";

struct Parsed {
  std::string needs;  // empty: valid
  std::string kind;
  int64_t epochs = 0;
  double gamma = 1;
};

Parsed parse(const std::string& spec) {
  Parsed p;
  if (spec == "constant" || spec == "cosine" || spec == "onecycle" || spec == "linear") {
    p.kind = spec;
    return p;
  }
  const std::string prefix = "step:";
  size_t colon = spec.find(':', prefix.size());
  if (spec.rfind(prefix, 0) != 0 || colon == std::string::npos) {
    p.needs = kSyntax;
    return p;
  }
  p.kind = "step";
  const std::string epochs = spec.substr(prefix.size(), colon - prefix.size()), gamma = spec.substr(colon + 1);
  auto [stop, err] = std::from_chars(epochs.data(), epochs.data() + epochs.size(), p.epochs);
  if (epochs.empty() || stop != epochs.data() + epochs.size() || err != std::errc() || p.epochs < 1) {
    p.needs = "step:EPOCHS:GAMMA with EPOCHS a whole number of at least 1 (got '" + epochs + "')";
    return p;
  }
  char* end = nullptr;
  p.gamma = std::strtod(gamma.c_str(), &end);
  if (gamma.empty() || end != gamma.c_str() + gamma.size() || std::isspace(static_cast<unsigned char>(gamma[0])) ||
      !std::isfinite(p.gamma) || p.gamma <= 0) {
    p.needs = "step:EPOCHS:GAMMA with GAMMA a finite number > 0 (got '" + gamma + "')";
  }
  return p;
}

// OneCycleLR._annealing_cos, term for term.
double annealing_cos(double start, double end, double pct) {
  double cos_out = std::cos(kPi * pct) + 1;
  return end + (start - end) / 2.0 * cos_out;
}

std::string number(double v) {
  std::ostringstream os;
  os.precision(6);
  os << v;
  return os.str();
}

}  // namespace

std::string lr_schedule_needs(const std::string& spec) { return parse(spec).needs; }

bool lr_schedule_uses_total(const std::string& spec) {
  return spec == "cosine" || spec == "onecycle" || spec == "linear";
}

LrSchedule::LrSchedule(const std::string& spec, const SgdConfig& sgd, int64_t warmup_steps, int64_t total_steps,
                       int64_t steps_per_epoch)
    : lr_(sgd.lr), momentum_(sgd.momentum), warmup_(warmup_steps), total_(total_steps), per_epoch_(steps_per_epoch) {
  Parsed p = parse(spec);
  DPCORE_CHECK(p.needs.empty(), "--lr-schedule ", spec, ": must be ", p.needs);
  kind_ = p.kind == "constant" ? Kind::Constant
          : p.kind == "step"   ? Kind::Step
          : p.kind == "cosine" ? Kind::Cosine
          : p.kind == "linear" ? Kind::Linear
                               : Kind::OneCycle;
  step_epochs_ = p.epochs, gamma_ = p.gamma;
  DPCORE_CHECK(total_ >= 1, "--lr-schedule ", spec, ": the run has no steps");
  DPCORE_CHECK(warmup_ >= 0, "--warmup-steps ", warmup_, " must not be negative");
  DPCORE_CHECK(warmup_ < total_, "--warmup-steps ", warmup_, " must be less than the run's ", total_,
               " steps (--steps, or --epochs x steps per epoch)");
  if (kind_ == Kind::Step) {
    DPCORE_CHECK(per_epoch_ >= 1, "--lr-schedule ", spec, ": the run has no steps per epoch");
  }
  if (kind_ == Kind::OneCycle) {
    // As OneCycleLR.__init__ computes them: pct_start * total_steps in floating point.
    if (warmup_ > 0) pct_start_ = double(warmup_) / double(total_);
    end_rise_ = pct_start_ * double(total_) - 1;
    end_fall_ = double(total_ - 1);
    // A rise that ends at step 0 is 0 steps long: PyTorch divides 0 by 0 there.
    DPCORE_CHECK(end_rise_ != 0, "--lr-schedule onecycle with --warmup-steps ", warmup_, " over ", total_,
                 " steps: the warm-up ends at step 0, where PyTorch's OneCycleLR divides by zero; give "
                 "--warmup-steps 0 or at least 2");
  }
}

Rates LrSchedule::at(int64_t t) const {
  DPCORE_CHECK(0 <= t && t < total_, "lr schedule: step ", t, " outside the run's ", total_, " steps");
  if (kind_ == Kind::OneCycle) {
    const double initial = lr_ / kDivFactor, min_lr = initial / kFinalDivFactor;
    const double step = double(t);
    Rates r;
    if (step <= end_rise_) {
      double pct = step / end_rise_;
      r.lr = annealing_cos(initial, lr_, pct);
      r.momentum = annealing_cos(kMaxMomentum, kBaseMomentum, pct);
    } else {
      double pct = (step - end_rise_) / (end_fall_ - end_rise_);
      r.lr = annealing_cos(lr_, min_lr, pct);
      r.momentum = annealing_cos(kBaseMomentum, kMaxMomentum, pct);
    }
    if (momentum_ == 0) r.momentum = 0;  // plain SGD: nothing to cycle
    return r;
  }
  if (kind_ == Kind::Linear) {
    // transformers' get_linear_schedule_with_warmup, its lr_lambda term for term (LambdaLR:
    // lr * lambda(t)).
    if (t < warmup_) return {lr_ * (double(t) / double(std::max<int64_t>(1, warmup_))), momentum_};
    return {lr_ * std::max(0.0, double(total_ - t) / double(std::max<int64_t>(1, total_ - warmup_))), momentum_};
  }
  if (t < warmup_) return {lr_ * (double(t + 1) / double(warmup_)), momentum_};
  const int64_t s = t - warmup_;  // the main schedule's own step
  switch (kind_) {
    case Kind::Step:
      return {lr_ * std::pow(gamma_, double(s / per_epoch_ / step_epochs_)), momentum_};
    case Kind::Cosine:
      return {lr_ * (1 + std::cos(kPi * double(s) / double(total_ - warmup_))) / 2, momentum_};
    default:
      return {lr_, momentum_};
  }
}

std::string LrSchedule::describe() const {
  std::string text;
  switch (kind_) {
    case Kind::Constant:
      text = "constant " + number(lr_);
      break;
    case Kind::Step:
      text = "step " + number(lr_) + " x" + number(gamma_) + " every " + std::to_string(step_epochs_) + " epoch" +
             (step_epochs_ == 1 ? "" : "s");
      break;
    case Kind::Cosine:
      text = "cosine from " + number(lr_) + " to 0 over " + std::to_string(total_ - warmup_) + " steps";
      break;
    case Kind::Linear:
      return "linear from " + number(lr_) + " to 0 over " + std::to_string(total_) + " steps" +
             (warmup_ > 0 ? " (warm-up from 0 over " + std::to_string(warmup_) + " steps)" : "");
    case Kind::OneCycle:
      return "onecycle to " + number(lr_) + " (" + number(100 * pct_start_) + "% warm-up" +
             (momentum_ > 0 ? ", momentum 0.95-0.85)" : ", momentum not cycled)");
  }
  if (warmup_ > 0) text += " after " + std::to_string(warmup_) + " warm-up steps";
  return text;
}

}  // namespace dpcore::train
