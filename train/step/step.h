// One training step, written so that the arithmetic never depends on how the batch is cut.
//
// A step over a global batch whose labels hold M COUNTED targets (one per sample for
// classification; per token, those that are not ignore_index, kernels::kDefaultIgnoreIndex)
// computes the mean loss gradient
//     g = (1/M) * sum over counted targets t of dloss_t/dparams,
// PyTorch's cross_entropy(reduction="mean") over the whole batch. However the batch is split
// (A accumulation micro-batches, R replicas, uneven shares, different numbers of counted
// tokens in each), each micro-batch runs a SUM-reduced loss over its counted targets and
// seeds its backward with 1/M of the GLOBAL batch (llm.c's trick: no separate scaling pass),
// and the gradients add up in the persistent flat gradient buffer. For one class per sample
// M = N, the seed is 1/N as it always was. Zeroing happens once per step, before the first
// micro-batch: zeroing inside the micro-batch loop would silently keep only the last
// micro-batch's gradient.
//
// A batch without counted targets: the mean loss is NaN (0/0, as PyTorch's), and the
// gradient is zero, as PyTorch's (its ignored targets contribute nothing): gradient_scale(0)
// is 0, not the 1/0 that would turn the zero gradient into NaN (docs/differences.md).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/optimizer.h"
#include "layers/model.h"

namespace dpcore::train {

using layers::Model;

// Sizes of `parts` pieces of n samples, as even as possible: the first n % parts pieces
// hold one more. Pieces may be empty when n < parts.
std::vector<int64_t> even_split(int64_t n, int64_t parts);

// The seed of every micro-batch's backward for a global batch of `counted` targets: 1/counted,
// or 0 when none counts (see the top of this file).
double gradient_scale(int64_t counted);
// The targets that count (not ignore_index) among n labels in host memory, and among y's
// (read back to the host).
int64_t counted_targets(const int64_t* labels, int64_t n);
int64_t counted_targets(const Tensor& y);

// Where a batch stands in training, for counter-based randomness (dropout): the step as
// the log numbers it, and the global index of the batch's first sample. Row r of it is
// global sample first_sample + r, whichever micro-batch or replica computes it.
struct BatchStart {
  uint64_t step = 0;
  int64_t first_sample = 0;
};

// Forward and backward of one micro-batch (x [n, ...] float values or int64 token ids,
// y [n] or [n, T] int64, entries may be ignore_index), accumulating
// grad_scale * d(sum of the counted targets' losses)/dparams into the model's gradient
// buffer. Returns the micro-batch's summed loss as a one-element tensor on the model's
// device (not read back, so the caller decides when to synchronise). Runs the fused
// cross-entropy when the model ends in LogSoftmax. The caller sets the model's batch
// position first (accumulate_gradients does).
Tensor forward_backward(Model& model, const Tensor& x, const Tensor& y, double grad_scale);
// The summed loss of `output` against y: the fused cross-entropy of logits [..., C] over
// the counted targets, or the NLL of log-probabilities [N, C]. Where every runner computes
// its loss (a span "loss" in a trace).
Tensor loss_of(const Tensor& output, const Tensor& y, bool logits);

// The `accum` micro-batches of (x, y) (as even as possible), each told its position
// (Model::set_batch_position(start.step, start.first_sample + its first row)) and adding
// grad_scale * d(sum of its losses)/dparams to the gradient buffer (not zeroed here).
// Returns the summed loss as a one-element tensor on the model's device, not read back.
Tensor accumulate_gradients(Model& model, const Tensor& x, const Tensor& y, int64_t accum, double grad_scale,
                            BatchStart start = {});
// A whole step on one model: zero the gradients, run the `accum` micro-batches of
// (x, y) seeded with gradient_scale(counted), `counted` being the targets of y that count
// (counted_targets; given, so that nothing here reads the device), step the optimizer.
// Returns the summed loss of the batch as a one-element tensor on the model's device,
// without reading it back: the whole step queues device work only, so it can be captured
// into a CUDA graph.
Tensor accumulate_and_step(Model& model, Optimizer& optimizer, const Tensor& x, const Tensor& y, int64_t accum,
                           int64_t counted, BatchStart start = {});
// The same, counting y's targets itself and returning the mean loss over the counted
// targets (reads them back: synchronises; NaN when none counts).
double train_step(Model& model, Optimizer& optimizer, const Tensor& x, const Tensor& y, int64_t accum = 1,
                  BatchStart start = {});

struct EvalResult {
  double loss_sum = 0;   // summed NLL over the counted targets
  int64_t correct = 0;   // argmax hits among them
  int64_t samples = 0;
  int64_t targets = 0;   // counted targets: the samples, or the tokens not ignored
  // classes x classes counts of the counted targets, row the target, column the argmax (one
  // class per sample only: empty for per-token targets).
  std::vector<int64_t> confusion;
};
// Evaluation: in eval mode (batch norm uses its running statistics; the model's mode is
// restored afterwards), and no graph is recorded. The loss and the hits are summed in
// float64 on the host over the counted targets of y ([n] or [n, T]).
EvalResult evaluate_batch(Model& model, const Tensor& x, const Tensor& y);

}  // namespace dpcore::train
