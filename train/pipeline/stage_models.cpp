#include "train/pipeline/stage_models.h"

#include "engine/runtime.h"
#include "kernels/error.h"

namespace dpcore::train::pipeline {
namespace {

// dst's elements [r.first, r.first + r.size) <- src's (flat tensors on any devices).
void copy_range(const Tensor& dst, const Tensor& src, const FlatRange& r) {
  if (r.size > 0) dst.narrow0(r.first, r.first + r.size).copy_(src.narrow0(r.first, r.first + r.size));
}

}  // namespace

StageModels::StageModels(layers::Model& master, const std::vector<Stage>& stages) : master_(master) {
  const Device home = master.device();
  for (const Stage& stage : stages) {
    const Device d = stage.device.device;
    DPCORE_CHECK(d.is_cuda() == home.is_cuda(), "pipeline: the stage of layers ", stage.first_layer, "-",
                 stage.last_layer, " is on ", stage.device.str(), " and the model on ", home.str(),
                 ": a pipeline's stages are all on the CPU (cpu:N, with --device cpu) or all on GPUs (cuda:N, "
                 "with --device cuda)");
    if (d.is_cpu() || d == home) {  // a CPU team, or the master's own GPU
      copy_of_.push_back(-1);
      per_stage_.push_back(&master_);
      continue;
    }
    int found = -1;
    for (size_t c = 0; c < copies_.size(); ++c)
      if (copies_[c]->device() == d) found = int(c);
    if (found < 0) {
      copies_.push_back(master.replicate(d));
      found = int(copies_.size()) - 1;
    }
    copy_of_.push_back(found);
    per_stage_.push_back(copies_[size_t(found)].get());
  }
  if (copies_.empty()) return;
  // (Refuses a weight two stages use: its gradient would be in two models.)
  parameters_ = stage_parameter_ranges(master, stages);
  buffers_ = stage_buffer_ranges(master, stages);
  wait_for_copies();
}

void StageModels::pull() {
  for (const auto& copy : copies_) copy->zero_grad();
  for (size_t s = 0; s < copy_of_.size(); ++s) {
    if (copy_of_[s] < 0) continue;
    layers::Model& copy = *copies_[size_t(copy_of_[s])];
    copy_range(copy.parameters().values(), master_.parameters().values(), parameters_[s]);
    copy_range(copy.buffers().values(), master_.buffers().values(), buffers_[s]);
  }
  wait_for_copies();
}

void StageModels::push() {
  for (size_t s = 0; s < copy_of_.size(); ++s) {
    if (copy_of_[s] < 0) continue;
    layers::Model& copy = *copies_[size_t(copy_of_[s])];
    copy_range(master_.parameters().grads(), copy.parameters().grads(), parameters_[s]);
    copy_range(master_.buffers().values(), copy.buffers().values(), buffers_[s]);
  }
  wait_for_copies();
}

std::vector<StageModels::CopyTraffic> StageModels::traffic() const {
  std::vector<CopyTraffic> out;
  for (const auto& copy : copies_) out.push_back({copy->device()});
  for (size_t s = 0; s < copy_of_.size(); ++s) {
    if (copy_of_[s] < 0) continue;
    out[size_t(copy_of_[s])].parameter_elements += parameters_[s].size;
    out[size_t(copy_of_[s])].buffer_elements += buffers_[s].size;
  }
  return out;
}

void StageModels::wait_for_copies() const {
  for (const auto& copy : copies_) runtime::synchronize_stream(copy->device());
  runtime::synchronize_stream(master_.device());
}

}  // namespace dpcore::train::pipeline
