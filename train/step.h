// One training step, written so that the arithmetic never depends on how the batch is cut.
//
// A step over a global batch of N samples computes the mean loss gradient
//     g = (1/N) * sum over samples of dloss_n/dparams.
// However the batch is split (A accumulation micro-batches, R replicas, uneven shares),
// each micro-batch runs a SUM-reduced loss and seeds its backward with 1/N (llm.c's trick:
// no separate scaling pass), and the gradients add up in the persistent flat gradient
// buffer. Zeroing happens once per step, before the first micro-batch: zeroing inside the
// micro-batch loop would silently keep only the last micro-batch's gradient.
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

// Forward and backward of one micro-batch (x [n, C, H, W], y [n] int64), accumulating
// grad_scale * d(sum of losses)/dparams into the model's gradient buffer. Returns the
// micro-batch's summed loss as a one-element tensor on the model's device (not read back,
// so the caller decides when to synchronise). Runs the fused cross-entropy when the model
// ends in LogSoftmax.
Tensor forward_backward(Model& model, const Tensor& x, const Tensor& y, double grad_scale);
// The summed loss of `output` against y: the fused cross-entropy of logits, or the NLL of
// log-probabilities. Where every runner computes its loss (a span "loss" in a trace).
Tensor loss_of(const Tensor& output, const Tensor& y, bool logits);

// The `accum` micro-batches of (x, y) (as even as possible), each adding
// grad_scale * d(sum of its losses)/dparams to the gradient buffer (not zeroed here).
// Returns the summed loss as a one-element tensor on the model's device, not read back.
Tensor accumulate_gradients(Model& model, const Tensor& x, const Tensor& y, int64_t accum, double grad_scale);
// A whole step on one model: zero the gradients, run the `accum` micro-batches of
// (x, y), step the optimizer. Returns the summed loss of the batch as a one-element tensor
// on the model's device, without reading it back: the whole step queues device work only,
// so it can be captured into a CUDA graph.
Tensor accumulate_and_step(Model& model, Optimizer& optimizer, const Tensor& x, const Tensor& y, int64_t accum = 1);
// The same, returning the mean loss over the batch (reads it back: synchronises).
double train_step(Model& model, Optimizer& optimizer, const Tensor& x, const Tensor& y, int64_t accum = 1);

struct EvalResult {
  double loss_sum = 0;   // summed NLL over the samples
  int64_t correct = 0;   // argmax hits
  int64_t samples = 0;
};
// Evaluation: in eval mode (batch norm uses its running statistics; the model's mode is
// restored afterwards), and no graph is recorded.
EvalResult evaluate_batch(Model& model, const Tensor& x, const Tensor& y);

}  // namespace dpcore::train
