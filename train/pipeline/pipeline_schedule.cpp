#include "train/pipeline/pipeline_schedule.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <map>
#include <sstream>

#include "kernels/error.h"
#include "train/step/step.h"

namespace dpcore::train::pipeline {

using Kind = PipelineOp::Kind;

Schedule parse_schedule(const std::string& text) {
  if (text == "naive") return Schedule::Naive;
  if (text == "gpipe") return Schedule::GPipe;
  if (text == "1f1b") return Schedule::OneFOneB;
  fail("--schedule '", text, "': unknown pipeline schedule (expected naive, gpipe or 1f1b)");
}

std::string schedule_name(Schedule schedule) {
  switch (schedule) {
    case Schedule::Naive: return "naive";
    case Schedule::GPipe: return "gpipe";
    case Schedule::OneFOneB: return "1f1b";
  }
  return "?";
}

std::string PipelineOp::str() const { return (kind == Kind::Forward ? "F" : "B") + std::to_string(micro_batch); }

std::vector<PipelineOp> stage_order(Schedule schedule, int stage, int stages, int micro_batches) {
  DPCORE_CHECK(stages >= 1 && stage >= 0 && stage < stages, "pipeline: stage ", stage, " of ", stages,
               " does not exist");
  DPCORE_CHECK(micro_batches >= 1, "--micro-batches ", micro_batches, ": needs at least 1");
  DPCORE_CHECK(schedule != Schedule::Naive || micro_batches == 1, "--schedule naive runs the batch whole: --micro-batches ",
               micro_batches, " needs --schedule gpipe or 1f1b");
  std::vector<PipelineOp> order;
  auto forward = [&](int m) { order.push_back({Kind::Forward, m}); };
  auto backward = [&](int m) { order.push_back({Kind::Backward, m}); };
  if (schedule == Schedule::OneFOneB) {
    // Warm up with the forwards that fill the pipeline below this stage, then one forward
    // and one backward at a time, then drain the backwards.
    const int warmup = std::min(stages - 1 - stage, micro_batches);
    for (int m = 0; m < warmup; ++m) forward(m);
    for (int m = warmup; m < micro_batches; ++m) forward(m), backward(m - warmup);
    for (int m = micro_batches - warmup; m < micro_batches; ++m) backward(m);
  } else {
    for (int m = 0; m < micro_batches; ++m) forward(m);
    for (int m = 0; m < micro_batches; ++m) backward(m);
  }
  return order;
}

std::vector<std::vector<PipelineOp>> stage_orders(Schedule schedule, int stages, int micro_batches) {
  std::vector<std::vector<PipelineOp>> orders;
  for (int s = 0; s < stages; ++s) orders.push_back(stage_order(schedule, s, stages, micro_batches));
  return orders;
}

std::vector<int64_t> micro_batch_sizes(int64_t batch, int micro_batches) {
  DPCORE_CHECK(micro_batches >= 1, "--micro-batches ", micro_batches, ": needs at least 1");
  DPCORE_CHECK(micro_batches <= batch, "--micro-batches ", micro_batches, " is larger than the batch (", batch,
               " samples): a micro-batch would be empty");
  return even_split(batch, micro_batches);  // the cut of one device's --accum
}

int peak_live_activations(const std::vector<PipelineOp>& order) {
  int live = 0, peak = 0;
  for (const PipelineOp& op : order) {
    live += op.kind == Kind::Forward ? 1 : -1;
    peak = std::max(peak, live);
  }
  return peak;
}

double PipelineTimeline::busy(int stage) const {
  double total = 0;
  for (const TimedOp& t : stages[stage]) total += t.end - t.start;
  return total;
}

double PipelineTimeline::bubble_fraction() const {
  if (stages.empty() || makespan <= 0) return 0;
  double busy_total = 0;
  for (int s = 0; s < int(stages.size()); ++s) busy_total += busy(s);
  return 1 - busy_total / (double(stages.size()) * makespan);
}

PipelineTimeline simulate(const std::vector<std::vector<PipelineOp>>& orders, int micro_batches,
                          const std::vector<double>& forward_time, const std::vector<double>& backward_time,
                          double transfer) {
  const int stages = int(orders.size());
  DPCORE_CHECK(stages >= 1 && int(forward_time.size()) == stages && int(backward_time.size()) == stages,
               "pipeline simulate: ", stages, " stage orders, ", forward_time.size(), " forward and ",
               backward_time.size(), " backward times");
  // Each stage must run every forward and every backward exactly once, a backward after its
  // forward.
  for (int s = 0; s < stages; ++s) {
    std::vector<int> forwards(micro_batches, 0), backwards(micro_batches, 0);
    for (const PipelineOp& op : orders[s]) {
      DPCORE_CHECK(op.micro_batch >= 0 && op.micro_batch < micro_batches, "pipeline stage ", s, ": ", op.str(),
                   " names a micro-batch outside 0-", micro_batches - 1);
      int& runs = (op.kind == Kind::Forward ? forwards : backwards)[op.micro_batch];
      DPCORE_CHECK(++runs == 1, "pipeline stage ", s, ": runs ", op.str(), " twice");
      DPCORE_CHECK(op.kind == Kind::Forward || forwards[op.micro_batch] == 1, "pipeline stage ", s, ": runs ",
                   op.str(), " before its forward");
    }
    for (int m = 0; m < micro_batches; ++m)
      DPCORE_CHECK(forwards[m] == 1 && backwards[m] == 1, "pipeline stage ", s, ": never runs ",
                   (forwards[m] == 0 ? "F" : "B"), m);
  }
  // end[kind][s][m]: when that op ended (NaN until it has run).
  const double unset = std::nan("");
  std::map<Kind, std::vector<std::vector<double>>> end;
  for (Kind k : {Kind::Forward, Kind::Backward}) end[k].assign(stages, std::vector<double>(micro_batches, unset));
  PipelineTimeline timeline;
  timeline.stages.resize(stages);
  std::vector<size_t> next(stages, 0);
  std::vector<double> free_at(stages, 0.0);
  // Run whatever op can run; an op's times depend only on ops already placed, so the order
  // in which stages are visited does not change the result.
  for (size_t placed = 0, total = size_t(stages) * 2 * micro_batches; placed < total;) {
    bool progressed = false;
    for (int s = 0; s < stages; ++s) {
      if (next[s] == orders[s].size()) continue;
      const PipelineOp op = orders[s][next[s]];
      double ready = free_at[s];
      if (op.kind == Kind::Forward && s > 0) {
        const double input = end[Kind::Forward][s - 1][op.micro_batch];
        if (std::isnan(input)) continue;
        ready = std::max(ready, input + transfer);
      }
      if (op.kind == Kind::Backward && s + 1 < stages) {
        const double gradient = end[Kind::Backward][s + 1][op.micro_batch];
        if (std::isnan(gradient)) continue;
        ready = std::max(ready, gradient + transfer);
      }
      const double length = op.kind == Kind::Forward ? forward_time[s] : backward_time[s];
      timeline.stages[s].push_back({op, ready, ready + length});
      end[op.kind][s][op.micro_batch] = free_at[s] = ready + length;
      timeline.makespan = std::max(timeline.makespan, ready + length);
      ++next[s], ++placed, progressed = true;
    }
    if (!progressed) {
      std::ostringstream stuck;
      for (int s = 0; s < stages; ++s)
        if (next[s] < orders[s].size()) stuck << (stuck.tellp() ? ", " : "") << "stage " << s << " at " << orders[s][next[s]].str();
      fail("pipeline schedule cannot finish: every stage waits on another (", stuck.str(), ")");
    }
  }
  return timeline;
}

std::string tick_table(Schedule schedule, int stages, int micro_batches) {
  const auto orders = stage_orders(schedule, stages, micro_batches);
  const PipelineTimeline timeline =
      simulate(orders, micro_batches, std::vector<double>(stages, 1.0), std::vector<double>(stages, 1.0));
  const int ticks = int(timeline.makespan);
  std::vector<std::vector<std::string>> cells(ticks, std::vector<std::string>(stages, "."));
  for (int s = 0; s < stages; ++s)
    for (const TimedOp& t : timeline.stages[s]) cells[int(t.start)][s] = t.op.str();
  std::ostringstream os;
  os << "pipeline " << schedule_name(schedule) << ": " << stages << " stages, " << micro_batches
     << " micro-batches, one tick per forward or backward\n";
  os << std::left << std::setw(6) << "tick";
  for (int s = 0; s < stages; ++s) os << std::setw(9) << ("stage " + std::to_string(s));
  os << "\n";
  for (int t = 0; t < ticks; ++t) {
    os << std::setw(6) << t;
    for (int s = 0; s < stages; ++s) os << std::setw(9) << cells[t][s];
    os << "\n";
  }
  os << "bubble " << std::fixed << std::setprecision(3) << timeline.bubble_fraction() << " of stage time ((P-1)/(M+P-1) = "
     << (stages - 1) << "/" << (micro_batches + stages - 1) << " = " << double(stages - 1) / (micro_batches + stages - 1)
     << "); live activations per stage at most:";
  for (const auto& order : orders) os << " " << peak_live_activations(order);
  os << "\n";
  return os.str();
}

}  // namespace dpcore::train::pipeline
