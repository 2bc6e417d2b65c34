// ncclSend and ncclRecv: checked at the call, then queued (nccl_group.cpp); the receiver's
// task copies out of the sender's buffer once the sender's task has posted it, and the
// sender's task ends once the copy is done (nccl_clique.cpp).
#include "host_exec/runtime/nccl_clique.h"

namespace host_runtime::nccl {
namespace {

ncclResult_t check_and_submit(Op::Kind kind, const void* send, void* recv, size_t count, ncclDataType_t type, int peer,
                              ncclComm_t comm, cudaStream_t stream) {
  const std::string name = name_of(kind);
  if (!comm) return record(ncclInvalidArgument, name + ": comm is null");
  if (!valid_type(type)) return record(ncclInvalidArgument, name + ": invalid data type " + std::to_string(int(type)));
  const int size = comm->clique->size();
  if (peer < 0 || peer >= size)
    return record(ncclInvalidArgument,
                  name + ": peer " + std::to_string(peer) + " is not a rank of " + std::to_string(size));
  if (count > 0 && !send && !recv) return record(ncclInvalidArgument, name + ": the buffer is null");
  return submit(comm, stream, Op{kind, send, recv, count, type, ncclSum, peer});
}

}  // namespace
}  // namespace host_runtime::nccl

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  host_runtime::Bookkeeping hide;
  return host_runtime::nccl::check_and_submit(host_runtime::nccl::Op::Kind::Send, sendbuff, nullptr, count, datatype,
                                              peer, comm, stream);
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  host_runtime::Bookkeeping hide;
  return host_runtime::nccl::check_and_submit(host_runtime::nccl::Op::Kind::Recv, nullptr, recvbuff, count, datatype,
                                              peer, comm, stream);
}
