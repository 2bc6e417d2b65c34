// What `dpcore train` is asked to do, flag by flag (cli/main.cpp fills it in): what the
// training loop (train/trainer.h) runs and a checkpoint records (train/checkpoints/resume.h).
#pragma once

#include <cstdint>
#include <string>

#include "engine/data/spec.h"
#include "engine/optimizer.h"
#include "train/runners/runner.h"

namespace dpcore::train {

struct TrainOptions {
  std::string model = "fashioncnn";
  std::string data = "fashion-mnist";
  std::string val_data;       // --val-data imagefolder:DIR: the test set of --data imagefolder:DIR
  int workers = 4;            // threads decoding an image folder (engine/data/image/image_folder.h)
  bool skip_bad_images = false;  // leave out, and count, image files that do not decode
  data::TextOptions text;        // text data: --vocab, --max-len, --truncate (engine/data/spec.h)
  bool bucket_by_length = false; // text data: batches of similar lengths (engine/data/loader.h)
  std::string task = "classify"; // text: classify (a class per text) or mlm (masked-LM pretraining, docs/text.md)
  std::string transform, val_transform;  // --transform, --val-transform (engine/data/image/transform_spec.h)
  int64_t epochs = 3;
  int64_t steps = 0;          // total optimizer steps; 0: run `epochs` epochs
  int64_t batch = 64;         // samples per optimizer step (split over micro-batches and replicas)
  int64_t accum = 1;
  // --optimizer: sgd (torch.optim.SGD), adam (torch.optim.Adam, L2 weight decay) or adamw
  // (torch.optim.AdamW, decoupled weight decay).
  std::string optimizer = "sgd";
  // --lr and --weight-decay are the optimizer's, whichever it is: they live here, with SGD's
  // --momentum, --dampening and --nesterov. (A schedule's momentum is SGD's momentum, Adam's
  // beta1.)
  SgdConfig sgd{0.03, 0.9, 0.0, 0.0, false};
  AdamConfig adam;  // --betas and --eps (its lr and weight_decay: sgd's above)
  double clip_grad_norm = -1;  // --clip-grad-norm MAX (Optimizer::set_clip_grad_norm); negative: none
  // --precision: fp32, bf16 or fp16 (autocast in bfloat16 / float16 with float32 master
  // weights, layers::Model::set_precision; fp16 with dynamic loss scaling,
  // train/step/loss_scaling.h; docs/mixed-precision.md).
  std::string precision = "fp32";
  std::string lr_schedule = "constant";  // constant | step:EPOCHS:GAMMA | cosine | onecycle (train/schedule/lr_schedule.h)
  int64_t warmup_steps = 0;              // linear warm-up steps; with onecycle, pct_start = W/T
  double warmup_fraction = 0;            // when warmup_steps is 0: the warm-up as this fraction of the
                                         // run's steps (a model's recipe, train/schedule/recipe.h)
  uint64_t seed = 0;
  bool shuffle = true;
  bool normalize = true;
  bool drop_last = false;
  std::string augment = "none";  // none, crop:PAD, flip or crop:PAD,flip (engine/data/augment.h)
  std::string device = "auto";  // cpu | cuda | cuda:N | auto
  int threads = 0;
  std::string init;             // safetensors weights to start from
  std::string init_from;        // safetensors weights to fine-tune from: what the model shares with them
  bool convert_weights = false; // --init / --init-from may be bfloat16 / float16, converted (layers/weights.h)
  std::string save;             // safetensors weights written at the end
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0; // steps; 0: only at the end
  int keep_checkpoints = 1;     // the newest K checkpoints are kept (train/checkpoints/checkpoint_files.h)
  bool resume = false;
  bool force_resume = false;    // resume even where recorded settings differ, logging each (train/checkpoints/resume.h)
  std::string metrics;          // JSONL file, one object per epoch (and per --eval-every evaluation)
  int64_t eval_every = 0;       // also evaluate every this many steps; 0: at the end of each epoch only
  std::string trace;            // Chrome trace-event JSON of a few steps (train/observe/trace_window.h)
  int64_t trace_steps = 3;      // steps in the trace
  bool nvtx = false;            // every trace span also an NVTX range, from the start of training on (CUDA builds)
  bool explain = false;         // print the run's first step move by move (train/observe/explain.h)
  int progress = -1;            // -1: a progress bar when stdout is a terminal; 0: plain lines; 1: bar
  int64_t log_every = 100;      // plain lines: one every this many steps, and at the last step
  ParallelOptions parallel;
};

// The optimizer the options ask for (its --lr and --weight-decay from `sgd`).
inline OptimizerConfig optimizer_config(const TrainOptions& o) {
  AdamConfig adam = o.adam;
  adam.lr = o.sgd.lr;
  adam.weight_decay = o.sgd.weight_decay;
  adam.decoupled = o.optimizer == "adamw";
  OptimizerConfig config = o.optimizer == "sgd" ? OptimizerConfig(o.sgd) : OptimizerConfig(adam);
  config.clip_grad_norm = o.clip_grad_norm;
  return config;
}

}  // namespace dpcore::train
