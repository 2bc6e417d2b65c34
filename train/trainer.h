// The training loop behind `dpcore train`: data, model, runner, epochs, evaluation,
// progress, metrics and checkpoints.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "train/observe/epoch_breakdown.h"
#include "train/train_options.h"

namespace dpcore::train {

struct EpochMetrics {
  std::string kind = "epoch";  // "epoch": at its end; "eval": --eval-every, the epoch so far
  int64_t epoch = 0, step = 0;
  double train_loss = 0, test_loss = 0, test_accuracy = 0;
  double lr = 0;  // the learning rate of the epoch's last step
  // --task mlm: exp(test_loss), the test loss then the mean over the masked tokens (and
  // test_accuracy the masked-token accuracy). NaN for the other tasks: not written.
  double test_perplexity = std::nan("");
  // --clip-grad-norm: the gradient norm of the epoch's last step (before clipping; the
  // root's, the same on every replica of --sync full). NaN without clipping: not written.
  double grad_norm = std::nan("");
  double samples_per_s = 0, seconds = 0;
  size_t peak_bytes = 0;
  std::vector<size_t> stage_peak_bytes;  // a pipeline's, per stage (StepRunner::stage_peak_bytes); else empty
  int64_t skipped_steps = 0;  // --skip-nonfinite or fp16's loss scaler: the epoch's steps not applied (NaN or Inf)
  // --precision fp16: the loss scale after the epoch's last step (GradScaler); NaN otherwise: not written.
  double loss_scale = std::nan("");
  // What the runner counted over the epoch (StepRunner::epoch_counters), e.g. async's
  // staleness histogram: in the metrics JSONL, each an array.
  std::vector<std::pair<std::string, std::vector<int64_t>>> counters;
  // Where the epoch's time went (train/observe/epoch_breakdown.h): the parts, the wall time they lie
  // within (from the epoch's start to its evaluation), each replica's samples/s over its
  // compute, and the shares of the last step (this process's replicas).
  TimeParts time;
  double wall_seconds = 0;
  std::vector<double> replica_samples_per_s;
  std::vector<int64_t> shares;
  // Over the test set: classes x classes counts, row the true class, column the prediction.
  std::vector<int64_t> confusion;
};

// The confusion table: a row per true class, a column per predicted class, named by
// `class_names` (or their indices when empty), with each class's recall.
std::string confusion_table(const std::vector<int64_t>& confusion, const std::vector<std::string>& class_names);

struct TrainResult {
  std::vector<EpochMetrics> epochs;
  int64_t steps = 0;
};

// Runs the whole job, writing human-readable progress to `out`.
TrainResult train(const TrainOptions& options, std::ostream& out);

// `dpcore eval`: test loss and accuracy of saved weights.
struct EvalOptions {
  std::string model = "fashioncnn", data = "fashion-mnist", init, device = "auto";
  bool convert_weights = false;  // --init may be bfloat16 / float16, converted (layers/weights.h)
  std::string val_data;  // imagefolder:DIR evaluated, normalised with --data imagefolder:DIR's statistics
  int workers = 4;       // as TrainOptions' (train/train_options.h)
  bool skip_bad_images = false;
  data::TextOptions text;  // as TrainOptions'
  std::string transform, val_transform;  // as in training: --val-transform is what evaluation applies
  bool normalize = true;
  int64_t batch = 1000;
  int threads = 0;
};
EpochMetrics evaluate(const EvalOptions& options, std::ostream& out);

}  // namespace dpcore::train
