#include "train/pipeline/stage_plan.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <limits>

#include "kernels/error.h"

namespace dpcore::train::pipeline {

namespace {

// A whole non-negative decimal number, or -1.
int parse_index(const std::string& text) {
  if (text.empty() || text.size() > 9 || !std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c); })) return -1;
  return std::stoi(text);
}

std::string range_text(int first, int last) {
  return first == last ? std::to_string(first) : std::to_string(first) + "-" + std::to_string(last);
}

}  // namespace

std::string StageDevice::str() const {
  return device.is_cpu() ? "cpu:" + std::to_string(cpu_team) : device.str();
}

StageDevice StageDevice::parse(const std::string& text) {
  const size_t colon = text.find(':');
  const std::string type = text.substr(0, colon);
  const int index = colon == std::string::npos ? 0 : parse_index(text.substr(colon + 1));
  if (index >= 0 && type == "cpu") return {Device::cpu(), index};
  if (index >= 0 && type == "cuda") return {Device::cuda(index), 0};
  fail("unknown stage device '", text, "' (expected cpu:N, a team of CPU threads, or cuda:N, a GPU)");
}

std::vector<Stage> parse_stages(const std::string& text, int layer_count, const AvailableDevices& available) {
  const std::string flag = "--stages '" + text + "'";
  DPCORE_CHECK(!text.empty(), "--stages: empty (expected stages such as 0-5@cpu:0,6-11@cpu:1)");
  std::vector<Stage> stages;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t end = std::min(text.find(',', begin), text.size());
    const std::string part = text.substr(begin, end - begin);
    begin = end + 1;
    const size_t at = part.find('@');
    DPCORE_CHECK(at != std::string::npos && at > 0 && at + 1 < part.size(), flag, ": '", part,
                 "' is not LAYERS@DEVICE (for example 0-5@cpu:0)");
    const std::string range = part.substr(0, at);
    const size_t dash = range.find('-');
    Stage stage;
    stage.first_layer = parse_index(range.substr(0, dash));
    stage.last_layer = dash == std::string::npos ? stage.first_layer : parse_index(range.substr(dash + 1));
    DPCORE_CHECK(stage.first_layer >= 0 && stage.last_layer >= 0, flag, ": '", range,
                 "' is not a layer range (expected A-B or A, layer numbers from 0)");
    DPCORE_CHECK(stage.first_layer <= stage.last_layer, flag, ": the range ", range, " runs backwards");
    DPCORE_CHECK(stage.last_layer < layer_count, flag, ": layer ", stage.last_layer, " does not exist (the model has ",
                 layer_count, " layers, 0-", layer_count - 1, ")");
    try {
      stage.device = StageDevice::parse(part.substr(at + 1));
    } catch (const Error& e) {
      fail(flag, ": ", e.what());
    }
    if (stage.device.device.is_cpu()) {
      DPCORE_CHECK(stage.device.cpu_team < available.cpu_teams, flag, ": ", stage.device.str(),
                   " does not exist (this machine has ", available.cpu_teams, " CPU team",
                   available.cpu_teams == 1 ? "" : "s", ", cpu:0-", available.cpu_teams - 1, ")");
    } else {
      DPCORE_CHECK(stage.device.device.index < available.cuda_devices, flag, ": ", stage.device.str(),
                   " does not exist (this machine has ", available.cuda_devices, " GPU",
                   available.cuda_devices == 1 ? "" : "s", ")");
    }
    stages.push_back(stage);
  }
  std::sort(stages.begin(), stages.end(), [](const Stage& a, const Stage& b) { return a.first_layer < b.first_layer; });
  // Every layer in exactly one stage: sorted by first layer, each stage must start just
  // after the previous one ends.
  int next = 0;
  for (size_t i = 0; i < stages.size(); ++i) {
    const Stage& s = stages[i];
    if (s.first_layer < next) {
      const Stage& before = stages[i - 1];
      fail(flag, ": layer ", s.first_layer, " is in two stages (", range_text(before.first_layer, before.last_layer),
           " and ", range_text(s.first_layer, s.last_layer), ")");
    }
    DPCORE_CHECK(s.first_layer == next, flag, ": ", s.first_layer - next == 1 ? "layer " : "layers ",
                 range_text(next, s.first_layer - 1), " in no stage");
    next = s.last_layer + 1;
  }
  DPCORE_CHECK(next == layer_count, flag, ": ", layer_count - next == 1 ? "layer " : "layers ",
               range_text(next, layer_count - 1), " in no stage (the model has ", layer_count, " layers)");
  return stages;
}

void check_stage_count(int stages, int layer_count) {
  DPCORE_CHECK(stages >= 1, "--pipeline ", stages, ": needs at least 1 stage");
  DPCORE_CHECK(stages <= layer_count, "--pipeline ", stages, ": more stages than the model has layers (", layer_count,
               "; a layer is a top-level child of the model, a residual block one layer)");
}

int64_t StageMemory::stage_bytes(int s, int first, int last) const {
  const int64_t input = first > 0 ? input_bytes[size_t(first)] : 0;  // stage 0's is a view of the batch
  const int64_t gradient = size_t(last) + 1 < input_bytes.size() ? input_bytes[size_t(last) + 1] : 0;
  int64_t activations = 0, backward = 0;
  for (int i = first; i <= last;) {
    const int n = std::min(int(ops[size_t(i)].size()), last - i + 1);
    const OpBytes& op = ops[size_t(i)][size_t(n - 1)];
    activations += op.held + (i == first ? op.input_released : 0);
    backward = std::max(backward, op.backward_peak);
    i += n;
  }
  const int64_t n = live[size_t(s)];
  return (recompute ? n * input + activations : n * (input + activations)) + gradient + backward;
}

namespace {

// The linear-partition dynamic programme over contiguous splits of n layers into P stages:
// best[k][i] is the least possible cost of the worst stage when layers 0..i-1 make k
// stages, cut[k][i] where the last of them begins. cost(s, first, last) is stage s's; a
// stage that `allowed` refuses is never chosen. Returns the split, or none (an empty
// vector) when no split is allowed.
template <class Cost, class Allowed>
std::vector<std::pair<int, int>> least_worst_split(int n, int P, Cost cost, Allowed allowed) {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(P + 1, std::vector<double>(n + 1, inf));
  std::vector<std::vector<int>> cut(P + 1, std::vector<int>(n + 1, 0));
  best[0][0] = 0;
  for (int k = 1; k <= P; ++k)
    for (int i = k; i <= n; ++i)
      for (int j = k - 1; j < i; ++j) {  // the last stage is layers j..i-1
        if (best[k - 1][j] == inf || !allowed(k - 1, j, i - 1)) continue;
        const double worst = std::max(best[k - 1][j], cost(k - 1, j, i - 1));
        if (worst < best[k][i]) best[k][i] = worst, cut[k][i] = j;
      }
  if (best[P][n] == inf) return {};
  std::vector<std::pair<int, int>> out(P);
  for (int k = P, end = n; k >= 1; --k) {
    out[k - 1] = {cut[k][end], end - 1};
    end = cut[k][end];
  }
  return out;
}

std::string split_text(const std::vector<std::pair<int, int>>& split) {
  std::string out;
  for (const auto& [first, last] : split) out += (out.empty() ? "" : ",") + range_text(first, last);
  return out;
}

std::string mib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f MiB", double(bytes) / (1 << 20));
  return text;
}

}  // namespace

std::vector<Stage> balance_stages(const std::vector<double>& layer_costs, int stages,
                                  const std::vector<StageDevice>& devices, const StageMemory* memory) {
  const int n = int(layer_costs.size());
  check_stage_count(stages, n);
  DPCORE_CHECK(int(devices.size()) == stages, "--pipeline ", stages, ": ", devices.size(), " devices given for ",
               stages, " stages");
  if (memory)
    DPCORE_CHECK(int(memory->ops.size()) == n && int(memory->input_bytes.size()) == n &&
                     int(memory->live.size()) == stages,
                 "--pipeline ", stages, ": the stage memory model has ", memory->ops.size(), " layers and ",
                 memory->live.size(), " stages for ", n, " layers and ", stages, " stages");
  // prefix[i]: the cost of layers 0..i-1.
  std::vector<double> prefix(n + 1, 0.0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + layer_costs[i];
  const auto time = [&](int, int first, int last) { return prefix[last + 1] - prefix[first]; };
  const bool limited = memory && memory->limit_mb > 0;
  const auto fits = [&](int s, int first, int last) {
    return !limited || double(memory->stage_bytes(s, first, last)) <= memory->limit_mb * (1 << 20);
  };
  const std::vector<std::pair<int, int>> split = least_worst_split(n, stages, time, fits);
  if (split.empty()) {
    // The split that needs least: the same programme over the stages' bytes.
    const auto bytes = [&](int s, int first, int last) { return double(memory->stage_bytes(s, first, last)); };
    const auto least = least_worst_split(n, stages, bytes, [](int, int, int) { return true; });
    int64_t needed = 0;
    for (size_t s = 0; s < least.size(); ++s)
      needed = std::max(needed, memory->stage_bytes(int(s), least[s].first, least[s].second));
    fail("--stage-memory-mb ", memory->limit_mb, ": no split of the ", n, " layers into ", stages,
         " stages holds at most that on every stage; the least any split needs is ", mib(needed), " (layers ",
         split_text(least), ")");
  }
  std::vector<Stage> out;
  for (int s = 0; s < stages; ++s) out.push_back({split[size_t(s)].first, split[size_t(s)].second, devices[size_t(s)]});
  return out;
}

std::string stages_text(const std::vector<Stage>& stages) {
  std::string out;
  for (const Stage& s : stages) out += (out.empty() ? "" : ",") + range_text(s.first_layer, s.last_layer) + "@" + s.device.str();
  return out;
}

std::vector<runtime::CpuTeam> stage_cpu_teams(const std::vector<Stage>& stages, const std::vector<int>& cpus,
                                              int max_threads) {
  int teams = 0;
  for (const Stage& s : stages) {
    DPCORE_CHECK(s.device.device.is_cpu(), "CPU teams: the stage of layers ", s.first_layer, "-", s.last_layer,
                 " is on ", s.device.str());
    teams = std::max(teams, s.device.cpu_team + 1);
  }
  const std::vector<runtime::CpuTeam> split = runtime::split_into_teams(cpus, teams, max_threads);
  std::vector<runtime::CpuTeam> out;
  for (const Stage& s : stages) out.push_back(split[size_t(s.device.cpu_team)]);
  return out;
}

}  // namespace dpcore::train::pipeline
