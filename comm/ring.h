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
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/rendezvous.h"
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

// This replica's place in the ring for one collective.
struct Peer {
  Rendezvous& rendezvous;
  int rank;
  Device device;   // where this replica's buffers are
  std::string op;  // names the collective in errors ("local allreduce")
  Workspace& workspace;

  int size() const { return rendezvous.size(); }
  // Waits for this replica's queued device work (so that neighbours read finished data),
  // publishes `outgoing`, waits for every replica, and returns all their slots.
  std::vector<Slot> meet(Slot outgoing);
  // meet() for the ring steps: returns the left neighbour's published tensor.
  Tensor pass_right(const Tensor& outgoing);
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
