// dpcore train --explain: the first step of a run told move by move, with this run's
// numbers. explain_step reads them from the runner after the step (the shares it used,
// its replicas' flat buffers, its buckets and the order they became ready, its
// optimizer), so the text describes what ran, not what the options asked for, and stays
// true when the code changes; render turns them into plain text.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/data/loader.h"
#include "engine/adam.h"
#include "engine/sgd.h"
#include "train/runners/runner.h"

namespace dpcore::train {

struct ExplainedBucket {
  int64_t begin = 0, end = 0;  // element range of the flat gradient buffer
  int64_t bytes = 0;
  std::vector<std::string> params;  // in the order backward finalises them
  // How many gradients of the armed backward had arrived when its last one did (on the
  // first replica of this process); 0: launched by finish() (that replica had no samples).
  int64_t ready_after = 0;
};

// One transfer of a ring allreduce: rank `from` passes chunk `chunk` (elements [begin,
// end) of the flat gradient buffer) to rank `to`.
struct RingTransfer {
  int from = 0, to = 0, chunk = 0;
  int64_t begin = 0, end = 0;
};
struct RingStep {
  bool reduce = true;                   // reduce-scatter (the receiver adds) or allgather (it copies)
  int step = 0;                         // within its phase, from 0
  std::vector<RingTransfer> transfers;  // one per rank, by rank
};

struct Explanation {
  enum class Kind { SingleDevice, DataParallel, Distributed, Pipeline };
  Kind kind = Kind::SingleDevice;
  std::string backend;               // local | mpi | nccl; empty for one device
  int replicas = 1;                  // in the whole job
  std::vector<std::string> devices;  // of this process's replicas, by local index
  std::vector<int> ranks;            // of this process's replicas

  // The batch and how it was cut.
  int64_t batch = 0;                         // N, the global batch
  int64_t image_bytes = 0, label_bytes = 0;  // per sample, as copied (float32 pixels, int64 label)
  int64_t labels_per_sample = 1;             // T for per-token labels (masked-LM), else 1
  int64_t targets = 0;                       // M, the counted targets (N for one class per sample)
  int64_t classes = 0;
  std::vector<int64_t> micro;                // micro-batch sizes
  std::vector<std::vector<int64_t>> shares;  // [micro-batch][rank]; one device: empty
  std::vector<std::vector<int64_t>> tokens;  // text batches: the tokens of each share, as `shares`; else empty
  bool token_ids = false;                    // the batch is token ids (padded to the longest text)
  std::string split;                         // even | weights | adaptive
  std::vector<double> weights;               // what the shares are proportional to (not even)

  // The model's flat buffers (per replica) and what the step did with them.
  int64_t param_tensors = 0;
  int64_t param_elements = 0, param_bytes = 0;  // the parameter buffer; the gradient buffer's twin
  int64_t grad_bytes = 0;
  // --grad-dtype bf16: the dtype the gradient allreduce moves and the bytes of its copy of
  // the gradient buffer; "" and 0 when it moves the float32 gradients themselves.
  std::string wire_dtype;
  int64_t wire_bytes = 0;
  int64_t momentum_bytes = 0;  // 0: no momentum buffer
  int64_t buffer_bytes = 0;    // batch norm's running statistics; 0: none
  bool sync_batch_norm = false;

  // The loss of the step (mean over the counted targets: the N samples, for one class per
  // sample) and its backward seed 1/M.
  double loss = 0;
  double seed = 0;

  // ddp: the buckets in launch order and their caps.
  std::vector<ExplainedBucket> buckets;
  int64_t first_cap_bytes = 0, cap_bytes = 0;
  // The ring schedule of the first gradient allreduce (bucket 0 with ddp, the whole
  // gradient buffer with dp), when this run's communicator runs dpcore's ring (local);
  // 2(R-1) steps.
  int64_t ring_begin = 0, ring_end = 0;  // its element range
  std::vector<RingStep> ring;

  // pipeline: the schedule, each stage's layers and device, what crosses each boundary per
  // sample (stage s to s+1, elements of the model's dtype), the tick table of the schedule,
  // and the micro-batches of activations each stage held at once in this step, and the
  // cores and threads each stage's kernels had.
  std::string schedule;
  std::vector<std::string> stages;
  std::vector<int64_t> boundary_elements;
  std::vector<DType> boundary_dtypes;  // per boundary: what crosses it (Model::layer_output_dtypes)
  int64_t dtype_bytes = 4;
  std::string ticks;
  std::vector<int> peak_live;
  std::vector<std::string> stage_cores;  // where each stage's kernels ran ("core 0, 1 thread")
  std::vector<size_t> stage_peak_bytes;   // the most bytes of tensors each stage held at once
  // pipeline x data parallel (replicas > 1; the stages above are replica 0's): each stage's
  // part of the flat gradient buffer, allreduced among the stage's replicas.
  std::vector<std::pair<int64_t, int64_t>> stage_ranges;  // [begin, end) elements per stage
  // The stages are threads driving GPUs (each on a stream of its own), and those on other
  // GPUs than the model's run on copies of it: each copy's device and the bytes of its
  // stages' parameters (pulled before the micro-batches; their gradients, pushed after, are
  // as many) and buffers (both ways).
  bool stage_gpus = false;
  struct StageCopy {
    std::string device;
    int64_t parameter_bytes = 0, buffer_bytes = 0;
  };
  std::vector<StageCopy> stage_copies;
  // The stages are processes of an mpirun job (rank r: stage r mod P of replica r / P, so
  // P x replicas processes), not threads of this one.
  bool stage_processes = false;

  std::string optimizer = "sgd";  // Optimizer::name: sgd, adam, adamw
  SgdConfig sgd;                  // sgd's settings
  AdamConfig adam;                // adam's and adamw's
  int64_t sgd_steps = 0;          // the optimizer's step count after this step
};

// The step `runner` just took on `batch`, which returned `stats` (reads the runner only;
// non-const because StepRunner's model() is). Fails naming the runner when it is none of
// the four it knows (one device, dp, ddp, a pipeline).
Explanation explain_step(StepRunner& runner, const data::Batch& batch, const StepStats& stats);

// The ring schedule of an allreduce of elements [begin, end) over n ranks: comm/ring.h's
// moves, with the element ranges of ring::chunk_range.
std::vector<RingStep> ring_schedule(int n, int64_t begin, int64_t end);

// The explanation as plain text, one move after another.
std::string render(const Explanation& e);

}  // namespace dpcore::train
