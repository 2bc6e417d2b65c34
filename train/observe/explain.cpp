// Builds the Explanation of a step from the runner's own state (train/observe/explain.h).
#include "train/observe/explain.h"

#include "comm/ring.h"
#include "train/pipeline/hybrid_runner.h"
#include "train/pipeline/pipeline_runner.h"
#include "train/pipeline/stage_process_runner.h"
#include "train/runners/ddp.h"
#include "train/step/step.h"

namespace dpcore::train {

namespace {

int64_t bytes_of(const Tensor& t) { return t.defined() ? int64_t(t.nbytes()) : 0; }

// What every runner has: the batch, the model's buffers, the loss and the optimizer.
Explanation common(const Model& model, const Optimizer& optimizer, const data::Batch& batch, const StepStats& stats) {
  Explanation e;
  e.batch = batch.size;
  e.token_ids = batch.token_ids();
  e.image_bytes = batch.sample_numel() * int64_t(batch.token_ids() ? sizeof(int64_t) : sizeof(float));
  e.label_bytes = batch.labels_per_sample * int64_t(sizeof(int64_t));
  e.labels_per_sample = batch.labels_per_sample;
  e.targets = stats.targets;
  e.classes = model.num_classes();
  const FlatParameters& params = model.parameters();
  e.param_tensors = int64_t(params.entries().size());
  e.param_elements = params.total();
  e.param_bytes = bytes_of(params.values());
  e.grad_bytes = bytes_of(params.grads());
  e.buffer_bytes = model.has_batch_norm() ? bytes_of(model.buffers().values()) : 0;
  e.loss = stats.loss_sum.item() / double(stats.targets);
  e.seed = gradient_scale(stats.targets);
  e.optimizer = optimizer.name();
  if (const auto* sgd = dynamic_cast<const Sgd*>(&optimizer)) {
    e.sgd = sgd->config();
    e.momentum_bytes = bytes_of(sgd->momentum());
  }
  if (const auto* adam = dynamic_cast<const Adam*>(&optimizer)) e.adam = adam->config();
  e.sgd_steps = optimizer.steps_taken();
  return e;
}

// How the batch was shared: `shares` [micro-batch][rank] by `splitter`, each micro-batch's
// samples (and, for text, each share's tokens).
void shared_out(Explanation& e, const std::vector<std::vector<int64_t>>& shares, const Splitter& splitter,
                const data::Batch& batch) {
  e.shares = shares;
  int64_t row = 0;
  for (const std::vector<int64_t>& pieces : e.shares) {
    int64_t micro = 0;
    std::vector<int64_t> tokens;
    for (int64_t p : pieces) {
      int64_t t = 0;
      for (int64_t i = row; batch.lengths && i < row + p; ++i) t += batch.lengths[i];
      tokens.push_back(t);
      micro += p, row += p;
    }
    e.micro.push_back(micro);
    if (batch.lengths) e.tokens.push_back(std::move(tokens));
  }
  e.split = splitter.even() ? "even" : splitter.adaptive() ? "adaptive" : "weights";
  e.weights = splitter.weights();
}

// What both data-parallel runners add: who the replicas are and how the batch was shared.
void replicated(Explanation& e, const ReplicatedRunner& runner, const data::Batch& batch) {
  const Replica& first = runner.replica(0);
  e.backend = first.comm->backend();
  e.replicas = first.comm->size();
  for (size_t r = 0; r < runner.local_replicas(); ++r) {
    e.devices.push_back(runner.replica(r).device().str());
    e.ranks.push_back(runner.replica(r).rank());
  }
  shared_out(e, runner.last_shares(), runner.splitter(), batch);
  e.sync_batch_norm = runner.sync_batch_norm();
  if (first.wire_grads.defined()) {
    e.wire_dtype = dtype_name(first.wire_grads.dtype());
    e.wire_bytes = bytes_of(first.wire_grads);
  }
}

// What a pipeline's explanation says of its stages, its schedule and the step just taken.
void pipelined(Explanation& e, Model& model, const std::vector<pipeline::Stage>& stages, pipeline::Schedule schedule,
               int micro_batches, const pipeline::PipelineStepStats& last, const data::Batch& batch) {
  e.schedule = pipeline::schedule_name(schedule);
  for (const pipeline::Stage& s : stages) {
    std::string layers;
    for (int i = s.first_layer; i <= s.last_layer; ++i) layers += (layers.empty() ? "" : " ") + model.net().child(size_t(i)).describe();
    e.stages.push_back("layers " + std::to_string(s.first_layer) + "-" + std::to_string(s.last_layer) + " (" + layers +
                       ") on " + s.device.str());
  }
  const auto shapes = pipeline::stage_input_shapes(model, stages, Shape(batch.sample.begin(), batch.sample.end()));
  // (What crosses has the dtype forward() has there: 16-bit activations under autocast.)
  const std::vector<DType>& dtypes = model.layer_output_dtypes(batch.token_ids() ? DType::Int64 : model.dtype());
  for (size_t s = 1; s < shapes.size(); ++s) {
    e.boundary_elements.push_back(shape_numel(shapes[s]));
    e.boundary_dtypes.push_back(dtypes[size_t(stages[s].first_layer - 1)]);
  }
  e.dtype_bytes = int64_t(dtype_size(model.dtype()));
  e.ticks = pipeline::tick_table(schedule, int(stages.size()), micro_batches);
  e.peak_live = last.peak_live_activations;
  for (const runtime::CpuTeam& team : last.stage_cores) e.stage_cores.push_back(team.str());
  e.stage_peak_bytes = last.peak_bytes;
}

// The ring schedule of the gradient allreduce over [begin, end), when the communicator
// runs dpcore's own ring (the local backend; MPI and NCCL choose their own algorithms).
void ring_of(Explanation& e, int64_t begin, int64_t end) {
  e.ring_begin = begin, e.ring_end = end;
  if (e.backend == "local") e.ring = ring_schedule(e.replicas, begin, end);
}

}  // namespace

std::vector<RingStep> ring_schedule(int n, int64_t begin, int64_t end) {
  std::vector<RingStep> steps;
  for (bool reduce : {true, false}) {
    for (int s = 0; s < n - 1; ++s) {
      RingStep step{reduce, s, {}};
      for (int r = 0; r < n; ++r) {
        const comm::ring::Move move =
            reduce ? comm::ring::reduce_scatter_move(n, r, s) : comm::ring::allgather_move(n, r, s);
        const comm::ring::Range range = comm::ring::chunk_range(end - begin, n, move.send);
        step.transfers.push_back({r, move.to, move.send, begin + range.begin, begin + range.end});
      }
      steps.push_back(std::move(step));
    }
  }
  return steps;
}

Explanation explain_step(StepRunner& runner, const data::Batch& batch, const StepStats& stats) {
  Explanation e = common(runner.model(), runner.optimizer(), batch, stats);
  // The runners are told apart here rather than by a virtual in StepRunner: the
  // explanation is a reader of their state, not a part of what a runner must do.
  if (const auto* ddp = dynamic_cast<const DistributedRunner*>(&runner)) {
    const Replica& first = ddp->replica(0);
    e.kind = Explanation::Kind::Distributed;
    replicated(e, *ddp, batch);
    const BucketReducer& reducer = ddp->reducer(0);
    const auto& entries = first.model->parameters().entries();
    for (const Bucket& b : reducer.buckets()) {
      const DType moved = first.wire_grads.defined() ? first.wire_grads.dtype() : first.model->dtype();
      ExplainedBucket x{b.begin, b.end, (b.end - b.begin) * int64_t(dtype_size(moved)), {}, 0};
      for (size_t p : b.params) x.params.push_back(entries[p].name);
      e.buckets.push_back(std::move(x));
    }
    for (const BucketReducer::Ready& ready : reducer.ready_order()) {
      e.buckets[ready.bucket].ready_after = ready.gradients;
    }
    e.first_cap_bytes = int64_t(ddp->first_bucket_cap_bytes());
    e.cap_bytes = int64_t(ddp->bucket_cap_bytes());
    ring_of(e, e.buckets[0].begin, e.buckets[0].end);
    return e;
  }
  if (const auto* dp = dynamic_cast<const DataParallelRunner*>(&runner)) {
    e.kind = Explanation::Kind::DataParallel;
    replicated(e, *dp, batch);
    ring_of(e, 0, e.param_elements);
    return e;
  }
  if (const auto* single = dynamic_cast<const SingleDeviceRunner*>(&runner)) {
    e.kind = Explanation::Kind::SingleDevice;
    e.devices = {single->device().str()};
    e.micro = even_split(batch.size, std::min<int64_t>(single->accum(), batch.size));
    return e;
  }
  if (const auto* pipe = dynamic_cast<const pipeline::PipelineRunner*>(&runner)) {
    e.kind = Explanation::Kind::Pipeline;
    e.devices = {runner.model().device().str()};
    const int micro_batches = int(std::min<int64_t>(pipe->micro_batches(), batch.size));
    e.micro = pipeline::micro_batch_sizes(batch.size, micro_batches);
    pipelined(e, runner.model(), pipe->stages(), pipe->schedule(), micro_batches, pipe->last_step(), batch);
    e.stage_gpus = runner.model().device().is_cuda();
    if (e.stage_gpus) e.stage_cores.clear();  // (the threads only queue the GPUs' work)
    for (const pipeline::StageModels::CopyTraffic& t : pipe->stage_models().traffic())
      e.stage_copies.push_back({t.device.str(), t.parameter_elements * e.dtype_bytes, t.buffer_elements * e.dtype_bytes});
    return e;
  }
  if (const auto* hybrid = dynamic_cast<const pipeline::HybridRunner*>(&runner)) {
    e.kind = Explanation::Kind::Pipeline;
    replicated(e, *hybrid, batch);
    int replica0_micro_batches = 0;  // the pieces replica 0's pipeline ran
    for (const std::vector<int64_t>& pieces : e.shares) replica0_micro_batches += pieces.front() > 0;
    pipelined(e, runner.model(), hybrid->stages(), hybrid->schedule(), replica0_micro_batches, hybrid->last_step(),
              batch);
    for (const pipeline::FlatRange& r : hybrid->stage_ranges()) e.stage_ranges.push_back({r.first, r.first + r.size});
    return e;
  }
  if (const auto* procs = dynamic_cast<const pipeline::StageProcessRunner*>(&runner)) {
    e.kind = Explanation::Kind::Pipeline;
    e.stage_processes = true;
    e.backend = "mpi";
    e.replicas = procs->replicas();
    e.devices = {runner.model().device().str()};
    e.sync_batch_norm = procs->sync_batch_norm();
    shared_out(e, procs->last_shares(), procs->splitter(), batch);
    int replica0_micro_batches = 0;
    for (const std::vector<int64_t>& pieces : e.shares) replica0_micro_batches += pieces.front() > 0;
    if (e.replicas == 1) e.shares.clear();  // one pipeline: its micro-batches are e.micro
    pipelined(e, runner.model(), procs->plan().stages, procs->plan().schedule, replica0_micro_batches,
              procs->last_step(), batch);
    for (const pipeline::FlatRange& r : procs->stage_ranges()) e.stage_ranges.push_back({r.first, r.first + r.size});
    return e;
  }
  fail("--explain: cannot explain a step of ", runner.describe(),
       " (it explains one device, --mode dp, --mode ddp and --stages, with or without --replicas)");
}

}  // namespace dpcore::train
