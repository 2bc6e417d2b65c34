// Pipeline stages: which of a model's layers run where. A layer is a top-level child of the
// model's Sequential (a residual block is one layer), so a stage boundary never falls inside
// a block: the block stays whole on one stage.
//
// Two ways to say it: --stages "0-5@cpu:0,6-11@cpu:1" names each stage's layers and device;
// --pipeline P splits the layers into P stages balanced by the measured cost of each layer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/cpu_team.h"
#include "engine/device.h"

namespace dpcore::train::pipeline {

// Where a stage runs: "cuda:N" is a GPU; "cpu:N" is the Nth team of CPU threads, each team
// on cores of its own (stage_cpu_teams below) (dpcore's Device has one "cpu", so the team is kept beside it).
struct StageDevice {
  Device device;
  int cpu_team = 0;  // for a cpu device: which team

  std::string str() const;  // "cpu:1", "cuda:0"
  bool operator==(const StageDevice& o) const { return device == o.device && cpu_team == o.cpu_team; }
  // Parses "cpu:N" or "cuda:N" ("cpu" and "cuda" are team and GPU 0); throws Error otherwise.
  static StageDevice parse(const std::string& text);
};

// What exists to put stages on.
struct AvailableDevices {
  int cpu_teams = 1;     // how many CPU thread teams this machine can give
  int cuda_devices = 0;  // GPUs
};

// One stage: layers first..last (inclusive, as --stages writes them) on one device.
struct Stage {
  int first_layer = 0;
  int last_layer = 0;
  StageDevice device;

  int layers() const { return last_layer - first_layer + 1; }
  bool operator==(const Stage& o) const {
    return first_layer == o.first_layer && last_layer == o.last_layer && device == o.device;
  }
};

// Parses --stages for a model of `layer_count` layers: comma-separated "A-B@DEVICE" (or
// "A@DEVICE" for one layer), in any order; the stages come back in layer order. Refuses,
// naming the part and the value: a part that is not RANGE@DEVICE, a range with A > B, a
// layer that does not exist, a layer in two stages, a layer in none, a device that is not
// "cpu:N"/"cuda:N" or that `available` does not have.
std::vector<Stage> parse_stages(const std::string& text, int layer_count, const AvailableDevices& available);

// --pipeline P for a model of `layer_count` layers: refuses P < 1 and P > layer_count.
void check_stage_count(int stages, int layer_count);

// What one op of a stage (a layer, or layers run fused as one op) adds to what the stage
// holds on one micro-batch, as one graph through the stage holds it. held: what the graph
// holds after the op's forward less what it held before (the op's output and what it saved
// for its backward, less its input when it does not keep that: it may be negative);
// input_released: the input it let go of that way (which a stage beginning with the op
// keeps: the stage's input); backward_peak: the most its backward allocates on top of what
// was held before it (the gradients it makes on the way, the one it sends down).
struct OpBytes {
  int64_t held = 0, input_released = 0, backward_peak = 0;
};

// What a stage of a pipeline holds, for --pipeline P's balance: the tensors of its live
// micro-batches and one backward's. Stage s of layers first..last runs them as its forward
// does (ops[i][n - 1], n the most of ops[i].size() and the layers left in the stage) and
// holds live[s] micro-batches at once (the schedule's count: gpipe M, 1f1b min(M, P - s),
// naive 1), each its ops' held bytes and the input its first op let go of, plus, above
// layer 0, the input it received; then in a backward the gradient received from above (the
// size of layer last + 1's input) and the most any of its ops' backwards allocates. With
// --recompute a live micro-batch is its input only, and one micro-batch's activations are
// held at a time, in its backward.
struct StageMemory {
  std::vector<std::vector<OpBytes>> ops;  // per layer, by the op's length - 1 (measure_layer_memory)
  std::vector<int64_t> input_bytes;       // per layer, one micro-batch: its input's
  std::vector<int> live;                  // per stage
  bool recompute = false;
  double limit_mb = 0;                    // --stage-memory-mb: the most a stage may hold, MiB; 0: no limit

  // What stage s of layers first..last holds at its peak.
  int64_t stage_bytes(int s, int first, int last) const;
};

// --pipeline P: splits layers 0..n-1 (n = layer_costs.size(), each cost the layer's forward
// plus backward time) into P contiguous, non-empty stages whose slowest stage costs as
// little as possible; stage i goes on devices[i]. With `memory` and its limit, only among
// the splits whose every stage holds at most the limit; none: refused, naming the limit and
// the least any split needs. Refuses what check_stage_count refuses and a device count other
// than P.
std::vector<Stage> balance_stages(const std::vector<double>& layer_costs, int stages,
                                  const std::vector<StageDevice>& devices, const StageMemory* memory = nullptr);

// "0-5@cpu:0,6-11@cpu:1": the --stages text of `stages` (parse_stages reads it back).
std::string stages_text(const std::vector<Stage>& stages);

// The cores of each stage's CPU team: `cpus` split into as many teams as the highest cpu:N
// names (N + 1, so that cpu:N is the same cores whichever teams the stages use), stage s on
// team N of its device. Stages on one team share its cores. Every stage must be on the CPU.
std::vector<runtime::CpuTeam> stage_cpu_teams(const std::vector<Stage>& stages, const std::vector<int>& cpus,
                                              int max_threads);

}  // namespace dpcore::train::pipeline
