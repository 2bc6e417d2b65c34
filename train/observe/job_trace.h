// --trace in a job of several processes (mpirun): every rank records its own lanes, and at
// the end of the window rank 0 writes them all into the one --trace file, each rank a
// process of its own (pid = rank, named "rank N"), all on rank 0's clock. One file, because
// the viewers open one trace at a time.
//
// The clock. Ranks on rank 0's host (the same boot id) share its steady_clock
// (CLOCK_MONOTONIC): their times are taken as they are, exactly. A rank on another host is
// shifted onto rank 0's clock by an offset measured through the communicator:
// kClockSamples times, every rank leaves a barrier and reads its clock, and the offset is
// the median of rank 0's reading minus its own. Each reading is off by how much later one
// rank leaves the barrier than the other, about one barrier's latency (microseconds over
// shared memory, tens of microseconds over a network); the median discards a sample taken
// while a rank was descheduled. Clocks drift apart by parts per million, nothing over the
// seconds of a window.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "train/runners/runner.h"

namespace dpcore::train {

constexpr int kClockSamples = 5;

// Writes the trace recorded so far to `path`: in a run of one process, trace::write; in a
// job of several, every rank calls it at the same point and rank 0 writes all of them.
// Returns the number of span events in the file (0 on the other ranks).
size_t write_run_trace(const std::string& path, StepRunner& runner);

// The part of write_run_trace each rank of a job runs, over `comm` (tensors on `device`).
size_t write_job_trace(const std::string& path, comm::Communicator& comm, Device device);

// What to add to the times of a clock read at `mine` to put them on the clock read at the
// same moments at `root`: the median of root[k] - mine[k].
int64_t clock_shift_ns(const std::vector<int64_t>& root, const std::vector<int64_t>& mine);

// Every rank's `mine`, in rank order, on every rank, over any transport: the lengths, then
// the bytes packed into int32 words (allgather copies them unchanged), on `device`.
std::vector<std::string> allgather_text(comm::Communicator& comm, Device device, const std::string& mine);

}  // namespace dpcore::train
