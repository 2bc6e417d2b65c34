// Communicator: the collectives that data-parallel training needs, behind one interface
// with one implementation per transport (PyTorch c10d's ProcessGroup, made small):
//
//   local  replicas are threads of this process; a hand-written ring over shared memory
//          that reduces with the Backend kernels, so CPU and CUDA tensors both work
//          (comm/local.cpp).
//   mpi    one replica per process under mpirun; MPI_COMM_WORLD (comm/mpi.cpp).
//   nccl   one replica per GPU; NCCL on a communication stream (comm/nccl.cpp).
//
// Every collective is asynchronous: it returns a Work at once and runs on a communication
// thread (local, mpi) or stream (nccl), overlapping with the caller. All ranks must issue
// the same collectives in the same order, as with MPI and NCCL. Tensors are contiguous
// and are treated as flat arrays of numel() elements.
//
// make_communicators() is the ONE place that chooses a backend by name (the CLI's
// --backend flag); the make_* functions below it build a specific one.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/work.h"
#include "engine/tensor.h"
#include "kernels/error.h"

namespace dpcore::comm {

enum class ReduceOp { Sum, Average };
const char* reduce_op_name(ReduceOp op);  // "sum", "average"

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;  // "local", "mpi", "nccl"

  // t <- op over all ranks of t, on every rank. Average is the sum times 1/size; DDP-style
  // sum(g / W) is the caller's business (pre-scale, then Sum): see docs/collectives.md.
  virtual Work allreduce(Tensor& t, ReduceOp op = ReduceOp::Sum) = 0;
  // t <- root's t, on every rank.
  virtual Work broadcast(Tensor& t, int root) = 0;
  // root's t <- op over all ranks of t; the other ranks' t are left unchanged.
  virtual Work reduce(Tensor& t, int root, ReduceOp op = ReduceOp::Sum) = 0;
  // out [size * in.numel()] <- the ins of ranks 0, 1, ... one after the other.
  virtual Work allgather(const Tensor& in, Tensor& out) = 0;
  // in [size * chunk]; out [chunk] <- op over all ranks of their in's chunk number rank().
  virtual Work reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op = ReduceOp::Sum) = 0;
  // Returns when every rank has called barrier() (after this rank's earlier collectives).
  virtual void barrier() = 0;

  // ---- point to point (torch.distributed's isend/irecv) ----
  // Only the two ranks take part. A recv takes the oldest message from `src` under `tag`
  // not yet received (messages between two ranks under one tag arrive in the order they
  // were sent); t must have the message's dtype and element count (its shape is the
  // caller's business). A send's Work is done once `t` may be reused. On local and mpi a
  // send copies the payload and does not wait for the receiver, so two ranks may both
  // send first; on nccl a send may wait for its recv, and the tag is ignored. A recv holds
  // this rank's communication queue until its message arrives: the calls issued after it
  // start after it. A message to oneself, or a negative tag, is refused. Waiting longer
  // than the timeout fails the group (local), aborts the job (mpi) or the communicator
  // (nccl), naming the call. docs/collectives.md, "Point to point and sub-groups".
  virtual Work send(const Tensor& t, int dst, int tag = 0) = 0;
  virtual Work recv(Tensor& t, int src, int tag = 0) = 0;

  // ---- sub-groups (torch.distributed.new_group, MPI_Comm_split) ----
  // Every rank of this group calls it, in the same place of its sequence of calls. Ranks
  // with the same color >= 0 form a new group, ranked by (key, rank here); a rank with a
  // negative color joins none and gets null. The new communicator has every collective
  // and send/recv and the same transport and timeout. local: it has a queue and
  // communication thread of its own, and an abort in it ends only its group. mpi: every
  // communicator of a process shares its one communication thread (a recv waiting there
  // holds the others' calls too), and an abort ends the job.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

  // Gives up on the group: collectives waiting on this rank (and, where the transport can,
  // on the other ranks) fail with an Error quoting `reason`, and later ones fail at once.
  // local: every replica fails at once. mpi: MPI_Abort ends the whole job. nccl:
  // ncclCommAbort, so this rank's pending collectives return instead of hanging.
  virtual void abort(const std::string& reason) = 0;
};

// What a waiting collective of an aborted group throws: an echo of another replica's
// failure, not a failure of its own (a runner that goes on without the failed replica,
// --on-replica-failure shrink, tells the cause from its echoes by this).
class GroupAborted : public Error {
 public:
  using Error::Error;
};
// What the replica that waited longest in vain throws (local): the ranks that never came.
class ReplicasMissing : public Error {
 public:
  ReplicasMissing(const std::string& what, std::vector<int> missing) : Error(what), missing(std::move(missing)) {}
  std::vector<int> missing;
};

// ---- local: replicas are threads of one process ----
struct LocalOptions {
  // How long a replica waits for the others at any rendezvous before the group fails with
  // "local allreduce: replica 2 did not arrive within 300 s".
  std::chrono::milliseconds timeout = std::chrono::seconds(300);
  // Rank r's communication thread in a trace: the lane "<lanes> r", placed at first_lane + r
  // (-1: trace::kCommLanes + r). A group beside the replicas' (a pipeline's stages) names
  // its own.
  std::string lanes = "comm";
  int first_lane = -1;
  // If given, runs on rank r's communication thread before its first call, with r: a
  // pipeline's stages pin their communication threads to their own cores with it, so that
  // a send does not wait for a core another stage is computing on.
  std::function<void(int rank)> thread_start;
};
// One Communicator per replica, rank i at index i. Each replica's thread calls the
// collectives on its own Communicator; they meet inside. world_size >= 1.
std::vector<std::unique_ptr<Communicator>> make_local_group(int world_size, const LocalOptions& options = {});

// ---- mpi: one replica per process, launched by mpirun ----
// Uses a duplicate of MPI_COMM_WORLD. Initialises MPI on first use, with
// MPI_THREAD_MULTIPLE (and finalises it at exit), unless the program already did; then it
// must have asked for at least MPI_THREAD_SERIALIZED, since every MPI call is made on
// dpcore's communication thread (but an abort: below MULTIPLE, a rank that gives up exits
// with status 1 instead of calling MPI_Abort, and mpirun ends the others for that).
// A collective (MPI's blocking one) not complete after `timeout` (a rank died or hangs;
// the CLI's --replica-timeout) aborts the whole job from the communicator's watchdog
// thread, "dpcore: error: rank 0 aborts the MPI job: mpi allreduce: not complete after
// 300 s (the replica timeout, --replica-timeout): ...": an MPI collective cannot be
// cancelled, so the group could not go on.
std::unique_ptr<Communicator> make_mpi_communicator(std::chrono::milliseconds timeout = std::chrono::seconds(300));
// What a rank that gives up after an error calls before it returns: when this process is
// one of several of an MPI job and has MPI initialised, prints "dpcore: error: rank R
// aborts the MPI job: REASON" and ends every rank with MPI_Abort (exit status 1), since
// finalising MPI instead would wait for the other ranks while they wait for this one in
// their next collective. Otherwise (one process, MPI not in use) returns at once, and the
// process ends as usual.
void abort_mpi_job_if_running(const std::string& reason);
// Copies `bytes` bytes at `data` from rank `root` to every rank of MPI_COMM_WORLD
// (initialising MPI like make_mpi_communicator). Shares the NCCL unique id between
// processes.
void mpi_broadcast_bytes(void* data, size_t bytes, int root);
// Every rank's `mine`, in rank order, on every rank of MPI_COMM_WORLD.
std::vector<std::string> mpi_allgather_strings(const std::string& mine);

// ---- nccl: one rank per GPU ----
// A collective's Work::wait() that sees no completion within `timeout` (a rank died or
// hangs; the CLI's --replica-timeout) aborts the communicator and fails naming the
// collective and the timeout; an error NCCL reports asynchronously fails it at once.
//
// One process, one thread per GPU: rank i on devices[i] (all CUDA, all different).
std::vector<std::unique_ptr<Communicator>> make_nccl_group(const std::vector<Device>& devices,
                                                           std::chrono::milliseconds timeout = std::chrono::seconds(300));
// One rank per process. The ranks agree on NCCL's unique id either over MPI_COMM_WORLD
// (id_file empty; the ranks' hosts and devices are then compared first, so that two ranks
// on one GPU fail with a clear error) or through a file that rank 0 writes (atomically)
// and the others wait for, up to `timeout`, on a filesystem they share.
struct NcclIdExchange {
  std::string id_file;
  std::chrono::milliseconds timeout = std::chrono::seconds(300);
};
std::unique_ptr<Communicator> make_nccl_communicator(int rank, int size, Device device,
                                                     const NcclIdExchange& exchange = {},
                                                     std::chrono::milliseconds timeout = std::chrono::seconds(300));
// Fails with the message the CLI shows unless `devices` can form an NCCL group: all CUDA
// and no GPU used twice ("nccl: ranks 0 and 1 would share cuda:0; NCCL refuses two ranks
// on one GPU — use --backend local for several replicas on one GPU"). Needs no GPU.
void check_nccl_devices(const std::vector<Device>& devices);

// ---- processes started by mpirun ----
// This process's place in a job started by mpirun/mpiexec (Open MPI's OMPI_COMM_WORLD_*
// or the PMI_* variables of MPICH's launchers); absent when not started by one.
struct Launch {
  int rank = 0, size = 1, local_rank = 0;  // local_rank: among the processes on this host
};
std::optional<Launch> mpirun_launch();

// ---- choosing by name ----
// Where `replicas` replicas of one process go on devices of `type`: CPU replicas all on
// the CPU; CUDA replicas round-robin over the usable GPUs (several per GPU when there are
// more replicas than GPUs, which the local backend allows and NCCL refuses).
std::vector<Device> place_replicas(int replicas, Device::Type type);

struct CommConfig {
  std::string backend = "local";  // "local", "mpi" or "nccl"
  // One entry per replica of THIS process (see place_replicas). mpi, and nccl in a job
  // started by mpirun (one process per GPU, NCCL's id shared over MPI): exactly one; the
  // number of processes comes from mpirun.
  std::vector<Device> devices = {Device::cpu()};
  LocalOptions local;  // its timeout also bounds each nccl and mpi collective
};
// The communicators of this process's replicas, rank order. Fails with a clear error for
// an unknown backend, a backend this build lacks (and how to enable it), or a device list
// the backend cannot use.
std::vector<std::unique_ptr<Communicator>> make_communicators(const CommConfig& config);

}  // namespace dpcore::comm
