// The collectives of every communicator backend this build and machine can run, by message
// size, with nccl-tests' bandwidth definitions:
//   algbw = message bytes / time, where the message is the whole buffer of allreduce and
//           broadcast, allgather's output and reduce_scatter's input;
//   busbw = algbw x 2(n-1)/n (allreduce), x (n-1)/n (allgather, reduce_scatter), x 1
//           (broadcast): comparable across rank counts and against link bandwidth.
// allreduce_bf16_grads is --grad-dtype bf16's allreduce of a float32 gradient buffer of the
// size named (cast to bfloat16, allreduce, cast back), its bandwidths counted in float32
// bytes so that they compare with allreduce's directly.
// Backends: local on the CPU (2, 3 and 4 replicas), local and nccl on the GPUs when there
// are any, and mpi when started under mpiexec (then with a fixed iteration count, since
// every rank must run the same number of collectives):
//   comm_bench --benchmark_filter=allreduce/local
//   mpiexec -n 2 comm_bench --benchmark_filter=mpi
#include <benchmark/benchmark.h>

#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "engine/backend.h"
#include "engine/runtime.h"

namespace {

using dpcore::Device;
using dpcore::DType;
using dpcore::Tensor;
using dpcore::comm::Communicator;

using Group = std::vector<std::unique_ptr<Communicator>>;

// Runs `op(rank)` on every replica of an in-process group once per step(): rank 0 on the
// benchmark's thread, the others on helper threads, as the trainer's replica threads do.
class Crew {
 public:
  Crew(size_t replicas, std::function<void(size_t)> op) : op_(std::move(op)) {
    for (size_t r = 1; r < replicas; ++r) helpers_.emplace_back([this, r] { serve(r); });
  }
  ~Crew() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (auto& t : helpers_) t.join();
  }
  void step() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++requested_;
    }
    wake_.notify_all();
    op_(0);
  }

 private:
  void serve(size_t rank) {
    for (uint64_t done = 0;; ++done) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return requested_ > done || stopping_; });
        if (requested_ == done) return;  // stopping, every requested step run
      }
      op_(rank);
    }
  }

  std::function<void(size_t)> op_;
  std::mutex mutex_;
  std::condition_variable wake_;
  uint64_t requested_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> helpers_;
};

// AllreduceBf16Grads: --grad-dtype bf16's gradient allreduce of a float32 buffer of the
// size named: rounded into a bfloat16 copy, that allreduced (half the bytes), widened back
// (train/step/gradient_wire.h), against Allreduce of the same float32 buffer.
enum class Op { Allreduce, AllreduceBf16Grads, Allgather, ReduceScatter, Broadcast };
const char* op_name(Op op) {
  switch (op) {
    case Op::Allreduce: return "allreduce";
    case Op::AllreduceBf16Grads: return "allreduce_bf16_grads";
    case Op::Allgather: return "allgather";
    case Op::ReduceScatter: return "reduce_scatter";
    case Op::Broadcast: return "broadcast";
  }
  return "?";
}
double bus_factor(Op op, int n) {
  switch (op) {
    case Op::Allreduce:
    case Op::AllreduceBf16Grads: return 2.0 * (n - 1) / n;
    case Op::Allgather:
    case Op::ReduceScatter: return double(n - 1) / n;
    case Op::Broadcast: return 1.0;
  }
  return 1.0;
}

// One replica's buffers for a message of `elements` float32 (a multiple of the world size).
struct Buffers {
  Tensor in, out;
};
Buffers make_buffers(Op op, int64_t elements, int world, Device device) {
  int64_t part = elements / world;
  switch (op) {
    case Op::Allreduce:
    case Op::Broadcast: return {Tensor::full({elements}, 1.0, DType::Float32, device), Tensor()};
    case Op::AllreduceBf16Grads:
      return {Tensor::full({elements}, 1.0, DType::Float32, device), Tensor::empty({elements}, DType::BFloat16, device)};
    case Op::Allgather: return {Tensor::full({part}, 1.0, DType::Float32, device), Tensor::empty({elements}, DType::Float32, device)};
    case Op::ReduceScatter: return {Tensor::full({elements}, 1.0, DType::Float32, device), Tensor::empty({part}, DType::Float32, device)};
  }
  return {};
}

void run_op(Op op, Communicator& c, Buffers& b) {
  switch (op) {
    case Op::Allreduce: c.allreduce(b.in).wait(); return;
    case Op::AllreduceBf16Grads:
      dpcore::backend_for(b.in.device()).cast(b.in, b.out);
      c.allreduce(b.out).wait();
      dpcore::backend_for(b.in.device()).cast(b.out, b.in);
      return;
    case Op::Allgather: c.allgather(b.in, b.out).wait(); return;
    case Op::ReduceScatter: c.reduce_scatter(b.in, b.out).wait(); return;
    case Op::Broadcast: c.broadcast(b.in, 0).wait(); return;
  }
}

void measure(benchmark::State& state, Op op, const Group& group, const std::vector<Device>& devices, int64_t bytes) {
  const int world = group[0]->size();
  const int64_t elements = bytes / 4 / world * world;
  std::vector<Buffers> buffers;
  for (size_t r = 0; r < group.size(); ++r) buffers.push_back(make_buffers(op, elements, world, devices[r]));
  Crew crew(group.size(), [&](size_t r) { run_op(op, *group[r], buffers[r]); });
  crew.step();  // warm-up: first-touch allocation of the scratch buffers, NCCL connections
  for (auto _ : state) crew.step();
  double message = double(elements) * 4;  // AllreduceBf16Grads: the float32 gradients it reduces
  using benchmark::Counter;
  state.counters["algbw"] = Counter(message, Counter::kIsIterationInvariantRate, Counter::OneK::kIs1000);
  state.counters["busbw"] =
      Counter(message * bus_factor(op, world), Counter::kIsIterationInvariantRate, Counter::OneK::kIs1000);
  state.SetLabel(std::to_string(world) + " ranks");
}

std::string size_name(int64_t bytes) {
  if (bytes >= (1 << 20)) return std::to_string(bytes >> 20) + "MiB";
  return std::to_string(bytes >> 10) + "KiB";
}

const Op kOps[] = {Op::Allreduce, Op::AllreduceBf16Grads, Op::Allgather, Op::ReduceScatter, Op::Broadcast};
const std::vector<int64_t> kCpuSizes = {4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20};
const std::vector<int64_t> kGpuSizes = {4 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20};

// Registers every op and size for one in-process setup, all on one group, built when the
// first of them runs (so that a filter that selects none of them builds nothing). One
// group, not one per benchmark: Google Benchmark calls a benchmark's function several
// times while it settles the iteration count, and building an NCCL group costs far more
// than the collectives measured. The group is never destroyed: it would be at static
// destruction, after the CUDA runtime may have shut down, where NCCL's teardown can fail
// or hang; the process exit frees everything.
void register_group(const std::string& backend, const std::vector<Device>& devices, const std::vector<int64_t>& sizes) {
  std::string where = devices[0].is_cpu() ? "cpu" : "cuda";
  auto group = std::make_shared<Group*>(nullptr);
  auto built = [=]() -> const Group& {
    if (!*group)
      *group = new Group(backend == "nccl" ? dpcore::comm::make_nccl_group(devices)
                                           : dpcore::comm::make_local_group(int(devices.size())));
    return **group;
  };
  for (Op op : kOps) {
    for (int64_t bytes : sizes) {
      std::string name = std::string(op_name(op)) + "/" + backend + "/" + where + "/world:" +
                         std::to_string(devices.size()) + "/" + size_name(bytes);
      benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& state) {
        measure(state, op, built(), devices, bytes);
      })->UseRealTime()->Unit(benchmark::kMicrosecond);
    }
  }
}

// mpi: one communicator for the process, made on first use (MPI starts once per process).
void register_mpi() {
  for (Op op : kOps) {
    for (int64_t bytes : kCpuSizes) {
      std::string name = std::string(op_name(op)) + "/mpi/cpu/" + size_name(bytes);
      benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& state) {
        static Group world = dpcore::comm::make_communicators({"mpi", {Device::cpu()}, {}});
        measure(state, op, world, {Device::cpu()}, bytes);
      })->UseRealTime()->Unit(benchmark::kMicrosecond)->Iterations(bytes >= (16 << 20) ? 10 : 100);
    }
  }
}

bool under_mpiexec() { return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE"); }

[[maybe_unused]] const bool registered = [] {
  if (under_mpiexec()) {
    register_mpi();
    return true;
  }
  for (int world : {2, 3, 4}) register_group("local", std::vector<Device>(size_t(world), Device::cpu()), kCpuSizes);
  int gpus = dpcore::runtime::cuda_device_count();
  if (gpus > 0) {
    register_group("local", dpcore::comm::place_replicas(2, Device::Type::CUDA), kGpuSizes);
    register_group("nccl", dpcore::comm::place_replicas(gpus, Device::Type::CUDA), kGpuSizes);
  }
  return true;
}();

}  // namespace
