// How a batch is shared among replicas: --split even | weights:3,1,... | adaptive.
//
//   even      PyTorch's scatter (torch.chunk): every share ceil(N/R) except a smaller
//             last one, so N=5, R=4 gives 2,2,1,0 and one replica idles, as in
//             nn.DataParallel.
//   weights   shares proportional to the given weights (largest remainders get the
//             leftover samples, ties to the lower replica).
//   adaptive  starts even (proportional to equal weights), then every `interval` steps
//             re-weights each replica by its measured speed (samples per second,
//             exponentially smoothed), so a slow replica gets less work. The global batch
//             and the exact mean gradient are unchanged: only who computes what moves.
//
// Text batches (token ids with their lengths, data::Batch::lengths) under `even` are split
// by tokens instead of samples: contiguous runs of the batch, chosen so that the replica
// with the most tokens has as few as possible (token_balanced_sizes), so that replicas get
// nearly equal work when the texts' lengths differ. The gradient stays exact: the loss of
// a classification is a mean over sequences, and every runner scales by the global batch's
// counted targets (train/step/step.h), whoever computes which rows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/data/loader.h"

namespace dpcore::train {

// torch.chunk sizes of n samples over `parts` replicas.
std::vector<int64_t> chunk_sizes(int64_t n, int parts);
// Shares of n proportional to `weights` (all > 0), summing to n.
std::vector<int64_t> weighted_sizes(int64_t n, const std::vector<double>& weights);
// Contiguous runs of the samples of `lengths` tokens over `parts` replicas that minimise
// the largest run's tokens; every replica gets a sample while there are enough (at most
// one empty run per missing sample, at the end). Of the splits reaching that minimum, the
// one whose earlier runs are longest (greedy from the first sample): deterministic.
std::vector<int64_t> token_balanced_sizes(const int64_t* lengths, int64_t n, int parts);

class Splitter {
 public:
  // Parses the --split flag for `replicas` replicas; fails naming the flag value.
  Splitter(const std::string& flag, int replicas);

  std::vector<int64_t> shares(int64_t n) const;
  // The shares of rows [begin, begin + n) of `batch`: by tokens for a text batch under
  // even (token_balanced_sizes), else shares(n).
  std::vector<int64_t> shares(const data::Batch& batch, int64_t begin, int64_t n) const;
  // Feeds the seconds each replica spent computing its share of one step (every replica
  // must see the same numbers, so that all compute the same shares). No-op unless adaptive.
  void observe(const std::vector<double>& seconds, const std::vector<int64_t>& shares);

  // The splitter of the replicas left when those at `dropped` (indices) are gone
  // (--on-replica-failure shrink): even stays even over fewer replicas, weights lose the
  // dropped replicas' weights, adaptive starts over from even (its speeds were measured on
  // shares of another size, and a new group should be measured afresh, as a run resumed on
  // these replicas would).
  Splitter without(const std::vector<int>& dropped) const;

  bool adaptive() const { return adaptive_; }
  bool even() const { return even_; }
  // weights/adaptive: the weights shares() is proportional to now (empty when even).
  const std::vector<double>& weights() const { return weights_; }
  std::string describe() const;

  static constexpr int kInterval = 5;       // steps between re-weightings
  static constexpr double kSmoothing = 0.5; // weight of the newest speed measurement

 private:
  int replicas_;
  bool even_ = false, adaptive_ = false;
  std::vector<double> weights_;  // weights/adaptive: current weights
  std::vector<double> speed_;    // adaptive: smoothed samples per second, 0 = unmeasured
  int observed_ = 0;
};

}  // namespace dpcore::train
