// Queueing NCCL calls on streams, and groups. A call outside a group is queued at once; inside
// one (ncclGroupStart .. the outermost ncclGroupEnd) it waits in the calling thread's list and
// the group's end queues them all: each collective as a task of its own, in call order, then
// each rank's sends and receives on one stream as one task, which posts every send before it
// receives, so that a ring of sends and receives in one group completes (as NCCL fuses them).
#include <algorithm>
#include <utility>

#include "host_exec/runtime/nccl_clique.h"

namespace host_runtime::nccl {
namespace {

struct Deferred {
  ncclComm_t comm;
  std::shared_ptr<Stream> stream;
  Op op;
};
thread_local int group_depth = 0;
thread_local std::vector<Deferred> deferred;
thread_local std::vector<std::function<ncclResult_t()>> finishers;

// The stream a handle names on the communicator's device (NCCL switches to its device first).
std::shared_ptr<Stream> stream_on(int device, cudaStream_t handle) {
  const int current = current_device();
  cudaSetDevice(device);
  std::shared_ptr<Stream> s = stream_for(handle);
  cudaSetDevice(current);
  return s;
}

void remember(ncclComm_t comm, const Point& point) {
  std::lock_guard<std::mutex> lock(comm->mutex);
  comm->queued[point.stream.get()] = point;
}

void queue_collective(const Deferred& call) {
  const std::shared_ptr<Clique> clique = call.comm->clique;
  const int rank = call.comm->rank;
  const uint64_t seq = clique->next_collective(rank);
  remember(call.comm, call.stream->enqueue(name_of(call.op.kind), [clique, rank, seq, op = call.op] {
    Bookkeeping hide;
    clique->collective(rank, seq, op);
  }));
}

// The sends and receives of one communicator on one stream, numbered in call order.
void queue_transfers(ncclComm_t comm, const std::shared_ptr<Stream>& stream, const std::vector<Op>& ops) {
  const std::shared_ptr<Clique> clique = comm->clique;
  const int rank = comm->rank;
  std::vector<std::pair<Op, uint64_t>> transfers;
  for (const Op& op : ops)
    transfers.emplace_back(op, op.kind == Op::Kind::Send ? clique->next_send(rank, op.root)
                                                          : clique->next_recv(rank, op.root));
  remember(comm, stream->enqueue(name_of(ops.front().kind), [clique, rank, transfers = std::move(transfers)] {
    Bookkeeping hide;
    clique->exchange(rank, transfers);
  }));
}

void queue(const std::vector<Deferred>& calls) {
  std::vector<std::pair<ncclComm_t, std::shared_ptr<Stream>>> keys;  // in order of first use
  for (const Deferred& call : calls) {
    if (call.op.collective()) {
      queue_collective(call);
    } else if (std::find(keys.begin(), keys.end(), std::make_pair(call.comm, call.stream)) == keys.end()) {
      keys.emplace_back(call.comm, call.stream);
    }
  }
  for (const auto& [comm, stream] : keys) {
    std::vector<Op> ops;
    for (const Deferred& call : calls)
      if (!call.op.collective() && call.comm == comm && call.stream == stream) ops.push_back(call.op);
    queue_transfers(comm, stream, ops);
  }
}

}  // namespace

bool in_group() { return group_depth > 0; }

void at_group_end(std::function<ncclResult_t()> finish) { finishers.push_back(std::move(finish)); }

ncclResult_t submit(ncclComm_t comm, cudaStream_t handle, const Op& op) {
  const int device = comm->clique->device(comm->rank);
  const std::shared_ptr<Stream> stream = stream_on(device, handle);
  if (!stream || stream->device() != device)
    return record(ncclUnhandledCudaError,
                  std::string(name_of(op.kind)) + ": invalid resource handle: " +
                      (stream ? "the stream belongs to device " + std::to_string(stream->device()) +
                                    ", the communicator's device is " + std::to_string(device)
                              : std::string("not a live stream")));
  // NCCL refuses a communicator with an asynchronous error (ncclCommEnsureReady).
  if (const ncclResult_t error = comm->clique->async_error(comm->rank))
    return record(error, std::string(name_of(op.kind)) + ": the communicator is unusable: " +
                             comm->clique->error_message());
  Deferred call{comm, stream, op};
  if (in_group()) {
    deferred.push_back(std::move(call));
    return ncclSuccess;
  }
  queue({call});
  return ncclSuccess;
}

}  // namespace host_runtime::nccl

ncclResult_t ncclGroupStart() {
  host_runtime::Bookkeeping hide;
  ++host_runtime::nccl::group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  host_runtime::Bookkeeping hide;
  using namespace host_runtime::nccl;
  if (group_depth == 0) return record(ncclInvalidUsage, "ncclGroupEnd: no group was started (ncclGroupStart)");
  if (--group_depth > 0) return ncclSuccess;
  ncclResult_t result = ncclSuccess;
  for (const std::function<ncclResult_t()>& finish : std::exchange(finishers, {})) {
    const ncclResult_t r = finish();
    if (result == ncclSuccess) result = r;
  }
  queue(std::exchange(deferred, {}));
  return result;
}
