#include "train/sync/sync_strategy.h"

#include "engine/data/flag_text.h"
#include "engine/tensor.h"

namespace dpcore::train {

SyncStrategy parse_sync(const std::string& flag) {
  if (flag == "full") return {SyncStrategy::Kind::Full, 1};
  if (flag == "async") return {SyncStrategy::Kind::Async, 1};
  const std::string prefix = "local:";
  if (flag.compare(0, prefix.size(), prefix) == 0) {
    if (auto k = data::positive_integer(flag.substr(prefix.size()))) return {SyncStrategy::Kind::Local, *k};
    fail("--sync ", flag, ": K must be a whole number of steps of at least 1 (e.g. local:4)");
  }
  fail("--sync ", flag, ": expected full, local:K or async");
}

}  // namespace dpcore::train
