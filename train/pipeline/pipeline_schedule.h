// Pipeline schedules: in which order each stage runs the forwards and backwards of a
// batch's micro-batches, and what that order costs when the stages wait on each other.
//
//   naive  the whole batch as one micro-batch flowing stage to stage, then back: one stage
//          works at a time.
//   gpipe  all M forwards, then all M backwards (GPipe): every stage keeps M micro-batches
//          of activations until its backwards begin.
//   1f1b   PipeDream-flush: stage s of P runs min(P-1-s, M) forwards ahead, then alternates
//          one forward and one backward, then finishes the backwards; it keeps at most
//          P - s micro-batches of activations.
//
// With every forward and backward taking one tick, gpipe and 1f1b both take 2(M+P-1) ticks
// and leave each stage idle (P-1)/(M+P-1) of the time (the bubble); 1f1b's gain is memory.
// Backwards run in micro-batch order 0..M-1 in both, so each stage adds its micro-batches'
// gradients in the same order: the two schedules give the same bits.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dpcore::train::pipeline {

enum class Schedule { Naive, GPipe, OneFOneB };

// "naive", "gpipe", "1f1b" (--schedule); throws Error naming the value otherwise.
Schedule parse_schedule(const std::string& text);
std::string schedule_name(Schedule schedule);

struct PipelineOp {
  enum class Kind { Forward, Backward };
  Kind kind = Kind::Forward;
  int micro_batch = 0;

  bool operator==(const PipelineOp& o) const { return kind == o.kind && micro_batch == o.micro_batch; }
  std::string str() const;  // "F3", "B0"
};

// The order in which stage `stage` (0-based) of `stages` runs its ops for `micro_batches`
// micro-batches. naive takes exactly one micro-batch (refused otherwise, naming the
// schedules that take more).
std::vector<PipelineOp> stage_order(Schedule schedule, int stage, int stages, int micro_batches);

// Every stage's order.
std::vector<std::vector<PipelineOp>> stage_orders(Schedule schedule, int stages, int micro_batches);

// The sizes of a batch's micro-batches, as torch.tensor_split cuts it (and
// torch.distributed.pipelining): the first batch % M one sample larger. Refuses M < 1 and
// M > batch (a micro-batch of no samples), naming both.
std::vector<int64_t> micro_batch_sizes(int64_t batch, int micro_batches);

// The most micro-batches whose activations a stage holds at once under `order`: a forward
// keeps its micro-batch's activations, its backward frees them.
int peak_live_activations(const std::vector<PipelineOp>& order);

struct TimedOp {
  PipelineOp op;
  double start = 0, end = 0;
};

// A simulated run of one batch: each stage runs its ops in its order, each as soon as its
// stage is free and its input has arrived. Forward m on stage s needs forward m of stage s-1
// (its activations); backward m needs backward m of stage s+1 (the gradient of its output)
// and the stage's own forward m. A transfer between stages takes `transfer` time.
struct PipelineTimeline {
  std::vector<std::vector<TimedOp>> stages;  // per stage, in the order run
  double makespan = 0;                       // when the last op ends

  double busy(int stage) const;     // the time stage `stage` spends running ops
  double bubble_fraction() const;   // the idle share of stages x makespan
};

// forward_time[s], backward_time[s]: one micro-batch's forward and backward on stage s.
// Refuses orders that cannot finish (a stage waiting on an op that waits on it), naming
// the op each stage is stuck at, and orders that run an op twice, leave one out, or run a
// backward before its forward.
PipelineTimeline simulate(const std::vector<std::vector<PipelineOp>>& orders, int micro_batches,
                          const std::vector<double>& forward_time, const std::vector<double>& backward_time,
                          double transfer = 0);

// The tick table --explain prints: `schedule` with every op taking one tick, a row per tick
// and a column per stage ("F3" forward of micro-batch 3, "B3" its backward, "." idle), then
// the bubble beside its formula.
std::string tick_table(Schedule schedule, int stages, int micro_batches);

}  // namespace dpcore::train::pipeline
