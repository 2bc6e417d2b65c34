// The span a collective makes in a trace (engine/trace.h) on the communication thread that
// runs it, from when that thread takes it up to its end. Only the issuing thread knows what
// the collective is for (its trace::CollectiveLabel: "bucket 3"), so the label is read when
// the collective is submitted and the span is named from it later: "allreduce bucket 3",
// with the bytes, the algorithm, the ranks and how long it queued behind earlier ones; a
// send or recv also names its peer and tag.
#pragma once

#include <cstdint>

#include "engine/trace.h"

namespace dpcore::comm {

class CollectiveSpanLabel {
 public:
  // On the issuing thread, as the collective is submitted. Reads nothing while not tracing.
  CollectiveSpanLabel(const char* name, int64_t bytes);
  // A send or recv with rank `peer` under `tag`.
  CollectiveSpanLabel(const char* name, int64_t bytes, int peer, int tag);
  // On the communication thread, as it opens the span.
  trace::Label label(const char* algorithm, int ranks, int rank) const;

 private:
  const char* name_;
  int64_t bytes_;
  trace::Label purpose_;
  int64_t submitted_ns_ = 0;  // 0: not tracing when submitted
  int peer_ = -1, tag_ = 0;   // peer -1: a collective
};

}  // namespace dpcore::comm
