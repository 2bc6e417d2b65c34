// The collectives' entry points: their arguments are checked at the call, as NCCL checks
// them (ncclInvalidArgument), then the call is queued on the stream (nccl_group.cpp) and
// runs when every rank's stream has reached its counterpart (nccl_clique.cpp). A call of
// no elements does nothing, as in NCCL.
#include "host_exec/runtime/nccl_clique.h"

namespace host_runtime::nccl {
namespace {

// Checks what NCCL checks before queueing. Off root, ncclReduce writes no recvbuff and
// ncclBroadcast reads no sendbuff.
ncclResult_t check_and_submit(const Op& op, bool needs_send, bool needs_recv, ncclComm_t comm, cudaStream_t stream) {
  const std::string name = name_of(op.kind);
  if (!comm) return record(ncclInvalidArgument, name + ": comm is null");
  if (!valid_type(op.type))
    return record(ncclInvalidArgument, name + ": invalid data type " + std::to_string(int(op.type)));
  if (!valid_reduce(op.reduce))
    return record(ncclInvalidArgument, name + ": invalid reduction operation " + std::to_string(int(op.reduce)));
  const int size = comm->clique->size();
  if (op.root < 0 || op.root >= size)
    return record(ncclInvalidArgument,
                  name + ": root " + std::to_string(op.root) + " is not a rank of " + std::to_string(size));
  if (op.count == 0) return ncclSuccess;
  if (needs_send && !op.send) return record(ncclInvalidArgument, name + ": sendbuff is null");
  if (needs_recv && !op.recv) return record(ncclInvalidArgument, name + ": recvbuff is null");
  return submit(comm, stream, op);
}

int rank_of(ncclComm_t comm) { return comm ? comm->rank : 0; }

}  // namespace
}  // namespace host_runtime::nccl

using host_runtime::nccl::Op;

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream) {
  host_runtime::Bookkeeping hide;
  const bool is_root = host_runtime::nccl::rank_of(comm) == root;
  return host_runtime::nccl::check_and_submit(
      Op{Op::Kind::Reduce, sendbuff, is_root ? recvbuff : nullptr, count, datatype, op, root},
      true, is_root, comm, stream);
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  host_runtime::Bookkeeping hide;
  const bool is_root = host_runtime::nccl::rank_of(comm) == root;
  return host_runtime::nccl::check_and_submit(
      Op{Op::Kind::Broadcast, is_root ? sendbuff : nullptr, recvbuff, count, datatype, ncclSum, root},
      is_root, true, comm, stream);
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  host_runtime::Bookkeeping hide;
  return host_runtime::nccl::check_and_submit(
      Op{Op::Kind::AllReduce, sendbuff, recvbuff, count, datatype, op, 0}, true, true, comm,
      stream);
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  host_runtime::Bookkeeping hide;
  return host_runtime::nccl::check_and_submit(
      Op{Op::Kind::ReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, 0}, true, true,
      comm, stream);
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  host_runtime::Bookkeeping hide;
  return host_runtime::nccl::check_and_submit(
      Op{Op::Kind::AllGather, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0}, true,
      true, comm, stream);
}
