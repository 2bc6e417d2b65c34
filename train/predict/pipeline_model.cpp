// predict_pipeline (train/predict/pipeline_model.h).
#include "train/predict/pipeline_model.h"

#include <algorithm>

#include "kernels/error.h"

namespace dpcore::train::scaling {

PipelinePrediction predict_pipeline(const PipelineProfile& profile, const std::vector<pipeline::Stage>& stages,
                                    pipeline::Schedule schedule, int micro_batches, int replicas, const Link& link,
                                    const Cluster& cluster, Algorithm algorithm, double compute_factor) {
  const size_t layers = profile.layers.size();
  DPCORE_CHECK(profile.output_bytes.size() == layers && profile.param_bytes.size() == layers,
               "pipeline model: ", layers, " layer costs, ", profile.output_bytes.size(), " output sizes and ",
               profile.param_bytes.size(), " parameter sizes");
  DPCORE_CHECK(!stages.empty() && stages.front().first_layer == 0 && size_t(stages.back().last_layer) + 1 == layers,
               "pipeline model: stages ", pipeline::stages_text(stages), " do not cover the ", layers, " layers");
  DPCORE_CHECK(replicas >= 1, "pipeline model: ", replicas, " replicas; expected at least one");
  const int P = int(stages.size());
  PipelinePrediction out;
  std::vector<double> stage_param_bytes(size_t(P), 0.0);
  for (int s = 0; s < P; ++s) {
    double forward = 0, backward = 0;
    for (int i = stages[size_t(s)].first_layer; i <= stages[size_t(s)].last_layer; ++i) {
      forward += profile.layers[size_t(i)].forward_s;
      backward += profile.layers[size_t(i)].backward_s;
      stage_param_bytes[size_t(s)] += double(profile.param_bytes[size_t(i)]);
    }
    // A forward receives its input from below and sends its output up; a backward receives
    // the output's gradient from above and sends the input's down: the same two boundaries.
    double messages = 0;
    if (s > 0) messages += link.seconds(double(profile.output_bytes[size_t(stages[size_t(s) - 1].last_layer)]));
    if (s + 1 < P) messages += link.seconds(double(profile.output_bytes[size_t(stages[size_t(s)].last_layer)]));
    out.transfer_s = std::max(out.transfer_s, messages);
    out.stage_forward_s.push_back(forward * compute_factor + messages);
    out.stage_backward_s.push_back(backward * compute_factor + messages);
  }
  for (int s = 0; s + 1 < P; ++s)
    out.p2p_bytes += 2 * int64_t(micro_batches) * profile.output_bytes[size_t(stages[size_t(s)].last_layer)];
  const pipeline::PipelineTimeline timeline =
      pipeline::simulate(pipeline::stage_orders(schedule, P, micro_batches), micro_batches, out.stage_forward_s,
                         out.stage_backward_s);
  out.pipeline_s = timeline.makespan;
  out.bubble = timeline.bubble_fraction();
  // Each stage's reduction starts when its last op ends.
  double reduced = timeline.makespan;
  for (int s = 0; s < P; ++s) {
    const double last = timeline.stages[size_t(s)].back().end;
    reduced = std::max(reduced, last + allreduce_seconds(stage_param_bytes[size_t(s)], replicas, cluster, algorithm));
  }
  out.exposed_allreduce_s = reduced - timeline.makespan;
  out.step_s = reduced + profile.optimizer_s * compute_factor;
  return out;
}

}  // namespace dpcore::train::scaling
