#include "train/pipeline/pipeline_threads.h"

#include <optional>

#include "engine/backend.h"
#include "engine/runtime.h"
#include "engine/trace.h"
#include "kernels/cpu/kernels.h"
#include "kernels/error.h"

namespace dpcore::train::pipeline {

namespace {

// A message's tag: micro-batch m's activations go up under 2m, its gradient comes back
// under 2m + 1 (messages between two stages under one tag keep their order anyway; the tag
// makes a mixed-up schedule fail as a mismatch instead of using the wrong tensor).
int tag(PipelineOp::Kind kind, int m) { return 2 * m + (kind == PipelineOp::Kind::Backward); }

// What a stage moves, as its trace names it: "activations of micro-batch 3 from stage 0".
trace::Label transfer(const char* verb, PipelineOp::Kind kind, int m, int peer, const Tensor& t) {
  const char* what = kind == PipelineOp::Kind::Forward ? "activations" : "gradients";
  const char* direction = verb[0] == 'r' ? " from" : " to";
  return trace::Label{std::string(verb) + " " + what + " of micro-batch " + std::to_string(m) + direction + " stage " +
                          std::to_string(peer),
                      {{"micro_batch", int64_t(m)}, {"peer", int64_t(peer)}, {"bytes", int64_t(t.nbytes())}}};
}

// Stage s's work on micro-batch m, timed in a trace: "micro-batch 3 forward" / "micro-batch 3 backward".
trace::Label compute(PipelineOp::Kind kind, int m, int s, int64_t rows) {
  return trace::Label{"micro-batch " + std::to_string(m) + (kind == PipelineOp::Kind::Forward ? " forward" : " backward"),
                      {{"micro_batch", int64_t(m)}, {"stage", int64_t(s)}, {"rows", rows}}};
}

// The trace's lanes of a pipeline's stages, "stage 2" ("replica 1 stage 2" for a replica's
// pipeline), and of their communication threads, "stage comm 2" ("replica 1 stage comm 2").
std::string lane_prefix(int replica) { return replica >= 0 ? "replica " + std::to_string(replica) + " " : ""; }
std::string stage_lane(int replica, int s) { return lane_prefix(replica) + "stage " + std::to_string(s); }
// Stage s's communication thread on stage s's team, as its stage thread: a send then needs
// no core that another stage is computing on.
comm::LocalOptions stage_comm_options(std::chrono::milliseconds timeout, int replica, int stages,
                                      const std::vector<runtime::CpuTeam>& teams) {
  comm::LocalOptions o;
  o.timeout = timeout;
  o.lanes = lane_prefix(replica) + "stage comm";
  o.first_lane = trace::kStageCommLanes + std::max(replica, 0) * stages;
  if (!teams.empty()) o.thread_start = [teams](int s) { runtime::join_cpu_team(teams[size_t(s)]); };
  return o;
}

}  // namespace

PipelineThreads::PipelineThreads(int stages, std::chrono::milliseconds timeout, std::vector<runtime::CpuTeam> teams,
                                 std::function<void(int, const std::string&)> on_failure, int replica)
    : comms_(comm::make_local_group(stages, stage_comm_options(timeout, replica, stages, teams))),
      teams_(std::move(teams)),
      accounts_(size_t(stages)),
      started_(size_t(stages), 0),
      replica_(replica),
      threads_(stages, [this, on_failure = std::move(on_failure)](int s, const std::string& message) {
        // The caller's first: what it records then precedes every echo of this failure.
        if (on_failure) on_failure(s, message);
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

void run_stage_ops(StageWork& work, Schedule schedule, int s, comm::Communicator& comm) {
  const int P = work.stages();
  // In a trace, on the stage's lane: each forward and backward a "step" span of its own,
  // apart from the "wait" spans of its recv and send, so that the lane's idle time (the
  // bubble) is the time outside the step spans.
  for (const PipelineOp& op : stage_order(schedule, s, P, work.micro_batches())) {
    const int m = op.micro_batch;
    const bool forward = op.kind == PipelineOp::Kind::Forward;
    const int from = forward ? s - 1 : s + 1, to = forward ? s + 1 : s - 1;
    Tensor in;
    if (from >= 0 && from < P) {
      const int boundary = forward ? s : s + 1;  // activations up, or their gradients back
      in = Tensor::empty(work.input_shape(boundary, m), work.input_dtype(boundary), work.device(s));  // recv writes all
      trace::Span span("wait", [&] { return transfer("recv", op.kind, m, from, in); });
      comm.recv(in, from, tag(op.kind, m)).wait();
    }
    Tensor out;
    {
      trace::Span span("step", [&] { return compute(op.kind, m, s, work.input_shape(s, m).front()); });
      out = forward ? work.forward(s, m, in) : work.backward(s, m, in);
    }
    if (to >= 0 && to < P) {
      trace::Span span("wait", [&] { return transfer("send", op.kind, m, to, out); });
      comm.send(out, to, tag(op.kind, m)).wait();
    }
  }
}

Tensor PipelineThreads::accumulate_gradients(Model& model, const std::vector<Stage>& stages, Schedule schedule,
                                             int micro_batches, const Tensor& x, const Tensor& y, double grad_scale,
                                             BatchStart start, PipelineStepStats* stats) {
  return accumulate_gradients(std::vector<Model*>(stages.size(), &model), stages, schedule,
                              micro_batch_rows(x.dim() >= 1 ? x.size(0) : 0, micro_batches), x, y, grad_scale, start,
                              stats, {});
}

Tensor PipelineThreads::accumulate_gradients(const std::vector<Model*>& models, const std::vector<Stage>& stages,
                                             Schedule schedule, const std::vector<MicroBatchRows>& rows,
                                             const Tensor& x, const Tensor& y, double grad_scale, BatchStart start,
                                             PipelineStepStats* stats, const std::function<void(int)>& after_stage) {
  DPCORE_CHECK(int(stages.size()) == this->stages() && models.size() == stages.size(), "pipeline: ", stages.size(),
               " stages (", stages_text(stages), ") and ", models.size(), " stage models for a pipeline of ",
               this->stages(), " threads");
  // No rows (a data-parallel replica whose share of a short batch is empty): the stages
  // have no work, but still reduce with their groups.
  std::optional<StageWork> work;
  if (!rows.empty()) {
    work.emplace(models, stages, rows, x, y, grad_scale, start);
    work->set_recompute(recompute_);
    work->set_batch_norm_groups(batch_norm_groups_);
  }
  // The caller's queued work (the batch's upload, the copies StageWork made of it, the
  // loss's zero fill) done before the stages' streams read it.
  for (const Model* m : models) runtime::synchronize_stream(m->device());
  std::vector<runtime::CpuTeam> cores(stages.size());  // cores[s]: written by stage s's thread only
  for (const auto& account : accounts_) account->begin_window();
  try {
    threads_.run([&](int s) {
      const MemoryAccount::Scope charged(accounts_[size_t(s)]);
      const Device device = models[size_t(s)]->device();
      if (!started_[size_t(s)]) {
        if (!teams_.empty()) runtime::join_cpu_team(teams_[size_t(s)]);
        backend_for(device).use_thread_stream(device.index, s);  // nothing to do on the CPU
        trace::set_lane(stage_lane(replica_, s), trace::kStageLanes + std::max(replica_, 0) * this->stages() + s);
        started_[size_t(s)] = 1;
      }
      if (work) run_stage_ops(*work, schedule, s, *comms_[size_t(s)]);
      if (after_stage) after_stage(s);
      runtime::synchronize_stream(device);
      cores[size_t(s)] = {runtime::allowed_cpus(), kernels::cpu::num_threads()};
    });
  } catch (const ReplicasFailed& e) {
    // The first failure is the cause; the others are stages the abort released.
    const ReplicaFailure& cause = e.failures().front();
    fail("pipeline stage ", cause.replica, " failed: ", cause.message);
  }
  if (stats) {
    stats->peak_live_activations = work ? work->peak_live_activations() : std::vector<int>(stages.size(), 0);
    stats->stage_cores = std::move(cores);
    stats->peak_bytes.clear();
    for (const auto& account : accounts_) stats->peak_bytes.push_back(account->window_peak_bytes());
  }
  return work ? work->loss_sum() : Tensor::zeros({}, models.back()->dtype(), models.back()->device());
}

}  // namespace dpcore::train::pipeline
