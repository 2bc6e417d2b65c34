#include "train/checkpoints/resume.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "engine/data/augment.h"
#include "train/checkpoints/checkpoint_files.h"
#include "train/schedule/lr_schedule.h"

namespace dpcore::train {

namespace {

// One setting a checkpoint records and a resumed run must share.
struct Setting {
  const char* key;   // in the checkpoint's metadata (the first checkpoints' names, so that they still load)
  const char* flag;  // how the user sets it, for messages
  const char* why;   // why it must not change, for the refusal
  std::string value;
  bool on_off = false;     // "1"/"0", shown as on/off
  bool optional = false;   // older checkpoints lack it: a note, not a refusal
};

// The schedule as a resumed run must repeat it: its text, the warm-up, and for a schedule
// that depends on the run's total steps, what sets them.
std::string schedule_setting(const TrainOptions& o) {
  std::string s = o.lr_schedule + ", warm-up " + std::to_string(o.warmup_steps);
  if (o.warmup_steps == 0 && o.warmup_fraction > 0) s += ", warm-up fraction " + std::to_string(o.warmup_fraction);
  if (lr_schedule_uses_total(o.lr_schedule)) {
    s += o.steps > 0 ? ", steps " + std::to_string(o.steps) : ", epochs " + std::to_string(o.epochs);
  }
  return s;
}

std::vector<Setting> settings_of(const TrainOptions& o) {
  // SGD's as the first checkpoints wrote them; Adam's and AdamW's after their name; the
  // clipping norm after them, when there is one.
  std::ostringstream optimizer;
  if (o.optimizer == "sgd") {
    optimizer << o.sgd.lr << "," << o.sgd.momentum << "," << o.sgd.dampening << "," << o.sgd.weight_decay << ","
              << o.sgd.nesterov;
  } else {
    optimizer << o.optimizer << " " << o.sgd.lr << "," << o.adam.beta1 << "," << o.adam.beta2 << "," << o.adam.eps
              << "," << o.sgd.weight_decay;
  }
  if (o.clip_grad_norm >= 0) optimizer << ", clip " << o.clip_grad_norm;
  const char* draws = "the batches are drawn with it";
  return {
      {"model", "--model", "the weights and momentum are this model's", o.model},
      {"data", "--data", "the data position is a position in this dataset", o.data},
      {"batch_size", "--batch", "every step's gradient is the mean over the global batch", std::to_string(o.batch)},
      // (Recorded since elastic resume; checkpoints from before it lack it. A pipeline's
      // --micro-batches are its step's micro-batches: the same maths as --accum.)
      {"accum", "--accum",
       "the micro-batches are a step's forward passes (with batch norm, each normalises with its own statistics)",
       std::to_string(is_pipeline(o.parallel.pipeline) ? pipeline_micro_batches(o.parallel.pipeline) : o.accum), false,
       true},
      {"seed", "--seed", "the sample order of every epoch follows from it", std::to_string(o.seed)},
      {"shuffle", "shuffling (--no-shuffle)", draws, o.shuffle ? "1" : "0", true},
      {"normalize", "normalisation (--no-normalize)", "the inputs are normalised with it", o.normalize ? "1" : "0", true},
      {"drop_last", "--drop-last", draws, o.drop_last ? "1" : "0", true},
      {"sgd",
       o.optimizer == "sgd" ? "the SGD settings (--lr,--momentum,--dampening,--weight-decay,--nesterov,--clip-grad-norm)"
                            : "the optimizer settings (--optimizer,--lr,--betas,--eps,--weight-decay,--clip-grad-norm)",
       "every step's update follows from them", optimizer.str()},
      {"lr_schedule", "the schedule (--lr-schedule, --warmup-steps and, for cosine, onecycle and linear, the run's length)",
       "every step's rate follows from it", schedule_setting(o)},
      {"augment", "--augment", draws, data::describe(data::parse_augment(o.augment))},
      // (Recorded since --precision; older checkpoints were written in fp32.)
      {"precision", "--precision", "every step's gradient is computed in it", o.precision, false, true},
  };
}

// A value as the messages show it: on/off for switches, quoted when it has spaces or commas.
std::string shown(const Setting& s, const std::string& value) {
  if (s.on_off && (value == "1" || value == "0")) return value == "1" ? "on" : "off";
  if (value.find_first_of(" ,") != std::string::npos) return "'" + value + "'";
  return value;
}

// Compares the checkpoint's settings with this run's: refuses the differences (all of
// them, so that one error says everything to change) unless --force-resume, and returns
// the log lines for what was accepted.
std::vector<std::string> compare_settings(const TrainOptions& o, const io::SafetensorsFile& file) {
  std::vector<std::string> log;
  std::string refused;
  for (const Setting& s : settings_of(o)) {
    auto it = file.metadata().find(s.key);
    if (it == file.metadata().end() && s.optional) {
      log.push_back("note: " + file.source() + " does not record " + s.flag +
                    " (written before checkpoints recorded it): taking this run's " + s.flag + " " + shown(s, s.value));
      continue;
    }
    if (it != file.metadata().end() && it->second == s.value) continue;
    const std::string old = it == file.metadata().end() ? "(not recorded)" : shown(s, it->second);
    log.push_back(std::string("--force-resume: ") + s.flag + " " + old + " -> " + shown(s, s.value));
    refused += (refused.empty() ? "" : "; and with ") + std::string(s.flag) + " " + old + ", this run has " +
               shown(s, s.value) + ": " + s.why;
  }
  DPCORE_CHECK(o.force_resume || refused.empty(), "--resume: ", file.source(), " was written with ", refused,
               ". Resume with the checkpoint's values, or add --force-resume to go on with this run's");
  return log;
}

}  // namespace

void record_loss_scale(const GradScalerState& state, std::map<std::string, std::string>& metadata) {
  char scale[32];
  std::snprintf(scale, sizeof scale, "%.9g", double(state.scale));  // 9 digits: the float32 back exactly
  metadata["loss_scale"] = scale;
  metadata["loss_scale_growth_tracker"] = std::to_string(state.growth_tracker);
}

std::optional<GradScalerState> checkpoint_loss_scale(const io::SafetensorsFile& file) {
  const auto scale = file.metadata().find("loss_scale"), tracker = file.metadata().find("loss_scale_growth_tracker");
  if (scale == file.metadata().end()) return std::nullopt;
  DPCORE_CHECK(tracker != file.metadata().end(), file.source(), ": the checkpoint has a loss_scale but no loss_scale_growth_tracker");
  try {
    return GradScalerState{std::stof(scale->second), int32_t(std::stol(tracker->second))};
  } catch (const std::exception&) {
    fail(file.source(), ": the loss scale '", scale->second, "' or its growth tracker '", tracker->second,
         "' is not a number");
  }
}

std::map<std::string, std::string> checkpoint_settings(const TrainOptions& o, const std::string& written_by) {
  std::map<std::string, std::string> out;
  for (const Setting& s : settings_of(o)) out[s.key] = s.value;
  // (Without the runner's "here": read back on resume, it would seem to mean the new run's devices.)
  std::string writer = written_by;
  const size_t here = writer.find(" here]");
  if (here != std::string::npos) writer.erase(here, 5);
  out["written_by"] = writer;
  return out;
}

data::LoaderPosition carry_position(data::LoaderPosition position, int64_t from_batch, int64_t to_batch,
                                    int64_t samples_per_epoch) {
  const int64_t samples = position.batch * from_batch;
  if (samples >= samples_per_epoch) return {position.epoch + 1, 0};
  return {position.epoch, samples / to_batch};
}

Resumed resume_from_checkpoint(const TrainOptions& o, int64_t train_samples, Model& model, Optimizer& optimizer) {
  Resumed r;
  std::vector<std::string> skipped;
  const io::SafetensorsFile file = newest_valid_checkpoint(o.checkpoint_dir, skipped);
  for (const std::string& why : skipped) {
    r.log.push_back("note: " + why + ": falling back to an older checkpoint");
  }
  if (!skipped.empty()) r.log.push_back("note: resuming from " + file.source() + ", the newest valid checkpoint");
  std::vector<std::string> changes = compare_settings(o, file);
  r.log.insert(r.log.end(), changes.begin(), changes.end());
  restore_checkpoint(file, model, optimizer);
  r.progress = checkpoint_progress(file);
  r.loss_scale = checkpoint_loss_scale(file);

  // The position counts batches of the checkpoint's size (a difference --force-resume accepted).
  auto recorded_batch = file.metadata().find("batch_size");
  const int64_t from_batch = recorded_batch == file.metadata().end() ? o.batch : std::stoll(recorded_batch->second);
  if (from_batch != o.batch) {
    const data::LoaderPosition carried = carry_position(r.progress.position, from_batch, o.batch, train_samples);
    const data::LoaderPosition& at = r.progress.position;
    const int64_t into = std::min(at.batch * from_batch, train_samples), carried_into = carried.batch * o.batch;
    std::string seen_again = carried.epoch == at.epoch && carried_into < into
                                 ? ", " + std::to_string(into - carried_into) + " samples are seen again"
                                 : "";
    r.log.push_back("--force-resume: the data position, " + std::to_string(into) + " samples into epoch " +
                    std::to_string(at.epoch + 1) + " (" + std::to_string(at.batch) + " batches of " +
                    std::to_string(from_batch) + "), is batch " + std::to_string(carried.batch) + " of epoch " +
                    std::to_string(carried.epoch + 1) + " in batches of " + std::to_string(o.batch) + seen_again +
                    "; steps keep counting from " + std::to_string(r.progress.step));
    r.progress.position = carried;
  }

  auto writer = file.metadata().find("written_by");
  r.log.push_back("resumed from " + file.source() + " at step " + std::to_string(r.progress.step) + " (epoch " +
                  std::to_string(r.progress.position.epoch + 1) + ")" +
                  (writer == file.metadata().end() ? "" : ", written by " + writer->second));
  return r;
}

}  // namespace dpcore::train
