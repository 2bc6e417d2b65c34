// dpcore predict (train/predict/predict.h).
#include "train/predict/predict.h"

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
#include "train/runners/ddp.h"
#include "train/predict/scaling_model.h"
#include "train/predict/step_profile.h"

namespace dpcore::train {

namespace {

using nlohmann::json;
using scaling::Prediction;
using scaling::StepProfile;

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

// One replica's step measured on this machine's CPU and, for a CPU cluster whose cores
// hold more than one replica, how much they slow each other; `source` says how.
StepProfile measure(const PredictOptions& o, layers::Model& model, const Shape& input, const scaling::Cluster& cluster,
                    std::string& source) {
  if (o.threads > 0) runtime::set_cpu_threads(o.threads);
  Generator gen(o.seed + 1);
  Shape batch_shape{o.batch};
  batch_shape.insert(batch_shape.end(), input.begin(), input.end());
  std::vector<float> pixels(size_t(shape_numel(batch_shape)));
  for (float& v : pixels) v = float(gen.normal());
  std::vector<int64_t> labels(size_t(o.batch));
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = int64_t(i) % o.classes;
  const Tensor x = Tensor::from_vector(pixels, batch_shape), y = Tensor::from_vector(labels, {o.batch});
  const SgdConfig sgd{0.01, 0.9, 0.0, 5e-4, true};
  StepProfile profile = measure_step_profile(model, x, y, sgd, o.warmup, o.steps);
  const int threads = runtime::cpu_threads();
  source = "measured on the CPU, " + std::to_string(threads) + (threads == 1 ? " thread" : " threads") +
           ", median of " + std::to_string(o.steps) + " steps";
  const int copies = cluster.cores_per_node / threads;
  if (copies > 1) {
    const auto make_model = [&] {
      layers::ModelDef d = layers::model_from_flag(o.model, input, o.classes);
      return std::make_unique<layers::Model>(std::move(d.net), d.input_shape, Device::cpu(), DType::Float32, o.seed);
    };
    profile.busy_slowdown = measure_busy_slowdown(make_model, pixels, labels, input, sgd, copies, o.warmup, o.steps);
    source += ", x" + fixed(profile.busy_slowdown, 2) + " with " + std::to_string(copies) + " replicas at once";
  }
  return profile;
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
    layers::ModelDef def = layers::model_from_flag(o.model, input, o.classes);
    layers::Model model(std::move(def.net), def.input_shape, Device::cpu(), DType::Float32, o.seed);
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
