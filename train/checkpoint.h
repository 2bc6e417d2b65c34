// Checkpoints: everything needed to continue a run exactly where it stopped.
//
// One safetensors file, DIR/checkpoint.safetensors: the model's parameters and buffers
// under their state_dict names ("model.<name>"), the flat momentum buffer ("optimizer.momentum"), and metadata
// strings: the step, the data loader's position (epoch, batch; the sample order is a pure
// function of seed and epoch, so this is the whole RNG state), the optimizer's step count,
// the run's settings (a resumed run must use the same ones), and a CRC-32 of all tensor
// bytes so that a damaged file is refused instead of silently training on garbage.
// Written to a temporary name, synced, then renamed: a run killed mid-write leaves the
// previous checkpoint intact.
#pragma once

#include <map>
#include <string>

#include "engine/data/loader.h"
#include "engine/sgd.h"
#include "layers/model.h"

namespace dpcore::train {

using layers::Model;

struct TrainProgress {
  int64_t step = 0;                // optimizer steps taken
  data::LoaderPosition position;   // the next batch to train on
};

std::string checkpoint_path(const std::string& dir);

// `settings` are the flags that must match on resume (model, data, batch, seed, ...).
void save_checkpoint(const std::string& dir, const Model& model, const Sgd& sgd, const TrainProgress& progress,
                     const std::map<std::string, std::string>& settings);

// Restores model, optimizer and progress; fails with a clear error when the file is
// missing, damaged, or was written with other settings (naming the differing flag).
TrainProgress load_checkpoint(const std::string& dir, Model& model, Sgd& sgd,
                              const std::map<std::string, std::string>& settings);

}  // namespace dpcore::train
