#include "train/pipeline/pipeline_step.h"

#include <algorithm>
#include <chrono>
#include <tuple>

#include "engine/autograd.h"
#include "engine/backend.h"
#include "engine/median.h"
#include "engine/memory_account.h"
#include "engine/runtime.h"
#include "kernels/error.h"

namespace dpcore::train::pipeline {

std::vector<Shape> stage_input_shapes(Model& model, const std::vector<Stage>& stages, const Shape& sample) {
  std::vector<Shape> out;
  Shape shape = sample;
  for (const Stage& stage : stages) {
    out.push_back(shape);
    for (int i = stage.first_layer; i <= stage.last_layer; ++i) {
      Shape batched = {1};
      batched.insert(batched.end(), shape.begin(), shape.end());
      batched = model.net().child(size_t(i)).output_shape(batched);
      shape.assign(batched.begin() + 1, batched.end());
    }
  }
  return out;
}

std::vector<MicroBatchRows> micro_batch_rows(int64_t batch, int micro_batches) {
  std::vector<MicroBatchRows> out;
  int64_t first = 0;
  for (int64_t size : micro_batch_sizes(batch, micro_batches)) out.push_back({first, size}), first += size;
  return out;
}

namespace {

// The ranges of stage_parameter_ranges over `entries` (in flat order, each with its name
// and offset), given which flat entry each stage's layers use (stage_of, -1: none yet).
template <class Entry>
std::vector<FlatRange> ranges_of(const std::vector<Entry>& entries, const std::vector<int>& stage_of, int64_t total,
                                 int stages, const char* what) {
  std::vector<int64_t> begin(size_t(stages) + 1, total);
  begin[0] = 0;
  int last = 0;
  for (size_t e = 0; e < entries.size(); ++e) {
    DPCORE_CHECK(stage_of[e] >= 0, "pipeline: the ", what, " ", entries[e].name, " is in no stage's layers");
    DPCORE_CHECK(stage_of[e] >= last, "pipeline: the ", what, " ", entries[e].name,
                 " lies in the flat buffer after a later stage's");
    for (int s = last + 1; s <= stage_of[e]; ++s) begin[size_t(s)] = entries[e].offset;
    last = stage_of[e];
  }
  std::vector<FlatRange> out;
  for (int s = 0; s < stages; ++s) out.push_back({begin[size_t(s)], begin[size_t(s) + 1] - begin[size_t(s)]});
  return out;
}

// Layer i's name prefix, as the model names its parameters and buffers.
std::string layer_prefix(layers::Sequential& net, int i) { return layers::qualified_name("", net.child_name(size_t(i))); }

}  // namespace

std::vector<FlatRange> stage_parameter_ranges(Model& model, const std::vector<Stage>& stages) {
  const FlatParameters& params = model.parameters();
  layers::Sequential& net = model.net();
  std::vector<int> stage_of(params.entries().size(), -1);  // per flat entry
  for (size_t s = 0; s < stages.size(); ++s) {
    for (int i = stages[s].first_layer; i <= stages[s].last_layer; ++i) {
      std::vector<layers::ParamSlot> slots;
      net.child(size_t(i)).collect_parameters(layer_prefix(net, i), slots);
      for (const layers::ParamSlot& slot : slots) {
        const std::string& name = slot.tied_to.empty() ? slot.name : slot.tied_to;
        const size_t e = size_t(&params.entry(name) - params.entries().data());
        DPCORE_CHECK(stage_of[e] < 0 || stage_of[e] == int(s), "pipeline: the parameter ", name,
                     " is used by the stages of layers ", stages[size_t(std::max(stage_of[e], 0))].first_layer, "-",
                     stages[size_t(std::max(stage_of[e], 0))].last_layer, " and ", stages[s].first_layer, "-",
                     stages[s].last_layer, " (a tied weight): two stages would accumulate its gradient at once, each on its own thread, device "
                     "or process; put the layers that use it on one stage");
        stage_of[e] = int(s);
      }
    }
  }
  return ranges_of(params.entries(), stage_of, params.total(), int(stages.size()), "parameter");
}

std::vector<FlatRange> stage_buffer_ranges(Model& model, const std::vector<Stage>& stages) {
  const FlatBuffers& buffers = model.buffers();
  layers::Sequential& net = model.net();
  std::vector<int> stage_of(buffers.entries().size(), -1);
  for (size_t s = 0; s < stages.size(); ++s) {
    for (int i = stages[s].first_layer; i <= stages[s].last_layer; ++i) {
      std::vector<layers::BufferSlot> slots;
      net.child(size_t(i)).collect_buffers(layer_prefix(net, i), slots);
      for (const layers::BufferSlot& slot : slots)
        stage_of[size_t(&buffers.entry(slot.name) - buffers.entries().data())] = int(s);
    }
  }
  return ranges_of(buffers.entries(), stage_of, buffers.total(), int(stages.size()), "buffer");
}

StageWork::StageWork(Model& model, const std::vector<Stage>& stages, int micro_batches, const Tensor& x,
                     const Tensor& y, double grad_scale, BatchStart start)
    : StageWork(model, stages, micro_batch_rows(x.dim() >= 1 ? x.size(0) : 0, micro_batches), x, y, grad_scale,
                start) {}

StageWork::StageWork(Model& model, const std::vector<Stage>& stages, std::vector<MicroBatchRows> rows, const Tensor& x,
                     const Tensor& y, double grad_scale, BatchStart start)
    : StageWork(std::vector<Model*>(stages.size(), &model), stages, std::move(rows), x, y, grad_scale, start) {}

StageWork::StageWork(const std::vector<Model*>& models, const std::vector<Stage>& stages,
                     std::vector<MicroBatchRows> rows, const Tensor& x, const Tensor& y, double grad_scale,
                     BatchStart start)
    : models_(models), stages_(stages), grad_scale_(grad_scale), start_(start), rows_(std::move(rows)) {
  const int P = int(stages.size());
  DPCORE_CHECK(P >= 1 && int(models_.size()) == P, "pipeline: ", models_.size(), " stage models for ", P, " stages");
  Model& model = *models_.front();
  for (Model* other : models_)
    DPCORE_CHECK(other->parameters().total() == model.parameters().total() &&
                     other->net().size() == model.net().size() && other->dtype() == model.dtype(),
                 "pipeline: the stages' models differ in layout (", other->net().size(), " layers, ",
                 other->parameters().total(), " parameters on ", other->device().str(), " against ", model.net().size(),
                 ", ", model.parameters().total(), " on ", model.device().str(), ")");
  logits_ = models_.back()->ends_in_log_softmax();
  layers::Sequential& net = model.net();
  const int layers = int(net.size());
  DPCORE_CHECK(stages.front().first_layer == 0 && stages.back().last_layer == layers - 1,
               "pipeline: stages ", stages_text(stages), " do not cover the model's ", layers, " layers");
  for (int s = 1; s < P; ++s)
    DPCORE_CHECK(stages[s].first_layer == stages[s - 1].last_layer + 1, "pipeline: stages ", stages_text(stages),
                 " are not contiguous");
  DPCORE_CHECK(x.dim() >= 1 && y.dim() >= 1 && x.size(0) == y.size(0), "pipeline step: inputs ", x.str(),
               " and targets ", y.str(), " disagree on the batch size");
  DPCORE_CHECK(!rows_.empty(), "pipeline step: no micro-batches");
  for (const MicroBatchRows& r : rows_)
    DPCORE_CHECK(r.size >= 1 && r.first >= 0 && r.first + r.size <= x.size(0), "pipeline step: a micro-batch of rows ",
                 r.first, "-", r.first + r.size - 1, " of a batch of ", x.size(0));
  const int micro_batches = int(rows_.size());
  boundary_ = stage_input_shapes(model, stages, Shape(x.shape().begin() + 1, x.shape().end()));
  const std::vector<DType>& layer_dtypes = model.layer_output_dtypes(x.dtype());
  for (const Stage& stage : stages)
    boundary_dtypes_.push_back(stage.first_layer == 0 ? x.dtype() : layer_dtypes[size_t(stage.first_layer - 1)]);
  input_.assign(P, std::vector<Tensor>(micro_batches));
  output_.assign(P, std::vector<Tensor>(micro_batches));
  live_.assign(P, 0);
  peak_.assign(P, 0);
  x_ = x.to(device(0));
  y_ = y.to(device(P - 1));
  loss_sum_ = Tensor::zeros({}, model.dtype(), device(P - 1));
}

size_t StageWork::layer_end(int s) const {
  return s + 1 == stages() && logits_ ? model(s).net().size() - 1 : size_t(stages_[s].last_layer + 1);
}

Shape StageWork::input_shape(int s, int m) const {
  Shape shape = {rows_[m].size};
  shape.insert(shape.end(), boundary_[s].begin(), boundary_[s].end());
  return shape;
}

void StageWork::set_recompute(bool on) {
  recompute_ = on;
  if (on && buffer_ranges_.empty()) buffer_ranges_ = stage_buffer_ranges(model(0), stages_);
}

void StageWork::set_batch_norm_groups(std::vector<ReplicaBatchNormGroup*> groups) {
  DPCORE_CHECK(groups.empty() || int(groups.size()) == stages(), "pipeline: ", groups.size(),
               " batch norm groups for ", stages(), " stages");
  batch_norm_groups_ = std::move(groups);
}

Tensor StageWork::run_layers(int s, int m, const Tensor& in) {
  const int64_t begin = rows_[m].first, end = rows_[m].first + rows_[m].size;
  if (!batch_norm_groups_.empty() && batch_norm_groups_[size_t(s)])
    batch_norm_groups_[size_t(s)]->set_rows(rows_[m].group_rows);
  Model& m_s = model(s);
  m_s.set_batch_position(start_.step, start_.first_sample + begin, size_t(stages_[s].first_layer), layer_end(s));
  // (Under --precision bf16/fp16: the model's autocast, 16-bit activations sent on, the
  // last stage's output widened to float32 before the loss, as in Model::forward.)
  Tensor out = m_s.forward_layers(in, size_t(stages_[s].first_layer), layer_end(s));
  if (s + 1 == stages()) out = loss_of(out, y_.narrow0(begin, end), logits_);
  return out;
}

Tensor StageWork::forward(int s, int m, const Tensor& received) {
  // (From another device: a copy, a leaf of this stage's graph like anything received.)
  Tensor in = s == 0 ? x_.narrow0(rows_[m].first, rows_[m].first + rows_[m].size) : received.to(device(s));
  if (s > 0) in.set_requires_grad(true);
  Tensor out;
  if (recompute_) {
    // No graph; batch norm's running statistics put back, for the backward's forward to move.
    const FlatRange& r = buffer_ranges_[size_t(s)];
    Tensor buffers = r.size > 0 ? model(s).buffers().values().narrow0(r.first, r.first + r.size) : Tensor();
    const Tensor before = buffers.defined() ? buffers.clone() : Tensor();
    {
      autograd::NoGradGuard no_graph;
      out = run_layers(s, m, in);
    }
    if (buffers.defined()) buffers.copy_(before);
  } else {
    out = run_layers(s, m, in);
    output_[s][m] = out;
    peak_[s] = std::max(peak_[s], ++live_[s]);
  }
  if (s + 1 == stages()) backend_for(loss_sum_.device()).add(loss_sum_, out.detach(), loss_sum_);
  input_[s][m] = in;
  return out.detach();
}

Tensor StageWork::backward(int s, int m, const Tensor& grad) {
  const bool last = s + 1 == stages();
  if (recompute_) {
    output_[s][m] = run_layers(s, m, input_[s][m]);
    peak_[s] = std::max(peak_[s], ++live_[s]);
  }
  // (A first stage whose layers have no parameters, a lone flatten, recorded no graph: its
  // backward has nothing to do.)
  if (output_[s][m].requires_grad())
    output_[s][m].backward(last ? Tensor::full({}, grad_scale_, loss_sum_.dtype(), loss_sum_.device())
                                : grad.to(device(s)));
  Tensor to_send = s > 0 ? input_[s][m].grad() : Tensor();
  input_[s][m] = Tensor(), output_[s][m] = Tensor();
  --live_[s];
  return to_send;
}

namespace {

// Every op of every stage in an order in which each finds its input: the unit-tick run's,
// by start tick, then stage.
std::vector<std::pair<int, PipelineOp>> run_order(Schedule schedule, int stages, int micro_batches) {
  const PipelineTimeline t = simulate(stage_orders(schedule, stages, micro_batches), micro_batches,
                                      std::vector<double>(stages, 1.0), std::vector<double>(stages, 1.0));
  std::vector<std::tuple<double, int, PipelineOp>> ops;
  for (int s = 0; s < stages; ++s)
    for (const TimedOp& op : t.stages[s]) ops.emplace_back(op.start, s, op.op);
  std::stable_sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) {
    return std::tie(std::get<0>(a), std::get<1>(a)) < std::tie(std::get<0>(b), std::get<1>(b));
  });
  std::vector<std::pair<int, PipelineOp>> out;
  for (const auto& [start, s, op] : ops) out.emplace_back(s, op);
  return out;
}

}  // namespace

Tensor pipeline_accumulate_gradients(Model& model, const std::vector<Stage>& stages, Schedule schedule,
                                     int micro_batches, const Tensor& x, const Tensor& y, double grad_scale,
                                     BatchStart start, PipelineStepStats* stats, bool recompute) {
  StageWork work(model, stages, micro_batches, x, y, grad_scale, start);
  work.set_recompute(recompute);
  const int P = work.stages();
  // sent[s][m]: what stage s sent up for micro-batch m; returned[s][m]: the gradient stage s
  // sent back down.
  std::vector<std::vector<Tensor>> sent(P, std::vector<Tensor>(micro_batches)), returned = sent;
  for (const auto& [s, op] : run_order(schedule, P, micro_batches)) {
    const int m = op.micro_batch;
    if (op.kind == PipelineOp::Kind::Forward) {
      sent[s][m] = work.forward(s, m, s > 0 ? sent[s - 1][m] : Tensor());
      if (s > 0) sent[s - 1][m] = Tensor();
    } else {
      returned[s][m] = work.backward(s, m, s + 1 < P ? returned[s + 1][m] : Tensor());
      if (s + 1 < P) returned[s + 1][m] = Tensor();
    }
  }
  if (stats) stats->peak_live_activations = work.peak_live_activations();
  return work.loss_sum();
}

std::vector<LayerCost> measure_layer_costs(Model& model, const Tensor& x, const Tensor& y, int warmup, int repeats) {
  DPCORE_CHECK(warmup >= 0 && repeats >= 1, "pipeline layer profile: warmup ", warmup, " and repeats ", repeats,
               " (need warmup >= 0, repeats >= 1)");
  const int layers = int(model.net().size());
  std::vector<Stage> one_per_layer;
  for (int i = 0; i < layers; ++i) one_per_layer.push_back({i, i, StageDevice{Device::cpu()}});
  using Clock = std::chrono::steady_clock;
  const auto seconds = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
  // A GPU's calls return once the work is queued: each clock read waits for it first.
  const Device device = model.device();
  const auto now = [device] {
    runtime::synchronize_stream(device);
    return Clock::now();
  };
  std::vector<std::vector<double>> forward(layers), backward(layers);  // [layer][repeat]
  for (int r = 0; r < warmup + repeats; ++r) {
    StageWork work(model, one_per_layer, 1, x, y, 1.0, {uint64_t(r), 0});
    Tensor passed;
    for (int pass = 0; pass < 2; ++pass) {
      for (int i = 0; i < layers; ++i) {
        const int s = pass == 0 ? i : layers - 1 - i;  // forwards up, backwards down
        const auto t0 = now();
        passed = pass == 0 ? work.forward(s, 0, passed) : work.backward(s, 0, passed);
        if (r >= warmup) (pass == 0 ? forward : backward)[size_t(s)].push_back(seconds(t0, now()));
      }
    }
  }
  model.zero_grad();
  std::vector<LayerCost> out;
  for (int i = 0; i < layers; ++i) out.push_back({median(forward[size_t(i)]), median(backward[size_t(i)])});
  return out;
}

std::vector<std::vector<OpBytes>> measure_layer_memory(Model& model, const Tensor& x, const Tensor& y) {
  layers::Sequential& net = model.net();
  const int layers = int(net.size());
  std::vector<std::vector<OpBytes>> out(static_cast<size_t>(layers));
  int longest = 1;  // the model's longest fused op
  for (int i = 0; i < layers; ++i) {
    out[size_t(i)].resize(net.fused_span(size_t(i), size_t(layers)));
    longest = std::max(longest, int(out[size_t(i)].size()));
  }
  // Ops of at most `cap` layers: every op a stage can run, each fused op cut short once per length.
  for (int cap = 1; cap <= longest; ++cap) {
    std::vector<Stage> ops;  // this pass's ops, as forward_range with `cap` would run them
    for (int i = 0; i < layers;) {
      const int n = int(net.fused_span(size_t(i), size_t(std::min(layers, i + cap))));
      ops.push_back({i, i + n - 1, StageDevice{Device::cpu()}});
      i += n;
    }
    const auto account = std::make_shared<MemoryAccount>();
    const MemoryAccount::Scope charged(account);
    // held and input_released: one graph through all the ops, as a stage of several holds it.
    {
      model.set_batch_position(0, 0);
      Tensor t = x;  // a view of the batch: not in the account
      int64_t before = 0;
      for (const Stage& op : ops) {
        Tensor next = model.forward_layers(t, size_t(op.first_layer), size_t(op.last_layer) + 1);
        const int64_t holding_both = int64_t(account->bytes_in_use());
        t = next, next = Tensor();
        const int64_t after = int64_t(account->bytes_in_use());
        OpBytes& bytes = out[size_t(op.first_layer)][size_t(op.layers() - 1)];
        bytes.held = after - before, bytes.input_released = holding_both - after;
        before = after;
      }
    }
    // backward_peak: each op a stage of its own, as the stage that ends with it runs its backward.
    StageWork work(model, ops, 1, x, y, 1.0, {0, 0});
    Tensor passed;
    for (int s = 0; s < int(ops.size()); ++s) passed = work.forward(s, 0, passed);
    for (int s = int(ops.size()) - 1; s >= 0; --s) {
      const int64_t before = int64_t(account->bytes_in_use());
      account->begin_window();
      passed = work.backward(s, 0, passed);
      out[size_t(ops[size_t(s)].first_layer)][size_t(ops[size_t(s)].layers() - 1)].backward_peak =
          int64_t(account->window_peak_bytes()) - before;
    }
  }
  model.zero_grad();
  return out;
}

}  // namespace dpcore::train::pipeline
