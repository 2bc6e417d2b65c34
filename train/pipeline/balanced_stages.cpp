#include "train/pipeline/balanced_stages.h"

#include <cstdio>

#include "kernels/error.h"
#include "train/pipeline/pipeline_step.h"

namespace dpcore::train::pipeline {

namespace {

std::string milliseconds(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", seconds * 1e3);
  return text;
}

}  // namespace

BalancedStages balance_pipeline(Model& model, const Tensor& x, const Tensor& y, int stages, int cpu_teams) {
  check_stage_count(stages, int(model.net().size()));  // before the timing, not after it
  DPCORE_CHECK(cpu_teams >= 1, "--pipeline ", stages, ": ", cpu_teams, " CPU teams to put the stages on");
  BalancedStages out;
  out.samples = x.size(0);
  for (const LayerCost& cost : measure_layer_costs(model, x, y, 1, kBalanceRepeats)) out.layer_seconds.push_back(cost.total());
  std::vector<StageDevice> devices;
  for (int i = 0; i < stages; ++i) devices.push_back({Device::cpu(), i % cpu_teams});
  out.stages = balance_stages(out.layer_seconds, stages, devices);
  return out;
}

std::string describe(const BalancedStages& b) {
  std::string layers, stages;
  for (double s : b.layer_seconds) layers += (layers.empty() ? "" : " ") + milliseconds(s);
  for (const Stage& st : b.stages) {
    double sum = 0;
    for (int i = st.first_layer; i <= st.last_layer; ++i) sum += b.layer_seconds[size_t(i)];
    stages += (stages.empty() ? "" : ", ") + milliseconds(sum);
  }
  return "--pipeline " + std::to_string(b.stages.size()) + ": forward + backward per layer on a micro-batch of " +
         std::to_string(b.samples) + " samples (ms, the median of " + std::to_string(kBalanceRepeats) + "): " + layers +
         "; balanced into " + stages_text(b.stages) + ", the stages taking " + stages + " ms\n";
}

}  // namespace dpcore::train::pipeline
