#include "train/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "comm/communicator.h"
#include "engine/backend.h"
#include "engine/cpu_team.h"
#include "engine/data/augment.h"
#include "engine/data/loader.h"
#include "engine/data/spec.h"
#include "engine/runtime.h"
#include "engine/seconds_since.h"
#include "engine/trace.h"
#include "train/checkpoints/checkpoint.h"
#include "train/checkpoints/checkpoint_files.h"
#include "train/checkpoints/class_to_idx.h"
#include "train/observe/explain.h"
#include "train/schedule/lr_schedule.h"
#include "train/checkpoints/resume.h"
#include "train/step/gradient_wire.h"
#include "train/step/step.h"
#include "train/sync/sync_strategy.h"
#include "train/observe/job_trace.h"
#include "train/pipeline/balanced_stages.h"
#include "train/pipeline/pipeline_runner.h"
#include "train/pipeline/pipeline_schedule.h"
#include "train/step/split.h"
#include "train/observe/trace_window.h"
#include "layers/weights.h"
#include "layers/zoo.h"

namespace dpcore::train {

namespace {

using Clock = std::chrono::steady_clock;

// Samples per forward pass when the test set is evaluated after each epoch. Fixed rather
// than tied to --batch (the optimizer's batch), so that the test metrics of runs with
// different --batch are computed the same way and compare exactly; evaluation records no
// autograd graph, so this can be larger than a training batch without using much memory.
constexpr int64_t kEvalBatch = 256;


Device resolve_device(const std::string& flag) {
  if (flag == "auto") return runtime::best_device();
  try {
    return Device::parse(flag);
  } catch (const std::invalid_argument& e) {
    fail("--device: ", e.what(), " (or auto)");
  }
}

// A text dataset's samples are token ids of up to max_len; the BERT presets take its
// vocabulary size, and every classifier its classes. On text, --task classify needs an output
// per text and --task mlm one per token, over the vocabulary.
std::unique_ptr<Model> build_model(const std::string& flag, const data::Dataset& sample_of, Device device,
                                   uint64_t seed, const std::string& task) {
  const Shape input = sample_of.tokens() ? Shape{sample_of.max_len} : Shape{sample_of.c, sample_of.h, sample_of.w};
  layers::ModelDef def = layers::model_from_flag(flag, input, sample_of.num_classes, sample_of.vocab_size);
  auto model = std::make_unique<Model>(std::move(def.net), def.input_shape, device, DType::Float32, seed);
  const bool per_token = model->output_shape().size() == 2;
  if (task == "mlm") {
    DPCORE_CHECK(per_token, "--task mlm: --model ", flag, " is a classifier (an output per text); masked-LM "
                 "pretraining needs an output per token: bert-tiny-mlm, bert-mini-mlm or bert(...,head=mlm)");
    DPCORE_CHECK(model->num_classes() == sample_of.vocab_size, "--task mlm: --model ", flag, " predicts ",
                 model->num_classes(), " tokens but the vocabulary ", sample_of.vocab, " has ", sample_of.vocab_size);
    return model;
  }
  DPCORE_CHECK(!per_token || !sample_of.tokens(), "--task ", task, ": --model ", flag,
               " is a masked-LM model (an output per token); use --task mlm, or a classifier: bert-tiny, bert-mini "
               "or bert(...)");
  DPCORE_CHECK(model->num_classes() == sample_of.num_classes, "--model ", flag, " has ", model->num_classes(),
               " outputs but the data has ", sample_of.num_classes, " classes");
  return model;
}

// Test loss, accuracy and the confusion table over a whole dataset, in evaluation mode,
// `batch` samples at a time in the dataset's order (the loader pads token ids per batch).
// With `mlm` on, over the masked tokens (the loss, the masked-token accuracy, the perplexity)
// and without a confusion table.
EpochMetrics evaluate_dataset(Model& model, const data::Dataset& test, int64_t batch,
                              const data::MlmMasking& mlm = {}) {
  data::LoaderOptions lo;
  lo.batch_size = batch, lo.shuffle = false, lo.prefetch = 1, lo.mlm = mlm;
  data::DataLoader loader(test, lo);
  EvalResult total;
  for (data::Batch b; loader.next(b);) {
    auto [x, y] = batch_tensors(b, model.device());
    EvalResult r = evaluate_batch(model, x, y);
    total.loss_sum += r.loss_sum, total.correct += r.correct, total.samples += r.samples;
    total.targets += r.targets;
    if (total.confusion.empty()) total.confusion.assign(r.confusion.size(), 0);
    for (size_t i = 0; i < r.confusion.size(); ++i) total.confusion[i] += r.confusion[i];
  }
  EpochMetrics m;  // over the counted targets: the samples, for one class per sample
  m.test_loss = total.targets ? total.loss_sum / double(total.targets) : 0;
  m.test_accuracy = total.targets ? double(total.correct) / double(total.targets) : 0;
  m.confusion = std::move(total.confusion);
  if (mlm.on()) m.test_perplexity = std::exp(m.test_loss);
  return m;
}

// ", test accuracy 51.24%", or for masked-LM ", test perplexity 123.45, masked-token accuracy 12.34%".
std::string test_accuracy_text(const EpochMetrics& m) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(2);
  if (!std::isnan(m.test_perplexity)) os << ", test perplexity " << m.test_perplexity << ", masked-token";
  else os << ", test";
  os << " accuracy " << 100 * m.test_accuracy << "%";
  return os.str();
}

std::string format_duration(double s) {
  char buf[32];
  int t = int(s + 0.5);
  std::snprintf(buf, sizeof buf, "%d:%02d:%02d", t / 3600, t / 60 % 60, t % 60);
  return buf;
}

std::string format_bytes(size_t b) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(1) << double(b) / (1 << 20) << " MiB";
  return os.str();
}

class MetricsLog {
 public:
  MetricsLog(const std::string& path, bool append) {
    if (path.empty()) return;
    file_.open(path, append ? std::ios::app : std::ios::trunc);
    DPCORE_CHECK(file_.good(), "--metrics: cannot open ", path, " for writing");
  }
  void write(const EpochMetrics& m) {
    nlohmann::json j = {{"kind", m.kind},             {"epoch", m.epoch},          {"step", m.step},          {"lr", m.lr},
                        {"train_loss", m.train_loss}, {"test_loss", m.test_loss},
                        {"test_accuracy", m.test_accuracy}, {"samples_per_s", m.samples_per_s},
                        {"seconds", m.seconds},       {"peak_bytes", m.peak_bytes},
                        {"skipped_steps", m.skipped_steps},
                        {"compute_s", m.time.compute}, {"communication_s", m.time.communication},
                        {"waiting_s", m.time.waiting}, {"data_s", m.time.data}, {"optimizer_s", m.time.optimizer},
                        {"wall_s", m.wall_seconds}, {"replica_samples_per_s", m.replica_samples_per_s},
                        {"shares", m.shares}};
    for (const auto& [name, values] : m.counters) j[name] = values;
    if (!m.stage_peak_bytes.empty()) j["stage_peak_bytes"] = m.stage_peak_bytes;
    if (!std::isnan(m.test_perplexity)) j["test_perplexity"] = m.test_perplexity;
    if (!std::isnan(m.grad_norm)) j["grad_norm"] = m.grad_norm;
    if (!std::isnan(m.loss_scale)) j["loss_scale"] = m.loss_scale;
    write(j);
  }
  // A record of another kind, e.g. {"kind": "shrink", ...}.
  void write(const nlohmann::json& record) {
    if (!file_.is_open()) return;
    file_ << record.dump() << "\n";
    file_.flush();
  }

 private:
  std::ofstream file_;
};

// What the schedule scales and cycles: the base learning rate, and the momentum onecycle
// cycles (SGD's momentum; Adam's beta1, as PyTorch's OneCycleLR cycles betas[0]).
SgdConfig schedule_rates(const TrainOptions& o) {
  SgdConfig rates = o.sgd;
  if (o.optimizer != "sgd") rates.momentum = o.adam.beta1;
  return rates;
}

// For the run header: ", adamw (betas 0.9,0.999, eps 1e-08, weight decay 0.01)"; nothing
// for SGD, whose settings the schedule's text and the defaults say.
std::string describe_adam(const TrainOptions& o) {
  if (o.optimizer == "sgd") return "";
  std::ostringstream os;
  os << ", " << o.optimizer << " (betas " << o.adam.beta1 << "," << o.adam.beta2 << ", eps " << o.adam.eps
     << ", weight decay " << o.sgd.weight_decay << ")";
  return os.str();
}

// --precision's dtype: the model's (layers::Model::set_precision).
DType precision_dtype(const std::string& precision) {
  if (precision == "fp32") return DType::Float32;
  if (precision == "fp16") return DType::Float16;
  DPCORE_CHECK(precision == "bf16", "--precision ", precision, ": unknown (expected fp32, bf16 or fp16)");
  return DType::BFloat16;
}

// fp16's loss scaler judges the one reduced gradient of a synchronous step
// (train/step/loss_scaling.h), and itself skips the steps whose gradients hold an Inf or NaN.
void check_precision(const TrainOptions& o) {
  precision_dtype(o.precision);
  if (o.precision != "fp16") return;
  DPCORE_CHECK(o.parallel.sync == "full", "--precision fp16 with --sync ", o.parallel.sync,
               ": the loss scaler judges the one reduced gradient of a synchronous step (--sync full)");
  DPCORE_CHECK(!o.parallel.guards.skip_nonfinite,
               "--precision fp16 with --skip-nonfinite: the loss scaler skips the steps whose gradients hold an Inf "
               "or NaN itself, and lowers its scale");
}

// ", allreduce in bfloat16 (...)" for the header line; "" for fp32.
std::string describe_grad_dtype(const TrainOptions& o) {
  if (o.parallel.grad_dtype == "fp32") return "";
  return std::string(", gradients allreduced in ") + dtype_name(grad_dtype_of(o.parallel.grad_dtype)) +
         " (accumulated in float32)";
}

// "precision bf16 (...)" for the header line; "" for fp32.
std::string describe_precision(const TrainOptions& o, const StepRunner& runner) {
  if (o.precision == "fp32") return "";
  std::ostringstream os;
  os << ", precision " << o.precision << " (autocast, float32 master weights";
  if (const auto scale = runner.loss_scale()) os << ", loss scale " << scale->scale;
  os << ")";
  return os.str();
}

// Checks the options that train() cannot start without; returns them.
const TrainOptions& checked(const TrainOptions& o) {
  DPCORE_CHECK(o.batch >= 1, "--batch ", o.batch, " must be at least 1");
  DPCORE_CHECK(o.task == "classify" || o.task == "mlm", "--task ", o.task, ": unknown (expected classify or mlm)");
  DPCORE_CHECK(o.epochs >= 1 || o.steps >= 1, "--epochs or --steps must be at least 1");
  DPCORE_CHECK(o.accum >= 1 && o.accum * o.parallel.replicas <= o.batch, "--batch ", o.batch,
               " cannot be split into --accum ", o.accum, " x --replicas ", o.parallel.replicas, " micro-batches");
  DPCORE_CHECK(pipeline_micro_batches(o.parallel.pipeline) * o.parallel.replicas <= o.batch, "--batch ", o.batch,
               " cannot be split into --micro-batches ", pipeline_micro_batches(o.parallel.pipeline), " x --replicas ",
               o.parallel.replicas, " micro-batches");
  DPCORE_CHECK(!o.resume || !o.checkpoint_dir.empty(), "--resume needs --checkpoint DIR");
  DPCORE_CHECK(!o.force_resume || o.resume, "--force-resume needs --resume");
  DPCORE_CHECK(o.init.empty() || o.init_from.empty(), "--init ", o.init, " and --init-from ", o.init_from,
               ": give one (--init loads every tensor of the model, strictly; --init-from those the file shares "
               "with it, to fine-tune)");
  DPCORE_CHECK(o.init_from.empty() || !o.resume, "--init-from ", o.init_from,
               " with --resume: the checkpoint holds the weights to continue from; give one");
  DPCORE_CHECK(o.keep_checkpoints >= 1, "--keep-checkpoints ", o.keep_checkpoints, " must be at least 1");
  data::parse_augment(o.augment);  // refuses a bad --augment before any data is loaded
  DPCORE_CHECK(o.checkpoint_every >= 0, "--checkpoint-every ", o.checkpoint_every, " must not be negative");
  const SyncStrategy sync = parse_sync(o.parallel.sync);
  DPCORE_CHECK(sync.kind != SyncStrategy::Kind::Local || o.checkpoint_every % sync.period == 0, "--checkpoint-every ",
               o.checkpoint_every, " with --sync ", o.parallel.sync,
               ": a checkpoint holds one model, which local SGD has only at its averagings (every ", sync.period,
               " steps); use a multiple of ", sync.period);
  DPCORE_CHECK(o.trace_steps >= 1, "--trace-steps ", o.trace_steps, " must be at least 1");
  DPCORE_CHECK(o.log_every >= 1, "--log-every ", o.log_every, " must be at least 1");
  check_precision(o);
  check_grad_dtype(o.parallel);
  DPCORE_CHECK(!is_pipeline(o.parallel.pipeline) || o.parallel.backend != "mpi" || o.clip_grad_norm < 0,
               "--clip-grad-norm ", o.clip_grad_norm, " with --backend mpi and ", pipeline::pipeline_flag(o.parallel.pipeline),
               ": the norm is over every stage's gradients, and each process has its own stage's");
  DPCORE_CHECK(!o.explain || o.parallel.sync == "full",
               "--explain tells one synchronous step (--sync full); with --sync ", o.parallel.sync,
               " the replicas step on their own");
  DPCORE_CHECK(o.parallel.guards.max_skipped >= 1, "--max-skipped ", o.parallel.guards.max_skipped,
               " must be at least 1");
  DPCORE_CHECK(o.parallel.guards.check_replicas >= 0, "--check-replicas ", o.parallel.guards.check_replicas,
               " must not be negative");
  // Now, not after the run's steps: a trace that cannot be written should cost no training.
  if (!o.trace.empty()) trace::check_writable(o.trace, "--trace");
  // (The rest of the schedule's checks need the run's length: LrSchedule, once it is known.)
  const std::string schedule_needs = lr_schedule_needs(o.lr_schedule);
  DPCORE_CHECK(schedule_needs.empty(), "--lr-schedule ", o.lr_schedule, ": must be ", schedule_needs);
  DPCORE_CHECK(o.warmup_steps >= 0, "--warmup-steps ", o.warmup_steps, " must not be negative");
  DPCORE_CHECK(o.warmup_fraction >= 0 && o.warmup_fraction < 1, "warm-up fraction ", o.warmup_fraction,
               " must be in [0, 1)");
  DPCORE_CHECK(o.clip_grad_norm < 0 || std::isfinite(o.clip_grad_norm), "--clip-grad-norm ", o.clip_grad_norm,
               " must be a finite number >= 0");
  DPCORE_CHECK(o.optimizer == "sgd" || o.optimizer == "adam" || o.optimizer == "adamw", "--optimizer ", o.optimizer,
               ": unknown (expected sgd, adam or adamw)");
  DPCORE_CHECK(!o.sgd.nesterov || (o.sgd.momentum > 0 && o.sgd.dampening == 0),
               "--nesterov: needs --momentum > 0 and --dampening 0 (as in PyTorch), got --momentum ", o.sgd.momentum,
               " and --dampening ", o.sgd.dampening);
  return o;
}

// Applies --threads (first, so that all CPU work uses it) and --nvtx (before any work, so
// that a profiler sees all of it), and picks the model's device.
Device set_up_device(const TrainOptions& o) {
  if (o.threads > 0) runtime::set_cpu_threads(o.threads);
  if (o.nvtx) trace::listen(true, "--nvtx");
  return resolve_device(o.device);
}

// --init-from: the tensors the file shares with the model loaded (layers::load_weights_partially),
// the rest as initialised; returns the report of what was loaded, new and unused. A dpcore
// checkpoint is refused by name: its tensors are "model.<name>" beside the optimizer's state.
std::string init_from(const TrainOptions& o, layers::Model& model) {
  const io::SafetensorsFile file = io::load_safetensors(o.init_from);
  DPCORE_CHECK(!is_checkpoint(file), "--init-from ", o.init_from,
               ": is a dpcore training checkpoint (the model's tensors as model.<name>, beside the optimizer's "
               "state), not a model's weights: fine-tune from the weights its run wrote with --save, or continue "
               "the run with --checkpoint DIR --resume");
  const layers::WeightsReport report = layers::load_weights_partially(model, file, o.model, {o.convert_weights});
  return layers::weights_report_log(report, "--init-from " + o.init_from, o.model) +
         layers::conversion_log(report.converted, model.dtype());
}

// --pipeline P: the stages, balanced by the layers' costs on the first micro-batch of the
// first epoch (unshuffled, unaugmented: the same every run), timed on a model of its own
// (timing moves batch norm's running statistics). Adds the measurement to `log`.
std::string balanced_stages(const TrainOptions& o, const data::Dataset& train_data, Device device, std::string& log) {
  const int64_t micro_batches = pipeline_micro_batches(o.parallel.pipeline);
  data::LoaderOptions lo;
  // The first piece of the first micro-batch (the largest): a replica's, when there are several.
  lo.batch_size = chunk_sizes(pipeline::micro_batch_sizes(o.batch, int(micro_batches)).front(), o.parallel.replicas).front();
  lo.shuffle = false, lo.seed = o.seed, lo.prefetch = 1;
  if (o.task == "mlm") lo.mlm = data::mlm_masking_of(train_data, o.seed, false);
  data::DataLoader loader(train_data, lo);
  data::Batch batch;
  DPCORE_CHECK(loader.next(batch), "--pipeline: the training data ", train_data.name, " has no batch to time the layers on");
  auto [x, y] = batch_tensors(batch, device);
  auto probe = build_model(o.model, train_data, device, o.seed, o.task);
  const pipeline::BalancedStages balanced =
      pipeline::balance_pipeline(*probe, x, y, o.parallel.pipeline.balanced_stages, int(runtime::allowed_cpus().size()),
                                 o.parallel.pipeline);
  log += pipeline::describe(balanced);
  return pipeline::stages_text(balanced.stages);
}

// The model of --model (with --init's or --init-from's weights) inside the runner of the
// parallel options; the primary says what --init-from loaded and --convert-weights converted.
std::unique_ptr<StepRunner> set_up_runner(const TrainOptions& o, const data::Dataset& train_data, Device device,
                                          std::ostream& primary_out) {
  auto model = build_model(o.model, train_data, device, o.seed, o.task);
  std::string loaded;
  if (!o.init.empty())
    loaded = layers::conversion_log(layers::load_weights(*model, o.init, {o.convert_weights}), model->dtype());
  if (!o.init_from.empty()) loaded = init_from(o, *model);
  model->set_precision(precision_dtype(o.precision));
  ParallelOptions parallel = o.parallel;
  if (parallel.pipeline.balanced_stages > 0) {
    DPCORE_CHECK(parallel.pipeline.stages.empty(), "--stages ", parallel.pipeline.stages, " and --pipeline ",
                 parallel.pipeline.balanced_stages, ": give the stages, or how many to balance, not both");
    pipeline::check_pipeline_flags(*model, o.accum, parallel);
    parallel.pipeline.stages = balanced_stages(o, train_data, device, loaded);
    // Under mpirun every process timed the layers on its own: they all take rank 0's stages.
    if (parallel.backend == "mpi") parallel.pipeline.stages = comm::mpi_allgather_strings(parallel.pipeline.stages).front();
  }
  auto runner = make_runner(std::move(model), optimizer_config(o), o.accum, parallel);
  if (runner->is_primary()) primary_out << loaded;
  return runner;
}

// What the epoch in progress has accumulated since its first step (or since the resume).
struct EpochTotals {
  Tensor loss_sum;           // summed training loss; stays on the device, read only when reported
  int64_t samples = 0;
  int64_t targets = 0;       // the counted targets loss_sum sums over
  double train_seconds = 0;  // in the runner's steps only: not evaluation, reporting or checkpoints
  // --skip-nonfinite: steps not applied, and their samples and targets (counted in
  // `samples` and `targets`, for the
  // speed, but not in the training loss, which would be NaN)
  int64_t skipped_steps = 0, skipped_samples = 0, skipped_targets = 0;
};

// One `dpcore train` job. The constructor sets everything up (options, data, model,
// runner, resumed state, loader); run() trains epoch by epoch, evaluating and reporting
// at the end of each, checkpoints as asked, and saves the weights.
class TrainingRun {
 public:
  TrainingRun(const TrainOptions& options, std::ostream& primary_out);
  TrainResult run();

 private:
  // --resume: the checkpoint's weights, optimizer state and position; with --resume,
  // --init or --init-from, every replica then starts from the root's state.
  void restore_state();
  std::unique_ptr<data::DataLoader> make_loader() const;
  void print_header() const;
  void print_image_folder() const;  // an image folder's class_to_idx and the files it skipped

  // Trains on the rest of epoch `epoch`: false when the run reached its last step first.
  bool train_epoch(int64_t epoch);
  void take_step(const data::Batch& batch, int64_t epoch);
  // --skip-nonfinite: step `step` was not applied. Logs it; stops the run after
  // --max-skipped such steps in a row.
  void note_skipped_step(int64_t step, const StepStats& s);
  // --precision fp16: the loss scaler skipped step `step` (an Inf or NaN in its gradients)
  // and lowered its scale. Logs it; the run goes on at the lower scale.
  void note_overflow(int64_t step, const StepStats& s);
  // --on-replica-failure shrink: logs and records each replica the step dropped.
  void note_dropped_replicas(const std::vector<ReplicaDropped>& dropped);
  // Too few replicas left to go on: a final checkpoint of the last completed step, then the
  // error, with where that checkpoint is.
  [[noreturn]] void stop_with_too_few_replicas(const TooFewReplicas& stop);
  bool report_due() const;
  void report_step(const StepStats& last, int64_t epoch) const;

  // The runner's replicas brought to one model (StepRunner::settle), the work that
  // finished meanwhile counted in the epoch's totals: before evaluating or writing it.
  void settle_runner();
  // --eval-every: evaluates and records where the epoch has got to (a record of kind
  // "eval"; its seconds and train loss are the epoch's so far).
  void evaluate_mid_epoch(int64_t epoch);
  // Evaluates, reports and records the epoch that just ended; then starts new totals.
  void end_epoch(int64_t epoch);
  EpochMetrics epoch_metrics(int64_t epoch);
  void print_epoch(const EpochMetrics& m) const;
  // The epoch's breakdown of its time (train/observe/epoch_breakdown.h), on a line of its own.
  void print_breakdown(const EpochMetrics& m) const;

  // Rank 0 writes the checkpoint (every --checkpoint-every steps, and at the end) and the
  // final --save weights; the other ranks hold the same state.
  void checkpoint();
  void save_final_weights();

  const TrainOptions& o_;
  const Device device_;
  data::DataSplits data_;
  std::unique_ptr<StepRunner> runner_;
  // In a multi-process run only rank 0 prints and writes files; the others train silently.
  const bool primary_;
  std::ostream silent_{nullptr};
  std::ostream& out_;

  // --task mlm: the test split's masks, from the evaluation key (engine/data/mlm_masking.h)
  // and independent of --seed, so that the test numbers of every epoch and run compare.
  const data::MlmMasking eval_masking_;
  TrainProgress progress_;
  std::unique_ptr<data::DataLoader> loader_;
  int64_t per_epoch_ = 0, total_steps_ = 0;
  std::optional<LrSchedule> schedule_;  // once T and E are known
  double last_lr_ = 0;                  // the lr of the last step taken
  bool bar_ = false;  // a progress bar redrawn in place, else plain lines
  std::optional<MetricsLog> metrics_;
  std::optional<TraceWindow> trace_;
  TrainResult result_;

  EpochTotals totals_;
  EpochBreakdown breakdown_;
  Clock::time_point run_start_;
  int64_t steps_at_start_ = 0;
  int64_t skipped_in_row_ = 0, first_skipped_ = 0;  // the current run of skipped steps
};

TrainingRun::TrainingRun(const TrainOptions& options, std::ostream& primary_out)
    : o_(checked(options)),
      device_(set_up_device(o_)),
      data_(data::load_data(data::parse_data_specs(o_.data, o_.val_data,
                                                   {o_.workers, o_.skip_bad_images, o_.transform, o_.val_transform}, o_.text),
                            o_.normalize)),
      runner_(set_up_runner(o_, data_.train, device_, primary_out)),
      primary_(runner_->is_primary()),
      out_(primary_ ? primary_out : silent_),
      eval_masking_(o_.task == "mlm" ? data::mlm_masking_of(data_.test, 0, true) : data::MlmMasking{}) {
  restore_state();
  loader_ = make_loader();
  per_epoch_ = loader_->batches_per_epoch();
  total_steps_ = o_.steps > 0 ? o_.steps : o_.epochs * per_epoch_;
  int64_t warmup = o_.warmup_steps;
  if (warmup == 0 && o_.warmup_fraction > 0) {
    // A fraction of a short run can round to a warm-up of 1 step, which onecycle refuses
    // (PyTorch divides by zero there): 2 steps then, or none in a run of 2 steps or fewer.
    warmup = std::llround(o_.warmup_fraction * double(total_steps_));
    if (warmup == 1) warmup = total_steps_ > 2 ? 2 : 0;
  }
  schedule_.emplace(o_.lr_schedule, schedule_rates(o_), warmup, total_steps_, per_epoch_);
  bar_ = o_.progress == 1 || (o_.progress == -1 && isatty(STDOUT_FILENO));
  print_header();
  if (o_.parallel.guards.check_replicas > 0 && dynamic_cast<SingleDeviceRunner*>(runner_.get())) {
    out_ << "note: --check-replicas: one replica, nothing to compare\n";
  }
  metrics_.emplace(primary_ ? o_.metrics : "", o_.resume);
  // (Every rank of a multi-process run records; rank 0 writes them all: train/observe/job_trace.h.)
  trace_.emplace(o_.trace, o_.trace_steps, progress_.step, total_steps_,
                 [this](const std::string& path) { return write_run_trace(path, *runner_); });
  trace::set_lane("main", trace::kMainLane);

  totals_.loss_sum = Tensor::zeros({}, DType::Float32, runner_->model().device());
  run_start_ = Clock::now();
  steps_at_start_ = progress_.step;
  runtime::reset_peak_bytes(device_);
  runner_->reset_stage_peak_bytes();
  breakdown_.reset();  // the first epoch starts now, after the setup
}

void TrainingRun::restore_state() {
  if (o_.resume) {
    const Resumed resumed = resume_from_checkpoint(o_, data_.train.n, runner_->model(), runner_->optimizer());
    runner_->sync_replicas();
    progress_ = resumed.progress;
    if (runner_->loss_scale() && resumed.loss_scale) {
      runner_->set_loss_scale(*resumed.loss_scale);
    } else if (runner_->loss_scale()) {
      out_ << "note: the checkpoint holds no loss scale (it was not written under --precision fp16): starting at "
           << runner_->loss_scale()->scale << "\n";
    } else if (resumed.loss_scale) {
      out_ << "note: the checkpoint's loss scale " << resumed.loss_scale->scale
           << " is not used: this run has no loss scaler (--precision " << o_.precision << ")\n";
    }
    for (const std::string& line : resumed.log) out_ << line << "\n";
  } else if (!o_.init.empty() || !o_.init_from.empty()) {
    runner_->sync_replicas();
  }
}

std::unique_ptr<data::DataLoader> TrainingRun::make_loader() const {
  data::LoaderOptions lo;
  lo.batch_size = o_.batch, lo.shuffle = o_.shuffle, lo.drop_last = o_.drop_last, lo.seed = o_.seed;
  lo.augment = data::parse_augment(o_.augment);
  lo.bucket_by_length = o_.bucket_by_length;
  if (o_.task == "mlm") lo.mlm = data::mlm_masking_of(data_.train, o_.seed, false);
  // Batches in memory the device can copy from asynchronously (pinned, on a GPU).
  Backend* host_memory = &backend_for(device_);
  lo.allocator = {[host_memory](size_t bytes) { return host_memory->alloc_host(bytes); },
                  [host_memory](void* p) { host_memory->free_host(p); },
                  [host_memory](const void* p) { host_memory->await_host_reads(p); }};
  return std::make_unique<data::DataLoader>(data_.train, lo, progress_.position);
}

void TrainingRun::print_header() const {
  out_ << "dpcore: " << o_.model << " on " << data_.train.name << " (" << data::describe(data_.train) << "), "
       << runner_->describe() << ", batch " << o_.batch << describe_adam(o_)
       << describe_precision(o_, *runner_) << describe_grad_dtype(o_) << ", lr " << schedule_->describe() << ", " << per_epoch_
       << " steps per epoch";
  const data::Augment augment = data::parse_augment(o_.augment);
  if (!augment.none()) out_ << ", augment " << data::describe(augment);
  if (data_.train.tokens()) {
    out_ << ", task " << o_.task << (o_.task == "mlm" ? " (the data's labels are not used)" : "")
         << ", max length " << data_.train.max_len
         << (o_.bucket_by_length ? ", bucketed by length" : "");
  }
  out_ << std::endl;
  print_image_folder();
}

void TrainingRun::print_image_folder() const {
  if (data_.train.class_names.empty()) return;
  if (o_.task == "classify")  // (masked-LM learns no classes)
    out_ << "class_to_idx: " << class_to_idx_json(data_.train.class_names) << std::endl;
  // (Without --val-data the test set is the train set, and its files were counted once.)
  for (const data::Dataset* d : {&data_.train, o_.val_data.empty() ? nullptr : &data_.test})
    if (d && !d->skipped.empty())
      out_ << "--skip-bad-images: left out " << d->skipped.size() << " file" << (d->skipped.size() == 1 ? "" : "s")
           << " of " << d->name << " that did not decode, the first " << d->skipped.front() << std::endl;
}

TrainResult TrainingRun::run() {
  int64_t epoch = progress_.position.epoch;
  while (progress_.step < total_steps_ && train_epoch(epoch)) {
    // (Nothing to report when a resumed run starts exactly at an epoch's end.)
    if (totals_.samples > 0) end_epoch(epoch);
    progress_.position = loader_->position();
    ++epoch;
  }
  // A run that stops mid-epoch (--steps) still reports where it got to.
  if (totals_.samples > 0) end_epoch(epoch);
  // Text classification ends with the test split's confusion table (of the last evaluation).
  if (data_.test.tokens() && o_.task == "classify" && !result_.epochs.empty()) {
    out_ << confusion_table(result_.epochs.back().confusion, data_.test.class_names);
  }
  checkpoint();
  save_final_weights();
  result_.steps = progress_.step;
  return std::move(result_);
}

bool TrainingRun::train_epoch(int64_t epoch) {
  data::Batch batch;
  while (progress_.step < total_steps_) {
    const Clock::time_point asked = Clock::now();
    if (!loader_->next(batch)) return true;
    breakdown_.add_data(seconds_since(asked));
    take_step(batch, epoch);
  }
  return false;
}

void TrainingRun::take_step(const data::Batch& batch, int64_t epoch) {
  const Rates rates = schedule_->at(progress_.step);
  runner_->set_rates(rates.lr, rates.momentum);
  last_lr_ = rates.lr;
  trace_->before_step(progress_.step);
  Clock::time_point t = Clock::now();
  StepStats s;
  {
    trace::Span span("step", [&] {
      return trace::Label{"step " + std::to_string(progress_.step + 1),
                          {{"samples", batch.size}, {"epoch", epoch + 1}, {"lr", rates.lr}}};
    });
    runner_->set_step_number(progress_.step + 1);
    try {
      s = runner_->step(batch);
    } catch (const TooFewReplicas& stop) {
      stop_with_too_few_replicas(stop);
    }
  }
  note_dropped_replicas(s.dropped);
  const double step_seconds = seconds_since(t);
  totals_.train_seconds += step_seconds;
  // The root's optimizer time only from a runner that did not break its step down: under
  // --sync async the replicas step the master's optimizer meanwhile.
  const double root_optimizer = s.times.measured ? 0.0 : runner_->optimizer().last_step_seconds();
  breakdown_.add_step(step_seconds, s.times, root_optimizer, s.samples);
  const std::string traced = trace_->after_step(progress_.step);
  if (!traced.empty()) out_ << (bar_ ? "\n" : "") << traced << std::endl;  // (off the bar's line)
  // Told from the runner's state right after the step, before another step changes it;
  // by rank 0 alone (the explanation says what the other ranks do).
  if (o_.explain && primary_ && progress_.step == steps_at_start_) {
    out_ << render(explain_step(*runner_, batch, s)) << std::flush;
  }
  if (s.skipped) {
    note_skipped_step(progress_.step + 1, s);
  } else if (s.overflow) {
    note_overflow(progress_.step + 1, s);
  } else {
    skipped_in_row_ = 0;
    backend_for(totals_.loss_sum.device()).add(totals_.loss_sum, s.loss_sum, totals_.loss_sum);
  }
  totals_.samples += s.samples, totals_.targets += s.targets;
  ++progress_.step;
  progress_.position = loader_->position();
  if (o_.checkpoint_every > 0 && progress_.step % o_.checkpoint_every == 0) checkpoint();
  // (Not at an epoch's last step: the epoch's own evaluation follows.)
  if (o_.eval_every > 0 && progress_.step % o_.eval_every == 0 && progress_.step % per_epoch_ != 0) {
    evaluate_mid_epoch(epoch);
  }
  if (report_due()) report_step(s, epoch);
}

void TrainingRun::note_skipped_step(int64_t step, const StepStats& s) {
  const int64_t max = o_.parallel.guards.max_skipped;
  ++totals_.skipped_steps;
  totals_.skipped_samples += s.samples, totals_.skipped_targets += s.targets;
  if (skipped_in_row_++ == 0) first_skipped_ = step;
  out_ << (bar_ ? "\n" : "") << "step " << step << " skipped: NaN or Inf in the loss or the gradients "
       << "(--skip-nonfinite: parameters and optimizer state unchanged; " << skipped_in_row_
       << " in a row, the run stops at " << max << ")" << std::endl;
  DPCORE_CHECK(skipped_in_row_ < max, "--skip-nonfinite: ", max, " steps in a row (steps ", first_skipped_, " to ",
               step, ") had a NaN or Inf in the loss or the gradients and were skipped (--max-skipped ", max,
               "); the parameters are those after step ", first_skipped_ - 1,
               ". Lower --lr, check the data, or resume from a checkpoint");
}

void TrainingRun::note_overflow(int64_t step, const StepStats& s) {
  ++totals_.skipped_steps;
  totals_.skipped_samples += s.samples, totals_.skipped_targets += s.targets;
  out_ << (bar_ ? "\n" : "") << "step " << step << " skipped: Inf or NaN in the float16 gradients (--precision fp16: "
       << "parameters and optimizer state unchanged; loss scale now " << runner_->loss_scale()->scale << ")" << std::endl;
}

void TrainingRun::note_dropped_replicas(const std::vector<ReplicaDropped>& dropped) {
  for (const ReplicaDropped& d : dropped) {
    out_ << (bar_ ? "\n" : "") << shrink_log_line(d) << std::endl;
    metrics_->write(nlohmann::json{{"kind", "shrink"}, {"step", d.step}, {"replica", d.replica},
                                   {"reason", d.reason}, {"replicas", d.survivors.size()},
                                   {"survivors", d.survivors}});
  }
}

void TrainingRun::stop_with_too_few_replicas(const TooFewReplicas& stop) {
  note_dropped_replicas(stop.dropped);
  if (o_.checkpoint_dir.empty()) throw stop;
  checkpoint();  // progress_ is still that of the last completed step
  fail(stop.what(), "; the checkpoint of step ", progress_.step, " is in ", o_.checkpoint_dir,
       " (--resume continues from it, on any replica count)");
}

bool TrainingRun::report_due() const {
  return bar_ || progress_.step % o_.log_every == 0 || progress_.step == total_steps_;
}

// "step 200/938  epoch 1  loss 0.5123  10234 samples/s  ETA 0:00:07": the mean loss of the
// last step, the epoch's training speed so far, and the time left at the average rate of
// the steps this process has taken (a resumed run does not count the steps before it).
void TrainingRun::report_step(const StepStats& last, int64_t epoch) const {
  double elapsed = seconds_since(run_start_);
  // (The 1e-9 floors only keep the first instant of a run from dividing by zero.)
  double rate = double(progress_.step - steps_at_start_) / std::max(elapsed, 1e-9);
  std::ostringstream line;
  line << std::fixed << "step " << progress_.step << "/" << total_steps_ << "  epoch " << epoch + 1 << "  loss ";
  // (--sync async reports the pieces applied since the last step: possibly none yet.)
  if (last.samples > 0) line << std::setprecision(4) << last.loss_sum.item() / double(last.targets);
  else line << "-";
  line << "  " << std::setprecision(0)
       << (totals_.train_seconds > 0 ? double(totals_.samples) / totals_.train_seconds : 0) << " samples/s  ETA "
       << format_duration(double(total_steps_ - progress_.step) / std::max(rate, 1e-9)) << "  "
       << breakdown_.biggest_two();
  // The bar redraws its line in place; the trailing spaces blank what a longer line left.
  if (bar_) out_ << "\r" << line.str() << "   " << std::flush;
  else out_ << line.str() << std::endl;
}

void TrainingRun::settle_runner() {
  Clock::time_point t = Clock::now();
  StepStats s = runner_->settle();
  // Training time only when training work finished meanwhile (async's last pieces); local
  // SGD's average for an evaluation changes no replica, so it is not training.
  if (s.samples == 0) return;
  const double seconds = seconds_since(t);
  totals_.train_seconds += seconds;
  breakdown_.add_step(seconds, s.times, 0.0, s.samples);
  backend_for(totals_.loss_sum.device()).add(totals_.loss_sum, s.loss_sum, totals_.loss_sum);
  totals_.samples += s.samples, totals_.targets += s.targets;
}

void TrainingRun::evaluate_mid_epoch(int64_t epoch) {
  settle_runner();
  EpochMetrics m = epoch_metrics(epoch);
  m.kind = "eval";
  out_ << (bar_ ? "\n" : "") << std::fixed << std::setprecision(4) << "step " << m.step << ": test loss "
       << m.test_loss << test_accuracy_text(m) << std::endl;
  metrics_->write(m);
}

void TrainingRun::end_epoch(int64_t epoch) {
  settle_runner();
  EpochMetrics m = epoch_metrics(epoch);
  m.counters = runner_->epoch_counters();
  print_epoch(m);
  metrics_->write(m);
  result_.epochs.push_back(m);
  totals_.loss_sum.zero_();
  totals_.samples = totals_.targets = 0, totals_.train_seconds = 0;
  totals_.skipped_steps = totals_.skipped_samples = totals_.skipped_targets = 0;
  breakdown_.reset();
}

EpochMetrics TrainingRun::epoch_metrics(int64_t epoch) {
  const double wall = breakdown_.wall_seconds();  // (the evaluation is not the epoch's)
  EpochMetrics m = evaluate_dataset(runner_->model(), data_.test, kEvalBatch, eval_masking_);
  m.time = breakdown_.parts(), m.wall_seconds = wall;
  m.replica_samples_per_s = breakdown_.replica_samples_per_s(), m.shares = breakdown_.shares();
  m.epoch = epoch + 1, m.step = progress_.step, m.lr = last_lr_;
  m.grad_norm = runner_->optimizer().last_grad_norm();
  const int64_t counted = totals_.targets - totals_.skipped_targets;  // of the steps applied
  m.train_loss = counted ? totals_.loss_sum.item() / double(counted) : 0;
  m.skipped_steps = totals_.skipped_steps;
  if (const auto scale = runner_->loss_scale()) m.loss_scale = scale->scale;
  m.seconds = totals_.train_seconds;
  m.samples_per_s = totals_.train_seconds > 0 ? double(totals_.samples) / totals_.train_seconds : 0;
  m.peak_bytes = runtime::peak_bytes(device_);
  m.stage_peak_bytes = runner_->stage_peak_bytes();
  return m;
}

void TrainingRun::print_epoch(const EpochMetrics& m) const {
  if (bar_) out_ << "\n";  // leave the bar's line
  out_ << std::fixed << std::setprecision(4) << "epoch " << m.epoch << ": train loss " << m.train_loss
       << ", test loss " << m.test_loss << test_accuracy_text(m) << ", " << std::setprecision(0) << m.samples_per_s << " samples/s, " << std::setprecision(1) << m.seconds
       << " s, peak memory " << format_bytes(m.peak_bytes);
  std::string stages;
  for (size_t bytes : m.stage_peak_bytes) stages += (stages.empty() ? "" : ", ") + format_bytes(bytes);
  if (!stages.empty()) out_ << " (stages " << stages << ")";
  out_ << std::endl;
  print_breakdown(m);
}

// "  time: compute 11.8 s (87%), communication 0.90 s (7%), waiting 0.40 s (3%), data 0.10 s
// (1%), optimizer 0.20 s (1%), of 13.5 s; per replica 1702, 1688, 1540 samples/s; shares 22, 22, 20"
void TrainingRun::print_breakdown(const EpochMetrics& m) const {
  const TimeParts& t = m.time;
  std::ostringstream line;
  line << std::fixed << "  time:";
  const std::pair<const char*, double> parts[] = {{"compute", t.compute}, {"communication", t.communication},
                                                  {"waiting", t.waiting}, {"data", t.data},
                                                  {"optimizer", t.optimizer}};
  for (const auto& [name, seconds] : parts) {
    line << " " << name << " " << std::setprecision(seconds < 10 ? 2 : 1) << seconds << " s ("
         << std::setprecision(0) << 100 * seconds / std::max(m.wall_seconds, 1e-9) << "%),";
  }
  line << std::setprecision(1) << " of " << m.wall_seconds << " s; per replica" << std::setprecision(0);
  for (size_t r = 0; r < m.replica_samples_per_s.size(); ++r) line << (r ? ", " : " ") << m.replica_samples_per_s[r];
  line << " samples/s; shares";
  for (size_t r = 0; r < m.shares.size(); ++r) line << (r ? ", " : " ") << m.shares[r];
  out_ << line.str() << std::endl;
}

void TrainingRun::checkpoint() {
  if (o_.checkpoint_dir.empty()) return;
  settle_runner();  // (on every rank: averaging local SGD's replicas is a collective)
  if (!primary_) return;
  save_keeping(o_.checkpoint_dir, progress_.step, o_.keep_checkpoints, [this](const std::string& path) {
    std::map<std::string, std::string> metadata = checkpoint_settings(o_, runner_->describe());
    if (const auto scale = runner_->loss_scale()) record_loss_scale(*scale, metadata);
    write_checkpoint(path, runner_->model(), runner_->optimizer(), progress_, metadata);
  });
}

void TrainingRun::save_final_weights() {
  if (o_.save.empty()) return;
  settle_runner();
  if (!primary_) return;
  layers::save_weights(runner_->model(), o_.save);
  out_ << "saved weights to " << o_.save << "\n";
  if (!data_.train.class_names.empty() && o_.task == "classify") {  // (masked-LM learns no classes)
    const std::string classes = class_to_idx_path(o_.save);
    save_class_to_idx(data_.train.class_names, classes);
    out_ << "saved class_to_idx to " << classes << "\n";
  }
}

}  // namespace

std::string confusion_table(const std::vector<int64_t>& confusion, const std::vector<std::string>& class_names) {
  const size_t classes = size_t(std::llround(std::sqrt(double(confusion.size()))));
  DPCORE_CHECK(classes * classes == confusion.size() && (class_names.empty() || class_names.size() == classes),
               "confusion table: ", confusion.size(), " counts for ", class_names.size(), " classes");
  std::vector<std::string> names = class_names;
  for (size_t c = names.size(); c < classes; ++c) names.push_back(std::to_string(c));
  size_t width = 6;  // "recall"
  for (const std::string& n : names) width = std::max(width, n.size());
  for (int64_t count : confusion) width = std::max(width, std::to_string(count).size());
  std::ostringstream os;
  os << "confusion (rows: true class, columns: predicted)\n" << std::setw(int(width)) << "";
  for (const std::string& n : names) os << " " << std::setw(int(width)) << n;
  os << " " << std::setw(int(width)) << "recall" << "\n";
  for (size_t t = 0; t < classes; ++t) {
    os << std::setw(int(width)) << names[t];
    int64_t row = 0;
    for (size_t p = 0; p < classes; ++p) row += confusion[t * classes + p];
    for (size_t p = 0; p < classes; ++p) os << " " << std::setw(int(width)) << confusion[t * classes + p];
    std::ostringstream recall;
    recall << std::fixed << std::setprecision(1);
    if (row > 0) recall << 100.0 * double(confusion[t * classes + t]) / double(row) << "%";
    else recall << "-";
    os << " " << std::setw(int(width)) << recall.str() << "\n";
  }
  return os.str();
}

TrainResult train(const TrainOptions& o, std::ostream& out) { return TrainingRun(o, out).run(); }

EpochMetrics evaluate(const EvalOptions& o, std::ostream& out) {
  DPCORE_CHECK(!o.init.empty(), "eval: --init FILE.safetensors is required");
  if (o.threads > 0) runtime::set_cpu_threads(o.threads);
  Device device = resolve_device(o.device);
  data::DataSplits data = data::load_data(
      data::parse_data_specs(o.data, o.val_data, {o.workers, o.skip_bad_images, o.transform, o.val_transform}, o.text),
      o.normalize);
  auto model = build_model(o.model, data.test, device, 0, "classify");
  out << layers::conversion_log(layers::load_weights(*model, o.init, {o.convert_weights}), model->dtype());
  EpochMetrics m = evaluate_dataset(*model, data.test, o.batch);
  out << std::fixed << std::setprecision(4) << "test loss " << m.test_loss << ", test accuracy "
      << std::setprecision(2) << 100 * m.test_accuracy << "% on " << data.test.n << " samples\n";
  return m;
}

}  // namespace dpcore::train
