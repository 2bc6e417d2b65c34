// The step-time model of train/predict/scaling_model.h.
#include "train/predict/scaling_model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>

#include "engine/data/flag_text.h"
#include "kernels/error.h"

namespace dpcore::train::scaling {

namespace {

double log2_ceil(int n) { return n <= 1 ? 0.0 : std::ceil(std::log2(double(n))); }

// The loss each DDP step reduces before its optimizer step (one float32): pure latency.
constexpr double kLossBytes = 4;

double single_replica_step(const StepProfile& profile) {
  return profile.forward_s + profile.backward_s + profile.optimizer_s;
}

// A prediction of R replicas whose compute is the profile's times `factor` and whose
// communication adds `exposed` seconds to the step.
Prediction predicted(const StepProfile& profile, int replicas, double factor, double exposed) {
  Prediction p;
  p.replicas = replicas;
  p.compute_s = single_replica_step(profile) * factor;
  p.exposed_comm_s = exposed;
  p.step_s = p.compute_s + exposed;
  p.efficiency = p.step_s > 0 ? single_replica_step(profile) / p.step_s : 1.0;
  return p;
}

// The replicas' kernel threads on the busiest node.
int threads_on_node(const StepProfile& profile, const Cluster& cluster, int replicas) {
  return std::min(replicas, cluster.replicas_per_node) * std::max(1, profile.threads);
}

// Whether a core is left to run communication beside the compute (always on GPU nodes).
bool overlap_possible(const StepProfile& profile, const Cluster& cluster, int replicas) {
  return cluster.cores_per_node <= 0 || threads_on_node(profile, cluster, replicas) < cluster.cores_per_node;
}

// How much slower the profile's step runs while `busy` of the node's cores compute: the
// profile kept profile.threads cores busy and its busy slowdown was measured with all of
// them busy; in between, in proportion to the cores kept busy.
double neighbour_slowdown(const StepProfile& profile, int cores, int busy) {
  const int own = std::max(1, profile.threads);
  const double filled = cores > own ? double(std::max(0, std::min(busy, cores) - own)) / double(cores - own) : 0.0;
  return 1.0 + (profile.busy_slowdown - 1.0) * filled;
}

}  // namespace

CoreSharing core_sharing(const StepProfile& profile, const Cluster& cluster, int replicas) {
  const int cores = cluster.cores_per_node;
  if (cores <= 0) return {1.0, 1.0};
  const int threads = threads_on_node(profile, cluster, replicas);
  if (threads <= cores) {
    const double f = neighbour_slowdown(profile, cores, threads);
    return {f, f};
  }
  // Fair: every thread gets cores / threads of a core, all cores busy throughout.
  const double fair = double(threads) / double(cores) * neighbour_slowdown(profile, cores, cores);
  // Placed: the threads stay on the cores they were dealt, floor(n / C) or one more per
  // core. All cores run floor(n / C) threads' work; then only the n mod C cores holding one
  // more thread run its work, their neighbours idle.
  const int fewer = threads / cores, crowded = threads % cores;
  const double placed = fewer * neighbour_slowdown(profile, cores, cores) +
                        (crowded > 0 ? neighbour_slowdown(profile, cores, crowded) : 0.0);
  return {fair, placed};
}

double compute_factor(const StepProfile& profile, const Cluster& cluster, int replicas) {
  const CoreSharing s = core_sharing(profile, cluster, replicas);
  return (s.fair + s.placed) / 2.0;
}

namespace {

Preset gpu_preset(const char* name, int per_node, Link intra, Link inter, const char* assumptions) {
  Preset p;
  p.cluster.name = name;
  p.cluster.replicas_per_node = per_node;
  p.cluster.intra = intra;
  p.cluster.inter = inter;
  p.assumptions = assumptions;
  return p;
}

}  // namespace

const std::vector<Preset>& presets() {
  static const std::vector<Preset> all = {
      gpu_preset("h200x8-nvlink-ib400", 8, {2e-6, 370e9}, {5e-6, 45e9},
                 "8 H200 per node on NVLink: 370 GB/s per ring link, the ring bus bandwidth nccl-tests report for "
                 "allreduce on 8xH200, and 2 us per ring step; one 400 Gb/s InfiniBand port per GPU between nodes, "
                 "45 GB/s (90% of the 50 GB/s line rate) and 5 us per hop"),
      // The machines of the published anchors for ResNet-50 (docs/scaling.md): DGX-1-class.
      gpu_preset("v100x8-nvlink-ib100", 8, {3e-6, 130e9}, {6e-6, 40e9},
                 "8 V100 per node on NVLink 2: 130 GB/s per ring link and 3 us per ring step (assumed, a DGX-1's "
                 "ring bus bandwidth); four 100 Gb/s EDR InfiniBand ports per node between nodes, about 40 GB/s of "
                 "ring bus bandwidth across 4 such nodes (NVIDIA's figure for DGX-1, nccl-tests issue 29), 6 us "
                 "per hop"),
  };
  return all;
}

const Cluster& preset(const std::string& name) {
  for (const Preset& p : presets())
    if (p.cluster.name == name) return p.cluster;
  std::string names;
  for (const Preset& p : presets()) names += (names.empty() ? "" : ", ") + p.cluster.name;
  fail("scaling model: no cluster preset '", name, "'; the presets are: ", names);
}

Preset cluster_from_flag(const std::string& text, const std::string& flag) {
  for (const Preset& p : presets())
    if (p.cluster.name == text) return p;
  if (text.find(',') == std::string::npos) preset(text);  // fails naming the presets
  std::vector<double> v;
  for (const std::string& part : data::split_commas(text)) {
    char* end = nullptr;
    const double x = std::strtod(part.c_str(), &end);
    DPCORE_CHECK(!part.empty() && *end == '\0' && x > 0 && std::isfinite(x), flag, " '", text, "': '", part,
                 "' is not a positive number");
    v.push_back(x);
  }
  DPCORE_CHECK((v.size() == 5 || v.size() == 6) && v[0] == std::floor(v[0]) && v.back() == std::floor(v.back()),
               flag, " '", text,
               "': expected a preset or G,A,B,a,b[,C] (whole replicas per node, then latency in us and bandwidth "
               "in GB/s inside a node and between nodes, and for CPU nodes their whole number of cores)");
  Preset p;
  p.cluster = {text, int(v[0]), {v[1] * 1e-6, v[2] * 1e9}, {v[3] * 1e-6, v[4] * 1e9}, v.size() == 6 ? int(v[5]) : 0};
  p.assumptions = "links as given: " + text;
  if (p.cluster.cores_per_node > 0)
    p.assumptions += " (CPU nodes of " + std::to_string(p.cluster.cores_per_node) + " cores shared by their replicas)";
  return p;
}

const char* algorithm_name(Algorithm a) {
  switch (a) {
    case Algorithm::Ring: return "ring";
    case Algorithm::Tree: return "tree";
    case Algorithm::Best: return "best";
  }
  return "?";
}

Algorithm parse_algorithm(const std::string& text, const std::string& flag) {
  for (Algorithm a : {Algorithm::Ring, Algorithm::Tree, Algorithm::Best})
    if (text == algorithm_name(a)) return a;
  fail(flag, " '", text, "': expected ring, tree or best");
}

const Link& slowest_link(const Cluster& cluster, int replicas) {
  return replicas <= cluster.replicas_per_node ? cluster.intra : cluster.inter;
}

double allreduce_seconds(double bytes, int replicas, const Cluster& cluster, Algorithm algorithm) {
  DPCORE_CHECK(replicas >= 1, "scaling model: ", replicas, " replicas; expected at least one");
  if (replicas == 1 || bytes <= 0) return 0.0;
  const Link& link = slowest_link(cluster, replicas);
  const double R = replicas;
  const double ring = 2.0 * (R - 1.0) * link.seconds(bytes / R);
  const double tree = 2.0 * (log2_ceil(replicas) * link.latency_s + bytes / link.bytes_per_s);
  switch (algorithm) {
    case Algorithm::Ring: return ring;
    case Algorithm::Tree: return tree;
    case Algorithm::Best: return std::min(ring, tree);
  }
  return ring;
}

int64_t StepProfile::total_param_bytes() const {
  return std::accumulate(param_bytes.begin(), param_bytes.end(), int64_t(0));
}

Prediction predict_ddp(const StepProfile& profile, const Buckets& buckets, int replicas, const Cluster& cluster,
                       Algorithm algorithm) {
  DPCORE_CHECK(profile.grad_ready_s.size() == profile.param_bytes.size(), "scaling model: ",
               profile.grad_ready_s.size(), " gradient ready times for ", profile.param_bytes.size(), " parameters");
  const double factor = compute_factor(profile, cluster, replicas);
  // One communication stream: bucket b starts when its last gradient is ready and bucket
  // b-1 is done.
  double stream_free = 0.0, all_buckets = 0.0;
  for (const auto& bucket : buckets) {
    double ready = 0.0, bytes = 0.0;
    for (size_t index : bucket) {
      DPCORE_CHECK(index < profile.param_bytes.size(), "scaling model: bucket parameter ", index, " of ",
                   profile.param_bytes.size());
      ready = std::max(ready, profile.grad_ready_s[index] * factor);
      bytes += double(profile.param_bytes[index]);
    }
    const double seconds = allreduce_seconds(bytes, replicas, cluster, algorithm);
    stream_free = std::max(stream_free, ready) + seconds;
    all_buckets += seconds;
  }
  const double buckets_exposed = overlap_possible(profile, cluster, replicas)
                                     ? std::max(0.0, stream_free - profile.backward_s * factor)
                                     : all_buckets;
  return predicted(profile, replicas, factor,
                   buckets_exposed + allreduce_seconds(kLossBytes, replicas, cluster, algorithm));
}

Prediction predict_dp(const StepProfile& profile, int replicas, const Cluster& cluster, Algorithm algorithm) {
  double exposed = 0.0;
  if (replicas > 1) {
    // The root copies R-1 shares out, then gathers R-1 outputs in and sends their
    // gradients back, one copy after another.
    const Link& link = slowest_link(cluster, replicas);
    const double copies = double(replicas - 1);
    exposed = copies * (link.seconds(double(profile.input_bytes)) + 2.0 * link.seconds(double(profile.output_bytes))) +
              allreduce_seconds(double(profile.total_param_bytes()), replicas, cluster, algorithm);
  }
  return predicted(profile, replicas, compute_factor(profile, cluster, replicas), exposed);
}

Prediction predict_local_sgd(const StepProfile& profile, int sync_every, int replicas, const Cluster& cluster,
                             Algorithm algorithm) {
  DPCORE_CHECK(sync_every >= 1, "scaling model: local SGD averaging every ", sync_every,
               " steps; expected at least 1");
  // Parameters and momentum: twice the parameter bytes, once every sync_every steps.
  const double exposed =
      allreduce_seconds(2.0 * double(profile.total_param_bytes()), replicas, cluster, algorithm) / sync_every;
  return predicted(profile, replicas, compute_factor(profile, cluster, replicas), exposed);
}

}  // namespace dpcore::train::scaling
