// Per-channel standardisation: x' = (x - mean_c) / std_c with the statistics of the train set
// applied to train and test alike (the test set must not leak into them).
#pragma once

#include <vector>

#include "engine/data/dataset.h"

namespace dpcore::data {

struct ChannelStats {
  std::vector<double> mean, std;  // one per channel; std is the population standard deviation
};

// Two passes (mean, then squared deviations) in double, in a fixed order: sample by sample,
// pixel by pixel. The same data always gives the same bits. Throws for a constant channel,
// whose std of 0 cannot be divided by.
ChannelStats channel_stats(const Dataset& data);

// Applies the statistics in place, to the pixels and to data.zero_value (the value a raw 0
// pixel now has); the channel counts must agree.
void normalize(Dataset& data, const ChannelStats& stats);

}  // namespace dpcore::data
