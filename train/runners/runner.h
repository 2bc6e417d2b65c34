// StepRunner: who executes a training step. One model on one device, or R replicas with
// their communicators (train/runners/data_parallel.h, train/runners/ddp.h): the training loop
// (train/trainer.h) cannot tell the difference, and the mathematics of a step is the same
// either way. make_runner (train/runners/make_runner.cpp) picks one from the options.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/backend.h"
#include "engine/data/loader.h"
#include "engine/grad_scaler.h"
#include "engine/optimizer.h"
#include "layers/model.h"
#include "train/faults/fault_injection.h"
#include "train/faults/guards.h"
#include "train/faults/replica_failure.h"
#include "train/step/step.h"
#include "train/observe/step_times.h"

namespace dpcore::comm {
class Communicator;
}

namespace dpcore::train {

using layers::Model;

// A pipeline (train/pipeline/): the model's layers cut into stages, each on a thread of its
// own, the batch into micro-batches (docs/pipelines.md).
struct PipelineOptions {
  std::string stages;              // --stages "0-5@cpu:0,6-11@cpu:1"; empty: no pipeline
  // --pipeline P: P stages balanced by the layers' measured costs (train/pipeline/balanced_stages.h);
  // the trainer measures them and fills `stages` before it makes the runner (both set: the
  // stages --pipeline chose). 0: not asked.
  int balanced_stages = 0;
  std::string schedule = "gpipe";  // --schedule naive | gpipe | 1f1b
  int micro_batches = 0;           // --micro-batches M; 0: one per stage (1 with naive)
  bool recompute = false;          // --recompute: each stage keeps its inputs only (StageWork::set_recompute)
  double stage_memory_mb = 0;      // --stage-memory-mb: what --pipeline P's stages may hold (MiB); 0: no limit
};
// The micro-batches of a pipeline's step: --micro-batches, else one per stage of --stages or
// --pipeline (1 with naive); 1 without a pipeline. What a checkpoint records as the step's --accum:
// a pipelined step is one device's step with that many micro-batches.
int64_t pipeline_micro_batches(const PipelineOptions& pipeline);
// --stages or --pipeline was given.
inline bool is_pipeline(const PipelineOptions& pipeline) {
  return !pipeline.stages.empty() || pipeline.balanced_stages > 0;
}

struct ParallelOptions {
  int replicas = 1;                // R; with --backend mpi, the world size
  std::string mode = "ddp";        // dp | ddp
  std::string backend = "local";   // local | nccl | mpi
  std::string split = "even";      // even | weights:3,1,... | adaptive
  double bucket_mb = 25;           // DDP bucket cap of every bucket but the first
  double first_bucket_mb = 1;      // DDP's first bucket cap (PyTorch's 1 MiB; the benchmarks sweep it)
  std::vector<Device> devices;     // one per replica; empty: all on the model's device
  double timeout_s = 300;          // a replica that does not answer within this fails the run
  // What the gradient allreduce moves: "fp32", or "bf16" (half the bytes; the gradients stay
  // float32 in the flat buffer: train/step/gradient_wire.h). dp and ddp.
  std::string grad_dtype = "fp32";
  // Batch norm over replicas: "local" (each replica normalises with its share's statistics;
  // rank 0's running statistics are broadcast at the start of each step, DDP's
  // broadcast_buffers) or "sync" (SyncBatchNorm: the statistics of the whole micro-batch).
  std::string batchnorm = "local";
  // How replicas combine their work (train/sync/sync_strategy.h): "full" (one synchronous step over
  // the global batch), "local:K" (local SGD: each replica steps on its own share, the
  // parameters are averaged every K steps) or "async" (a parameter server in this process).
  std::string sync = "full";
  int64_t max_staleness = 8;       // async: updates a gradient may lag behind the master
  FaultInjector faults;            // --inject (train/faults/fault_injection.h); empty: none
  GuardOptions guards;             // --skip-nonfinite, --check-replicas (train/faults/guards.h)
  ReplicaFailurePolicy failure;    // --on-replica-failure, --min-replicas (train/faults/replica_failure.h)
  PipelineOptions pipeline;        // --stages or --pipeline, --schedule, --micro-batches
};

struct StepStats {
  Tensor loss_sum;       // summed loss over the counted targets of the global batch, one element,
                         // on the root device, the step's own (later steps never write it)
                         // (read it only when needed: reading synchronises with the device)
  int64_t samples = 0;
  int64_t targets = 0;   // the counted targets loss_sum sums over (the mean loss is loss_sum / targets)
  bool skipped = false;  // --skip-nonfinite: the step held a NaN or Inf and was not applied
  StepTimes times = {};  // where the step's time went (train/observe/step_times.h); dp and ddp fill it
  // --on-replica-failure shrink: the replicas that failed in this step and were dropped
  // before it ran again without them (none normally).
  std::vector<ReplicaDropped> dropped = {};
  // --precision fp16: the loss scaler found an Inf or NaN in the reduced gradients, so the
  // step was not applied and the scale backed off (train/step/loss_scaling.h).
  bool overflow = false;
};

class StepRunner {
 public:
  virtual ~StepRunner() = default;
  // One optimizer step on a global batch in host memory.
  virtual StepStats step(const data::Batch& batch) = 0;
  // The root replica: the one evaluated, saved and checkpointed.
  virtual Model& model() = 0;
  virtual Optimizer& optimizer() = 0;
  // The learning rate and momentum of the next steps (a schedule, train/schedule/lr_schedule.h: the
  // trainer calls it before every step), on the optimizer of every replica of this process.
  virtual void set_rates(double lr, double momentum) = 0;
  // Called after the root's parameters or optimizer state were replaced (resume, --init),
  // so that every replica starts equal again.
  virtual void sync_replicas() = 0;
  // False on the processes of a multi-process run other than rank 0: they train, but
  // leave printing and writing files to rank 0.
  virtual bool is_primary() const { return true; }
  // Runs `fn` on the thread that issues this process's collectives, with the communicator
  // that joins this process to the other processes of a multi-process run (mpirun) and its
  // replica's device; every process calls it at the same point of the run (a --trace
  // window's end: train/observe/job_trace.h). Returns false, without calling `fn`, when this process
  // is the whole run.
  virtual bool across_processes(const std::function<void(comm::Communicator&, Device)>& /*fn*/) { return false; }
  virtual std::string describe() const = 0;
  // The number of the step the next step() takes, from 1, as the log counts them (resumed
  // runs keep counting; a step skipped by --skip-nonfinite counts too). The trainer sets it
  // before every step; fault injection and the guards' messages use it. Unset, it is the
  // optimizer's steps_taken() + 1.
  void set_step_number(int64_t step) { step_number_ = step; }
  int64_t step_number() { return step_number_ > 0 ? step_number_ : optimizer().steps_taken() + 1; }
  // Brings the replicas to one model before it is evaluated, saved or checkpointed (the
  // trainer calls it at the end of every epoch and before writing files): local SGD
  // averages now, async waits for the updates still in flight. Returns the loss and samples
  // of work finished since the last step() returned and not reported yet (async).
  virtual StepStats settle() { return {}; }
  // Counts the runner kept since the last call, for the metrics of an epoch (e.g. async's
  // staleness histogram): name and values. None by default.
  virtual std::vector<std::pair<std::string, std::vector<int64_t>>> epoch_counters() { return {}; }
  // A pipeline's: per stage, the most bytes of tensors the stage's thread held at once since
  // reset_stage_peak_bytes (the epoch line's and the metrics' peak memory per stage). Empty
  // for a runner without stages.
  virtual std::vector<size_t> stage_peak_bytes() const { return {}; }
  virtual void reset_stage_peak_bytes() {}
  // --precision fp16: the loss scaler's state (the same on every replica), for the log,
  // the metrics and checkpoints; nullopt for a runner without one. loss_scaler()'s.
  std::optional<GradScalerState> loss_scale() const;
  // Sets every replica's scaler to `state` (a resumed checkpoint's): loss_scaler()'s, by
  // default. Fails on a runner without one.
  virtual void set_loss_scale(const GradScalerState& state);

 protected:
  // The runner's loss scaler (--precision fp16's, train/step/loss_scaling.h; its replica
  // 0's where each replica has one), null without one.
  virtual GradScaler* loss_scaler() const { return nullptr; }

 private:
  int64_t step_number_ = 0;  // 0: not set
};

// One model, one device: zero, A micro-batches, one fused optimizer step.
//
// On a backend that can capture (CUDA, unless --cuda-graph off), the whole step (zeroing,
// every micro-batch's forward and backward, the optimizer's update) is recorded once into a graph
// over fixed input buffers and replayed from then on: each step is then one copy of the
// batch into those buffers and one launch. Before recording, kWarmupSteps steps at the
// size of the first batch run eagerly, the last of them on the stream the recording will
// use (Backend::Captured::warm_up). A batch of another size (the last, partial one of an
// epoch) runs eagerly.
//
// What the recording bakes in is checked before every replay; when any of it changed, the
// step runs eagerly on a fresh graph's stream and is recorded anew:
//   * the backend's settings (engines, TF32, --cuda-graph), through Captured::stale;
//   * the optimizer's hyper-parameters (set_rates, Optimizer::set_lr) and whether its step
//     was the first (the hyper-parameters are compared with the previous step's: see below);
//   * the micro-batch split needs no check: it follows from the batch size, and only
//     batches of the recorded size replay; the gradient scale 1/(counted targets) is
//     compared: a batch of that size with another count (tokens, ignore_index) runs
//     eagerly (one class per sample: the count is the size, and every such batch replays);
//   * NOT checked: the batch position (Model::set_batch_position) is handed to the modules
//     on the host as the step is recorded, so a replay keeps the recorded step's; no module
//     of this branch draws random numbers, but a dropout must keep graphs off (or read its
//     step from device memory) before it trains under a graph.
// Rates that change from one step to the next (an --lr-schedule other than constant, a
// warm-up) would record anew at every step, which costs more than running eagerly: so a
// step whose rates differ from the previous step's runs eagerly, drops the graph, and
// recording waits for steps whose rates hold still (a step decay records anew once per
// decay; cosine and onecycle run eagerly throughout, with a note on stderr saying so the
// first time, when the backend could have recorded).
//
// With --inject or --skip-nonfinite every step runs eagerly: a fault runs host code
// between backward and the optimizer step, and the guard reads the loss and the gradients
// there, which a recorded graph cannot do (a note on stderr says so, where the backend
// could have recorded). So does a step under the loss scaler (--precision fp16), which
// reads back whether the gradients held an Inf or NaN.
//
// An optimizer whose step is not replayable (Optimizer::replayable: Adam passes its bias
// corrections, which change every step, to the kernel) runs every step eagerly too.
//
// A recording that fails (a library doing something a capture forbids) costs nothing but
// a warning on stderr: that step was already taken by the warm-up, the step count is
// unchanged, and training goes on eagerly.
class SingleDeviceRunner : public StepRunner {
 public:
  // `options`: only its faults and guards matter here (one replica: replica 0).
  SingleDeviceRunner(std::unique_ptr<Model> model, const OptimizerConfig& optimizer, int64_t accum,
                     const ParallelOptions& options = {});
  ~SingleDeviceRunner() override;
  StepStats step(const data::Batch& batch) override;
  Model& model() override { return *model_; }
  Optimizer& optimizer() override { return *optimizer_; }
  void set_rates(double lr, double momentum) override;
  void sync_replicas() override {}
  std::string describe() const override;
  // True while steps of the recorded size replay a graph.
  bool replaying() const { return graph_ != nullptr; }
  Device device() const { return model_->device(); }
  int64_t accum() const { return accum_; }  // micro-batches per step (fewer when a batch is smaller)

  static constexpr int kWarmupSteps = 2;

 private:
  // This step on the graph's capture stream, then the recording of the next ones.
  Tensor warm_up_and_record(const Tensor& x, const Tensor& y, int64_t accum, int64_t counted, BatchStart start);
  // Whether something the graph baked in, other than the optimizer's rates, has changed
  // since it was recorded.
  bool graph_outdated() const;
  // Whether the rates differ from the previous step's; notes on stderr, once, when they
  // change at consecutive steps on a backend that records graphs.
  bool rates_changed();
  void drop_graph();
  // The step through the fault injector, the --skip-nonfinite guard and the loss scaler, eagerly.
  StepStats guarded_step(const Tensor& x, const Tensor& y, int64_t accum, int64_t samples, int64_t counted,
                         BatchStart start);

  std::unique_ptr<Model> model_;
  std::unique_ptr<Optimizer> optimizer_;
  int64_t accum_;
  int64_t graph_batch_ = 0;   // the batch size the graph is (to be) recorded at
  int64_t graph_counted_ = 0; // the counted targets it was recorded with (its gradient scale)
  int warmup_steps_ = 0;      // eager steps taken at that size
  bool eager_only_ = false;   // the backend cannot capture, or a recording failed
  bool recorded_first_step_ = false;
  // The optimizer as the previous step used it (a graph, when there is one, recorded it
  // so: a change drops the graph), whether its rates had changed, and whether the note
  // that rates changing at every step keep graphs off was printed.
  std::vector<double> last_hyper_parameters_;
  bool stepped_ = false, rates_were_changing_ = false, noted_changing_ = false;
  FaultInjector faults_;
  GuardOptions guards_;
  std::unique_ptr<GradScaler> scaler_;  // --precision fp16's loss scaler; null otherwise
  GradScaler* loss_scaler() const override { return scaler_.get(); }
  bool guarded_ = false;      // faults, --skip-nonfinite or the scaler: guarded_step, never a graph
  std::unique_ptr<Backend::Captured> graph_;  // declared first: destroyed after its buffers
  Tensor static_x_, static_y_, static_loss_;  // the graph's fixed input and output buffers
};

// --grad-dtype: refuses, naming the flags, a 16-bit gradient allreduce where there is none
// for it to change (one replica), or the runner communicates otherwise (a pipeline, local
// SGD, async). make_runner checks it; the trainer too, before it loads any data.
void check_grad_dtype(const ParallelOptions& options);

// SingleDeviceRunner for one local replica, else the data-parallel runner of options.mode.
std::unique_ptr<StepRunner> make_runner(std::unique_ptr<Model> model, const OptimizerConfig& optimizer, int64_t accum,
                                        const ParallelOptions& options);

// Rows [begin, end) of a host batch: a view of the same memory, nothing is copied. How
// every runner cuts a batch into micro-batches and replicas' shares (and the trainer a
// dataset into evaluation batches), so the row arithmetic lives in one place.
data::Batch batch_rows(const data::Batch& batch, int64_t begin, int64_t end);
// The batch's inputs and labels as tensors on `device`: [n, sample...] float32 values or
// int64 token ids, and [n] int64 labels ([n, L] with L labels per sample).
std::pair<Tensor, Tensor> batch_tensors(const data::Batch& batch, Device device);
// Only the labels: for the device that computes a loss from gathered outputs and needs no
// inputs (the root of --mode dp).
Tensor batch_labels(const data::Batch& batch, Device device);
// The labels that count in the loss: those that are not ignore_index (n for one class per
// sample). A step's gradient is the sum of the losses of the counted targets of the GLOBAL
// batch divided by this number of the global batch (train/step/step.h), however the batch is
// split; every runner has the global batch on the host (each process of an mpi run loads
// it whole), so the count costs no communication.
int64_t counted_targets(const data::Batch& batch);

// What StepRunner::describe says, built by describe_runner in one format for every runner:
//   "1 replica on cpu, 2 micro-batches"                       (one device: `parallelism` empty)
//   "data parallel (dp, local) over 2 replicas [cpu,cpu], split even, 2 micro-batches"
struct RunnerDescription {
  std::string parallelism;           // e.g. "data parallel (dp, local)"; empty: one device
  int replicas = 1;                  // in the whole job (with mpi, over every process)
  std::vector<Device> devices;       // this process's replicas' devices
  bool devices_here = false;         // say " here" after the devices: they may be a part of `replicas`
  std::vector<std::string> details;  // e.g. "3 buckets", "split even", in order
  int64_t accum = 1;                 // micro-batches per step; named only when more than one
};
std::string describe_runner(const RunnerDescription& d);

}  // namespace dpcore::train
