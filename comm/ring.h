// The ring algorithm of the local backend, over shared memory (docs/collectives.md has a
// worked example). Rank r's left neighbour is r-1 and its right neighbour r+1, modulo n.
// A buffer is cut into n chunks; rank r OWNS chunk r.
//
//   reduce-scatter, n-1 steps: at step s rank r adds its left neighbour's partial sum of
//     chunk (r-2-s) mod n to its own chunk. Chunk c starts at rank c+1 and travels right
//     around the ring, so it is summed in the fixed order
//         x[c+1], then + x[c+2], ..., then + x[c]   (ranks mod n)
//     and ends complete at its owner c.
//   allgather, n-1 steps: at step s rank r copies chunk (r-1-s) mod n from its left
//     neighbour, so every complete chunk travels once around the ring.
//
// Instead of sending, a rank publishes the chunk its right neighbour needs at the
// Rendezvous; after the barrier the neighbour reads it in place (through a staging copy
// when the two replicas' devices differ). One barrier per step keeps a chunk from being
// overwritten while a neighbour still reads it.
//
// On GPUs the barrier orders the host only; the device work is ordered by events, so
// that no replica waits for another's (or its own) compute. The communication thread
// queues the ring's kernels on a stream of its own, which first waits for the point the
// caller's stream had reached when it submitted the collective (start_on_own_stream).
// At every meeting each replica records an event on that stream and publishes it, and
// every replica's stream then waits for all of them: after a meeting, each replica's
// work runs after the work every replica queued before it, as if each had waited for its
// device, but without a host in the way. finish() waits on the host for this replica's
// stream alone.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/rendezvous.h"
#include "engine/backend.h"
#include "engine/tensor.h"

namespace dpcore::comm::ring {

// Chunk c of `count` elements cut into n chunks: the first count % n chunks have one
// element more than the others (so count < n gives empty chunks at the end).
struct Range {
  int64_t begin, end;
};
Range chunk_range(int64_t count, int n, int c);
// The n chunks of a 1-D tensor, as views.
std::vector<Tensor> split(const Tensor& flat, int n);

// The ring's chunk arithmetic, in one place: reduce_scatter and allgather below run it,
// and `dpcore train --explain` (train/observe/explain.h) prints it, so the two cannot disagree.
// At step `step` (0 .. n-2) of a phase, rank `rank` of n sends chunk `send` to its right
// neighbour `to` and receives chunk `receive` from its left neighbour `from`.
struct Move {
  int send, receive;  // chunk numbers
  int to, from;       // ranks
};
int left_of(int rank, int n);
int right_of(int rank, int n);
// Reduce-scatter: `send` is this rank's partial sum of a chunk (its own data at step 0),
// `receive` the left neighbour's partial sum of the chunk this rank adds its data to.
Move reduce_scatter_move(int n, int rank, int step);
// Allgather: `send` is a complete chunk this rank holds, `receive` one it does not yet.
Move allgather_move(int n, int rank, int step);

// Scratch buffers kept by one replica across collectives, so that steady-state training
// does not allocate.
class Workspace {
 public:
  enum Buffer { kPartialEven, kPartialOdd, kStaging, kResult, kBufferCount };
  // A 1-D view of the first `numel` elements of the buffer, which grows (and so moves)
  // only when it is too small or of another dtype or device; contents undefined.
  Tensor get(Buffer which, int64_t numel, DType dtype, Device device);

 private:
  Tensor buffers_[kBufferCount];
};

// On the caller's thread, when a collective is submitted: the point after the work queued
// so far on its current stream of `device`, which produced the collective's input and
// may still read its output. Null on the CPU.
std::shared_ptr<Backend::Event> record_submission(Device device);
// On the communication thread, before the collective: its device work goes to the
// thread's own stream of `device`, after `submitted`.
void start_on_own_stream(Device device, const std::shared_ptr<Backend::Event>& submitted);

// This replica's place in the ring for one collective.
struct Peer {
  Rendezvous& rendezvous;
  int rank;
  Device device;   // where this replica's buffers are
  std::string op;  // names the collective in errors ("local allreduce")
  Workspace& workspace;

  int size() const { return rendezvous.size(); }
  // Publishes `outgoing` with an event after this replica's queued device work, waits for
  // every replica, orders this replica's stream after all their events (so that it reads
  // finished data and overwrites nothing still being read), and returns all their slots.
  std::vector<Slot> meet(Slot outgoing);
  // meet() for the ring steps: returns the left neighbour's published tensor.
  Tensor pass_right(const Tensor& outgoing);
  // The last meeting, then a host wait for this replica's stream: once it returns, every
  // replica's work on the collective has run, and the caller may read and reuse its buffers.
  void finish();
};

// Reduce-scatter over `chunks` (this rank's n chunks). On return `result` holds the sum of
// chunk `rank` over all ranks. In place, each step's partial sum overwrites the chunk
// itself (allreduce); otherwise the chunks stay unchanged and the partials go through the
// workspace (result must then be a separate buffer of chunk `rank`'s size).
void reduce_scatter(Peer& peer, const std::vector<Tensor>& chunks, bool in_place, const Tensor& result);
// Allgather over `chunks`: on entry chunk `rank` is this rank's; on return every chunk
// holds its owner's.
void allgather(Peer& peer, const std::vector<Tensor>& chunks);

}  // namespace dpcore::comm::ring
