#include "train/step/split.h"

#include <algorithm>
#include <numeric>
#include <sstream>

#include "kernels/error.h"

namespace dpcore::train {

std::vector<int64_t> chunk_sizes(int64_t n, int parts) {
  DPCORE_CHECK(parts >= 1, "split: ", parts, " replicas");
  int64_t chunk = (n + parts - 1) / parts;
  std::vector<int64_t> sizes(size_t(parts), 0);
  int64_t left = n;
  for (auto& s : sizes) {
    s = std::min(chunk, left);
    left -= s;
  }
  return sizes;
}

std::vector<int64_t> weighted_sizes(int64_t n, const std::vector<double>& weights) {
  double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  DPCORE_CHECK(total > 0, "split: weights must be positive");
  std::vector<int64_t> sizes(weights.size());
  std::vector<std::pair<double, size_t>> remainders;
  int64_t given = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    double exact = double(n) * weights[i] / total;
    sizes[i] = int64_t(exact);
    given += sizes[i];
    remainders.emplace_back(exact - double(sizes[i]), i);
  }
  // Largest remainder first; equal remainders go to the lower replica.
  std::stable_sort(remainders.begin(), remainders.end(), [](auto& a, auto& b) { return a.first > b.first; });
  for (int64_t k = 0; k < n - given; ++k) sizes[remainders[size_t(k)].second]++;
  return sizes;
}

// Greedy from the first sample: runs of at most `cap` tokens, each leaving a sample for
// every replica after it while there are enough. The sizes, or nothing when `parts` runs
// cannot hold the samples.
static std::vector<int64_t> runs_within(const int64_t* lengths, int64_t n, int parts, int64_t cap) {
  std::vector<int64_t> sizes(size_t(parts), 0);
  int64_t row = 0;
  for (int p = 0; p < parts && row < n; ++p) {
    const int64_t later_parts = parts - 1 - p;
    int64_t tokens = 0;
    while (row < n && tokens + lengths[row] <= cap && (sizes[size_t(p)] == 0 || n - row > later_parts)) {
      tokens += lengths[row++];
      ++sizes[size_t(p)];
    }
    if (sizes[size_t(p)] == 0) return {};  // a sample longer than cap
  }
  if (row < n) return {};
  return sizes;
}

std::vector<int64_t> token_balanced_sizes(const int64_t* lengths, int64_t n, int parts) {
  DPCORE_CHECK(parts >= 1, "split: ", parts, " replicas");
  int64_t lo = 0, hi = 0;  // the smallest feasible cap lies in [longest sample, all tokens]
  for (int64_t i = 0; i < n; ++i) {
    DPCORE_CHECK(lengths[i] >= 0, "split: sample ", i, " has ", lengths[i], " tokens");
    lo = std::max(lo, lengths[i]), hi += lengths[i];
  }
  if (n == 0) return std::vector<int64_t>(size_t(parts), 0);
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (runs_within(lengths, n, parts, mid).empty()) lo = mid + 1;
    else hi = mid;
  }
  return runs_within(lengths, n, parts, lo);
}

Splitter::Splitter(const std::string& flag, int replicas) : replicas_(replicas) {
  DPCORE_CHECK(replicas >= 1, "--replicas ", replicas, " must be at least 1");
  if (flag == "even") {
    even_ = true;
  } else if (flag == "adaptive") {
    adaptive_ = true;
    weights_.assign(size_t(replicas), 1.0);
    speed_.assign(size_t(replicas), 0.0);
  } else if (flag.rfind("weights:", 0) == 0) {
    std::stringstream list(flag.substr(8));
    for (std::string item; std::getline(list, item, ',');) {
      size_t used = 0;
      double w = -1;
      try {
        w = std::stod(item, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      DPCORE_CHECK(used == item.size() && w > 0, "--split ", flag, ": '", item, "' is not a positive weight");
      weights_.push_back(w);
    }
    DPCORE_CHECK(int(weights_.size()) == replicas, "--split ", flag, " gives ", weights_.size(),
                 " weights for ", replicas, " replicas");
  } else {
    fail("--split ", flag, ": expected even, weights:W1,W2,... (one per replica) or adaptive");
  }
}

Splitter Splitter::without(const std::vector<int>& dropped) const {
  Splitter left = *this;
  left.replicas_ = replicas_ - int(dropped.size());
  DPCORE_CHECK(left.replicas_ >= 1, "split: dropping ", dropped.size(), " of ", replicas_, " replicas leaves none");
  if (adaptive_) {
    left.weights_.assign(size_t(left.replicas_), 1.0);
    left.speed_.assign(size_t(left.replicas_), 0.0);
    left.observed_ = 0;
  } else if (!even_) {
    left.weights_.clear();
    for (int r = 0; r < replicas_; ++r) {
      if (std::find(dropped.begin(), dropped.end(), r) == dropped.end()) left.weights_.push_back(weights_[size_t(r)]);
    }
  }
  return left;
}

std::vector<int64_t> Splitter::shares(int64_t n) const {
  return even_ ? chunk_sizes(n, replicas_) : weighted_sizes(n, weights_);
}

std::vector<int64_t> Splitter::shares(const data::Batch& batch, int64_t begin, int64_t n) const {
  if (!even_ || !batch.lengths) return shares(n);
  DPCORE_CHECK(0 <= begin && begin + n <= batch.size, "split: rows [", begin, ", ", begin + n, ") of a batch of ",
               batch.size);
  return token_balanced_sizes(batch.lengths + begin, n, replicas_);
}

void Splitter::observe(const std::vector<double>& seconds, const std::vector<int64_t>& shares) {
  if (!adaptive_) return;
  for (size_t r = 0; r < speed_.size(); ++r) {
    if (shares[r] == 0 || seconds[r] <= 0) continue;
    double speed = double(shares[r]) / seconds[r];
    speed_[r] = speed_[r] == 0 ? speed : kSmoothing * speed + (1 - kSmoothing) * speed_[r];
  }
  if (++observed_ % kInterval != 0) return;
  // Every replica measured: weights become the smoothed speeds.
  if (std::all_of(speed_.begin(), speed_.end(), [](double s) { return s > 0; })) weights_ = speed_;
}

std::string Splitter::describe() const {
  if (even_) return "even";
  std::ostringstream os;
  os << (adaptive_ ? "adaptive" : "weights") << " [";
  for (size_t i = 0; i < weights_.size(); ++i) os << (i ? ", " : "") << weights_[i];
  return os.str() + "]";
}

}  // namespace dpcore::train
