#include "comm/collective_span.h"

namespace dpcore::comm {

CollectiveSpanLabel::CollectiveSpanLabel(const char* name, int64_t bytes) : name_(name), bytes_(bytes) {
  if (!trace::recording()) return;
  purpose_ = trace::CollectiveLabel::current();
  submitted_ns_ = trace::now_ns();
}

CollectiveSpanLabel::CollectiveSpanLabel(const char* name, int64_t bytes, int peer, int tag)
    : CollectiveSpanLabel(name, bytes) {
  peer_ = peer;
  tag_ = tag;
}

trace::Label CollectiveSpanLabel::label(const char* algorithm, int ranks, int rank) const {
  trace::Label label{purpose_.name.empty() ? name_ : std::string(name_) + " " + purpose_.name,
                     {{"bytes", bytes_}, {"algorithm", algorithm}, {"ranks", int64_t(ranks)}, {"rank", int64_t(rank)}}};
  if (peer_ >= 0) {
    label.args.push_back({"peer", int64_t(peer_)});
    label.args.push_back({"tag", int64_t(tag_)});
  }
  if (submitted_ns_ > 0) label.args.push_back({"queued_us", double(trace::now_ns() - submitted_ns_) / 1000.0});
  label.args.insert(label.args.end(), purpose_.args.begin(), purpose_.args.end());
  return label;
}

}  // namespace dpcore::comm
