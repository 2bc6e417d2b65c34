// One checkpoint file: everything needed to continue a run exactly where it stopped.
//
// A safetensors file: the model's parameters and buffers under their state_dict names
// ("model.<name>"), the optimizer's state tensors in the parameters' flat layout
// ("optimizer.<name>": SGD's "optimizer.momentum", none without momentum; Adam's and AdamW's
// "optimizer.exp_avg" and "optimizer.exp_avg_sq"), and metadata strings:
// the step, the data loader's position (epoch, batch; the sample order is a pure function
// of seed and epoch, so this is the whole RNG state), the optimizer's step count, the run's
// settings (train/checkpoints/resume.h compares them on resume), and a CRC-32 of all tensor bytes so
// that a damaged file is refused instead of silently training on garbage. Nothing in it
// depends on how many replicas or processes wrote it: it is the one model every replica
// holds, and the position of the global batch.
//
// Written to a temporary name, synced, then renamed: a run killed mid-write leaves the
// previous checkpoint intact. Which files a run keeps: train/checkpoints/checkpoint_files.h.
#pragma once

#include <map>
#include <string>

#include "engine/data/loader.h"
#include "engine/io/safetensors.h"
#include "engine/optimizer.h"
#include "layers/model.h"

namespace dpcore::train {

using layers::Model;

struct TrainProgress {
  int64_t step = 0;                // optimizer steps taken
  data::LoaderPosition position;   // the next batch to train on
};

// Writes the checkpoint at `path`; `settings` go into the metadata as they are.
void write_checkpoint(const std::string& path, const Model& model, const Optimizer& optimizer, const TrainProgress& progress,
                      const std::map<std::string, std::string>& settings);

// Reads the whole file and checks that it is a dpcore checkpoint whose tensors match their
// CRC-32; fails naming the file and what is wrong (missing, truncated, damaged, other format).
io::SafetensorsFile read_checkpoint(const std::string& path);

// Whether the file's metadata says it is a dpcore checkpoint (read_checkpoint checks the rest):
// so that --init-from can refuse one by name rather than as a file of another model.
bool is_checkpoint(const io::SafetensorsFile& file);

// The step and data position a checkpoint read by read_checkpoint continues from.
TrainProgress checkpoint_progress(const io::SafetensorsFile& file);

// Loads its weights, buffers and optimizer state into `model` and `optimizer`; fails when
// they do not fit (another model, other optimizer state: momentum on one side only, SGD's
// state for Adam), naming both.
void restore_checkpoint(const io::SafetensorsFile& file, Model& model, Optimizer& optimizer);

}  // namespace dpcore::train
