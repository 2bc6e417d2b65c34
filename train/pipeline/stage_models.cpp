#include "train/pipeline/stage_models.h"

#include <algorithm>

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
    // A CPU team, or the master's own GPU, runs on the master; another GPU on its copy.
    layers::Model* runs_on = &master_;
    if (d.is_cuda() && d != home) {
      auto copy = std::find_if(copies_.begin(), copies_.end(), [&](const auto& c) { return c->device() == d; });
      if (copy == copies_.end()) copy = copies_.insert(copies_.end(), master.replicate(d));
      runs_on = copy->get();
    }
    per_stage_.push_back(runs_on);
  }
  if (copies_.empty()) return;
  // (Refuses a weight two stages use: its gradient would be in two models.)
  parameters_ = stage_parameter_ranges(master, stages);
  buffers_ = stage_buffer_ranges(master, stages);
  wait_for_copies();
}

void StageModels::pull() {
  for_copied_stages([&](layers::Model& copy, const FlatRange& params, const FlatRange& buffers) {
    copy_range(copy.parameters().values(), master_.parameters().values(), params);
    copy_range(copy.buffers().values(), master_.buffers().values(), buffers);
  });
  // After the parameters: under --precision bf16/fp16 zero_grad also casts the copy's 16-bit
  // parameters from them.
  for (const auto& copy : copies_) copy->zero_grad();
  wait_for_copies();
}

void StageModels::push() {
  for_copied_stages([&](layers::Model& copy, const FlatRange& params, const FlatRange& buffers) {
    copy_range(master_.parameters().grads(), copy.parameters().grads(), params);
    copy_range(master_.buffers().values(), copy.buffers().values(), buffers);
  });
  wait_for_copies();
}

void StageModels::for_copied_stages(
    const std::function<void(layers::Model&, const FlatRange&, const FlatRange&)>& move) const {
  for (size_t s = 0; s < per_stage_.size(); ++s)
    if (per_stage_[s] != &master_) move(*per_stage_[s], parameters_[s], buffers_[s]);
}

std::vector<StageModels::CopyTraffic> StageModels::traffic() const {
  std::vector<CopyTraffic> out;
  for (const auto& copy : copies_) out.push_back({copy->device()});
  for (size_t s = 0; s < per_stage_.size(); ++s) {
    if (per_stage_[s] == &master_) continue;
    const Device d = per_stage_[s]->device();
    CopyTraffic& t = *std::find_if(out.begin(), out.end(), [&](const CopyTraffic& c) { return c.device == d; });
    t.parameter_elements += parameters_[s].size;
    t.buffer_elements += buffers_[s].size;
  }
  return out;
}

void StageModels::wait_for_copies() const {
  for (const auto& copy : copies_) runtime::synchronize_stream(copy->device());
  runtime::synchronize_stream(master_.device());
}

}  // namespace dpcore::train::pipeline
