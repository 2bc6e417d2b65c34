// Choosing a backend by name (the CLI's --backend), placing replicas on devices, and the
// device-list checks that stop NCCL from being asked for two ranks on one GPU. None of
// this needs a GPU or mpirun.
#include <gtest/gtest.h>

#include "comm/communicator.h"
#include "engine/runtime.h"
#include "support/error_of.h"
#include "support/test_support.h"

namespace dpcore::testing {
namespace {

using comm::CommConfig;

const std::string kShareCuda0 =
    "nccl: ranks 0 and 1 would share cuda:0; NCCL refuses two ranks on one GPU — use --backend local for several "
    "replicas on one GPU";

TEST(ChooseBackend, LocalByName) {
  auto group = comm::make_communicators({"local", comm::place_replicas(3, Device::Type::CPU), {}});
  ASSERT_EQ(group.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(group[size_t(r)]->backend(), "local");
    EXPECT_EQ(group[size_t(r)]->rank(), r);
    EXPECT_EQ(group[size_t(r)]->size(), 3);
  }
}

TEST(ChooseBackend, UnknownNameListsTheChoices) {
  EXPECT_EQ(error_of([] { comm::make_communicators({"gloo", {Device::cpu()}, {}}); }),
            "unknown communication backend 'gloo': choose local, nccl or mpi");
}

TEST(ChooseBackend, EmptyDeviceListIsRefused) {
  EXPECT_EQ(error_of([] { comm::make_communicators({"local", {}, {}}); }),
            "local: no replicas (the device list is empty)");
}

TEST(ChooseBackend, MpiRunsOneReplicaPerProcess) {
  EXPECT_EQ(error_of([] { comm::make_communicators({"mpi", {Device::cpu(), Device::cpu()}, {}}); }),
            "mpi: one replica per process, not 2 — start N processes with mpirun -np N, or use --backend local for "
            "replicas in one process");
}

#if !DPCORE_TEST_HAVE_MPI
TEST(ChooseBackend, MpiMissingFromTheBuildSaysHowToGetIt) {
  EXPECT_EQ(error_of([] { comm::make_communicators({"mpi", {Device::cpu()}, {}}); }),
            "mpi: this build of dpcore has no MPI support; install libopenmpi-dev (scripts/install-deps.sh) and "
            "configure with -DDPCORE_MPI=ON");
}
#endif

TEST(ChooseBackend, NcclRefusesTwoRanksOnOneGpuBeforeCallingNccl) {
  // Runs without a GPU and without NCCL: the device list is checked first.
  EXPECT_EQ(error_of([] { comm::make_nccl_group({Device::cuda(0), Device::cuda(0)}); }), kShareCuda0);
  EXPECT_EQ(error_of([] { comm::make_communicators({"nccl", {Device::cuda(0), Device::cuda(0)}, {}}); }),
            kShareCuda0);
  EXPECT_EQ(error_of([] { comm::check_nccl_devices({Device::cuda(1), Device::cuda(0), Device::cuda(1)}); }),
            "nccl: ranks 0 and 2 would share cuda:1; NCCL refuses two ranks on one GPU — use --backend local for "
            "several replicas on one GPU");
  EXPECT_NO_THROW(comm::check_nccl_devices({Device::cuda(0), Device::cuda(1)}));
}

TEST(ChooseBackend, NcclRefusesCpuReplicas) {
  EXPECT_EQ(error_of([] { comm::make_nccl_group({Device::cuda(0), Device::cpu()}); }),
            "nccl: rank 1 is on cpu; NCCL needs one CUDA device per rank — use --backend local or mpi for CPU "
            "replicas");
  EXPECT_EQ(error_of([] { comm::make_nccl_communicator(0, 2, Device::cpu()); }),
            "nccl: rank 0 is on cpu; NCCL needs one CUDA device per rank — use --backend local or mpi for CPU "
            "replicas");
}

TEST(ChooseBackend, NcclWithoutAGpuSaysWhy) {
  if (cuda_available()) GTEST_SKIP() << "this machine has a GPU; the no-GPU message cannot be provoked";
#if DPCORE_TEST_HAVE_NCCL
  EXPECT_EQ(error_of([] { comm::make_nccl_group({Device::cuda(0)}); }),
            "nccl: rank 0 wants cuda:0 but 0 CUDA device(s) are usable on this machine");
#else
  EXPECT_EQ(error_of([] { comm::make_nccl_group({Device::cuda(0)}); }),
            "nccl: this build of dpcore has no CUDA/NCCL support; configure with -DDPCORE_CUDA=ON on a machine with "
            "the CUDA toolkit and NCCL");
#endif
}

TEST(PlaceReplicas, CpuReplicasAllOnTheCpu) {
  EXPECT_EQ(comm::place_replicas(3, Device::Type::CPU), std::vector<Device>(3, Device::cpu()));
  EXPECT_THROW(comm::place_replicas(0, Device::Type::CPU), Error);
}

TEST(PlaceReplicas, CudaReplicasRoundRobinOverTheGpus) {
  int gpus = runtime::cuda_device_count();
  if (gpus == 0) {
    EXPECT_EQ(error_of([] { comm::place_replicas(2, Device::Type::CUDA); }),
              "place_replicas: 2 CUDA replica(s) asked for, but no CUDA device is usable on this machine");
    return;
  }
  std::vector<Device> devices = comm::place_replicas(gpus + 1, Device::Type::CUDA);
  for (int r = 0; r <= gpus; ++r) EXPECT_EQ(devices[size_t(r)], Device::cuda(r % gpus));
  // More replicas than GPUs: fine for local, the clear error for nccl.
  EXPECT_NE(error_of([&] { comm::make_communicators({"nccl", devices, {}}); }).find("would share cuda:0"),
            std::string::npos);
}

}  // namespace
}  // namespace dpcore::testing

namespace dpcore::comm {
namespace {

// A process started by mpirun learns its rank, the world size and its rank on this host
// from the launcher's environment (Open MPI's, or the PMI variables of MPICH's).
TEST(MpirunLaunch, ReadFromTheLaunchersEnvironment) {
  const char* names[] = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                         "PMI_RANK", "PMI_SIZE", "PMI_LOCAL_RANK", "MPI_LOCALRANKID"};
  std::vector<std::pair<std::string, std::string>> saved;
  for (const char* n : names) {
    if (const char* v = std::getenv(n)) saved.emplace_back(n, v);
    unsetenv(n);
  }
  EXPECT_FALSE(mpirun_launch().has_value());
  setenv("OMPI_COMM_WORLD_RANK", "3", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
  auto launch = mpirun_launch();
  ASSERT_TRUE(launch.has_value());
  EXPECT_EQ(launch->rank, 3);
  EXPECT_EQ(launch->size, 4);
  EXPECT_EQ(launch->local_rank, 1);
  for (const char* n : names) unsetenv(n);
  setenv("PMI_RANK", "0", 1);
  setenv("PMI_SIZE", "2", 1);
  launch = mpirun_launch();
  ASSERT_TRUE(launch.has_value());
  EXPECT_EQ(launch->size, 2);
  EXPECT_EQ(launch->local_rank, 0);
  for (const char* n : names) unsetenv(n);
  for (auto& [n, v] : saved) setenv(n.c_str(), v.c_str(), 1);
}

}  // namespace
}  // namespace dpcore::comm
