#include "train/pipeline/balanced_stages.h"

#include <cstdio>

#include "engine/runtime.h"
#include "kernels/error.h"
#include "train/pipeline/pipeline_schedule.h"
#include "train/pipeline/pipeline_step.h"

namespace dpcore::train::pipeline {

namespace {

std::string milliseconds(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", seconds * 1e3);
  return text;
}

std::string kib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", double(bytes) / 1024);
  return text;
}

}  // namespace

BalancedStages balance_pipeline(Model& model, const Tensor& x, const Tensor& y, int stages, int cpu_teams,
                                const PipelineOptions& pipeline) {
  const int layers = int(model.net().size());
  check_stage_count(stages, layers);  // before the timing, not after it
  DPCORE_CHECK(cpu_teams >= 1, "--pipeline ", stages, ": ", cpu_teams, " CPU teams to put the stages on");
  DPCORE_CHECK(pipeline.stage_memory_mb >= 0, "--stage-memory-mb ", pipeline.stage_memory_mb, ": must be >= 0");
  BalancedStages out;
  out.samples = x.size(0);
  const Schedule schedule = parse_schedule(pipeline.schedule);
  out.schedule = schedule_name(schedule);
  PipelineOptions balanced = pipeline;
  balanced.balanced_stages = stages;
  out.micro_batches = int(pipeline_micro_batches(balanced));
  StageMemory memory;
  memory.recompute = pipeline.recompute;
  memory.limit_mb = pipeline.stage_memory_mb;
  for (int s = 0; s < stages; ++s)
    memory.live.push_back(peak_live_activations(stage_order(schedule, s, stages, out.micro_batches)));
  // Each layer's input, as the stage that begins with it receives it.
  std::vector<Stage> one_per_layer;
  for (int i = 0; i < layers; ++i) one_per_layer.push_back({i, i, StageDevice{Device::cpu()}});
  // (In the dtype that reaches the layer: 16-bit activations under autocast.)
  const std::vector<DType>& dtypes = model.layer_output_dtypes(x.dtype());
  const auto inputs = stage_input_shapes(model, one_per_layer, Shape(x.shape().begin() + 1, x.shape().end()));
  for (size_t i = 0; i < inputs.size(); ++i)
    memory.input_bytes.push_back(out.samples * shape_numel(inputs[i]) * int64_t(dtype_size(i == 0 ? x.dtype() : dtypes[i - 1])));
  for (const LayerCost& cost : measure_layer_costs(model, x, y, 1, kBalanceRepeats))
    out.layer_seconds.push_back(cost.total());
  memory.ops = measure_layer_memory(model, x, y);
  std::vector<StageDevice> devices;
  const int gpus = runtime::cuda_device_count();
  for (int i = 0; i < stages; ++i)
    devices.push_back(model.device().is_cuda() ? StageDevice{Device::cuda(i % gpus)} : StageDevice{Device::cpu(), i % cpu_teams});
  out.stages = balance_stages(out.layer_seconds, stages, devices, &memory);
  out.memory = std::move(memory);
  return out;
}

std::string describe(const BalancedStages& b) {
  std::string layers, stages, held;
  for (size_t i = 0; i < b.layer_seconds.size(); ++i)
    layers += (layers.empty() ? "" : " ") + milliseconds(b.layer_seconds[i]) + "/" + kib(b.memory.ops[i].front().held);
  for (size_t s = 0; s < b.stages.size(); ++s) {
    double sum = 0;
    for (int i = b.stages[s].first_layer; i <= b.stages[s].last_layer; ++i) sum += b.layer_seconds[size_t(i)];
    stages += (stages.empty() ? "" : ", ") + milliseconds(sum);
    held += (held.empty() ? "" : ", ") + kib(b.stage_bytes(s));
  }
  return "--pipeline " + std::to_string(b.stages.size()) + ": per layer on a micro-batch of " +
         std::to_string(b.samples) + " samples, forward + backward ms (the median of " +
         std::to_string(kBalanceRepeats) + ") / KiB held from forward to backward: " + layers + "; balanced into " +
         stages_text(b.stages) + ", the stages taking " + stages + " ms and holding " + held + " KiB at most (" +
         b.schedule + ", " + std::to_string(b.micro_batches) + " micro-batches)\n";
}

}  // namespace dpcore::train::pipeline
