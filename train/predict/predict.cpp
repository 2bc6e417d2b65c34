// dpcore predict (train/predict/predict.h).
#include "train/predict/predict.h"

#include <algorithm>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <vector>

#include "engine/data/flag_text.h"
#include "engine/io/atomic_file.h"
#include "engine/random.h"
#include "engine/runtime.h"
#include "kernels/error.h"
#include "layers/zoo.h"
#include "train/pipeline/pipeline_schedule.h"
#include "train/pipeline/stage_plan.h"
#include "train/predict/pipeline_profile.h"
#include "train/runners/ddp.h"
#include "train/predict/scaling_model.h"
#include "train/predict/step_profile.h"

namespace dpcore::train {

namespace {

using nlohmann::json;
using scaling::Prediction;
using scaling::StepProfile;

const SgdConfig kSgd{0.01, 0.9, 0.0, 5e-4, true};  // the optimizer every measurement steps with

struct Strategy {
  std::string name;   // "ddp", "dp", "local:K"
  int sync_every = 0;  // K of local:K
};

std::vector<Strategy> parse_strategies(const std::string& text) {
  std::vector<Strategy> out;
  const std::string local = "local:";
  for (const std::string& part : data::split_commas(text)) {
    if (part == "ddp" || part == "dp") {
      out.push_back({part, 0});
      continue;
    }
    const std::optional<int64_t> k =
        part.rfind(local, 0) == 0 ? data::positive_integer(part.substr(local.size())) : std::nullopt;
    DPCORE_CHECK(k.has_value(), "--strategies '", text, "': '", part, "' is not ddp, dp or local:K with K >= 1");
    out.push_back({part, int(*k)});
  }
  return out;
}

Shape parse_input(const std::string& text) {
  Shape shape;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, 'x');) {
    const std::optional<int64_t> v = data::positive_integer(part);
    DPCORE_CHECK(v.has_value(), "--input '", text, "': expected CxHxW, e.g. 3x32x32");
    shape.push_back(*v);
  }
  DPCORE_CHECK(shape.size() == 3, "--input '", text, "': expected CxHxW, e.g. 3x32x32");
  return shape;
}

json profile_json(const StepProfile& p) {
  return {{"forward_s", p.forward_s},         {"backward_s", p.backward_s},     {"optimizer_s", p.optimizer_s},
          {"param_bytes", p.param_bytes},     {"grad_ready_s", p.grad_ready_s}, {"input_bytes", p.input_bytes},
          {"output_bytes", p.output_bytes},   {"threads", p.threads},           {"busy_slowdown", p.busy_slowdown}};
}

// The replica counts to predict: the list given, or 1, 2, 4, ... up to max_replicas.
std::vector<int> replica_counts(const PredictOptions& o) {
  std::vector<int> counts;
  if (!o.replicas.empty()) {
    for (const std::string& part : data::split_commas(o.replicas)) {
      const std::optional<int64_t> r = data::positive_integer(part);
      DPCORE_CHECK(r.has_value() && *r <= (1 << 20), "--replicas '", o.replicas, "': '", part,
                   "' is not a replica count from 1 to 1048576");
      counts.push_back(int(*r));
    }
    return counts;
  }
  for (int r = 1; r <= o.max_replicas; r *= 2) {
    counts.push_back(r);
    if (r > o.max_replicas / 2) break;  // no overflow past the largest power of two asked for
  }
  return counts;
}

// A saved profile, with the model and per-replica batch it was measured on where it says.
struct SavedProfile {
  StepProfile profile;
  std::string model;
  int64_t batch = 0;
};

SavedProfile load_profile(const std::string& path) {
  std::ifstream file(path);
  DPCORE_CHECK(file.good(), "--profile ", path, ": cannot open it for reading");
  SavedProfile saved;
  StepProfile& p = saved.profile;
  try {
    const json j = json::parse(file);
    saved.model = j.value("model", std::string());
    saved.batch = j.value("batch", int64_t(0));
    p.forward_s = j.at("forward_s"), p.backward_s = j.at("backward_s"), p.optimizer_s = j.at("optimizer_s");
    p.param_bytes = j.at("param_bytes").get<std::vector<int64_t>>();
    p.grad_ready_s = j.at("grad_ready_s").get<std::vector<double>>();
    p.input_bytes = j.at("input_bytes"), p.output_bytes = j.at("output_bytes");
    // Profiles saved before CPU nodes were modelled: one thread, no slowdown measured.
    p.threads = j.value("threads", 1), p.busy_slowdown = j.value("busy_slowdown", 1.0);
  } catch (const json::exception& e) {
    fail("--profile ", path, ": not a step profile (", e.what(), ")");
  }
  DPCORE_CHECK(p.grad_ready_s.size() == p.param_bytes.size(), "--profile ", path, ": ", p.grad_ready_s.size(),
               " gradient ready times for ", p.param_bytes.size(), " parameters");
  return saved;
}

void write_json(const std::string& path, const json& j, const char* flag) {
  const std::string text = j.dump(1) + "\n";
  io::AtomicFileWriter file(path, flag);
  file.write(text.data(), text.size());
  file.commit();
}

std::string fixed(double v, int digits) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(digits) << v;
  return os.str();
}

// --model on the CPU, as every measurement here builds it.
std::unique_ptr<layers::Model> build(const PredictOptions& o, const Shape& input) {
  layers::ModelDef d = layers::model_from_flag(o.model, input, o.classes);
  return std::make_unique<layers::Model>(std::move(d.net), d.input_shape, Device::cpu(), DType::Float32, o.seed);
}

// `rows` samples of normal noise shaped `input`, labelled 0, 1, ... in turn: what the
// measurements run on (--seed draws them).
struct RandomBatch {
  std::vector<float> pixels;
  std::vector<int64_t> labels;
  Tensor x, y;
};
RandomBatch random_batch(const PredictOptions& o, const Shape& input, int64_t rows) {
  Generator gen(o.seed + 1);
  Shape shape{rows};
  shape.insert(shape.end(), input.begin(), input.end());
  RandomBatch b;
  b.pixels.resize(size_t(shape_numel(shape)));
  for (float& v : b.pixels) v = float(gen.normal());
  b.labels.resize(size_t(rows));
  for (size_t i = 0; i < b.labels.size(); ++i) b.labels[i] = int64_t(i) % o.classes;
  b.x = Tensor::from_vector(b.pixels, shape), b.y = Tensor::from_vector(b.labels, {rows});
  return b;
}

// One replica's step measured on this machine's CPU and, for a CPU cluster whose cores
// hold more than one replica, how much they slow each other; `source` says how.
StepProfile measure(const PredictOptions& o, layers::Model& model, const Shape& input, const scaling::Cluster& cluster,
                    std::string& source) {
  if (o.threads > 0) runtime::set_cpu_threads(o.threads);
  const RandomBatch batch = random_batch(o, input, o.batch);
  StepProfile profile = measure_step_profile(model, batch.x, batch.y, kSgd, o.warmup, o.steps);
  const int threads = runtime::cpu_threads();
  source = "measured on the CPU, " + std::to_string(threads) + (threads == 1 ? " thread" : " threads") +
           ", median of " + std::to_string(o.steps) + " steps";
  const int copies = cluster.cores_per_node / threads;
  if (copies > 1) {
    profile.busy_slowdown = measure_busy_slowdown([&] { return build(o, input); }, batch.pixels, batch.labels, input,
                                                  kSgd, copies, o.warmup, o.steps);
    source += ", x" + fixed(profile.busy_slowdown, 2) + " with " + std::to_string(copies) + " replicas at once";
  }
  return profile;
}

// dpcore predict --stages: the pipeline's step for each replica count.
void predict_pipelines(const PredictOptions& o, const scaling::Preset& cluster, scaling::Algorithm algorithm,
                       const std::vector<int>& counts, std::ostream& out) {
  DPCORE_CHECK(o.profile_in.empty() && o.profile_out.empty(), "--stages with --profile or --profile-out: a saved "
               "profile is a data-parallel step's; a pipeline's is measured per layer each time");
  const Shape input = parse_input(o.input);
  const std::unique_ptr<layers::Model> model = build(o, input);
  const std::vector<pipeline::Stage> stages =
      pipeline::parse_stages(o.stages, int(model->net().size()), {int(runtime::allowed_cpus().size()), 0});
  const pipeline::Schedule schedule = pipeline::parse_schedule(o.schedule);
  PipelineOptions asked;
  asked.stages = o.stages, asked.schedule = o.schedule, asked.micro_batches = o.micro_batches;
  const int M = int(pipeline_micro_batches(asked));
  pipeline::stage_order(schedule, 0, int(stages.size()), M);  // refuses naive with M > 1
  const int64_t rows = pipeline::micro_batch_sizes(o.batch, M).front();
  if (o.threads > 0) runtime::set_cpu_threads(o.threads);
  const RandomBatch micro_batch = random_batch(o, input, rows);
  scaling::PipelineProfile profile =
      measure_pipeline_profile(*model, micro_batch.x, micro_batch.y, kSgd, o.warmup, o.steps);
  for (pipeline::LayerCost& c : profile.layers) c.forward_s *= o.compute_scale, c.backward_s *= o.compute_scale;
  profile.optimizer_s *= o.compute_scale;
  const int64_t largest = *std::max_element(profile.output_bytes.begin(), profile.output_bytes.end());
  const scaling::Link link = measure_p2p_link(largest, 20);
  // The stages compute side by side, a thread on each stage's CPU team: that slows each
  // (shared caches, memory bandwidth), measured with the teams the stages would have.
  std::vector<runtime::CpuTeam> teams;
  for (const runtime::CpuTeam& team : pipeline::stage_cpu_teams(stages, runtime::allowed_cpus(), runtime::cpu_threads()))
    if (std::none_of(teams.begin(), teams.end(), [&](const runtime::CpuTeam& t) { return t.cpus == team.cpus; }))
      teams.push_back(team);
  const double slowdown = measure_side_by_side_slowdown([&] { return build(o, input); }, micro_batch.x, micro_batch.y,
                                                        teams, o.warmup, o.steps);
  out << "dpcore predict: " << o.model << ", pipeline (" << pipeline::schedule_name(schedule) << ") of "
      << stages.size() << " stages [" << pipeline::stages_text(stages) << "], " << M << " micro-batches of " << rows
      << " samples (batch " << o.batch << " per replica)\n"
      << "layer profile (measured on the CPU, " << runtime::cpu_threads() << (runtime::cpu_threads() == 1 ? " thread" : " threads") << ", median of " << o.steps
      << "), forward / backward ms:";
  for (const pipeline::LayerCost& c : profile.layers)
    out << " " << fixed(c.forward_s * 1e3, 3) << "/" << fixed(c.backward_s * 1e3, 3);
  out << "; optimizer " << fixed(profile.optimizer_s * 1e3, 2) << " ms\n"
      << "each end of a message between stages (measured: send/recv between two threads): "
      << fixed(link.latency_s * 1e6, 1) << " us + bytes at " << fixed(link.bytes_per_s / 1e9, 2) << " GB/s\n"
      << "compute x " << fixed(slowdown, 2) << ": measured with a thread on each of the stages' " << teams.size()
      << " CPU teams at once, against one alone\n"
      << "cluster " << cluster.cluster.name << " (each stage's allreduce among its replicas): " << cluster.assumptions
      << "\n"
      << "a processor per stage and replica (stages that share cores are slower than this)\n";
  out << std::setw(8) << "replicas" << " | " << std::setw(8) << "step ms" << std::setw(13) << "pipeline ms"
      << std::setw(8) << "bubble" << std::setw(16) << "p2p MiB/step" << std::setw(22) << "exposed allreduce ms\n";
  json rows_json = json::array();
  for (int r : counts) {
    const scaling::PipelinePrediction p =
        scaling::predict_pipeline(profile, stages, schedule, M, r, link, cluster.cluster, algorithm, slowdown);
    out << std::setw(8) << r << " | " << std::setw(8) << fixed(p.step_s * 1e3, 2) << std::setw(13)
        << fixed(p.pipeline_s * 1e3, 2) << std::setw(7) << fixed(p.bubble * 100, 1) << "%" << std::setw(16)
        << fixed(double(p.p2p_bytes) / double(1 << 20), 2) << std::setw(21) << fixed(p.exposed_allreduce_s * 1e3, 3)
        << "\n";
    rows_json.push_back({{"replicas", r}, {"step_s", p.step_s}, {"pipeline_s", p.pipeline_s}, {"bubble", p.bubble},
                         {"p2p_bytes", p.p2p_bytes}, {"exposed_allreduce_s", p.exposed_allreduce_s}});
  }
  if (!o.json.empty()) {
    json layers = json::array();
    for (size_t i = 0; i < profile.layers.size(); ++i)
      layers.push_back({{"forward_s", profile.layers[i].forward_s}, {"backward_s", profile.layers[i].backward_s},
                        {"output_bytes", profile.output_bytes[i]}, {"param_bytes", profile.param_bytes[i]}});
    write_json(o.json,
               {{"model", o.model}, {"batch_per_replica", o.batch}, {"stages", pipeline::stages_text(stages)},
                {"schedule", pipeline::schedule_name(schedule)}, {"micro_batches", M},
                {"link", {{"latency_s", link.latency_s}, {"bytes_per_s", link.bytes_per_s}}},
                {"busy_slowdown", slowdown},
                {"layers", layers}, {"optimizer_s", profile.optimizer_s}, {"cluster", cluster.cluster.name},
                {"predictions", rows_json}},
               "--json");
  }
}

}  // namespace

void predict(const PredictOptions& o, std::ostream& out) {
  DPCORE_CHECK(o.batch >= 1, "--batch ", o.batch, ": expected at least 1 sample per replica");
  DPCORE_CHECK(o.max_replicas >= 1, "--max-replicas ", o.max_replicas, ": expected at least 1");
  DPCORE_CHECK(o.compute_scale > 0, "--compute-scale ", o.compute_scale, ": expected a positive factor");
  DPCORE_CHECK(o.bucket_mb > 0, "--bucket-mb ", o.bucket_mb, ": expected a positive size");
  const scaling::Preset cluster = scaling::cluster_from_flag(o.cluster, "--cluster");
  const scaling::Algorithm algorithm = scaling::parse_algorithm(o.algorithm, "--algorithm");
  const std::vector<Strategy> strategies = parse_strategies(o.strategies);
  const std::vector<int> counts = replica_counts(o);
  // Output paths that cannot be written fail now, not after the measurement.
  if (!o.profile_out.empty()) io::AtomicFileWriter(o.profile_out, "--profile-out");
  if (!o.json.empty()) io::AtomicFileWriter(o.json, "--json");
  if (!o.stages.empty()) return predict_pipelines(o, cluster, algorithm, counts, out);

  const size_t mib = size_t(1) << 20;
  const size_t cap = size_t(o.bucket_mb * double(mib));
  StepProfile profile;
  scaling::Buckets buckets;
  std::string source, model_name = o.model;
  int64_t batch = o.batch;
  if (!o.profile_in.empty() && !o.model_given) {
    // The profile of a model dpcore need not build (one measured with another framework,
    // say): its own tensor sizes give DDP's buckets.
    SavedProfile saved = load_profile(o.profile_in);
    DPCORE_CHECK(!saved.model.empty() && saved.batch >= 1, "--profile ", o.profile_in,
                 ": it names no model and batch (\"model\", \"batch\"); give --model and --batch");
    profile = std::move(saved.profile);
    model_name = saved.model, batch = saved.batch;
    buckets = bucket_params(profile.param_bytes, mib, cap);
    source = "loaded from " + o.profile_in;
  } else {
    const Shape input = parse_input(o.input);
    const std::unique_ptr<layers::Model> built = build(o, input);
    layers::Model& model = *built;
    DPCORE_CHECK(model.num_classes() == o.classes, "--model ", o.model, " has ", model.num_classes(),
                 " outputs, not --classes ", o.classes);
    const size_t params = model.parameters().params().size();
    for (const Bucket& b : make_buckets(model.parameters(), mib, cap)) buckets.push_back(b.params);
    if (!o.profile_in.empty()) {
      profile = load_profile(o.profile_in).profile;
      DPCORE_CHECK(profile.param_bytes.size() == params, "--profile ", o.profile_in, ": ", profile.param_bytes.size(),
                   " parameters, but --model ", o.model, " has ", params);
      source = "loaded from " + o.profile_in;
    } else {
      profile = measure(o, model, input, cluster.cluster, source);
      if (!o.profile_out.empty()) {
        json saved = profile_json(profile);
        saved["model"] = o.model, saved["batch"] = o.batch;
        write_json(o.profile_out, saved, "--profile-out");
      }
    }
  }
  if (o.compute_scale != 1.0) {
    profile.forward_s *= o.compute_scale, profile.backward_s *= o.compute_scale;
    profile.optimizer_s *= o.compute_scale;
    for (double& t : profile.grad_ready_s) t *= o.compute_scale;
    source += ", compute times x " + fixed(o.compute_scale, 4);
  }

  out << "dpcore predict: " << model_name << " (" << fixed(double(profile.total_param_bytes()) / double(mib), 2)
      << " MiB of parameters, " << buckets.size() << " DDP bucket" << (buckets.size() == 1 ? "" : "s") << "), batch "
      << batch << " per replica\n"
      << "step profile (" << source << "): forward " << fixed(profile.forward_s * 1e3, 2) << " ms, backward "
      << fixed(profile.backward_s * 1e3, 2) << " ms, optimizer " << fixed(profile.optimizer_s * 1e3, 2) << " ms\n"
      << "cluster " << cluster.cluster.name << ": " << cluster.assumptions << "\n"
      << "allreduce: " << scaling::algorithm_name(algorithm) << "; efficiency = step(1) / step(R), per-replica batch fixed\n";
  out << std::setw(8) << "replicas";
  for (const Strategy& s : strategies) out << " | " << std::setw(9) << (s.name + " ms") << std::setw(12) << "exposed ms" << std::setw(6) << "eff";
  out << "\n";

  json rows = json::array();
  for (int r : counts) {
    out << std::setw(8) << r;
    json row = {{"replicas", r}};
    for (const Strategy& s : strategies) {
      const Prediction p =
          s.name == "ddp"  ? scaling::predict_ddp(profile, buckets, r, cluster.cluster, algorithm)
          : s.name == "dp" ? scaling::predict_dp(profile, r, cluster.cluster, algorithm)
                           : scaling::predict_local_sgd(profile, s.sync_every, r, cluster.cluster, algorithm);
      out << " | " << std::setw(9) << fixed(p.step_s * 1e3, 2) << std::setw(12) << fixed(p.exposed_comm_s * 1e3, 3)
          << std::setw(6) << fixed(p.efficiency, 2);
      row[s.name] = {{"step_s", p.step_s}, {"exposed_comm_s", p.exposed_comm_s}, {"efficiency", p.efficiency}};
    }
    out << "\n";
    rows.push_back(row);
  }
  if (!o.json.empty()) {
    write_json(o.json,
               {{"model", model_name},
                {"batch_per_replica", batch},
                {"cluster", cluster.cluster.name},
                {"assumptions", cluster.assumptions},
                {"algorithm", scaling::algorithm_name(algorithm)},
                {"profile", profile_json(profile)},
                {"buckets", buckets},
                {"predictions", rows}},
               "--json");
  }
}

}  // namespace dpcore::train
