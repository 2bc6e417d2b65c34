// The mpi backend: one replica per process, collectives on a duplicate of MPI_COMM_WORLD.
//
// Every MPI call of dpcore but MPI_Abort runs on one process-wide communication thread,
// the one that initialised MPI: calls never race, and collectives overlap with the
// caller's compute. CUDA tensors go through a host copy.
//
// Errors: the communicator returns MPI errors (MPI_ERRORS_RETURN) and they become
// dpcore::Error naming the collective. A rank that dies is a different matter: mpirun
// notices and ends the whole job, which is how MPI jobs fail (docs/collectives.md). A rank
// that gives up (an error, a collective past the timeout) ends the job with MPI_Abort.
//
// Collectives are MPI's blocking ones, at full speed, each watched by the communicator's
// CollectiveWatchdog: one not complete after the timeout (--replica-timeout) aborts the job
// from the watchdog's thread, since an MPI collective cannot be cancelled and the ranks in
// it would wait for the missing one for ever. dpcore asks for MPI_THREAD_MULTIPLE, under
// which MPI_Abort may be called from that thread (or the caller's) while a collective
// blocks.
//
// Point to point: a send copies its payload to the host, starts an MPI_Isend of the copy and
// is done (so two ranks may both send first); the copies are freed as MPI completes them
// (checked at every later send and recv, waited for when the communicator is freed). A recv
// probes the message first, so that one of another size fails naming both sizes, then
// receives it; both block the communication thread under the watchdog. split() is
// MPI_Comm_split.
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <limits>
#include <sstream>

#include "comm/checks.h"
#include "comm/collective_span.h"
#include "comm/collective_watchdog.h"
#include "comm/comm_thread.h"
#include "comm/communicator.h"
#include "engine/backend.h"
#include "engine/trace.h"
#include "kernels/cpu/half/gemm_half.h"

namespace dpcore::comm {
namespace {

void check_mpi(int code, const std::string& what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  fail(what, ": ", std::string(text, size_t(length)));
}

int mpi_count(const std::string& op, int64_t numel) {
  DPCORE_CHECK(numel <= std::numeric_limits<int>::max(), op, ": ", numel, " elements exceed MPI's int count");
  return int(numel);
}

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::Float32: return MPI_FLOAT;
    case DType::Float64: return MPI_DOUBLE;
    case DType::Int32: return MPI_INT32_T;
    case DType::Int64: return MPI_INT64_T;
    // MPI has no 16-bit float: moved as bits, and summed by sum_op's own operation.
    case DType::BFloat16:
    case DType::Float16: return MPI_UINT16_T;
  }
  return MPI_DATATYPE_NULL;
}

// The sum of 16-bit floats, which MPI_SUM would add as integers: the CPU kernel of the
// local ring's 16-bit add (each pair added in float32 and rounded once to nearest even, as
// NCCL's kernels do).
template <class H>
void sum_half(void* in, void* inout, int* length, MPI_Datatype*) {
  kernels::cpu::add_half(*length, static_cast<const H*>(in), static_cast<const H*>(inout), static_cast<H*>(inout));
}

// MPI_SUM, or for a 16-bit dtype its operation, created once (on the communication thread,
// where every MPI call runs) and kept until MPI_Finalize frees it.
MPI_Op sum_op(DType dtype) {
  auto created = [](MPI_User_function* f) {
    MPI_Op op;
    check_mpi(MPI_Op_create(f, /*commute=*/1, &op), "MPI_Op_create");
    return op;
  };
  if (dtype == DType::BFloat16) {
    static const MPI_Op bf16 = created(sum_half<kernels::BFloat16>);
    return bf16;
  }
  if (dtype == DType::Float16) {
    static const MPI_Op f16 = created(sum_half<kernels::Float16>);
    return f16;
  }
  return MPI_SUM;
}

// This process's place in MPI_COMM_WORLD and MPI's thread level while MPI is initialised
// (size 0 otherwise): set on the communication thread, read by whichever thread gives up
// on the job.
std::atomic<int> world_rank{0}, world_size{0}, thread_level{MPI_THREAD_SINGLE};

// Prints "dpcore: error: rank R aborts the MPI job: REASON" and ends every process of the
// job (exit status 1). From any thread: the communication thread may be the one stuck in a
// collective. MPI_Abort may be called from another thread only under MPI_THREAD_MULTIPLE;
// below it the process exits with status 1 without finalising, and mpirun ends the other
// ranks for that instead (about a second later than after MPI_Abort).
[[noreturn]] void abort_job(const std::string& reason) {
  std::fprintf(stderr, "dpcore: error: rank %d aborts the MPI job: %s\n", world_rank.load(), reason.c_str());
  std::fflush(nullptr);  // stdout too: the log up to the failure
  if (thread_level == MPI_THREAD_MULTIPLE) MPI_Abort(MPI_COMM_WORLD, 1);  // does not return
  std::_Exit(1);
}

// MPI for the whole process, alive until exit so that MPI is finalised exactly once.
class MpiSession {
 public:
  static std::shared_ptr<MpiSession> get() {
    static std::shared_ptr<MpiSession> session = std::make_shared<MpiSession>();
    return session;
  }

  MpiSession() {
    thread_.run([this] {
      int initialized = 0, finalized = 0;
      MPI_Initialized(&initialized);
      MPI_Finalized(&finalized);
      DPCORE_CHECK(!finalized, "mpi: MPI was already finalized in this process");
      if (!initialized) {
        // Every call but an abort is made on this thread (FUNNELED); MULTIPLE lets the
        // watchdog's thread abort while this one blocks. (Open MPI provides it.)
        int provided = 0;
        check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "mpi: MPI_Init_thread");
        owns_mpi_ = true;
        record_world(provided);
        return;
      }
      // The program initialised MPI on another thread: this one may call MPI only if
      // calls from any thread, one at a time, are allowed.
      int level = 0;
      MPI_Query_thread(&level);
      DPCORE_CHECK(level >= MPI_THREAD_SERIALIZED, "mpi: MPI was initialised with thread level ", level,
                   "; dpcore calls MPI from its communication thread and needs MPI_THREAD_SERIALIZED (",
                   MPI_THREAD_SERIALIZED, ") or more: initialise with MPI_Init_thread");
      record_world(level);
    });
  }
  ~MpiSession() {
    thread_.run([this] {
      if (!owns_mpi_) return;
      world_size = 0;
      MPI_Finalize();
    });
  }

  CommThread& thread() { return thread_; }

 private:
  static void record_world(int level) {
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    world_rank = rank;
    thread_level = level;
    world_size = size;
  }

  bool owns_mpi_ = false;
  CommThread thread_;
};

// The host side of a tensor: the tensor itself on the CPU; for a CUDA tensor a host copy,
// taken after the device's queued work and written back by store().
class HostView {
 public:
  HostView(const Tensor& t, bool load) : tensor_(t) {
    if (t.device().is_cpu()) {
      host_ = t;
      return;
    }
    backend_for(t.device()).synchronize(t.device().index);
    host_ = load ? t.to(Device::cpu()) : Tensor::empty(t.shape(), t.dtype(), Device::cpu());
  }
  void* data() const { return host_.raw_data(); }
  const Tensor& tensor() const { return host_; }
  void store() const {
    if (tensor_.device().is_cpu()) return;
    tensor_.copy_(host_);
    backend_for(tensor_.device()).synchronize(tensor_.device().index);
  }

 private:
  Tensor tensor_, host_;
};

bool overlap(const Tensor& a, const Tensor& b) {
  auto begin = [](const Tensor& t) { return static_cast<const char*>(t.raw_data()); };
  return a.device() == b.device() && begin(a) < begin(b) + b.nbytes() && begin(b) < begin(a) + a.nbytes();
}

// A copy of a tensor on the host that MPI may read after the caller has reused the tensor.
Tensor host_copy(const Tensor& t) {
  if (t.device().is_cpu()) return t.clone();
  backend_for(t.device()).synchronize(t.device().index);
  return t.to(Device::cpu());
}

class MpiCommunicator : public Communicator {
 public:
  // On a duplicate of MPI_COMM_WORLD; names the communication thread's lane in a trace.
  explicit MpiCommunicator(std::chrono::milliseconds timeout) : MpiCommunicator(timeout, duplicate_world()) {
    session_->thread().run([this] { trace::set_lane("comm " + std::to_string(rank_), trace::kCommLanes + rank_); });
  }
  // Owns `comm`, made on the communication thread.
  MpiCommunicator(std::chrono::milliseconds timeout, MPI_Comm comm)
      : session_(MpiSession::get()),
        timeout_(timeout),
        watchdog_(timeout, [timeout](const std::string& op) { time_out(op, timeout); }),
        comm_(comm) {
    session_->thread().run([this] {
      check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "mpi: MPI_Comm_set_errhandler");
      MPI_Comm_rank(comm_, &rank_);
      MPI_Comm_size(comm_, &size_);
    });
  }
  // Frees the communicator after the collectives still queued (its error, if any, has
  // nobody left to tell) and the sends MPI has not yet delivered; the watchdog stops after
  // them.
  ~MpiCommunicator() override {
    session_->thread().run([this] {
      std::vector<MPI_Request> requests;
      for (const PendingSend& send : pending_sends_) requests.push_back(send.request);
      call("mpi send", [&] { return MPI_Waitall(int(requests.size()), requests.data(), MPI_STATUSES_IGNORE); });
      MPI_Comm_free(&comm_);
    });
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }

  Work allreduce(Tensor& tensor, ReduceOp reduce) override {
    Tensor t = tensor;
    return submit("allreduce", int64_t(t.nbytes()), [=](const std::string& op) {
      check_reducible(op, t, reduce, true);
      HostView host(t, true);
      const int count = mpi_count(op, t.numel());
      call(op, [&] { return MPI_Allreduce(MPI_IN_PLACE, host.data(), count, mpi_type(t.dtype()), sum_op(t.dtype()), comm_); });
      average(host.tensor(), reduce);
      host.store();
    });
  }

  Work broadcast(Tensor& tensor, int root) override {
    Tensor t = tensor;
    return submit("broadcast", int64_t(t.nbytes()), [=](const std::string& op) {
      check_defined(op, "input", t);
      check_root(op, root, size_);
      HostView host(t, rank_ == root);
      const int count = mpi_count(op, t.numel());
      call(op, [&] { return MPI_Bcast(host.data(), count, mpi_type(t.dtype()), root, comm_); });
      if (rank_ != root) host.store();
    });
  }

  Work reduce(Tensor& tensor, int root, ReduceOp reduce) override {
    Tensor t = tensor;
    return submit("reduce", int64_t(t.nbytes()), [=](const std::string& op) {
      check_reducible(op, t, reduce, true);
      check_root(op, root, size_);
      HostView host(t, true);
      const int count = mpi_count(op, t.numel());
      const bool is_root = rank_ == root;
      call(op, [&] {
        return MPI_Reduce(is_root ? MPI_IN_PLACE : host.data(), is_root ? host.data() : nullptr, count,
                          mpi_type(t.dtype()), sum_op(t.dtype()), root, comm_);
      });
      if (is_root) {
        average(host.tensor(), reduce);
        host.store();
      }
    });
  }

  Work allgather(const Tensor& input, Tensor& output) override {
    Tensor in = input, out = output;
    return submit("allgather", int64_t(in.nbytes()), [=](const std::string& op) {
      check_allgather_args(op, in, out, size_);
      // MPI forbids overlapping send and receive buffers (except its own in-place form).
      HostView send(overlap(in, out) ? in.clone() : in, true), receive(out, false);
      const int count = mpi_count(op, in.numel());
      call(op, [&] {
        return MPI_Allgather(send.data(), count, mpi_type(in.dtype()), receive.data(), count, mpi_type(in.dtype()),
                             comm_);
      });
      receive.store();
    });
  }

  Work reduce_scatter(const Tensor& input, Tensor& output, ReduceOp reduce) override {
    Tensor in = input, out = output;
    return submit("reduce_scatter", int64_t(in.nbytes()), [=](const std::string& op) {
      check_reduce_scatter_args(op, in, out, size_);
      check_reducible(op, in, reduce, true);
      HostView send(overlap(in, out) ? in.clone() : in, true), receive(out, false);
      const int count = mpi_count(op, out.numel());
      call(op, [&] {
        return MPI_Reduce_scatter_block(send.data(), receive.data(), count, mpi_type(in.dtype()), sum_op(in.dtype()),
                                        comm_);
      });
      average(receive.tensor(), reduce);
      receive.store();
    });
  }

  void barrier() override {
    submit("barrier", 0, [this](const std::string& op) {
      call(op, [&] { return MPI_Barrier(comm_); });
    }).wait();
  }

  Work send(const Tensor& tensor, int dst, int tag) override {
    Tensor t = tensor;
    return submit("send", int64_t(t.nbytes()), [=](const std::string& op) {
      check_point_to_point(op, "destination", dst, tag, t, rank_, size_);
      forget_delivered(op);
      PendingSend send{MPI_REQUEST_NULL, host_copy(t)};
      const int count = mpi_count(op, t.numel());
      check_mpi(MPI_Isend(send.payload.raw_data(), count, mpi_type(t.dtype()), dst, tag, comm_, &send.request), op);
      pending_sends_.push_back(std::move(send));
    }, dst, tag);
  }

  Work recv(Tensor& tensor, int src, int tag) override {
    Tensor t = tensor;
    return submit("recv", int64_t(t.nbytes()), [=](const std::string& op) {
      check_point_to_point(op, "source", src, tag, t, rank_, size_);
      forget_delivered(op);
      MPI_Status status;
      call(op, [&] { return MPI_Probe(src, tag, comm_, &status); });
      int sent_bytes = 0;
      check_mpi(MPI_Get_count(&status, MPI_BYTE, &sent_bytes), op);
      DPCORE_CHECK(size_t(sent_bytes) == t.nbytes(), op, ": rank ", rank_, " expects ", t.numel(), " ",
                   dtype_name(t.dtype()), " (", t.nbytes(), " bytes) from rank ", src, " (tag ", tag,
                   "), which sent ", sent_bytes, " bytes");
      HostView host(t, false);
      const int count = mpi_count(op, t.numel());
      call(op, [&] { return MPI_Recv(host.data(), count, mpi_type(t.dtype()), src, tag, comm_, MPI_STATUS_IGNORE); });
      host.store();
    }, src, tag);
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm sub = MPI_COMM_NULL;
    submit("split", 0, [&](const std::string& op) {
      call(op, [&] { return MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &sub); });
    }).wait();
    if (sub == MPI_COMM_NULL) return nullptr;
    return std::make_unique<MpiCommunicator>(timeout_, sub);
  }

  // Straight from the caller's thread (abort_job).
  void abort(const std::string& reason) override { abort_job(reason); }

 private:
  // Makes the blocking collective `mpi_call()` under the watchdog's watch.
  template <typename MpiCall>
  void call(const std::string& op, MpiCall mpi_call) {
    check_mpi(watchdog_.watch(op, mpi_call), op);
  }

  // What the watchdog does with a collective not complete after the timeout.
  [[noreturn]] static void time_out(const std::string& op, std::chrono::milliseconds timeout) {
    std::ostringstream why;
    why << op << ": not complete after " << double(timeout.count()) / 1000.0
        << " s (the replica timeout, --replica-timeout): a rank died or hangs";
    abort_job(why.str());
  }

  static MPI_Comm duplicate_world() {
    MPI_Comm comm = MPI_COMM_NULL;
    MpiSession::get()->thread().run([&] { check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "mpi: MPI_Comm_dup"); });
    return comm;
  }

  // On the communication thread: frees the payloads of the sends MPI has completed.
  void forget_delivered(const std::string& op) {
    while (!pending_sends_.empty()) {
      int delivered = 0;
      check_mpi(MPI_Test(&pending_sends_.front().request, &delivered, MPI_STATUS_IGNORE), op);
      if (!delivered) return;
      pending_sends_.pop_front();
    }
  }

  // In a trace, the collective is a span on the communication thread's lane, as the local
  // backend's are (comm/collective_span.h); `bytes` is this rank's input. A send or recv
  // (`peer` >= 0) names its peer and tag there.
  Work submit(const char* name, int64_t bytes, std::function<void(const std::string& op)> body, int peer = -1,
              int tag = 0) {
    std::string op = std::string("mpi ") + name;
    const CollectiveSpanLabel traced =
        peer >= 0 ? CollectiveSpanLabel(name, bytes, peer, tag) : CollectiveSpanLabel(name, bytes);
    return session_->thread().submit([this, op, body, traced] {
      trace::Span span("comm", [&] { return traced.label("mpi", size_, rank_); });
      body(op);
    });
  }

  void average(const Tensor& host, ReduceOp reduce) const {
    if (reduce != ReduceOp::Average || host.numel() == 0) return;
    Tensor t = host;
    backend_for(Device::cpu()).scale(1.0 / size_, t, t);
  }

  // A send MPI may still be reading the payload of.
  struct PendingSend {
    MPI_Request request;
    Tensor payload;
  };

  std::shared_ptr<MpiSession> session_;
  const std::chrono::milliseconds timeout_;
  CollectiveWatchdog watchdog_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  std::deque<PendingSend> pending_sends_;  // oldest first; only on the communication thread
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(std::chrono::milliseconds timeout) {
  return std::make_unique<MpiCommunicator>(timeout);
}

void abort_mpi_job_if_running(const std::string& reason) {
  if (world_size > 1) abort_job(reason);
}

void mpi_broadcast_bytes(void* data, size_t bytes, int root) {
  DPCORE_CHECK(bytes <= size_t(std::numeric_limits<int>::max()), "mpi_broadcast_bytes: ", bytes,
               " bytes exceed MPI's int count");
  MpiSession::get()->thread().run([&] {
    check_mpi(MPI_Bcast(data, int(bytes), MPI_BYTE, root, MPI_COMM_WORLD), "mpi_broadcast_bytes");
  });
}

std::vector<std::string> mpi_allgather_strings(const std::string& mine) {
  std::vector<std::string> all;
  MpiSession::get()->thread().run([&] {
    int size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int length = int(mine.size());
    std::vector<int> lengths(static_cast<size_t>(size)), offsets(static_cast<size_t>(size));
    check_mpi(MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, MPI_COMM_WORLD), "mpi_allgather_strings");
    int total = 0;
    for (int r = 0; r < size; ++r) {
      offsets[size_t(r)] = total;
      total += lengths[size_t(r)];
    }
    std::string joined(size_t(total), '\0');
    check_mpi(MPI_Allgatherv(mine.data(), length, MPI_CHAR, joined.data(), lengths.data(), offsets.data(), MPI_CHAR,
                             MPI_COMM_WORLD),
              "mpi_allgather_strings");
    for (int r = 0; r < size; ++r) all.push_back(joined.substr(size_t(offsets[size_t(r)]), size_t(lengths[size_t(r)])));
  });
  return all;
}

}  // namespace dpcore::comm
