// Communicators: unique ids, joining a clique (ncclCommInitRank blocks until every rank has
// joined, as NCCL's bootstrap does), ncclCommInitAll, destroy and abort, the asynchronous
// error, and NCCL's error strings. Ids are single use: the clique's registry entry goes
// once its last rank has joined.
#include <atomic>
#include <cstring>
#include <unistd.h>

#include "host_exec/runtime/nccl_clique.h"

namespace host_runtime::nccl {
namespace {

std::mutex last_error_mutex;
std::string& last_error() {
  static auto* text = new std::string;  // leaked: workers may fail a clique during static destruction
  return *text;
}

constexpr char kIdMagic[] = "dpcore host nccl id";

// A clique being formed, by its id.
struct Joining {
  int nranks = 0;
  std::vector<int> devices;  // -1: not joined yet
  int joined = 0;
  std::shared_ptr<Clique> clique;  // made when the last rank joins
  ncclResult_t error = ncclSuccess;
  std::string why;
};
struct Joinings {
  std::mutex mutex;
  std::condition_variable changed;
  std::map<std::string, std::shared_ptr<Joining>> by_id;
};
Joinings& joinings() {
  static auto* j = new Joinings;
  return *j;
}

// Mutex held. Fails the whole init: every waiting rank returns `error`.
void fail_joining(Joining& j, ncclResult_t error, const std::string& why) {
  if (j.error != ncclSuccess) return;
  j.error = error;
  j.why = why;
  joinings().changed.notify_all();
}

// Mutex held, every rank joined: NCCL refuses two ranks on one device.
void complete(Joining& j) {
  for (int r = 0; r < j.nranks; ++r)
    for (int q = 0; q < r; ++q)
      if (j.devices[q] == j.devices[r])
        return fail_joining(j, ncclInvalidUsage,
                            "ncclCommInitRank: duplicate GPU detected: rank " + std::to_string(q) + " and rank " +
                                std::to_string(r) + " both on CUDA device " + std::to_string(j.devices[r]));
  j.clique = std::make_shared<Clique>(j.devices);
  joinings().changed.notify_all();
}

ncclResult_t join(int nranks, const ncclUniqueId& id, int rank, int device, std::shared_ptr<Joining>& out) {
  if (std::memcmp(id.internal, kIdMagic, sizeof(kIdMagic)) != 0)
    return record(ncclInvalidArgument, "ncclCommInitRank: the unique id was not made by ncclGetUniqueId");
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return record(ncclInvalidArgument, "ncclCommInitRank: rank " + std::to_string(rank) + " is not in a clique of " +
                                           std::to_string(nranks));
  Joinings& all = joinings();
  std::lock_guard<std::mutex> lock(all.mutex);
  std::shared_ptr<Joining>& slot = all.by_id[std::string(id.internal, sizeof(id.internal))];
  if (!slot) {
    slot = std::make_shared<Joining>();
    slot->nranks = nranks;
    slot->devices.assign(nranks, -1);
  }
  out = slot;
  Joining& j = *slot;
  if (j.nranks != nranks)
    fail_joining(j, ncclInvalidUsage, "ncclCommInitRank: rank " + std::to_string(rank) + " says the clique has " +
                                          std::to_string(nranks) + " ranks, an earlier rank said " +
                                          std::to_string(j.nranks));
  else if (j.devices[rank] != -1)
    fail_joining(j, ncclInvalidUsage, "ncclCommInitRank: rank " + std::to_string(rank) + " joined twice");
  if (j.error != ncclSuccess) return record(j.error, j.why);
  j.devices[rank] = device;
  if (++j.joined == nranks) {
    all.by_id.erase(std::string(id.internal, sizeof(id.internal)));
    complete(j);
  }
  return ncclSuccess;
}

ncclResult_t await_clique(const std::shared_ptr<Joining>& j, int rank, ncclComm_t* comm) {
  Joinings& all = joinings();
  std::unique_lock<std::mutex> lock(all.mutex);
  all.changed.wait(lock, [&] { return j->clique || j->error != ncclSuccess; });
  if (j->error != ncclSuccess) return record(j->error, j->why);
  *comm = make_comm(j->clique, rank);
  return ncclSuccess;
}

}  // namespace

ncclComm_t make_comm(std::shared_ptr<Clique> clique, int rank) {
  auto* comm = new ncclComm;
  comm->clique = std::move(clique);
  comm->rank = rank;
  return comm;
}

ncclResult_t record(ncclResult_t result, const std::string& message) {
  std::lock_guard<std::mutex> lock(last_error_mutex);
  last_error() = message;
  return result;
}

}  // namespace host_runtime::nccl

using host_runtime::nccl::record;

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    case ncclNumResults: break;
  }
  return "unknown result code";
}

const char* ncclGetLastError(ncclComm_t) {
  thread_local std::string copy;  // valid until the calling thread's next call
  std::lock_guard<std::mutex> lock(host_runtime::nccl::last_error_mutex);
  copy = host_runtime::nccl::last_error();
  return copy.c_str();
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  host_runtime::Bookkeeping hide;
  if (!id) return record(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is null");
  static std::atomic<unsigned long long> next{1};
  const unsigned long long number = next++;
  const long pid = long(getpid());
  std::memset(id->internal, 0, sizeof(id->internal));
  std::memcpy(id->internal, host_runtime::nccl::kIdMagic, sizeof(host_runtime::nccl::kIdMagic));
  std::memcpy(id->internal + 64, &pid, sizeof(pid));
  std::memcpy(id->internal + 64 + sizeof(pid), &number, sizeof(number));
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  host_runtime::Bookkeeping hide;
  if (!comm) return record(ncclInvalidArgument, "ncclCommInitRank: comm is null");
  std::shared_ptr<host_runtime::nccl::Joining> joining;
  const ncclResult_t joined = host_runtime::nccl::join(nranks, id, rank, host_runtime::current_device(), joining);
  if (joined != ncclSuccess) return joined;
  if (host_runtime::nccl::in_group()) {  // one thread may init several ranks in a group: wait at its end
    host_runtime::nccl::at_group_end(
        [joining, rank, comm] { return host_runtime::nccl::await_clique(joining, rank, comm); });
    return ncclSuccess;
  }
  return host_runtime::nccl::await_clique(joining, rank, comm);
}

ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  host_runtime::Bookkeeping hide;
  if (!comms) return record(ncclInvalidArgument, "ncclCommInitAll: comm is null");
  if (ndev < 1 || ndev > host_runtime::kDevices)
    return record(ncclInvalidArgument, "ncclCommInitAll: invalid device count requested: " + std::to_string(ndev));
  std::vector<int> devices;
  for (int i = 0; i < ndev; ++i) {
    const int d = devlist ? devlist[i] : i;
    if (d < 0 || d >= host_runtime::kDevices)
      return record(ncclInvalidArgument, "ncclCommInitAll: invalid device " + std::to_string(d) +
                                             " (there are " + std::to_string(host_runtime::kDevices) + ")");
    for (int earlier : devices)
      if (earlier == d)
        return record(ncclInvalidUsage, "ncclCommInitAll: duplicate device " + std::to_string(d) + " in devlist");
    devices.push_back(d);
  }
  auto clique = std::make_shared<host_runtime::nccl::Clique>(devices);
  for (int r = 0; r < ndev; ++r) comms[r] = host_runtime::nccl::make_comm(clique, r);
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  host_runtime::Bookkeeping hide;
  if (!comm) return ncclSuccess;
  std::map<const host_runtime::Stream*, host_runtime::Point> queued;
  {
    std::lock_guard<std::mutex> lock(comm->mutex);
    queued = comm->queued;
  }
  for (const auto& entry : queued) entry.second.wait();  // NCCL finishes the communicator's work first
  comm->clique->leave(comm->rank, false);
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  host_runtime::Bookkeeping hide;
  if (!comm) return ncclSuccess;
  comm->clique->leave(comm->rank, true);
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* error) {
  host_runtime::Bookkeeping hide;
  if (!comm || !error) return record(ncclInvalidArgument, "ncclCommGetAsyncError: comm or asyncError is null");
  *error = comm->clique->async_error(comm->rank);
  if (*error != ncclSuccess) record(*error, comm->clique->error_message());
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  host_runtime::Bookkeeping hide;
  if (!comm || !count) return record(ncclInvalidArgument, "ncclCommCount: comm or count is null");
  *count = comm->clique->size();
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  host_runtime::Bookkeeping hide;
  if (!comm || !rank) return record(ncclInvalidArgument, "ncclCommUserRank: comm or rank is null");
  *rank = comm->rank;
  return ncclSuccess;
}
