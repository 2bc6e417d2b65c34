#include "train/pipeline/pipeline_step.h"

#include <algorithm>
#include <tuple>

#include "engine/backend.h"
#include "kernels/error.h"

namespace dpcore::train::pipeline {

namespace {

// Every op of every stage in an order in which each finds its input: the unit-tick run's,
// by start tick, then stage.
std::vector<std::pair<int, PipelineOp>> run_order(Schedule schedule, int stages, int micro_batches) {
  const PipelineTimeline t = simulate(stage_orders(schedule, stages, micro_batches), micro_batches,
                                      std::vector<double>(stages, 1.0), std::vector<double>(stages, 1.0));
  std::vector<std::tuple<double, int, PipelineOp>> ops;
  for (int s = 0; s < stages; ++s)
    for (const TimedOp& op : t.stages[s]) ops.emplace_back(op.start, s, op.op);
  std::stable_sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) {
    return std::tie(std::get<0>(a), std::get<1>(a)) < std::tie(std::get<0>(b), std::get<1>(b));
  });
  std::vector<std::pair<int, PipelineOp>> out;
  for (const auto& [start, s, op] : ops) out.emplace_back(s, op);
  return out;
}

}  // namespace

Tensor pipeline_accumulate_gradients(Model& model, const std::vector<Stage>& stages, Schedule schedule,
                                     int micro_batches, const Tensor& x, const Tensor& y, double grad_scale,
                                     BatchStart start, PipelineStepStats* stats) {
  layers::Sequential& net = model.net();
  const int layers = int(net.size());
  const int P = int(stages.size());
  DPCORE_CHECK(P >= 1 && stages.front().first_layer == 0 && stages.back().last_layer == layers - 1,
               "pipeline: stages ", stages_text(stages), " do not cover the model's ", layers, " layers");
  for (int s = 1; s < P; ++s)
    DPCORE_CHECK(stages[s].first_layer == stages[s - 1].last_layer + 1, "pipeline: stages ", stages_text(stages),
                 " are not contiguous");
  DPCORE_CHECK(x.dim() >= 1 && y.dim() >= 1 && x.size(0) == y.size(0), "pipeline step: inputs ", x.str(),
               " and targets ", y.str(), " disagree on the batch size");
  const std::vector<int64_t> sizes = micro_batch_sizes(x.size(0), micro_batches);
  std::vector<int64_t> first(micro_batches, 0);
  for (int m = 1; m < micro_batches; ++m) first[m] = first[m - 1] + sizes[m - 1];
  // The last stage stops before a final LogSoftmax: the loss is the fused cross entropy on
  // the logits, as on one device (train/step/step.cpp).
  const bool logits = model.ends_in_log_softmax();
  auto layer_end = [&](int s) { return s + 1 == P && logits ? net.size() - 1 : size_t(stages[s].last_layer + 1); };

  // input[s][m]: what stage s received for micro-batch m (a leaf that requires a gradient;
  // stage 0's is the batch itself); output[s][m]: its result, holding the forward's graph
  // until the backward; loss[m]: the last stage's summed loss of micro-batch m.
  std::vector<std::vector<Tensor>> input(P, std::vector<Tensor>(micro_batches));
  std::vector<std::vector<Tensor>> output(P, std::vector<Tensor>(micro_batches));
  std::vector<int> live(P, 0), peak(P, 0);
  Tensor loss_sum = Tensor::zeros({}, model.dtype(), model.device());
  for (const auto& [s, op] : run_order(schedule, P, micro_batches)) {
    const int m = op.micro_batch;
    if (op.kind == PipelineOp::Kind::Forward) {
      Tensor in = s == 0 ? x.narrow0(first[m], first[m] + sizes[m]) : output[s - 1][m].detach();
      if (s > 0) in.set_requires_grad(true);
      model.set_batch_position(start.step, start.first_sample + first[m]);
      Tensor out = net.forward_range(in, size_t(stages[s].first_layer), layer_end(s));
      if (s + 1 == P) {
        out = loss_of(out, y.narrow0(first[m], first[m] + sizes[m]), logits);
        backend_for(loss_sum.device()).add(loss_sum, out.detach(), loss_sum);
      }
      input[s][m] = in, output[s][m] = out;
      peak[s] = std::max(peak[s], ++live[s]);
    } else {
      // The gradient of this stage's output: the seed on the last stage, else what the stage
      // above found for its input.
      const Tensor seed = s + 1 == P ? Tensor::full({}, grad_scale, loss_sum.dtype(), loss_sum.device())
                                     : input[s + 1][m].grad();
      output[s][m].backward(seed);
      // The stage above is done with micro-batch m: its input and gradient go.
      if (s + 1 < P) input[s + 1][m] = Tensor();
      output[s][m] = Tensor();
      --live[s];
    }
  }
  if (stats) stats->peak_live_activations = peak;
  return loss_sum;
}

}  // namespace dpcore::train::pipeline
