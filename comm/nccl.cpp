// The nccl backend: one rank per GPU, NCCL collectives on a communication stream per
// communicator.
//
// Ordering with the caller's work: each collective first makes the communication stream
// wait (through an event) for everything queued so far on the caller's current stream
// (kernels/cuda_runtime/stream.h), so NCCL reads finished data while later compute overlaps with
// it; Work::wait() then polls the collective's completion event and NCCL's asynchronous
// error state until the collective is done, NCCL reports an error, or the replica timeout
// runs out: a dead peer then aborts the communicator and fails the wait with a message
// naming the collective and the timeout, instead of hanging the job. Every NCCL call on a
// communicator and its abort are serialised by one mutex, so abort() never frees the
// communicator under a call. In-flight collectives keep their tensors alive until they
// complete, even when the caller drops the Work.
//
// NCCL refuses two ranks on one GPU; the device lists are checked first so that the user
// sees why (check_nccl_devices). Average is ncclAvg, which scales by 1/size inside NCCL.
//
// Point to point: ncclSend/ncclRecv, each alone in an ncclGroupStart/End, on the
// communication stream like the collectives. NCCL has no tags (as in torch's NCCL backend,
// the tag is checked and otherwise ignored: a pair's messages match in issue order), cannot
// tell a recv of the wrong size, and a send need not complete before its recv is posted:
// two ranks that both send first to each other can wait until the timeout. split() is
// ncclCommSplit.
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <unistd.h>

#include <chrono>
#include <deque>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "comm/checks.h"
#include "comm/communicator.h"
#include "engine/io/atomic_file.h"
#include "kernels/cuda_runtime/check.h"
#include "kernels/cuda_runtime/devices.h"
#include "kernels/cuda_runtime/stream.h"

namespace dpcore::comm {
namespace {

void check_nccl(ncclResult_t result, const std::string& what, ncclComm_t comm = nullptr) {
  if (result == ncclSuccess) return;
  std::string detail = ncclGetLastError(comm);
  fail(what, ": ", ncclGetErrorString(result), detail.empty() ? "" : " (" + detail + ")");
}

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::Float32: return ncclFloat32;
    case DType::Float64: return ncclFloat64;
    case DType::Int32: return ncclInt32;
    case DType::Int64: return ncclInt64;
    // Summed by NCCL in float32 and rounded back at every step (--grad-dtype bf16).
    case DType::BFloat16: return ncclBfloat16;
    case DType::Float16: return ncclFloat16;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp reduce) { return reduce == ReduceOp::Sum ? ncclSum : ncclAvg; }

cudaEvent_t new_event() {
  cudaEvent_t event;
  CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  return event;
}

// What a communicator and its in-flight collectives share, freed by the last of them.
struct NcclState {
  ncclComm_t comm = nullptr;
  int device = 0;
  cudaStream_t stream = nullptr;
  std::chrono::milliseconds timeout;
  std::mutex mutex;          // held across every NCCL call on comm, and by abort
  std::string abort_reason;  // set by abort(): the communicator is unusable (and freed)

  NcclState(ncclComm_t c, int d, std::chrono::milliseconds t) : comm(c), device(d), timeout(t) {
    kernels::cuda_runtime::DeviceGuard guard(device);
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  }
  ~NcclState() {
    kernels::cuda_runtime::DeviceGuard guard(device);
    if (abort_reason.empty()) {
      cudaStreamSynchronize(stream);
      ncclCommDestroy(comm);
    }
    cudaStreamDestroy(stream);
  }

  // Mutex held. The first reason wins; ncclCommAbort frees the communicator.
  void abort_locked(const std::string& reason) {
    if (!abort_reason.empty()) return;
    abort_reason = reason.empty() ? "aborted" : reason;
    ncclCommAbort(comm);
  }
};

// How long a Work::wait() sleeps between two looks once the collective has taken more
// than kSpinFor: short collectives (DDP's buckets) are seen at once, long ones cost no core.
constexpr auto kSpinFor = std::chrono::milliseconds(1);
constexpr auto kPollEvery = std::chrono::microseconds(100);

// One collective: done when its event on the communication stream has fired.
class NcclWork : public Work::Impl {
 public:
  NcclWork(std::shared_ptr<NcclState> state, std::string op, std::vector<Tensor> tensors)
      : state_(std::move(state)), op_(std::move(op)), tensors_(std::move(tensors)), finished_(new_event()) {
    CUDA_CHECK(cudaEventRecord(finished_, state_->stream));
  }
  ~NcclWork() override { cudaEventDestroy(finished_); }

  bool done() override {
    cudaError_t status = cudaEventQuery(finished_);
    if (status == cudaErrorNotReady) return false;
    CUDA_CHECK(status);
    return true;
  }
  void wait() override {
    kernels::cuda_runtime::DeviceGuard guard(state_->device);
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
      const cudaError_t status = cudaEventQuery(finished_);
      if (status != cudaErrorNotReady) CUDA_CHECK(status);
      {
        std::lock_guard<std::mutex> lock(state_->mutex);
        DPCORE_CHECK(state_->abort_reason.empty(), op_, ": the communicator was aborted: ", state_->abort_reason);
        ncclResult_t async = ncclSuccess;
        check_nccl(ncclCommGetAsyncError(state_->comm, &async), op_, state_->comm);
        if (async != ncclSuccess && async != ncclInProgress) {
          const std::string detail = ncclGetLastError(state_->comm);
          const std::string message = op_ + ": " + ncclGetErrorString(async) + (detail.empty() ? "" : " (" + detail + ")");
          state_->abort_locked(message);  // a communicator with an asynchronous error is unusable
          fail(message);
        }
      }
      if (status == cudaSuccess) return;
      const auto waited = std::chrono::steady_clock::now() - start;
      if (waited >= state_->timeout) {
        std::ostringstream text;
        text << op_ << ": not complete after " << double(state_->timeout.count()) / 1000.0
             << " s (the replica timeout, --replica-timeout): a rank died or hangs";
        const std::string message = text.str();
        {
          std::lock_guard<std::mutex> lock(state_->mutex);
          state_->abort_locked(message);
        }
        fail(message, "; the communicator was aborted");
      }
      if (waited < kSpinFor) std::this_thread::yield();
      else std::this_thread::sleep_for(kPollEvery);
    }
  }

 private:
  std::shared_ptr<NcclState> state_;
  std::string op_;
  std::vector<Tensor> tensors_;  // kept alive while NCCL may still use them
  cudaEvent_t finished_;
};

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int device, std::chrono::milliseconds timeout)
      : state_(std::make_shared<NcclState>(comm, device, timeout)) {
    check_nccl(ncclCommUserRank(comm, &rank_), "nccl: ncclCommUserRank", comm);
    check_nccl(ncclCommCount(comm, &size_), "nccl: ncclCommCount", comm);
  }
  ~NcclCommunicator() override {
    for (auto& work : in_flight_) {
      try {
        work->wait();
      } catch (const std::exception&) {
        // The caller saw (or chose not to see) this error through its Work.
      }
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }

  Work allreduce(Tensor& t, ReduceOp reduce) override {
    std::string op = "nccl allreduce";
    check_reducible(op, t, reduce, true);
    return launch(op, {t}, [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclAllReduce(t.raw_data(), t.raw_data(), size_t(t.numel()), nccl_type(t.dtype()), nccl_op(reduce),
                           comm, stream);
    });
  }

  Work broadcast(Tensor& t, int root) override {
    std::string op = "nccl broadcast";
    check_defined(op, "input", t);
    check_root(op, root, size_);
    return launch(op, {t}, [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclBroadcast(t.raw_data(), t.raw_data(), size_t(t.numel()), nccl_type(t.dtype()), root, comm, stream);
    });
  }

  Work reduce(Tensor& t, int root, ReduceOp reduce) override {
    std::string op = "nccl reduce";
    check_reducible(op, t, reduce, true);
    check_root(op, root, size_);
    return launch(op, {t}, [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclReduce(t.raw_data(), t.raw_data(), size_t(t.numel()), nccl_type(t.dtype()), nccl_op(reduce), root,
                        comm, stream);
    });
  }

  Work allgather(const Tensor& in, Tensor& out) override {
    std::string op = "nccl allgather";
    check_allgather_args(op, in, out, size_);
    return launch(op, {in, out}, [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclAllGather(in.raw_data(), out.raw_data(), size_t(in.numel()), nccl_type(in.dtype()), comm, stream);
    });
  }

  Work reduce_scatter(const Tensor& in, Tensor& out, ReduceOp reduce) override {
    std::string op = "nccl reduce_scatter";
    check_reduce_scatter_args(op, in, out, size_);
    check_reducible(op, in, reduce, true);
    return launch(op, {in, out}, [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclReduceScatter(in.raw_data(), out.raw_data(), size_t(out.numel()), nccl_type(in.dtype()),
                               nccl_op(reduce), comm, stream);
    });
  }

  // NCCL has no barrier: a one-element allreduce that every rank must join.
  void barrier() override {
    if (!token_.defined()) token_ = Tensor::zeros({1}, DType::Float32, Device::cuda(state_->device));
    launch("nccl barrier", {token_}, [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclAllReduce(token_.raw_data(), token_.raw_data(), 1, ncclFloat32, ncclSum, comm, stream);
    }).wait();
  }

  Work send(const Tensor& t, int dst, int tag) override {
    std::string op = "nccl send";
    check_point_to_point(op, "destination", dst, tag, t, rank_, size_);
    return launch(op, {t}, [&](ncclComm_t comm, cudaStream_t stream) {
      return grouped(
          [&] { return ncclSend(t.raw_data(), size_t(t.numel()), nccl_type(t.dtype()), dst, comm, stream); });
    });
  }

  Work recv(Tensor& t, int src, int tag) override {
    std::string op = "nccl recv";
    check_point_to_point(op, "source", src, tag, t, rank_, size_);
    return launch(op, {t}, [&](ncclComm_t comm, cudaStream_t stream) {
      return grouped(
          [&] { return ncclRecv(t.raw_data(), size_t(t.numel()), nccl_type(t.dtype()), src, comm, stream); });
    });
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    const std::string op = "nccl split";
    kernels::cuda_runtime::DeviceGuard guard(state_->device);
    ncclComm_t sub = nullptr;
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      DPCORE_CHECK(state_->abort_reason.empty(), op, ": the communicator was aborted: ", state_->abort_reason);
      check_nccl(ncclCommSplit(state_->comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &sub, nullptr), op,
                 state_->comm);
    }
    if (sub == nullptr) return nullptr;
    return std::make_unique<NcclCommunicator>(sub, state_->device, state_->timeout);
  }

  void abort(const std::string& reason) override {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->abort_locked(reason);
  }

 private:
  // `call()` (an ncclSend or ncclRecv) inside a group of its own; the first error wins.
  template <class Call>
  static ncclResult_t grouped(Call call) {
    ncclResult_t result = ncclGroupStart();
    if (result != ncclSuccess) return result;
    result = call();
    ncclResult_t ended = ncclGroupEnd();
    return result != ncclSuccess ? result : ended;
  }

  template <class Call>
  Work launch(const std::string& op, std::vector<Tensor> tensors, Call call) {
    for (const Tensor& t : tensors) {
      DPCORE_CHECK(t.device() == Device::cuda(state_->device), op, ": ", t.str(), " is not on this rank's device cuda:",
                   state_->device);
    }
    kernels::cuda_runtime::DeviceGuard guard(state_->device);
    cudaEvent_t ready = new_event();
    CUDA_CHECK(cudaEventRecord(ready, kernels::cuda_runtime::current_stream(state_->device)));
    CUDA_CHECK(cudaStreamWaitEvent(state_->stream, ready, 0));
    CUDA_CHECK(cudaEventDestroy(ready));  // released once it has fired
    {
      std::lock_guard<std::mutex> lock(state_->mutex);  // abort() must not free the communicator under the call
      DPCORE_CHECK(state_->abort_reason.empty(), op, ": the communicator was aborted: ", state_->abort_reason);
      check_nccl(call(state_->comm, state_->stream), op, state_->comm);
    }
    auto work = std::make_shared<NcclWork>(state_, op, std::move(tensors));
    forget_finished();
    in_flight_.push_back(work);
    return Work(work);
  }

  void forget_finished() {
    while (!in_flight_.empty() && in_flight_.front()->done()) in_flight_.pop_front();
  }

  std::shared_ptr<NcclState> state_;
  int rank_ = 0, size_ = 1;
  std::deque<std::shared_ptr<NcclWork>> in_flight_;  // in launch order, so they finish in order
  Tensor token_;
};

void check_timeout(std::chrono::milliseconds timeout) {
  DPCORE_CHECK(timeout.count() > 0, "nccl: timeout ", timeout.count(), " ms must be positive");
}

void check_usable(int rank, Device device) {
  int usable = kernels::cuda_runtime::device_count();
  DPCORE_CHECK(device.index < usable, "nccl: rank ", rank, " wants ", device.str(), " but ", usable,
               " CUDA device(s) are usable on this machine");
}

std::string host_name() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

void write_id_file(const std::string& path, const ncclUniqueId& id) {
  io::AtomicFileWriter writer(path, "nccl id file");
  writer.write(&id, sizeof(id));
  writer.commit();
}

// Waits for rank 0's id file. Rank 0 writes it with a rename, so it is complete once seen.
ncclUniqueId read_id_file(int rank, const NcclIdExchange& exchange) {
  auto deadline = std::chrono::steady_clock::now() + exchange.timeout;
  for (;;) {
    std::ifstream file(exchange.id_file, std::ios::binary);
    ncclUniqueId id;
    if (file.read(reinterpret_cast<char*>(&id), sizeof(id))) return id;
    DPCORE_CHECK(std::chrono::steady_clock::now() < deadline, "nccl: rank ", rank, " waited ",
                 double(exchange.timeout.count()) / 1000.0, " s for rank 0's id file ", exchange.id_file);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_nccl_group(const std::vector<Device>& devices,
                                                           std::chrono::milliseconds timeout) {
  check_nccl_devices(devices);
  check_timeout(timeout);
  std::vector<int> indices;
  for (size_t r = 0; r < devices.size(); ++r) {
    check_usable(int(r), devices[r]);
    indices.push_back(devices[r].index);
  }
  std::vector<ncclComm_t> comms(devices.size());
  check_nccl(ncclCommInitAll(comms.data(), int(comms.size()), indices.data()), "nccl: ncclCommInitAll");
  std::vector<std::unique_ptr<Communicator>> group;
  for (size_t r = 0; r < comms.size(); ++r)
    group.push_back(std::make_unique<NcclCommunicator>(comms[r], indices[r], timeout));
  return group;
}

std::unique_ptr<Communicator> make_nccl_communicator(int rank, int size, Device device,
                                                     const NcclIdExchange& exchange,
                                                     std::chrono::milliseconds timeout) {
  DPCORE_CHECK(size >= 1 && 0 <= rank && rank < size, "nccl: rank ", rank, " is not in a group of ", size);
  check_timeout(timeout);
  check_nccl_devices({device});
  check_usable(rank, device);
  ncclUniqueId id;
  if (rank == 0) check_nccl(ncclGetUniqueId(&id), "nccl: ncclGetUniqueId");
  if (exchange.id_file.empty()) {
    check_distinct_gpus(mpi_allgather_strings(device.str() + " on host " + host_name()));
    mpi_broadcast_bytes(&id, sizeof(id), 0);
  } else if (rank == 0) {
    write_id_file(exchange.id_file, id);
  } else {
    id = read_id_file(rank, exchange);
  }
  kernels::cuda_runtime::DeviceGuard guard(device.index);
  ncclComm_t comm;
  check_nccl(ncclCommInitRank(&comm, size, id, rank), "nccl: ncclCommInitRank");
  return std::make_unique<NcclCommunicator>(comm, device.index, timeout);
}

}  // namespace dpcore::comm
