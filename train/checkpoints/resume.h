// What --resume checks and carries over (docs/fault-tolerance.md, "Elastic resume").
//
// A checkpoint holds one model, its optimizer state, the step and the position of the
// global batch in the data: nothing per replica. A resumed run therefore may use another
// replica count, backend (local, mpi, nccl), --mode, --split, --bucket-mb, --threads or
// --device: none of them changes the maths of a step, whose gradient is the mean over the
// global batch however the batch is shared (each share's loss is a sum seeded with 1/N of
// the global N, and the shares' gradients are summed: docs/data-parallel.md). Sums in
// another order change only the last bits.
//
// What does change the maths is recorded in the checkpoint and compared: the model, the
// data and how it is drawn (seed, shuffle, normalisation, drop-last, augmentation), the
// global batch, the accumulation, the SGD settings and the schedule. A difference is
// refused naming the flag and both values, unless --force-resume, which goes on with this
// run's values and logs each change (old -> new).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/grad_scaler.h"
#include "train/checkpoints/checkpoint.h"
#include "train/train_options.h"

namespace dpcore::train {

// The metadata a checkpoint of this run records: the settings compared on resume, and
// `written_by` (the runner's description; shown on resume, never compared).
std::map<std::string, std::string> checkpoint_settings(const TrainOptions& o, const std::string& written_by);

// --precision fp16: the loss scaler's state in a checkpoint's metadata ("loss_scale", a
// float32 written with the digits that read back exactly, and "loss_scale_growth_tracker",
// PyTorch's "scale" and "_growth_tracker"), and read back (nullopt when the file has none:
// written without a loss scaler).
void record_loss_scale(const GradScalerState& state, std::map<std::string, std::string>& metadata);
std::optional<GradScalerState> checkpoint_loss_scale(const io::SafetensorsFile& file);

struct Resumed {
  TrainProgress progress;
  std::optional<GradScalerState> loss_scale;  // the checkpoint's, when it has one
  std::vector<std::string> log;  // lines for the run's log: fallbacks, notes, changes, "resumed from ..."
};

// --resume: loads the newest valid checkpoint of --checkpoint DIR (falling back to older
// ones past damaged files) into `model` and `sgd`, after checking its settings against
// this run's. `train_samples` is the training set's size: with a forced change of --batch
// the data position is carried over in samples, not in batches.
Resumed resume_from_checkpoint(const TrainOptions& o, int64_t train_samples, Model& model, Optimizer& optimizer);

// The data position `position`, counted in batches of `from_batch` samples, in batches of
// `to_batch`: the same number of samples into the epoch, rounded down (a sample may be
// seen again, none is skipped); a position at or past the epoch's end is the next epoch's start.
data::LoaderPosition carry_position(data::LoaderPosition position, int64_t from_batch, int64_t to_batch,
                                    int64_t samples_per_epoch);

}  // namespace dpcore::train
