// The inside of the host NCCL (include/nccl.h): a clique is the state the ranks of one
// communicator share, and where their streams' tasks meet. Not part of NCCL's API.
//
// A collective is rank r's task on its stream; it waits at the clique until every rank's
// task of the same sequence number has arrived (or the clique has failed), checks that all
// ranks made the same call, reads every rank's input into a result of its own, waits until
// every rank has read, and only then writes its output, so in-place calls read nothing a
// peer has overwritten. ThreadSanitizer sees the exchange as edges (bookkeeping.h): each
// rank's arrival releases a token every rank acquires before it reads, and each rank's
// "read" releases a token every rank acquires before it writes. A send is posted by the
// sender's task and copied by the receiver's, with the same two edges.
//
// The clique fails once, for all ranks, and then every waiting or later call ends at once
// without touching memory: a mismatched call (ncclInvalidUsage), an abort (the aborted
// rank's peers see ncclRemoteError, as NCCL reports a peer that went away), a rank that
// destroyed its communicator while a peer still needs it (ncclRemoteError), a device fault
// in a call's buffers (ncclUnhandledCudaError for that rank, ncclRemoteError for its peers).
// A call that every rank has reached runs to its end even if the clique fails meanwhile.
#pragma once

#include <nccl.h>

#include <condition_variable>
#include <functional>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "host_exec/runtime/runtime.h"

namespace host_runtime::nccl {

// One call of one rank, as queued: a collective or one side of a send.
struct Op {
  enum class Kind { AllReduce, Broadcast, Reduce, AllGather, ReduceScatter, Send, Recv };
  Kind kind = Kind::AllReduce;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;  // ncclReduceScatter: per rank received; ncclAllGather: per rank sent
  ncclDataType_t type = ncclFloat32;
  ncclRedOp_t reduce = ncclSum;
  int root = 0;  // ncclBroadcast, ncclReduce: the root; ncclSend, ncclRecv: the peer
  bool collective() const { return kind != Kind::Send && kind != Kind::Recv; }
};
const char* name_of(Op::Kind kind);         // "ncclAllReduce"
std::string describe(const Op& op);         // "ncclAllReduce of 8 float32 (sum)"
bool same_call(const Op& a, const Op& b);   // all but the buffers

// ---- the arithmetic (nccl_reduce.cpp) ----
bool valid_type(ncclDataType_t type);
bool valid_reduce(ncclRedOp_t reduce);
size_t type_size(ncclDataType_t type);
// What rank `rank`'s recvbuff receives from the collective whose calls (rank q's is
// calls[q]) are given: reductions combine rank 0's value with rank 1's, then rank 2's...,
// in the data type (ncclAvg: floating types scale each value by 1/size first, integers
// divide the sum, as NCCL does). Empty when the rank receives nothing (ncclReduce off root).
std::vector<char> result_for(int rank, const std::vector<Op>& calls);

class Clique {
 public:
  explicit Clique(std::vector<int> devices);
  int size() const { return int(devices_.size()); }
  int device(int rank) const { return devices_[rank]; }

  // ---- the calling host thread, as it queues ----
  uint64_t next_collective(int rank);
  // The number of the next message from `from` to `to`, counted on each side.
  uint64_t next_send(int from, int to);
  uint64_t next_recv(int to, int from);
  ncclResult_t async_error(int rank);
  std::string error_message();
  // The rank's communicator is freed: by ncclCommAbort (`aborted`; the clique fails) or by
  // ncclCommDestroy after its work (a peer that still needs it fails the clique).
  void leave(int rank, bool aborted);

  // ---- on the ranks' streams (hidden from ThreadSanitizer but for the data) ----
  void collective(int rank, uint64_t seq, const Op& op);
  // The sends and receives of one rank's group on one stream: (op, message number) each.
  void exchange(int rank, const std::vector<std::pair<Op, uint64_t>>& transfers);

 private:
  struct Meeting {  // one collective
    explicit Meeting(int n) : calls(n), present(n), arrival_tokens(new char[n]), read_tokens(new char[n]) {}
    std::vector<Op> calls;
    std::vector<bool> present;
    int arrived = 0, read = 0, left = 0;
    std::unique_ptr<char[]> arrival_tokens, read_tokens;
  };
  struct Message {  // one send, from its post to its copy
    Op send;
    bool posted = false, taken = false, copied = false;
    char posted_token = 0, copied_token = 0;
  };
  using MessageKey = std::tuple<int, int, uint64_t>;  // from, to, number

  // Mutex held: the first failure is the one reported.
  void fail_locked(int culprit, ncclResult_t culprit_error, ncclResult_t others, const std::string& message);
  // Mutex held: a rank the meeting still waits for has left; fails the clique saying so.
  bool peer_left_locked(const Meeting& meeting, int rank, uint64_t seq);
  // Fails the clique when the kernel of `op` would fault on the rank's device.
  bool buffers_fault(int rank, const Op& op);
  void receive(std::unique_lock<std::mutex>& lock, int rank, const Op& op, uint64_t number);
  void await_copy(std::unique_lock<std::mutex>& lock, int rank, const Op& op, uint64_t number);

  const std::vector<int> devices_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<uint64_t> collectives_issued_;
  std::vector<std::vector<uint64_t>> sends_issued_, recvs_issued_;  // [from][to]
  std::vector<bool> left_;
  std::map<uint64_t, std::shared_ptr<Meeting>> meetings_;
  std::map<MessageKey, std::shared_ptr<Message>> messages_;
  bool failed_ = false;
  int culprit_ = -1;
  ncclResult_t culprit_error_ = ncclSuccess, others_error_ = ncclSuccess;
  std::string message_;
};

// ---- communicators (nccl_comm.cpp) ----
ncclComm_t make_comm(std::shared_ptr<Clique> clique, int rank);

// ---- errors (nccl_comm.cpp) ----
// Records `message` as ncclGetLastError's and returns `result`.
ncclResult_t record(ncclResult_t result, const std::string& message);

// ---- queueing (nccl_group.cpp) ----
// Checks the stream and the communicator's state, then queues `op` on the stream, or at the
// end of the calling thread's group.
ncclResult_t submit(ncclComm_t comm, cudaStream_t stream, const Op& op);
bool in_group();
// Runs at the outermost ncclGroupEnd, before the calls are queued (ncclCommInitRank's wait).
void at_group_end(std::function<ncclResult_t()> finish);

}  // namespace host_runtime::nccl

// The handle: one rank of a clique, and the last point it queued on each stream (for
// ncclCommDestroy). Freed by ncclCommDestroy and ncclCommAbort, as NCCL frees it.
struct ncclComm {
  std::shared_ptr<host_runtime::nccl::Clique> clique;
  int rank = 0;
  std::mutex mutex;
  std::map<const host_runtime::Stream*, host_runtime::Point> queued;
  uint64_t splits = 0;  // ncclCommSplit calls so far: the ranks' n-th calls meet
};
