// The host execution layer's <nccl.h>: the part of NCCL's API that dpcore calls (comm/nccl.cpp),
// plus the send/receive and group calls, implemented over host threads by
// tests/host_exec/runtime/nccl*.cpp: the ranks are threads of one process, each with its device
// of the host CUDA runtime (cuda_runtime_api.h), and every call is queued on the caller's stream
// and runs when every rank's stream reaches its counterpart. The names, types and values are
// NCCL 2.28's (/usr/local/cuda/include/nccl.h); of its enums only the values this API uses.
#pragma once

#include <cstddef>

#include "cuda_runtime_api.h"

extern "C" {

typedef struct ncclComm* ncclComm_t;

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;

typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;

// NCCL's numbering; bfloat16 and float16 are summed in float32 and rounded back per step.
typedef enum {
  ncclInt32 = 2,
  ncclInt64 = 4,
  ncclFloat16 = 6,
  ncclFloat32 = 7,
  ncclFloat64 = 8,
  ncclBfloat16 = 9
} ncclDataType_t;

// ---- communicators (runtime/nccl_comm.cpp) ----
// An id naming a new clique: the ranks that pass it to ncclCommInitRank form one communicator.
ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId);
// Joins the clique `commId` as `rank` of `nranks` on the current device; returns once all
// nranks have joined (inside a group: at ncclGroupEnd).
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);
// One clique of ndev ranks in the calling thread, rank i on devlist[i] (0..ndev-1 when null).
ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist);
// Waits for the communicator's queued work, then frees it.
ncclResult_t ncclCommDestroy(ncclComm_t comm);
// Frees the communicator at once; its queued and waiting work ends without running.
ncclResult_t ncclCommAbort(ncclComm_t comm);
// ncclSuccess, or the error that made the communicator unusable (a peer gone, mismatched calls).
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError);
ncclResult_t ncclCommCount(const ncclComm_t comm, int* count);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank);
// Every rank of comm calls it (it returns once all have): the ranks that pass one color form
// a new communicator, ranked by key, then by their rank in comm; NCCL_SPLIT_NOCOLOR gets
// none (*newcomm null). config must be null here (runtime/nccl_split.cpp).
#define NCCL_SPLIT_NOCOLOR -1
typedef struct ncclConfig ncclConfig_t;
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config);

// ---- errors (runtime/nccl_comm.cpp) ----
const char* ncclGetErrorString(ncclResult_t result);
// What the last error was about (comm is unused, as in NCCL).
const char* ncclGetLastError(ncclComm_t comm);

// ---- collectives (runtime/nccl_collectives.cpp) ----
// In place when sendbuff == recvbuff (ncclReduceScatter: recvbuff == sendbuff + rank *
// recvcount; ncclAllGather: sendbuff == recvbuff + rank * sendcount).
ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream);

// ---- point to point (runtime/nccl_p2p.cpp) ----
// The k-th send from rank a to rank b matches b's k-th receive from a; both wait for the
// other, so two that must progress together go in one group.
ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream);
ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream);

// ---- groups (runtime/nccl_group.cpp) ----
// The calls between them are queued at the outermost ncclGroupEnd, a rank's sends and
// receives on one stream as one operation.
ncclResult_t ncclGroupStart();
ncclResult_t ncclGroupEnd();

}  // extern "C"
