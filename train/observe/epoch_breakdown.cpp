#include "train/observe/epoch_breakdown.h"

#include <algorithm>
#include <array>
#include <numeric>
#include <utility>

#include "engine/seconds_since.h"

namespace dpcore::train {

void EpochBreakdown::reset() {
  parts_ = {};
  replica_compute_.clear();
  replica_samples_.clear();
  shares_.clear();
  started_ = std::chrono::steady_clock::now();
}

void EpochBreakdown::add_step(double wall, const StepTimes& times, double root_optimizer, int64_t samples) {
  const double optimizer = times.measured ? times.optimizer : root_optimizer;
  // The runner's parts are averages over replicas whose steps all lie within `wall`; what
  // they leave is compute (with dp, also the root's gather, loss and scatter). Only the
  // clocks' rounding could make them exceed the wall: they are then scaled down to it.
  const double reported = times.communication + times.waiting + optimizer;
  const double scale = reported > wall ? wall / reported : 1.0;
  parts_.communication += times.communication * scale;
  parts_.waiting += times.waiting * scale;
  parts_.optimizer += optimizer * scale;
  parts_.compute += wall - reported * scale;
  // One device (or a runner that does not break its step down): one replica, whose
  // compute is the step but its optimizer.
  const std::vector<double> compute =
      times.measured ? times.replica_compute : std::vector<double>{wall - optimizer * scale};
  const std::vector<int64_t> rows = times.measured ? times.replica_samples : std::vector<int64_t>{samples};
  if (replica_compute_.size() != compute.size()) {
    replica_compute_.assign(compute.size(), 0);
    replica_samples_.assign(compute.size(), 0);
  }
  for (size_t r = 0; r < compute.size(); ++r) {
    replica_compute_[r] += compute[r];
    replica_samples_[r] += rows[r];
  }
  // The shares of the epoch's full-size steps: its short last batch would not show the split.
  auto total = [](const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t(0)); };
  if (total(rows) >= total(shares_)) shares_ = rows;
}

double EpochBreakdown::wall_seconds() const {
  return seconds_since(started_);
}

std::vector<double> EpochBreakdown::replica_samples_per_s() const {
  std::vector<double> speeds;
  for (size_t r = 0; r < replica_compute_.size(); ++r) {
    speeds.push_back(replica_compute_[r] > 0 ? double(replica_samples_[r]) / replica_compute_[r] : 0);
  }
  return speeds;
}

std::string EpochBreakdown::biggest_two() const {
  std::array<std::pair<double, const char*>, 5> parts = {{{parts_.compute, "compute"},
                                                          {parts_.communication, "comm"},
                                                          {parts_.waiting, "waiting"},
                                                          {parts_.data, "data"},
                                                          {parts_.optimizer, "optimizer"}}};
  // Stable: equal parts keep this order, so the line does not flicker between them.
  std::stable_sort(parts.begin(), parts.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  const double total = parts_.sum();
  if (total <= 0) return "";
  std::string text;
  for (size_t i = 0; i < 2; ++i) {
    const int percent = int(100 * parts[i].first / total + 0.5);
    text += (i ? "  " : "") + std::string(parts[i].second) + " " + std::to_string(percent) + "%";
  }
  return text;
}

}  // namespace dpcore::train
