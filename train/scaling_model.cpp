// The step-time model of train/scaling_model.h.
#include "train/scaling_model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>

#include "engine/data/flag_text.h"
#include "kernels/error.h"

namespace dpcore::train::scaling {

namespace {

double log2_ceil(int n) { return n <= 1 ? 0.0 : std::ceil(std::log2(double(n))); }

Prediction finish(Prediction p, const StepProfile& profile, double one_replica_step_s) {
  p.compute_s = profile.forward_s + profile.backward_s + profile.optimizer_s;
  p.efficiency = p.step_s > 0 ? one_replica_step_s / p.step_s : 1.0;
  return p;
}

double single_replica_step(const StepProfile& profile) {
  return profile.forward_s + profile.backward_s + profile.optimizer_s;
}

}  // namespace

namespace {

Preset h200_nvlink_ib400() {
  Preset p;
  p.cluster.name = "h200x8-nvlink-ib400";
  p.cluster.replicas_per_node = 8;
  p.cluster.intra = {2e-6, 370e9};
  p.cluster.inter = {5e-6, 45e9};
  p.assumptions =
      "8 H200 per node on NVLink: 370 GB/s per ring link, the ring bus bandwidth nccl-tests report for "
      "allreduce on 8xH200, and 2 us per ring step; one 400 Gb/s InfiniBand port per GPU between nodes, "
      "45 GB/s (90% of the 50 GB/s line rate) and 5 us per hop";
  return p;
}

}  // namespace

const std::vector<Preset>& presets() {
  static const std::vector<Preset> all = {h200_nvlink_ib400()};
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
  DPCORE_CHECK(v.size() == 5 && v[0] == std::floor(v[0]), flag, " '", text,
               "': expected a preset or G,A,B,a,b (replicas per node, then latency in us and bandwidth in GB/s "
               "inside a node and between nodes)");
  Preset p;
  p.cluster = {text, int(v[0]), {v[1] * 1e-6, v[2] * 1e9}, {v[3] * 1e-6, v[4] * 1e9}};
  p.assumptions = "links as given: " + text;
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
  // One communication stream: bucket b starts when its last gradient is ready and bucket
  // b-1 is done.
  double stream_free = 0.0;
  for (const auto& bucket : buckets) {
    double ready = 0.0, bytes = 0.0;
    for (size_t index : bucket) {
      DPCORE_CHECK(index < profile.param_bytes.size(), "scaling model: bucket parameter ", index, " of ",
                   profile.param_bytes.size());
      ready = std::max(ready, profile.grad_ready_s[index]);
      bytes += double(profile.param_bytes[index]);
    }
    stream_free = std::max(stream_free, ready) + allreduce_seconds(bytes, replicas, cluster, algorithm);
  }
  Prediction p;
  p.replicas = replicas;
  p.exposed_comm_s = std::max(0.0, stream_free - profile.backward_s);
  p.step_s = single_replica_step(profile) + p.exposed_comm_s;
  return finish(p, profile, single_replica_step(profile));
}

Prediction predict_dp(const StepProfile& profile, int replicas, const Cluster& cluster, Algorithm algorithm) {
  Prediction p;
  p.replicas = replicas;
  if (replicas > 1) {
    // The root copies R-1 shares out, then gathers R-1 outputs in and sends their
    // gradients back, one copy after another.
    const Link& link = slowest_link(cluster, replicas);
    const double copies = double(replicas - 1);
    p.exposed_comm_s = copies * (link.seconds(double(profile.input_bytes)) +
                                 2.0 * link.seconds(double(profile.output_bytes))) +
                       allreduce_seconds(double(profile.total_param_bytes()), replicas, cluster, algorithm);
  }
  p.step_s = single_replica_step(profile) + p.exposed_comm_s;
  return finish(p, profile, single_replica_step(profile));
}

Prediction predict_local_sgd(const StepProfile& profile, int sync_every, int replicas, const Cluster& cluster,
                             Algorithm algorithm) {
  DPCORE_CHECK(sync_every >= 1, "scaling model: local SGD averaging every ", sync_every,
               " steps; expected at least 1");
  Prediction p;
  p.replicas = replicas;
  // Parameters and momentum: twice the parameter bytes, once every sync_every steps.
  p.exposed_comm_s =
      allreduce_seconds(2.0 * double(profile.total_param_bytes()), replicas, cluster, algorithm) / sync_every;
  p.step_s = single_replica_step(profile) + p.exposed_comm_s;
  return finish(p, profile, single_replica_step(profile));
}

}  // namespace dpcore::train::scaling
