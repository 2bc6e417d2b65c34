#include "train/pipeline/pipeline_threads.h"

#include "kernels/cpu/kernels.h"
#include "kernels/error.h"

namespace dpcore::train::pipeline {

namespace {

// A message's tag: micro-batch m's activations go up under 2m, its gradient comes back
// under 2m + 1 (messages between two stages under one tag keep their order anyway; the tag
// makes a mixed-up schedule fail as a mismatch instead of using the wrong tensor).
int tag(PipelineOp::Kind kind, int m) { return 2 * m + (kind == PipelineOp::Kind::Backward); }

}  // namespace

PipelineThreads::PipelineThreads(int stages, std::chrono::milliseconds timeout, std::vector<runtime::CpuTeam> teams)
    : comms_(comm::make_local_group(stages, comm::LocalOptions{timeout})),
      teams_(std::move(teams)),
      accounts_(size_t(stages)),
      joined_(size_t(stages), 0),
      threads_(stages, [this](int s, const std::string& message) {
        comms_[s]->abort("pipeline stage " + std::to_string(s) + " failed: " + message);
      }) {
  DPCORE_CHECK(teams_.empty() || int(teams_.size()) == stages, "pipeline: ", teams_.size(), " CPU teams for ", stages,
               " stages");
  for (auto& account : accounts_) account = std::make_shared<MemoryAccount>();
}

std::vector<size_t> PipelineThreads::peak_bytes() const {
  std::vector<size_t> out;
  for (const auto& account : accounts_) out.push_back(account->peak_bytes());
  return out;
}

void PipelineThreads::reset_peaks() {
  for (const auto& account : accounts_) account->reset_peak();
}

void PipelineThreads::run_stage(StageWork& work, Schedule schedule, int s) {
  comm::Communicator& comm = *comms_[s];
  const int P = work.stages();
  const DType dtype = work.dtype();
  const Device device = work.device();
  for (const PipelineOp& op : stage_order(schedule, s, P, work.micro_batches())) {
    const int m = op.micro_batch;
    if (op.kind == PipelineOp::Kind::Forward) {
      Tensor in;
      if (s > 0) {
        in = Tensor::empty(work.input_shape(s, m), dtype, device);  // recv writes all of it
        comm.recv(in, s - 1, tag(op.kind, m)).wait();
      }
      Tensor out = work.forward(s, m, in);
      if (s + 1 < P) comm.send(out, s + 1, tag(op.kind, m)).wait();
    } else {
      Tensor grad;
      if (s + 1 < P) {
        grad = Tensor::empty(work.input_shape(s + 1, m), dtype, device);
        comm.recv(grad, s + 1, tag(op.kind, m)).wait();
      }
      Tensor back = work.backward(s, m, grad);
      if (s > 0) comm.send(back, s - 1, tag(op.kind, m)).wait();
    }
  }
}

Tensor PipelineThreads::accumulate_gradients(Model& model, const std::vector<Stage>& stages, Schedule schedule,
                                             int micro_batches, const Tensor& x, const Tensor& y, double grad_scale,
                                             BatchStart start, PipelineStepStats* stats) {
  DPCORE_CHECK(int(stages.size()) == this->stages(), "pipeline: ", stages.size(), " stages (", stages_text(stages),
               ") for a pipeline of ", this->stages(), " threads");
  StageWork work(model, stages, micro_batches, x, y, grad_scale, start);
  std::vector<runtime::CpuTeam> cores(stages.size());  // cores[s]: written by stage s's thread only
  for (const auto& account : accounts_) account->begin_window();
  try {
    threads_.run([&](int s) {
      const MemoryAccount::Scope charged(accounts_[size_t(s)]);
      if (!teams_.empty() && !joined_[size_t(s)]) {
        runtime::join_cpu_team(teams_[size_t(s)]);
        joined_[size_t(s)] = 1;
      }
      run_stage(work, schedule, s);
      cores[size_t(s)] = {runtime::allowed_cpus(), kernels::cpu::num_threads()};
    });
  } catch (const ReplicasFailed& e) {
    // The first failure is the cause; the others are stages the abort released.
    const ReplicaFailure& cause = e.failures().front();
    fail("pipeline stage ", cause.replica, " failed: ", cause.message);
  }
  if (stats) {
    stats->peak_live_activations = work.peak_live_activations();
    stats->stage_cores = std::move(cores);
    stats->peak_bytes.clear();
    for (const auto& account : accounts_) stats->peak_bytes.push_back(account->window_peak_bytes());
  }
  return work.loss_sum();
}

}  // namespace dpcore::train::pipeline
