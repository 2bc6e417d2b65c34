// The Explanation of a step as plain text (train/observe/explain.h): every number printed here is
// a field of the Explanation, which explain_step read from the runner.
#include <algorithm>
#include <iomanip>
#include <numeric>
#include <sstream>

#include "train/observe/explain.h"
#include "train/step/split.h"

namespace dpcore::train {

namespace {

// 1605696 -> "1,605,696": byte counts of a real model are long.
std::string count(int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return (v < 0 ? "-" : "") + out;
}
std::string bytes(int64_t b) { return count(b) + " B"; }
std::string number(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}
std::string range(int64_t begin, int64_t end) { return "[" + count(begin) + ", " + count(end) + ")"; }

std::string joined(const std::vector<std::string>& items, const std::string& sep = ", ") {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : sep) + s;
  return out;
}

// Why the shares are what they are, for micro-batch 1.
void explain_split(std::ostream& os, const Explanation& e) {
  const int64_t n = e.micro.front();
  const int R = e.replicas;
  if (e.split == "even" && !e.tokens.empty()) {
    os << "   --split even, by tokens (a text batch): contiguous runs of the batch chosen so that the replica with "
          "the most tokens (the texts' lengths before padding) has as few as possible\n";
    return;
  }
  if (e.split == "even") {
    os << "   --split even (torch.chunk): every replica gets ceil(" << n << "/" << R << ") = " << (n + R - 1) / R
       << " samples until the batch runs out\n";
    return;
  }
  const double total = std::accumulate(e.weights.begin(), e.weights.end(), 0.0);
  std::vector<std::string> weights, quotas;
  for (double w : e.weights) {
    weights.push_back(number(w));
    std::ostringstream q;
    q << std::fixed << std::setprecision(2) << double(n) * w / total;
    quotas.push_back(q.str());
  }
  os << "   --split " << e.split << ": shares proportional to the weights " << joined(weights, ":");
  if (e.split == "adaptive") {
    os << " (equal until measured: every " << Splitter::kInterval
       << " steps they become the replicas' smoothed samples/s)";
  }
  os << ", i.e. " << n << " x w/" << number(total) << " = " << joined(quotas)
     << "; whole samples, the leftovers to the largest remainders\n";
}

void explain_shares(std::ostream& os, const Explanation& e) {
  int64_t begin = 0;
  for (size_t m = 0; m < e.shares.size(); ++m) {
    os << "     micro-batch " << m + 1 << " (" << e.micro[m] << "):";
    int64_t row = begin;
    for (size_t r = 0; r < e.shares[m].size(); ++r) {
      os << (r ? "," : "") << " replica " << r << " rows " << range(row, row + e.shares[m][r]);
      if (!e.tokens.empty()) os << " (" << e.tokens[m][r] << " tokens)";
      row += e.shares[m][r];
    }
    os << "\n";
    begin += e.micro[m];
  }
}

// "1 micro-batch", "2 micro-batches".
std::string plural(int64_t n, const std::string& one, const std::string& many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

// Move 2 is a micro-batch: "2. " for the only one, "2.1 ", "2.2 ", ... for several.
std::string micro_move(const Explanation& e, size_t m) {
  return e.shares.size() == 1 ? "2. " : "2." + std::to_string(m + 1) + " ";
}

// The copy of each replica's rows from the host batch: what `scatter` moves.
void explain_scatter(std::ostream& os, const Explanation& e, size_t m) {
  for (size_t r = 0; r < e.shares[m].size(); ++r) {
    const int64_t rows = e.shares[m][r];
    os << "     replica " << r << ": " << rows << " x (" << bytes(e.image_bytes) << " + " << bytes(e.label_bytes)
       << ") = " << bytes(rows * (e.image_bytes + e.label_bytes)) << "\n";
  }
}

void explain_ring(std::ostream& os, const Explanation& e, const std::string& what) {
  const int R = e.replicas;
  const int64_t elements = e.ring_end - e.ring_begin;
  if (R == 1) {
    os << "   one replica: the allreduce has nothing to exchange\n";
    return;
  }
  if (e.ring.empty()) {
    os << "   --backend " << e.backend << ": the allreduce is the library's own, which chooses its algorithm "
       << "(--backend local shows dpcore's ring here)\n";
    return;
  }
  const int64_t largest = (elements + R - 1) / R;
  os << "   the ring for " << what << ": elements " << range(e.ring_begin, e.ring_end) << " cut into " << R
     << " chunks; at each step every rank r sends one chunk to rank r+1 (mod " << R << "):\n";
  for (const RingStep& step : e.ring) {
    os << "     " << (step.reduce ? "reduce-scatter" : "allgather     ") << " step " << step.step + 1 << ":";
    for (const RingTransfer& t : step.transfers) {
      os << "  " << t.from << "->" << t.to << " chunk " << t.chunk << " " << range(t.begin, t.end);
    }
    os << "\n";
  }
  os << "   reduce-scatter: the receiver adds the chunk into its own copy, so after " << plural(R - 1, "step", "steps")
     << " rank r holds chunk r summed over all ranks, added in ring order (the same on every rank: all end "
        "bit-identical);\n   allgather: the receiver copies the complete chunk. Each rank sends "
     << plural(2 * (R - 1), "chunk", "chunks") << " of at most "
     << bytes(largest * (e.wire_dtype.empty() ? int64_t(sizeof(float)) : e.wire_bytes / e.param_elements))
     << ": 2(R-1)/R of the buffer\n";
}

void explain_optimizer(std::ostream& os, const Explanation& e, int move, const std::string& who) {
  if (e.optimizer != "sgd") {
    const AdamConfig& a = e.adam;
    os << move << ". " << (a.decoupled ? "AdamW" : "Adam") << " step" << who
       << ": one fused launch over the flat buffers (" << count(e.param_elements) << " elements, " << e.param_tensors
       << " tensors): parameters " << bytes(e.param_bytes) << ", gradients " << bytes(e.grad_bytes) << ", exp_avg "
       << bytes(e.param_bytes) << ", exp_avg_sq " << bytes(e.param_bytes) << "\n   lr " << number(a.lr) << ", betas "
       << number(a.beta1) << "," << number(a.beta2) << ", eps " << number(a.eps) << ", weight decay "
       << number(a.weight_decay) << (a.decoupled ? " (decoupled)" : " (L2)") << "; the optimizer has now taken "
       << e.sgd_steps << " step" << (e.sgd_steps == 1 ? "" : "s") << "\n";
    return;
  }
  const SgdConfig& s = e.sgd;
  os << move << ". SGD step" << who << ": one fused launch over the flat buffers (" << count(e.param_elements)
     << " elements, " << e.param_tensors << " tensors): parameters " << bytes(e.param_bytes) << ", gradients "
     << bytes(e.grad_bytes) << ", momentum " << (e.momentum_bytes ? bytes(e.momentum_bytes) : "none") << "\n   lr "
     << number(s.lr) << ", momentum " << number(s.momentum) << ", dampening " << number(s.dampening)
     << ", weight decay " << number(s.weight_decay) << (s.nesterov ? ", nesterov" : "")
     << "; the optimizer has now taken " << e.sgd_steps << " step" << (e.sgd_steps == 1 ? "" : "s") << "\n";
}

bool per_token(const Explanation& e) { return e.labels_per_sample > 1; }

// The backward's seed: "1/N = 1/64 = 0.015625", or per-token "1/M = 1/57 = 0.0175439".
std::string seed_text(const Explanation& e) {
  return (per_token(e) ? "1/M = 1/" + std::to_string(e.targets) : "1/N = 1/" + std::to_string(e.batch)) + " = " +
         number(e.seed);
}

// What the seed divides by, for the runners that share the batch.
const char* seed_denominator(const Explanation& e) {
  return per_token(e) ? "M the global batch's counted targets, its per-token labels that are not -100"
                      : "N the global batch";
}

void explain_loss(std::ostream& os, const Explanation& e) {
  os << "   the loss of step 1: " << number(e.loss) << " (the mean over the ";
  if (per_token(e)) os << "M = " << e.targets << " counted targets)\n";
  else os << e.batch << " samples)\n";
}

void explain_single(std::ostream& os, const Explanation& e) {
  os << "explain: step 1 of this run on one device (" << e.devices.front() << ")\n";
  os << "1. copy the batch to " << e.devices.front() << ": " << e.batch << " x (" << bytes(e.image_bytes) << " + "
     << bytes(e.label_bytes) << ") = " << bytes(e.batch * (e.image_bytes + e.label_bytes)) << "\n";
  std::vector<std::string> micro;
  for (int64_t m : e.micro) micro.push_back(std::to_string(m));
  os << "2. zero the gradient buffer (" << bytes(e.grad_bytes) << ", one fill)\n";
  for (const Explanation::StageCopy& c : e.stage_copies) {
    os << "   and the copy on " << c.device << ": its gradients zeroed, its stages' parameters (" << bytes(c.parameter_bytes)
       << ")";
    if (c.buffer_bytes > 0) os << " and running statistics (" << bytes(c.buffer_bytes) << ")";
    os << " copied from " << e.devices.front() << "\n";
  }
  os << "3. " << plural(int64_t(e.micro.size()), "micro-batch", "micro-batches") << " of " << joined(micro)
     << " samples, each: forward, cross-entropy summed over its samples, backward seeded with " << seed_text(e)
     << "; the gradients add up in the flat buffer to the mean over all " << (per_token(e) ? "M" : "N") << "\n";
  explain_loss(os, e);
  explain_optimizer(os, e, 4, "");
}

void explain_pipeline(std::ostream& os, const Explanation& e) {
  const int stages = int(e.stages.size());
  const bool replicated = e.replicas > 1;
  os << "explain: step 1 of this run as a pipeline (" << e.schedule << ") of " << stages;
  if (e.stage_processes) {
    os << " stages, each a process of this mpirun job on " << e.devices.front() << " (" << stages * e.replicas
       << " processes: rank r is stage r mod " << stages << " of replica r / " << stages
       << "), each holding the whole model and computing its stage's layers";
    if (replicated) os << ", x " << e.replicas << " replicas";
  } else if (e.stage_gpus) {
    os << " stages, each a thread of this process queueing its GPU's work on a stream of its own, the model whole on "
       << e.devices.front();
    if (!e.stage_copies.empty()) os << ", the stages on other GPUs running on a copy of it there";
  } else {
    os << " stages, each a thread of this process on cores of its CPU team, the model whole on " << e.devices.front();
    if (replicated)
      os << ", x " << e.replicas << " replicas (each its own pipeline of " << stages << " threads, its own copy of the model)";
  }
  os << "\n";
  for (int s = 0; s < stages; ++s) os << "   stage " << s << ": " << e.stages[s] << "\n";
  if (replicated) {
    os << "0. the batch cut as ddp with --accum " << e.shares.size()
       << " cuts it: into micro-batches, each shared among the replicas (--split " << e.split << "):\n";
    explain_shares(os, e);
    os << "   what follows is replica 0's pipeline; every replica runs its own the same way\n";
    if (e.sync_batch_norm)
      os << "   --batchnorm sync: in each forward a stage's batch norms allgather their statistics (count, mean, "
            "variance per channel) among the replicas' same stage, and in each backward sum their two gradient sums "
            "there, so they normalise with the whole micro-batch\n";
  }
  os << "1. copy the batch to " << e.devices.front() << ": " << e.batch << " x (" << bytes(e.image_bytes) << " + "
     << bytes(e.label_bytes) << ") = " << bytes(e.batch * (e.image_bytes + e.label_bytes)) << "\n";
  os << "2. zero the gradient buffer (" << bytes(e.grad_bytes) << ", one fill)\n";
  for (const Explanation::StageCopy& c : e.stage_copies) {
    os << "   and the copy on " << c.device << ": its gradients zeroed, its stages' parameters (" << bytes(c.parameter_bytes)
       << ")";
    if (c.buffer_bytes > 0) os << " and running statistics (" << bytes(c.buffer_bytes) << ")";
    os << " copied from " << e.devices.front() << "\n";
  }
  // The micro-batches this pipeline ran: with replicas, replica 0's non-empty pieces.
  std::vector<int64_t> rows = e.micro;
  if (replicated) {
    rows.clear();
    for (const std::vector<int64_t>& pieces : e.shares)
      if (pieces.front() > 0) rows.push_back(pieces.front());
  }
  std::vector<std::string> micro;
  for (int64_t m : rows) micro.push_back(std::to_string(m));
  os << "3. " << plural(int64_t(rows.size()), "micro-batch", "micro-batches") << " of " << joined(micro)
     << " samples; each stage runs its forwards (F) and backwards (B) in " << e.schedule
     << "'s order, each as soon as its input has come:\n";
  std::istringstream ticks(e.ticks);
  for (std::string line; std::getline(ticks, line);) os << "   " << line << "\n";
  for (int s = 0; s + 1 < stages; ++s) {
    const DType dtype = e.boundary_dtypes[size_t(s)];
    const int64_t per_sample = e.boundary_elements[s] * int64_t(dtype_size(dtype));
    os << "   stage " << s << " -> " << s + 1 << ": each micro-batch's activations, " << count(e.boundary_elements[s])
       << " " << dtype_name(dtype) << " values a sample (" << bytes(per_sample) << "; " << bytes(per_sample * rows.front())
       << " for the first micro-batch) by send/recv; their gradient comes back by the same size\n";
  }
  os << "   measured in this step, micro-batches of activations held at once:";
  for (int s = 0; s < stages; ++s) os << (s ? ", " : " ") << "stage " << s << " " << e.peak_live[s];
  if (!e.stage_peak_bytes.empty()) {
    os << "\n   measured in this step, the most bytes of tensors each stage held at once:";
    for (int s = 0; s < stages; ++s)
      os << (s ? ", " : " ") << "stage " << s << " " << bytes(int64_t(e.stage_peak_bytes[size_t(s)]));
  }
  if (!e.stage_cores.empty()) {
    os << "\n   measured in this step, where each stage's kernels ran:";
    for (int s = 0; s < stages; ++s) os << (s ? "; " : " ") << "stage " << s << " on " << e.stage_cores[size_t(s)];
  }
  os << "\n   each backward seeded with " << seed_text(e) << "; the gradients add up in the flat buffer to the mean over all "
     << (per_token(e) ? "M" : "N");
  if (!replicated) {
    os << ", as one device's --accum " << e.micro.size() << " adds them\n";
    for (const Explanation::StageCopy& c : e.stage_copies) {
      os << "   then the copy on " << c.device << " hands back its stages' gradients (" << bytes(c.parameter_bytes) << ")";
      if (c.buffer_bytes > 0) os << " and running statistics (" << bytes(c.buffer_bytes) << ")";
      os << " to " << e.devices.front() << ", into the flat buffers the optimizer steps\n";
    }
  } else {
    os << " once summed over the replicas:\n";
    for (int s = 0; s < stages; ++s) {
      const auto [begin, end] = e.stage_ranges[size_t(s)];
      os << "   stage " << s << ", after its last backward: allreduce (sum) of its gradients, elements " << begin << "-"
         << end << " of the flat buffer (" << bytes((end - begin) * e.dtype_bytes) << "), among the " << e.replicas
         << " replicas' stage " << s << " (a group of their own), while the stages below may still be draining\n";
    }
  }
  explain_loss(os, e);
  explain_optimizer(os, e, 4, "");
}

void explain_header(std::ostream& os, const Explanation& e, const char* mode) {
  os << "explain: step 1 of this run, move by move: " << mode << ", " << e.replicas << " replicas, --backend "
     << e.backend << "\n";
  std::vector<std::string> devices;
  for (size_t r = 0; r < e.devices.size(); ++r) devices.push_back(std::to_string(e.ranks[r]) + " on " + e.devices[r]);
  os << "   replicas here: " << joined(devices) << "\n";
  if (e.ranks.size() < size_t(e.replicas)) {
    const int others = e.replicas - int(e.ranks.size());
    os << "   (rank " << e.ranks.front() << " prints this; the other "
       << (others == 1
               ? "process runs the same moves on its own share and prints nothing)\n"
               : std::to_string(others) + " processes run the same moves on their own shares and print nothing)\n");
  }
  os << "   the batch: N = " << e.batch << " samples of " << bytes(e.image_bytes)
     << (e.token_ids ? " (int64 token ids, padded to the batch's longest text) + " : " (float32 pixels) + ")
     << bytes(e.label_bytes) << (per_token(e) ? " (int64 per-token labels)" : " (int64 label)") << ", cut into "
     << plural(int64_t(e.micro.size()), "micro-batch", "micro-batches") << ", each shared among the replicas:\n";
  explain_split(os, e);
  explain_shares(os, e);
  // replicate() copies the root model to the other replicas of this process; the
  // processes of an mpi job each built their own.
  const int64_t copies = int64_t(e.ranks.size()) - 1;
  os << "0. before step 1, once: ";
  if (copies > 0) {
    os << "replicate the model to the other " << plural(copies, "replica", "replicas") << " here (a copy of its "
       << bytes(e.param_bytes) << " parameter buffer each), ";
  }
  if (e.ranks.size() < size_t(e.replicas)) os << "every process built its own model, ";
  os << "then broadcast rank 0's parameters (" << bytes(e.param_bytes) << ")"
     << (e.momentum_bytes ? " and momentum (" + bytes(e.momentum_bytes) + ")" : "")
     << (e.buffer_bytes ? " and buffers (" + bytes(e.buffer_bytes) + ")" : "")
     << " to every replica;\n   never again: the same summed gradients and the same SGD step keep them equal\n";
  os << "1. ";
  if (e.buffer_bytes) {
    os << "broadcast rank 0's batch-norm running statistics (" << bytes(e.buffer_bytes) << ", DDP's broadcast_buffers)"
       << (e.sync_batch_norm ? "; --batchnorm sync: each batch norm also allgathers its statistics in forward" : "")
       << "; ";
  }
  os << "zero_grad on every replica (" << bytes(e.grad_bytes) << " each, one fill)\n";
}

void explain_dp(std::ostream& os, const Explanation& e) {
  explain_header(os, e, "--mode dp (nn.DataParallel made explicit)");
  // Per token, a row's logits are [T, classes].
  const int64_t logit_bytes = e.labels_per_sample * e.classes * int64_t(sizeof(float));
  const std::string row_shape = (per_token(e) ? std::to_string(e.labels_per_sample) + ", " : "") +
                                std::to_string(e.classes);
  for (size_t m = 0; m < e.shares.size(); ++m) {
    os << micro_move(e, m) << "micro-batch " << m + 1 << " of " << e.shares.size() << " (" << e.micro[m]
       << " samples):\n";
    os << "   scatter: the main thread copies each replica's rows to its device:\n";
    explain_scatter(os, e, m);
    os << "   parallel_apply forward: every replica on its own thread -> its logits [rows, " << row_shape << "]\n";
    os << "   gather: the logits into one [" << e.micro[m] << ", " << row_shape << "] tensor on the root ("
       << e.devices.front() << "):";
    for (size_t r = 0; r < e.shares[m].size(); ++r) os << (r ? " +" : "") << " " << bytes(e.shares[m][r] * logit_bytes);
    os << "; the micro-batch's labels too (" << bytes(e.micro[m] * e.label_bytes) << ")\n";
    os << "   loss on the root: cross-entropy summed over the " << e.micro[m] << " rows; backward seeded with "
       << seed_text(e) << " (" << seed_denominator(e) << ": the shares' gradients add up to the mean)\n";
    os << "   scatter the loss gradient [" << e.micro[m] << ", " << row_shape << "] back:";
    for (size_t r = 0; r < e.shares[m].size(); ++r) os << (r ? " +" : "") << " " << bytes(e.shares[m][r] * logit_bytes);
    os << "\n   parallel_apply backward: every replica from its rows of that gradient, into its flat gradient buffer\n";
  }
  if (e.wire_dtype.empty()) {
    os << "3. reduce: every replica allreduces (SUM) its whole gradient buffer, " << bytes(e.grad_bytes)
       << ", in one collective after the last backward (nothing overlaps)\n";
  } else {
    os << "3. reduce: every replica rounds its whole gradient buffer into its " << e.wire_dtype << " copy ("
       << bytes(e.wire_bytes) << ", --grad-dtype), allreduces (SUM) that in one collective after the last backward\n"
       << "   (nothing overlaps; each step's partial sum rounded to " << e.wire_dtype
       << "), then widens it back into the float32 gradients (one cast)\n";
  }
  explain_ring(os, e, "the gradient buffer");
  explain_optimizer(os, e, 4, " on every replica, the same");
  explain_loss(os, e);
}

void explain_ddp(std::ostream& os, const Explanation& e) {
  explain_header(os, e, "--mode ddp (DistributedDataParallel)");
  for (size_t m = 0; m < e.shares.size(); ++m) {
    const bool last = m + 1 == e.shares.size();
    os << micro_move(e, m) << "micro-batch " << m + 1 << " of " << e.shares.size() << " (" << e.micro[m]
       << " samples), hooks " << (last ? "armed: this backward communicates" : "disarmed: no communication") << "\n";
    os << "   each replica copies its own rows of the host batch to its device (no scatter from a root, no gather):\n";
    explain_scatter(os, e, m);
    os << "   each replica: forward, cross-entropy summed over its rows, backward seeded with " << seed_text(e)
       << "\n   (the global " << (per_token(e) ? "M" : "N")
       << ", not the share's: the SUM allreduce then gives the exact mean)\n";
  }
  const int64_t cap_mib = e.cap_bytes >> 20;
  os << "3. buckets: the gradient buffer cut in reverse parameter order (the order backward finalises them), the first "
        "up to "
     << bytes(e.first_cap_bytes) << ", the others up to "
     << (cap_mib > 0 && cap_mib << 20 == e.cap_bytes ? count(cap_mib) + " MiB" : bytes(e.cap_bytes))
     << " (--bucket-mb); "
     << (e.wire_dtype.empty()
             ? "each a slice of the buffer, allreduced in place:\n"
             : "each a slice of the buffer, rounded into the same slice of its " + e.wire_dtype + " copy (" +
                   bytes(e.wire_bytes) + ", --grad-dtype) and allreduced there, each step's partial sum rounded to " +
                   e.wire_dtype + "; after the last, one cast widens the copy back into the float32 gradients:\n");
  for (size_t b = 0; b < e.buckets.size(); ++b) {
    const ExplainedBucket& k = e.buckets[b];
    os << "     bucket " << b << ": " << bytes(k.bytes) << ", elements " << range(k.begin, k.end) << ": "
       << joined(k.params) << "\n";
  }
  std::vector<size_t> ready;
  for (size_t b = 0; b < e.buckets.size(); ++b) {
    if (e.buckets[b].ready_after > 0) ready.push_back(b);
  }
  std::sort(ready.begin(), ready.end(),
            [&e](size_t a, size_t b) { return e.buckets[a].ready_after < e.buckets[b].ready_after; });
  os << "   ready in the last backward on replica " << e.ranks.front() << ", as its " << e.param_tensors
     << " gradients became final:";
  for (size_t b : ready) {
    os << (b == ready.front() ? " " : ", ") << "bucket " << b << " after " << e.buckets[b].ready_after;
  }
  // (No backward armed on this replica: no samples, or --inject writing its gradients.)
  if (ready.size() < e.buckets.size()) {
    os << (ready.empty() ? " none" : "") << " (the rest launched by finish(), after backward)";
  }
  os << "\n4. allreduce (SUM) of each bucket on the communication thread as soon as it is ready, strictly in bucket "
        "order,\n   while backward goes on with earlier layers; after backward, finish() waits for the rest\n";
  explain_ring(os, e, "bucket 0");
  explain_optimizer(os, e, 5, " on every replica, the same");
  os << "6. allreduce of the loss (" << bytes(int64_t(sizeof(float))) << ")"
     << (e.split == "adaptive" ? " and allgather of the replicas' compute seconds (--split adaptive)" : "") << "\n";
  explain_loss(os, e);
}

}  // namespace

std::string render(const Explanation& e) {
  std::ostringstream os;
  switch (e.kind) {
    case Explanation::Kind::SingleDevice:
      explain_single(os, e);
      break;
    case Explanation::Kind::DataParallel:
      explain_dp(os, e);
      break;
    case Explanation::Kind::Distributed:
      explain_ddp(os, e);
      break;
    case Explanation::Kind::Pipeline:
      explain_pipeline(os, e);
      break;
  }
  return os.str();
}

}  // namespace dpcore::train
