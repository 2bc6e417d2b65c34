#include "kernels/cuda_runtime/target_check.h"

#include <climits>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/error.h"
#include "kernels/cuda_runtime/check.h"
#include "kernels/cuda_runtime/devices.h"
#include "kernels/cuda_runtime/stream.h"

namespace dpcore::kernels::cuda_runtime {

namespace {

// Written by the device, read by the host after a synchronize.
struct TargetError {
  int set;  // 0 until a check fails
  int op;   // index into op_names
  long long row, target, classes;
};

// Where a device keeps its record: `claim` in device memory, because atomics on mapped
// host memory are atomic only on some platforms; the record itself in mapped host memory,
// so the host reads it without a copy.
struct DeviceRecord {
  int* claim = nullptr;
  TargetError* host = nullptr;
  TargetError* device_view = nullptr;  // the same memory as the device addresses it
};

constexpr int kThreads = 512;

// One block scans all rows (a batch of targets is small) and keeps the lowest bad row,
// so that the report is the same on every run. The first failing check wins the record:
// later ones would only repeat the same mistake.
__global__ void check_targets_kernel(const int64_t* target, long long rows, long long classes, int op, int* claim,
                                     TargetError* error) {
  __shared__ long long first_bad[kThreads];
  long long bad = LLONG_MAX;
  for (long long r = threadIdx.x; r < rows; r += blockDim.x) {
    const long long t = target[r];
    if ((t < 0 || t >= classes) && r < bad) bad = r;
  }
  first_bad[threadIdx.x] = bad;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) first_bad[threadIdx.x] = min(first_bad[threadIdx.x], first_bad[threadIdx.x + half]);
    __syncthreads();
  }
  if (threadIdx.x == 0 && first_bad[0] != LLONG_MAX && atomicCAS(claim, 0, 1) == 0) {
    error->op = op;
    error->row = first_bad[0];
    error->target = target[first_bad[0]];
    error->classes = classes;
    __threadfence_system();  // the fields reach the host before the flag that says they are valid
    error->set = 1;
  }
}

struct Records {
  std::mutex mutex;
  std::vector<std::string> op_names;  // interned, so the kernel records a small index
  std::vector<DeviceRecord> devices;
};

Records& records() {
  static Records* r = new Records();  // never freed: see device_allocator
  return *r;
}

int intern_op(Records& r, const char* op) {
  for (size_t i = 0; i < r.op_names.size(); ++i)
    if (r.op_names[i] == op) return int(i);
  r.op_names.emplace_back(op);
  return int(r.op_names.size()) - 1;
}

DeviceRecord& device_record_locked(Records& r, int device) {
  if (r.devices.empty()) r.devices.resize(device_count());
  DeviceRecord& record = r.devices.at(device);
  if (!record.host) {
    DeviceGuard guard(device);
    CUDA_CHECK(cudaMalloc(&record.claim, sizeof(int)));
    CUDA_CHECK(cudaMemset(record.claim, 0, sizeof(int)));
    void* host = nullptr;
    CUDA_CHECK(cudaHostAlloc(&host, sizeof(TargetError), cudaHostAllocMapped | cudaHostAllocPortable));
    *static_cast<TargetError*>(host) = TargetError{0, 0, 0, 0, 0};
    void* dev = nullptr;
    CUDA_CHECK(cudaHostGetDevicePointer(&dev, host, 0));
    record.host = static_cast<TargetError*>(host);
    record.device_view = static_cast<TargetError*>(dev);
  }
  return record;
}

}  // namespace

void prepare_target_checks(int device) {
  Records& r = records();
  std::lock_guard<std::mutex> lock(r.mutex);
  device_record_locked(r, device);
}

void check_targets_async(int device, const char* op, const int64_t* target, int64_t rows, int64_t classes,
                         cudaStream_t stream) {
  if (rows == 0) return;
  Records& r = records();
  DeviceRecord record;
  int op_index;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    record = device_record_locked(r, device);
    op_index = intern_op(r, op);
  }
  check_targets_kernel<<<1, kThreads, 0, stream>>>(target, rows, classes, op_index, record.claim, record.device_view);
  CUDA_LAUNCH_CHECK();
}

void raise_pending_target_error(int device) {
  Records& r = records();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.devices.empty() || !r.devices.at(device).host) return;
  DeviceRecord& record = r.devices[device];
  volatile TargetError* error = record.host;
  if (!error->set) return;
  const TargetError seen{error->set, error->op, error->row, error->target, error->classes};
  error->set = 0;
  {
    DeviceGuard guard(device);
    CUDA_CHECK(cudaMemset(record.claim, 0, sizeof(int)));  // the device is idle: re-arm the check
  }
  fail(r.op_names[seen.op], ": target ", seen.target, " at row ", seen.row, " is outside [0, ", seen.classes, ")");
}

}  // namespace dpcore::kernels::cuda_runtime
