#include "comm/ring.h"

#include "engine/backend.h"

namespace dpcore::comm::ring {

namespace {

int wrap(int i, int n) { return ((i % n) + n) % n; }

// dst <- mine + incoming. `incoming` may live on another device: it is then first copied
// next to `mine`, into the staging buffer (sized by the largest chunk, so that it stays in
// place for the whole collective).
void add_chunk(Peer& peer, const Tensor& mine, const Tensor& incoming, Tensor dst, int64_t largest_chunk) {
  if (mine.numel() == 0) return;
  Tensor left = incoming;
  if (incoming.device() != mine.device()) {
    left = peer.workspace.get(Workspace::kStaging, largest_chunk, mine.dtype(), mine.device()).narrow0(0, mine.numel());
    left.copy_(incoming);
  }
  backend_for(mine.device()).add(mine, left, dst);
}

}  // namespace

Range chunk_range(int64_t count, int n, int c) {
  int64_t base = count / n, extra = count % n;
  int64_t begin = c * base + (c < extra ? c : extra);
  return {begin, begin + base + (c < extra ? 1 : 0)};
}

int left_of(int rank, int n) { return wrap(rank - 1, n); }
int right_of(int rank, int n) { return wrap(rank + 1, n); }

// Chunk c starts at rank c+1 (its owner's right neighbour) and moves one rank right per
// step, so at step s rank r passes on chunk r-1-s and adds to chunk r-2-s, which after
// the n-1 steps is chunk r itself: complete at its owner.
Move reduce_scatter_move(int n, int rank, int step) {
  return {wrap(rank - 1 - step, n), wrap(rank - 2 - step, n), right_of(rank, n), left_of(rank, n)};
}

// Each complete chunk leaves its owner and moves one rank right per step: at step s rank
// r passes on chunk r-s (its own at step 0) and receives chunk r-1-s.
Move allgather_move(int n, int rank, int step) {
  return {wrap(rank - step, n), wrap(rank - 1 - step, n), right_of(rank, n), left_of(rank, n)};
}

std::vector<Tensor> split(const Tensor& flat, int n) {
  std::vector<Tensor> chunks;
  for (int c = 0; c < n; ++c) {
    Range range = chunk_range(flat.numel(), n, c);
    chunks.push_back(flat.narrow0(range.begin, range.end));
  }
  return chunks;
}

Tensor Workspace::get(Buffer which, int64_t numel, DType dtype, Device device) {
  Tensor& buffer = buffers_[which];
  if (!buffer.defined() || buffer.numel() < numel || buffer.dtype() != dtype || buffer.device() != device) {
    buffer = Tensor::empty({numel}, dtype, device);
  }
  return buffer.narrow0(0, numel);
}

std::shared_ptr<Backend::Event> record_submission(Device device) {
  return backend_for(device).record_event(device.index);
}

void start_on_own_stream(Device device, const std::shared_ptr<Backend::Event>& submitted) {
  Backend& backend = backend_for(device);
  backend.use_own_stream(device.index);
  backend.wait_event(device.index, submitted);
}

std::vector<Slot> Peer::meet(Slot outgoing) {
  Backend& backend = backend_for(device);
  outgoing.done = backend.record_event(device.index);
  std::vector<Slot> slots = rendezvous.exchange(rank, std::move(outgoing), op);
  for (const Slot& slot : slots) backend.wait_event(device.index, slot.done);
  return slots;
}

void Peer::finish() {
  meet(Slot{});
  // This stream now waits for every replica's last event, so its own end is theirs too.
  std::shared_ptr<Backend::Event> all_done = backend_for(device).record_event(device.index);
  if (all_done) all_done->synchronize();
}

Tensor Peer::pass_right(const Tensor& outgoing) {
  std::vector<Slot> slots = meet(Slot{outgoing, ""});
  return slots[size_t(left_of(rank, size()))].tensor;
}

void reduce_scatter(Peer& peer, const std::vector<Tensor>& chunks, bool in_place, const Tensor& result) {
  const int n = peer.size(), r = peer.rank;
  // Chunk 0 is the largest: sizing the scratch by it keeps it in place for every step.
  const Tensor& largest = chunks[0];
  Tensor partials[2];  // used from 3 ranks on: with 2, the only step writes `result`
  if (!in_place && n > 2) {
    partials[0] = peer.workspace.get(Workspace::kPartialEven, largest.numel(), largest.dtype(), largest.device());
    partials[1] = peer.workspace.get(Workspace::kPartialOdd, largest.numel(), largest.dtype(), largest.device());
  }
  // The chunk sent at step s+1 is the partial sum written at step s (reduce_scatter_move's
  // send(s+1) == receive(s)); only step 0 sends this rank's own data.
  Tensor outgoing = chunks[size_t(reduce_scatter_move(n, r, 0).send)];
  for (int s = 0; s < n - 1; ++s) {
    Tensor incoming = peer.pass_right(outgoing);
    const Tensor& mine = chunks[size_t(reduce_scatter_move(n, r, s).receive)];
    // Not in place, partial sums alternate between two buffers: the right neighbour is
    // still reading the previous step's while this step's is written.
    Tensor dst = s == n - 2 ? result : in_place ? mine : partials[s % 2].narrow0(0, mine.numel());
    add_chunk(peer, mine, incoming, dst, largest.numel());
    outgoing = dst;
  }
  if (n == 1) result.copy_(chunks[0]);  // a no-op when in place
}

void allgather(Peer& peer, const std::vector<Tensor>& chunks) {
  const int n = peer.size(), r = peer.rank;
  // The chunk sent at step s+1 is the one received at step s (allgather_move's send(s+1)
  // == receive(s)); step 0 sends this rank's own.
  Tensor outgoing = chunks[size_t(allgather_move(n, r, 0).send)];
  for (int s = 0; s < n - 1; ++s) {
    Tensor incoming = peer.pass_right(outgoing);
    const Tensor& chunk = chunks[size_t(allgather_move(n, r, s).receive)];
    chunk.copy_(incoming);
    outgoing = chunk;
  }
}

}  // namespace dpcore::comm::ring
