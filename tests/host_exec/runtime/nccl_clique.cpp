// The clique (nccl_clique.h): where the ranks' tasks meet, exchange data and fail together.
#include "host_exec/runtime/nccl_clique.h"

#include <cstring>

namespace host_runtime::nccl {

Clique::Clique(std::vector<int> devices)
    : devices_(std::move(devices)),
      collectives_issued_(devices_.size()),
      sends_issued_(devices_.size(), std::vector<uint64_t>(devices_.size())),
      recvs_issued_(devices_.size(), std::vector<uint64_t>(devices_.size())),
      left_(devices_.size()) {}

uint64_t Clique::next_collective(int rank) {
  std::lock_guard<std::mutex> lock(mutex_);
  return collectives_issued_[rank]++;
}

uint64_t Clique::next_send(int from, int to) {
  std::lock_guard<std::mutex> lock(mutex_);
  return sends_issued_[from][to]++;
}

uint64_t Clique::next_recv(int to, int from) {
  std::lock_guard<std::mutex> lock(mutex_);
  return recvs_issued_[from][to]++;
}

ncclResult_t Clique::async_error(int rank) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!failed_) return ncclSuccess;
  return rank == culprit_ ? culprit_error_ : others_error_;
}

std::string Clique::error_message() {
  std::lock_guard<std::mutex> lock(mutex_);
  return message_;
}

void Clique::leave(int rank, bool aborted) {
  std::lock_guard<std::mutex> lock(mutex_);
  left_[rank] = true;
  if (aborted)
    fail_locked(rank, ncclRemoteError, ncclRemoteError,
                "rank " + std::to_string(rank) + " of " + std::to_string(size()) + " aborted its communicator");
  changed_.notify_all();
}

void Clique::fail_locked(int culprit, ncclResult_t culprit_error, ncclResult_t others, const std::string& message) {
  if (failed_) return;
  failed_ = true;
  culprit_ = culprit;
  culprit_error_ = culprit_error;
  others_error_ = others;
  message_ = message;
  record(others, message);
  changed_.notify_all();
}

bool Clique::peer_left_locked(const Meeting& meeting, int rank, uint64_t seq) {
  for (int q = 0; q < size(); ++q) {
    if (meeting.present[q] || !left_[q]) continue;
    fail_locked(q, ncclRemoteError, ncclRemoteError,
                "rank " + std::to_string(q) + " destroyed its communicator before collective #" + std::to_string(seq) +
                    " (" + describe(meeting.calls[rank]) + "), which rank " + std::to_string(rank) + " waits in");
    return true;
  }
  return false;
}

bool Clique::buffers_fault(int rank, const Op& op) {
  const int d = device(rank);
  check_kernel_pointers(name_of(op.kind), d, {op.send, op.recv});
  if (device_error(d) == cudaSuccess) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  fail_locked(rank, ncclUnhandledCudaError, ncclRemoteError,
              "rank " + std::to_string(rank) + "'s " + describe(op) + " failed on device " + std::to_string(d) + ": " +
                  device_error_detail(d));
  return true;
}

void Clique::collective(int rank, uint64_t seq, const Op& op) {
  if (buffers_fault(rank, op)) return;
  const int n = size();
  std::shared_ptr<Meeting> meeting;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (failed_) return;  // the communicator is unusable: the call does nothing
    std::shared_ptr<Meeting>& slot = meetings_[seq];
    if (!slot) slot = std::make_shared<Meeting>(n);
    meeting = slot;
    for (int q = 0; q < n; ++q) {
      if (!meeting->present[q] || same_call(meeting->calls[q], op)) continue;
      const auto on = [](const Op& call, int r) { return describe(call) + " on rank " + std::to_string(r); };
      const std::string lower = q < rank ? on(meeting->calls[q], q) : on(op, rank);
      const std::string higher = q < rank ? on(op, rank) : on(meeting->calls[q], q);
      fail_locked(-1, ncclInvalidUsage, ncclInvalidUsage,
                  "mismatched collectives: call #" + std::to_string(seq) + " is " + lower + " but " + higher);
      return;  // the ranks waiting here leave and erase the meeting
    }
    release_edge(&meeting->arrival_tokens[rank]);  // what this rank's stream did before, its peers see
    meeting->calls[rank] = op;
    meeting->present[rank] = true;
    ++meeting->arrived;
    changed_.notify_all();
    changed_.wait(lock, [&] { return meeting->arrived == n || failed_ || peer_left_locked(*meeting, rank, seq); });
    if (meeting->arrived != n) {  // the clique failed first: the pending call ends without running
      if (++meeting->left == meeting->arrived) meetings_.erase(seq);
      return;
    }
  }
  for (int q = 0; q < n; ++q) acquire_edge(&meeting->arrival_tokens[q]);
  std::vector<char> result;
  {
    Visible data;
    result = result_for(rank, meeting->calls);
  }
  release_edge(&meeting->read_tokens[rank]);  // this rank has read its peers' inputs
  {
    std::unique_lock<std::mutex> lock(mutex_);
    ++meeting->read;
    changed_.notify_all();
    changed_.wait(lock, [&] { return meeting->read == n; });  // every rank is past its arrival: no failure waits here
  }
  for (int q = 0; q < n; ++q) acquire_edge(&meeting->read_tokens[q]);
  if (!result.empty()) {
    Visible data;
    std::memcpy(op.recv, result.data(), result.size());
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (++meeting->left == n) meetings_.erase(seq);
}

void Clique::exchange(int rank, const std::vector<std::pair<Op, uint64_t>>& transfers) {
  for (const auto& [op, number] : transfers)
    if (buffers_fault(rank, op)) return;
  std::unique_lock<std::mutex> lock(mutex_);
  if (failed_) return;
  for (const auto& [op, number] : transfers) {  // every send first, so that a group's receives can progress
    if (op.kind != Op::Kind::Send) continue;
    std::shared_ptr<Message>& m = messages_[MessageKey{rank, op.root, number}];
    if (!m) m = std::make_shared<Message>();
    release_edge(&m->posted_token);
    m->send = op;
    m->posted = true;
  }
  changed_.notify_all();
  for (const auto& [op, number] : transfers)
    if (op.kind == Op::Kind::Recv && !failed_) receive(lock, rank, op, number);
  for (const auto& [op, number] : transfers)
    if (op.kind == Op::Kind::Send) await_copy(lock, rank, op, number);
}

void Clique::receive(std::unique_lock<std::mutex>& lock, int rank, const Op& op, uint64_t number) {
  const int from = op.root;
  std::shared_ptr<Message>& slot = messages_[MessageKey{from, rank, number}];
  if (!slot) slot = std::make_shared<Message>();
  const std::shared_ptr<Message> m = slot;
  changed_.wait(lock, [&] { return m->posted || failed_ || left_[from]; });
  if (!m->posted) {
    fail_locked(from, ncclRemoteError, ncclRemoteError,
                "rank " + std::to_string(from) + " left before sending message #" + std::to_string(number) +
                    " to rank " + std::to_string(rank) + " (" + describe(op) + ")");
    return;
  }
  if (m->send.count != op.count || m->send.type != op.type) {
    fail_locked(-1, ncclInvalidUsage, ncclInvalidUsage,
                "mismatched send and receive: message #" + std::to_string(number) + " from rank " +
                    std::to_string(from) + " to rank " + std::to_string(rank) + " is " + describe(m->send) +
                    " but " + describe(op));
    return;
  }
  m->taken = true;
  lock.unlock();
  acquire_edge(&m->posted_token);
  {
    Visible data;
    std::memcpy(op.recv, m->send.send, op.count * type_size(op.type));
  }
  release_edge(&m->copied_token);
  lock.lock();
  m->copied = true;
  changed_.notify_all();
}

void Clique::await_copy(std::unique_lock<std::mutex>& lock, int rank, const Op& op, uint64_t number) {
  const MessageKey key{rank, op.root, number};
  const std::shared_ptr<Message> m = messages_[key];
  // A receiver that has begun to copy finishes; until then a failure or its leaving ends the send.
  changed_.wait(lock, [&] { return m->copied || (!m->taken && (failed_ || left_[op.root])); });
  if (m->copied) {
    acquire_edge(&m->copied_token);  // the sender may now overwrite its buffer
    messages_.erase(key);
    return;
  }
  fail_locked(op.root, ncclRemoteError, ncclRemoteError,
              "rank " + std::to_string(op.root) + " left before receiving message #" + std::to_string(number) +
                  " from rank " + std::to_string(rank) + " (" + describe(op) + ")");
}

}  // namespace host_runtime::nccl
