// A step-time model for data parallelism: how long one training step would take on R
// replicas of a cluster, from what one replica's step costs (a measured profile) and an
// alpha-beta model of the links (issue 13, docs/scaling.md once it is checked against
// measurement).
//
// A message of n bytes over a link costs alpha + n / bandwidth. The allreduce algorithms:
//   ring  2(R-1) steps, each moving n/R bytes over every link of the ring at once, so the
//         slowest link in the ring sets the pace: 2(R-1) * (alpha + n / (R * bandwidth));
//   tree  a reduce up and a broadcast down a binary tree of depth ceil(log2 R), pipelined
//         in chunks, so each direction costs depth * alpha plus one pass of n over the
//         slowest link: 2 * (depth * alpha + n / bandwidth).
// The ring moves a little less per link (2n(R-1)/R against 2n) but pays 2(R-1) latencies
// against the tree's 2 log2 R: it wins on large messages over few replicas, the tree on
// small messages and at large R (as NCCL picks them). With more than one node the
// slowest link is the inter-node one (one network port per replica, as on 8-GPU servers
// with one NIC per GPU).
//
// The step of each strategy, for R replicas each on its own share (the per-replica batch
// fixed, so the global batch grows with R: weak scaling):
//   ddp     forward + backward + the exposed part of the bucketed allreduce + optimizer.
//           Bucket b's allreduce starts when its last gradient is ready (the profile's
//           ready times) and the previous bucket's allreduce has ended (one communication
//           stream, buckets in order, as in train/runners/ddp.h); what runs past the end of
//           backward is exposed.
//   dp      scatter (the root copies every other replica's share), forward, gather of the
//           outputs to the root and their gradient back, backward, one allreduce of the
//           whole gradient buffer after backward (nothing hidden), optimizer
//           (train/runners/data_parallel.h).
//   local:K forward + backward + optimizer every step, and every K steps one allreduce of
//           the parameters and the momentum (2x the parameter bytes), spread over the K.
// Scaling efficiency at R = step(1) / step(R).
//
// CPU nodes (Cluster::cores_per_node > 0) differ from GPU nodes in two ways the model
// keeps, both checked against measured steps in docs/scaling.md:
//   - the replicas share the node's cores, and computing side by side they slow each other
//     (shared caches and memory bandwidth, the runner's threads and scatter: the profile's
//     measured busy slowdown, in proportion to the cores kept busy). With n T kernel
//     threads on C < n T cores the step lies between two bounds (core_sharing): "fair",
//     each thread C / (n T) of a core throughout, and "placed", the threads staying on the
//     cores they were dealt, so that where n T is not a multiple of C the cores holding
//     one thread more finish last while the others idle. Linux does not move a running
//     thread to even out one extra thread per core, and pulls a waiting one over to an idle
//     core only now and then; the model takes the middle of the two;
//   - the communication runs on the same cores: once the replicas' threads fill them there
//     is no idle core to run it beside the compute, so DDP's overlap hides nothing and the
//     whole allreduce time adds to the step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dpcore::train::scaling {

struct Link {
  double latency_s = 0;        // alpha
  double bytes_per_s = 0;      // 1 / beta
  double seconds(double bytes) const { return latency_s + bytes / bytes_per_s; }
};

struct Cluster {
  std::string name;
  int replicas_per_node = 1;
  Link intra;  // between replicas of one node
  Link inter;  // between nodes (per replica)
  int cores_per_node = 0;  // a CPU node's cores, shared by its replicas; 0: a processor per replica (GPUs)
};

// The named presets, each with the assumptions behind its numbers (presets()[i].name).
struct Preset {
  Cluster cluster;
  std::string assumptions;
};
const std::vector<Preset>& presets();
// The preset called `name`; an Error naming it and listing the presets when there is none.
const Cluster& preset(const std::string& name);
// A preset's name, or "G,A,B,a,b[,C]": G replicas per node, A us and B GB/s per link
// inside a node, a us and b GB/s between nodes (measured links: fitted from comm_bench),
// and for CPU nodes C, the cores the node's replicas share. An Error naming `flag` and the
// text when it is neither.
Preset cluster_from_flag(const std::string& text, const std::string& flag);

// Best: whichever of ring and tree is faster for each allreduce (NCCL's tuner chooses by
// message size and rank count in the same spirit).
enum class Algorithm { Ring, Tree, Best };
const char* algorithm_name(Algorithm a);
// "ring", "tree" or "best"; an Error naming `flag` and the text otherwise.
Algorithm parse_algorithm(const std::string& text, const std::string& flag);

// The slowest link a collective over `replicas` crosses: intra-node while they fit in one node.
const Link& slowest_link(const Cluster& cluster, int replicas);
// Seconds of one allreduce of `bytes` over `replicas` (0 for one replica or no bytes).
double allreduce_seconds(double bytes, int replicas, const Cluster& cluster, Algorithm algorithm);

// One replica's step, measured at the per-replica batch.
struct StepProfile {
  double forward_s = 0, backward_s = 0, optimizer_s = 0;
  std::vector<int64_t> param_bytes;   // per parameter tensor, in flat-buffer order
  std::vector<double> grad_ready_s;   // per parameter: when its gradient is final, seconds after backward began
  int64_t input_bytes = 0;            // one replica's share of the batch (scatter)
  int64_t output_bytes = 0;           // one replica's outputs (gather; their gradient comes back)
  int threads = 1;                    // CPU kernel threads of one replica
  // How much slower one replica's step runs while copies of it keep every core of its CPU
  // node busy (measure_busy_slowdown); 1 where not measured, as on a GPU.
  double busy_slowdown = 1.0;
  int64_t total_param_bytes() const;
};

// The compute of one step on R replicas of the cluster, as a multiple of the profile's,
// under the two bounds of a CPU node's core sharing (above); both 1 on GPU nodes, and
// equal while the threads fit the cores or fill them evenly.
struct CoreSharing {
  double fair = 1.0;    // every thread an equal share of the cores throughout
  double placed = 1.0;  // threads kept on the cores they were dealt
};
CoreSharing core_sharing(const StepProfile& profile, const Cluster& cluster, int replicas);

// What the model uses: the middle of core_sharing's two bounds.
double compute_factor(const StepProfile& profile, const Cluster& cluster, int replicas);

// DDP's buckets as parameter indices in launch order (train/runners/ddp.h make_buckets).
using Buckets = std::vector<std::vector<size_t>>;

struct Prediction {
  int replicas = 1;
  double step_s = 0;          // one optimizer step
  double compute_s = 0;       // forward + backward + optimizer (the same on every replica)
  double exposed_comm_s = 0;  // communication not hidden behind compute
  double efficiency = 1;      // step(1) / step(R)
};

Prediction predict_ddp(const StepProfile& profile, const Buckets& buckets, int replicas, const Cluster& cluster,
                       Algorithm algorithm);
Prediction predict_dp(const StepProfile& profile, int replicas, const Cluster& cluster, Algorithm algorithm);
Prediction predict_local_sgd(const StepProfile& profile, int sync_every, int replicas, const Cluster& cluster,
                             Algorithm algorithm);

}  // namespace dpcore::train::scaling
