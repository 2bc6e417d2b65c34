// --pipeline P: the model's layers timed on one micro-batch (measure_layer_costs,
// train/pipeline/pipeline_step.h) and split into the P contiguous stages whose slowest
// stage is the fastest any split gives (balance_stages, train/pipeline/stage_plan.h), within
// what --stage-memory-mb lets a stage hold.
//
// The split changes where the work runs, never the arithmetic: a pipelined step is one
// device's step with --accum M whatever the stages (docs/pipelines.md), so a split that
// differs from run to run (the timings are measured) gives the same bits.
#pragma once

#include <string>
#include <vector>

#include "train/runners/runner.h"
#include "train/pipeline/stage_plan.h"

namespace dpcore::train::pipeline {

struct BalancedStages {
  std::vector<double> layer_seconds;  // per layer: forward + backward on the micro-batch (the medians' sum)
  int64_t samples = 0;                // the micro-batch's samples
  std::vector<Stage> stages;          // stage i on cpu:(i mod the CPU teams), or cuda:(i mod the GPUs)
  StageMemory memory;                 // the layers' bytes and the schedule's live micro-batches, its limit
  std::string schedule;               // what the memory is for: the schedule and its micro-batches
  int micro_batches = 1;

  // What stage s of `stages` holds at its peak (memory.stage_bytes).
  int64_t stage_bytes(size_t s) const {
    return memory.stage_bytes(int(s), stages[s].first_layer, stages[s].last_layer);
  }
};

// The layer profile repeats this many times after one warm-up batch; the median counts.
inline constexpr int kBalanceRepeats = 3;

// Times `model`'s layers on the micro-batch (x, y) and splits them into `stages` stages,
// stage i on CPU team i mod `cpu_teams` (a machine of fewer cores than stages shares them),
// or for a model on a GPU on cuda:(i mod the GPUs) (one GPU: every stage on it, each on a
// stream of its own),
// the slowest stage as fast as any split allows, among the splits whose every stage holds
// at most `pipeline`'s --stage-memory-mb under its schedule, --micro-batches and
// --recompute (StageMemory, train/pipeline/stage_plan.h; no limit: any split). Measuring
// trains nothing but moves batch norm's running statistics, so give it a model made for
// the purpose, not the one that trains. Refuses, naming --pipeline and the value: fewer than
// 1 stage, more stages than layers (check_stage_count), a limit no split keeps
// (balance_stages).
BalancedStages balance_pipeline(Model& model, const Tensor& x, const Tensor& y, int stages, int cpu_teams,
                                const PipelineOptions& pipeline = {});

// The log line: the measured layers, the stages chosen and what each costs and holds.
std::string describe(const BalancedStages& balanced);

}  // namespace dpcore::train::pipeline
