// The span a collective makes in a trace (engine/trace.h) on the communication thread that
// runs it, from when that thread takes it up to its end. Only the issuing thread knows what
// the collective is for (its trace::CollectiveLabel: "bucket 3"), so the label is read when
// the collective is submitted and the span is named from it later: "allreduce bucket 3",
// with the bytes, the algorithm, the ranks and how long it queued behind earlier ones.
#pragma once

#include <cstdint>

#include "engine/trace.h"

namespace dpcore::comm {

class CollectiveSpanLabel {
 public:
  // On the issuing thread, as the collective is submitted. Reads nothing while not tracing.
  CollectiveSpanLabel(const char* name, int64_t bytes);
  // On the communication thread, as it opens the span.
  trace::Label label(const char* algorithm, int ranks, int rank) const;

 private:
  const char* name_;
  int64_t bytes_;
  trace::Label purpose_;
  int64_t submitted_ns_ = 0;  // 0: not tracing when submitted
};

}  // namespace dpcore::comm
