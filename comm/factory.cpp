// Choosing a communicator: the one place that knows which backends this build has. The
// mpi and nccl files are compiled only when their libraries were found (comm/CMakeLists
// defines DPCORE_COMM_MPI / DPCORE_COMM_NCCL for this file); without them, their entry
// points fail with a message that says how to get them.
#include <cstdlib>
#include <string>

#include "comm/checks.h"
#include "comm/communicator.h"
#include "engine/runtime.h"

namespace dpcore::comm {

namespace {
[[maybe_unused]] const char* const kNoMpi =
    "mpi: this build of dpcore has no MPI support; install libopenmpi-dev (scripts/install-deps.sh) and "
    "configure with -DDPCORE_MPI=ON";
[[maybe_unused]] const char* const kNoNccl =
    "nccl: this build of dpcore has no CUDA/NCCL support; configure with -DDPCORE_CUDA=ON on a machine with the "
    "CUDA toolkit and NCCL";
}  // namespace

#ifndef DPCORE_COMM_MPI
std::unique_ptr<Communicator> make_mpi_communicator(std::chrono::milliseconds) { fail(kNoMpi); }
void abort_mpi_job_if_running(const std::string&) {}  // without MPI there is no MPI job to end
void mpi_broadcast_bytes(void*, size_t, int) { fail(kNoMpi); }
std::vector<std::string> mpi_allgather_strings(const std::string&) { fail(kNoMpi); }
#endif

#ifndef DPCORE_COMM_NCCL
// The device list is still checked first, so the message for two ranks on one GPU does
// not depend on the build.
std::vector<std::unique_ptr<Communicator>> make_nccl_group(const std::vector<Device>& devices, std::chrono::milliseconds) {
  check_nccl_devices(devices);
  fail(kNoNccl);
}
std::unique_ptr<Communicator> make_nccl_communicator(int, int, Device device, const NcclIdExchange&,
                                                     std::chrono::milliseconds) {
  check_nccl_devices({device});
  fail(kNoNccl);
}
#endif

void check_nccl_devices(const std::vector<Device>& devices) {
  DPCORE_CHECK(!devices.empty(), "nccl: no devices given");
  std::vector<std::string> gpus;
  for (size_t r = 0; r < devices.size(); ++r) {
    DPCORE_CHECK(devices[r].is_cuda(), "nccl: rank ", r, " is on ", devices[r].str(),
                 "; NCCL needs one CUDA device per rank — use --backend local or mpi for CPU replicas");
    gpus.push_back(devices[r].str());
  }
  check_distinct_gpus(gpus);
}

std::vector<Device> place_replicas(int replicas, Device::Type type) {
  DPCORE_CHECK(replicas >= 1, "place_replicas: ", replicas, " replicas; need at least 1");
  if (type == Device::Type::CPU) return std::vector<Device>(size_t(replicas), Device::cpu());
  int gpus = runtime::cuda_device_count();
  DPCORE_CHECK(gpus > 0, "place_replicas: ", replicas, " CUDA replica(s) asked for, but no CUDA device is usable "
               "on this machine");
  std::vector<Device> devices;
  for (int r = 0; r < replicas; ++r) devices.push_back(Device::cuda(r % gpus));
  return devices;
}

std::optional<Launch> mpirun_launch() {
  auto number = [](const char* name) -> std::optional<int> {
    const char* v = std::getenv(name);
    if (!v || !*v) return std::nullopt;
    try {
      return std::stoi(v);
    } catch (const std::exception&) {
      return std::nullopt;
    }
  };
  for (const char* prefix : {"OMPI_COMM_WORLD_", "PMI_"}) {
    std::string p = prefix;
    auto size = number((p + "SIZE").c_str()), rank = number((p + "RANK").c_str());
    if (!size || !rank) continue;
    auto local = number((p + "LOCAL_RANK").c_str());
    if (!local) local = number("MPI_LOCALRANKID");
    return Launch{*rank, *size, local.value_or(0)};
  }
  return std::nullopt;
}

std::vector<std::unique_ptr<Communicator>> make_communicators(const CommConfig& config) {
  const std::string& name = config.backend;
  const size_t replicas = config.devices.size();
  DPCORE_CHECK(replicas >= 1, name, ": no replicas (the device list is empty)");
  if (name == "local") return make_local_group(int(replicas), config.local);
  if (name == "nccl") {
    // Under mpirun: one rank per process, NCCL's unique id shared over MPI.
    std::optional<Launch> launch = mpirun_launch();
    if (launch && launch->size > 1) {
      DPCORE_CHECK(replicas == 1, "nccl under mpirun: one replica per process, not ", replicas);
      std::vector<std::unique_ptr<Communicator>> group;
      group.push_back(make_nccl_communicator(launch->rank, launch->size, config.devices[0], {}, config.local.timeout));
      return group;
    }
    return make_nccl_group(config.devices, config.local.timeout);
  }
  if (name == "mpi") {
    DPCORE_CHECK(replicas == 1, "mpi: one replica per process, not ", replicas,
                 " — start N processes with mpirun -np N, or use --backend local for replicas in one process");
    std::vector<std::unique_ptr<Communicator>> group;
    group.push_back(make_mpi_communicator(config.local.timeout));
    return group;
  }
  fail("unknown communication backend '", name, "': choose local, nccl or mpi");
}

}  // namespace dpcore::comm
