// The local backend: replicas are threads of this process, each with its own
// LocalCommunicator and communication thread; the threads meet at one Rendezvous and run
// the ring algorithms of comm/ring.h over each other's buffers. Reductions use the
// Backend kernels of the replica's device, so CPU replicas, several CUDA replicas on one
// GPU and replicas on different GPUs all work, with a fixed reduction order: every
// replica ends bit-identical.
//
// Point to point goes through the Rendezvous' mailbox: a send posts a copy of its payload
// (made on its own stream, with an event the receiver's stream waits for) and is done; a
// recv takes the message, checks that it fits and copies it out. split() meets the whole
// group once to learn every replica's color and key, and the members of each new group
// share a new Rendezvous, with a LocalCommunicator (and communication thread) each.
#include <algorithm>
#include <sstream>

#include "comm/checks.h"
#include "comm/collective_span.h"
#include "comm/comm_thread.h"
#include "comm/communicator.h"
#include "comm/rendezvous.h"
#include "comm/ring.h"
#include "engine/backend.h"
#include "engine/trace.h"

namespace dpcore::comm {
namespace {

template <class... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}

Tensor flat(const Tensor& t) { return t.view({t.numel()}); }

// "allreduce (sum) of 1000 float32": compared across replicas to catch mismatched calls.
std::string describe(const char* what, const Tensor& t, const std::string& detail) {
  return concat(what, detail, " of ", t.numel(), " ", dtype_name(t.dtype()));
}
std::string with_op(ReduceOp reduce) { return concat(" (", reduce_op_name(reduce), ")"); }

class LocalCommunicator : public Communicator {
 public:
  // `lane` names the communication thread's lane in a trace, `lane_index` places it.
  // `thread_start`, if given, runs on the communication thread first (LocalOptions).
  LocalCommunicator(std::shared_ptr<Rendezvous> rendezvous, int rank, std::string lane, int lane_index,
                    const std::function<void(int)>& thread_start = {})
      : rendezvous_(std::move(rendezvous)), rank_(rank), lane_(std::move(lane)), lane_index_(lane_index) {
    thread_.run([this, &thread_start] {
      trace::set_lane(lane_, lane_index_);
      if (thread_start) thread_start(rank_);
    });
  }
  // A replica that goes away must not leave the others waiting for it until the timeout.
  // After a completed collective the group is idle and aborting it harms nobody.
  ~LocalCommunicator() override {
    rendezvous_->abort(concat("local group: the communicator of replica ", rank_, " was destroyed"));
  }

  int rank() const override { return rank_; }
  int size() const override { return rendezvous_->size(); }
  std::string backend() const override { return "local"; }

  Work allreduce(Tensor& tensor, ReduceOp reduce) override {
    Tensor t = tensor;
    return submit("allreduce", t, [=](const std::string& op) {
      check_reducible(op, t, reduce, false);
      ring::Peer peer = start(op, t.device(), describe("allreduce", t, with_op(reduce)));
      std::vector<Tensor> chunks = ring::split(flat(t), size());
      ring::reduce_scatter(peer, chunks, /*in_place=*/true, chunks[size_t(rank_)]);
      average(chunks[size_t(rank_)], reduce);
      ring::allgather(peer, chunks);
      finish(peer);
    });
  }

  // Every replica copies the root's buffer directly: one step, nothing to reduce.
  Work broadcast(Tensor& tensor, int root) override {
    Tensor t = tensor;
    return submit("broadcast", t, [=](const std::string& op) {
      check_defined(op, "input", t);
      check_root(op, root, size());
      ring::Peer peer = start(op, t.device(), describe("broadcast", t, concat(" from replica ", root)));
      std::vector<Slot> slots = peer.meet(Slot{flat(t), ""});
      if (rank_ != root) flat(t).copy_(slots[size_t(root)].tensor);
      finish(peer);
    });
  }

  // The reduce-scatter of allreduce into scratch (so that only the root's tensor changes),
  // then the root collects the owners' chunks: bit-identical to allreduce's result.
  Work reduce(Tensor& tensor, int root, ReduceOp reduce) override {
    Tensor t = tensor;
    return submit("reduce", t, [=](const std::string& op) {
      check_reducible(op, t, reduce, false);
      check_root(op, root, size());
      ring::Peer peer = start(op, t.device(), describe("reduce", t, concat(with_op(reduce), " to replica ", root)));
      std::vector<Tensor> chunks = ring::split(flat(t), size());
      Tensor owned = workspace_.get(ring::Workspace::kResult, chunks[size_t(rank_)].numel(), t.dtype(), t.device());
      ring::reduce_scatter(peer, chunks, /*in_place=*/false, owned);
      average(owned, reduce);
      std::vector<Slot> slots = peer.meet(Slot{owned, ""});
      if (rank_ == root) {
        for (size_t c = 0; c < chunks.size(); ++c) chunks[c].copy_(slots[c].tensor);
      }
      finish(peer);
    });
  }

  Work allgather(const Tensor& input, Tensor& output) override {
    Tensor in = input, out = output;
    return submit("allgather", in, [=](const std::string& op) {
      check_allgather_args(op, in, out, size());
      ring::Peer peer = start(op, in.device(), describe("allgather", in, ""));
      std::vector<Tensor> chunks = ring::split(flat(out), size());
      chunks[size_t(rank_)].copy_(flat(in));
      ring::allgather(peer, chunks);
      finish(peer);
    });
  }

  Work reduce_scatter(const Tensor& input, Tensor& output, ReduceOp reduce) override {
    Tensor in = input, out = output;
    return submit("reduce_scatter", in, [=](const std::string& op) {
      check_reduce_scatter_args(op, in, out, size());
      check_reducible(op, in, reduce, false);
      ring::Peer peer = start(op, in.device(), describe("reduce_scatter", in, with_op(reduce)));
      ring::reduce_scatter(peer, ring::split(flat(in), size()), /*in_place=*/false, flat(out));
      average(out, reduce);
      finish(peer);
    });
  }

  void barrier() override {
    submit("barrier", Tensor(), [=](const std::string& op) {
      ring::Peer peer = start(op, Device::cpu(), "barrier");
      finish(peer);
    }).wait();
  }

  Work send(const Tensor& tensor, int dst, int tag) override {
    Tensor t = tensor;
    return submit("send", t, [=](const std::string& op) {
      check_point_to_point(op, "destination", dst, tag, t, rank_, size());
      Slot message{Tensor::empty({t.numel()}, t.dtype(), t.device()), ""};
      message.tensor.copy_(flat(t));
      message.done = backend_for(t.device()).record_event(t.device().index);
      std::shared_ptr<Backend::Event> copied = message.done;
      rendezvous_->post(rank_, dst, tag, std::move(message));
      if (copied) copied->synchronize();  // the caller may now overwrite t
    }, dst, tag);
  }

  Work recv(Tensor& tensor, int src, int tag) override {
    Tensor t = tensor;
    return submit("recv", t, [=](const std::string& op) {
      check_point_to_point(op, "source", src, tag, t, rank_, size());
      Slot message;
      {
        trace::Span span("wait", [&] { return trace::Label{"wait for the message", {{"peer", int64_t(src)}}}; });
        message = rendezvous_->take(src, rank_, tag, op);
      }
      const Tensor& sent = message.tensor;
      DPCORE_CHECK(sent.dtype() == t.dtype() && sent.numel() == t.numel(), op, ": replica ", rank_, " expects ",
                   t.numel(), " ", dtype_name(t.dtype()), " (", t.nbytes(), " bytes) from replica ", src, " (tag ",
                   tag, "), which sent ", sent.numel(), " ", dtype_name(sent.dtype()), " (", sent.nbytes(),
                   " bytes)");
      Backend& backend = backend_for(t.device());
      backend.wait_event(t.device().index, message.done);
      flat(t).copy_(sent);
      std::shared_ptr<Backend::Event> copied = backend.record_event(t.device().index);
      if (copied) copied->synchronize();  // the caller may now read t
    }, src, tag);
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    std::shared_ptr<Rendezvous> sub;
    int sub_rank = 0;
    submit("split", Tensor(), [&](const std::string& op) {
      ring::Peer peer = start(op, Device::cpu(), "split");
      std::vector<Slot> slots = peer.meet(Slot{Tensor::from_vector<int64_t>({color, key}, {2}), ""});
      const uint64_t split_number = splits_++;
      if (color < 0) return finish(peer);
      std::vector<std::pair<int64_t, int>> members;  // (key, rank here), in the new group's order
      for (int r = 0; r < size(); ++r) {
        std::vector<int64_t> color_key = slots[size_t(r)].tensor.to_vector<int64_t>();
        if (color_key[0] == color) members.push_back({color_key[1], r});
      }
      std::sort(members.begin(), members.end());
      sub_rank = int(std::find(members.begin(), members.end(), std::make_pair(int64_t(key), rank_)) - members.begin());
      sub = rendezvous_->subgroup(split_number, color, int(members.size()));
      finish(peer);
    }).wait();
    if (!sub) return nullptr;
    return std::make_unique<LocalCommunicator>(sub, sub_rank, concat(lane_, " / split ", color, " rank ", sub_rank),
                                               lane_index_);
  }

  void abort(const std::string& reason) override {
    rendezvous_->abort(concat("local group aborted by replica ", rank_, ": ", reason));
  }

 private:
  // Runs `body` on the communication thread. If it fails here (bad arguments, a device
  // error), the group is aborted so that the other replicas fail now, naming this one,
  // instead of waiting for it.
  // `input` (the collective's input; undefined for barrier) names the device whose stream
  // the collective is ordered after (ring.h).
  //
  // In a trace, the collective is a span on the communication thread's lane from when that
  // thread takes it up to its end, named by what the caller said it is for
  // ("allreduce bucket 3"); queued_us is how long it waited behind earlier collectives.
  // A send or recv (`peer` >= 0) names its peer and tag there.
  Work submit(const char* name, const Tensor& input, std::function<void(const std::string& op)> body,
              int peer = -1, int tag = 0) {
    std::string op = concat("local ", name);
    const Device device = input.defined() ? input.device() : Device::cpu();
    std::shared_ptr<Backend::Event> submitted = ring::record_submission(device);
    const int64_t bytes = input.defined() ? int64_t(input.nbytes()) : 0;
    const CollectiveSpanLabel traced =
        peer >= 0 ? CollectiveSpanLabel(name, bytes, peer, tag) : CollectiveSpanLabel(name, bytes);
    const char* algorithm = peer >= 0 ? "mailbox" : "ring";
    return thread_.submit([this, op, body, device, submitted, traced, algorithm] {
      trace::Span span("comm", [&] { return traced.label(algorithm, size(), rank_); });
      try {
        ring::start_on_own_stream(device, submitted);
        body(op);
      } catch (const std::exception& e) {
        rendezvous_->abort(concat(op, ": replica ", rank_, " failed: ", e.what()));
        throw;
      }
    });
  }

  // The first meeting of a collective: every replica must be in the same one.
  ring::Peer start(const std::string& op, Device device, const std::string& call) {
    ring::Peer peer{*rendezvous_, rank_, device, op, workspace_};
    std::vector<Slot> slots;
    {
      trace::Span span("wait", [&] {
        return trace::Label{"wait for every replica to join", {{"replicas", int64_t(size())}}};
      });
      slots = peer.meet(Slot{Tensor(), call});
    }
    for (size_t r = 1; r < slots.size(); ++r) {
      DPCORE_CHECK(slots[r].call == slots[0].call, "local group: replica ", r, " called ", slots[r].call,
                   " while replica 0 called ", slots[0].call);
    }
    return peer;
  }
  // The last meeting: no replica returns (and lets its caller reuse its buffers) while a
  // neighbour may still be reading them.
  void finish(ring::Peer& peer) { peer.finish(); }

  void average(const Tensor& owned, ReduceOp reduce) {
    if (reduce != ReduceOp::Average || owned.numel() == 0) return;
    Tensor t = owned;
    backend_for(t.device()).scale(1.0 / size(), t, t);
  }

  std::shared_ptr<Rendezvous> rendezvous_;
  const int rank_;
  const std::string lane_;
  const int lane_index_;
  uint64_t splits_ = 0;        // split() calls so far, the same on every replica; only on thread_
  ring::Workspace workspace_;  // used only on thread_
  CommThread thread_;          // last: joined first, while the members it uses still exist
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_local_group(int world_size, const LocalOptions& options) {
  DPCORE_CHECK(world_size >= 1, "make_local_group: world size ", world_size, " must be at least 1");
  DPCORE_CHECK(options.timeout.count() > 0, "make_local_group: timeout ", options.timeout.count(),
               " ms must be positive");
  auto rendezvous = std::make_shared<Rendezvous>(world_size, options.timeout);
  std::vector<std::unique_ptr<Communicator>> group;
  const int first_lane = options.first_lane >= 0 ? options.first_lane : trace::kCommLanes;
  for (int r = 0; r < world_size; ++r) {
    group.push_back(std::make_unique<LocalCommunicator>(rendezvous, r, options.lanes + " " + std::to_string(r),
                                                        first_lane + r, options.thread_start));
  }
  return group;
}

}  // namespace dpcore::comm
