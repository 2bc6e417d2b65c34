// ncclCommSplit: a collective over the parent communicator's ranks, blocking as NCCL's is.
// The ranks' n-th calls on one clique meet in a round; the last to arrive forms the new
// cliques (one per color, its ranks ordered by key and then by their parent rank, on their
// parent devices) and wakes the others, each of which takes its new rank.
#include <algorithm>

#include "host_exec/runtime/nccl_clique.h"

namespace host_runtime::nccl {
namespace {

struct SplitRound {
  explicit SplitRound(int n) : color(n), key(n), clique(n), new_rank(n, -1) {}
  std::vector<int> color, key;
  std::vector<std::shared_ptr<Clique>> clique;  // per parent rank; null for NCCL_SPLIT_NOCOLOR
  std::vector<int> new_rank;
  int arrived = 0;
  bool formed = false;
};

struct Splits {
  std::mutex mutex;
  std::condition_variable changed;
  std::map<std::pair<const Clique*, uint64_t>, std::shared_ptr<SplitRound>> rounds;
};
Splits& splits() {
  static auto* s = new Splits;  // leaked, as the other registries: workers may outlive statics
  return *s;
}

// Mutex held, every rank arrived.
void form(SplitRound& round, const Clique& parent) {
  std::map<int, std::vector<int>> members;  // color -> parent ranks
  for (int r = 0; r < parent.size(); ++r)
    if (round.color[r] != NCCL_SPLIT_NOCOLOR) members[round.color[r]].push_back(r);
  for (auto& [color, ranks] : members) {
    std::stable_sort(ranks.begin(), ranks.end(), [&](int a, int b) { return round.key[a] < round.key[b]; });
    std::vector<int> devices;
    for (int r : ranks) devices.push_back(parent.device(r));
    auto clique = std::make_shared<Clique>(devices);
    for (size_t i = 0; i < ranks.size(); ++i) round.clique[ranks[i]] = clique, round.new_rank[ranks[i]] = int(i);
  }
  round.formed = true;
}

}  // namespace
}  // namespace host_runtime::nccl

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  using namespace host_runtime::nccl;
  host_runtime::Bookkeeping hide;
  if (!comm || !newcomm) return record(ncclInvalidArgument, "ncclCommSplit: comm or newcomm is null");
  if (config) return record(ncclInvalidArgument, "ncclCommSplit: the host NCCL takes no config (pass null)");
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
    return record(ncclInvalidArgument, "ncclCommSplit: color " + std::to_string(color) +
                                           " is negative and not NCCL_SPLIT_NOCOLOR");
  const ncclResult_t failed = comm->clique->async_error(comm->rank);
  if (failed != ncclSuccess) return record(failed, "ncclCommSplit: " + comm->clique->error_message());
  const Clique& parent = *comm->clique;
  Splits& all = splits();
  std::unique_lock<std::mutex> lock(all.mutex);
  const auto id = std::make_pair(&parent, comm->splits++);
  std::shared_ptr<SplitRound>& slot = all.rounds[id];
  if (!slot) slot = std::make_shared<SplitRound>(parent.size());
  const std::shared_ptr<SplitRound> round = slot;
  round->color[comm->rank] = color;
  round->key[comm->rank] = key;
  if (++round->arrived == parent.size()) {
    form(*round, parent);
    all.rounds.erase(id);
    all.changed.notify_all();
  }
  all.changed.wait(lock, [&] { return round->formed; });
  *newcomm = round->clique[comm->rank] ? make_comm(round->clique[comm->rank], round->new_rank[comm->rank]) : nullptr;
  return ncclSuccess;
}
