#include "kernels/cuda_runtime/target_check.h"

#include <climits>
#include <mutex>
#include <optional>
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
  int check;  // index into Records::checks
  long long row, target;
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
// later ones would only repeat the same mistake. An entry equal to `ignore` passes when
// `has_ignore` (cross_entropy's ignore_index).
__global__ void check_targets_kernel(const int64_t* target, long long rows, long long classes, bool has_ignore,
                                     long long ignore, int check, int* claim, TargetError* error) {
  __shared__ long long first_bad[kThreads];
  long long bad = LLONG_MAX;
  for (long long r = threadIdx.x; r < rows; r += blockDim.x) {
    const long long t = target[r];
    if ((t < 0 || t >= classes) && !(has_ignore && t == ignore) && r < bad) bad = r;
  }
  first_bad[threadIdx.x] = bad;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) first_bad[threadIdx.x] = min(first_bad[threadIdx.x], first_bad[threadIdx.x + half]);
    __syncthreads();
  }
  if (threadIdx.x == 0 && first_bad[0] != LLONG_MAX && atomicCAS(claim, 0, 1) == 0) {
    error->check = check;
    error->row = first_bad[0];
    error->target = target[first_bad[0]];
    __threadfence_system();  // the fields reach the host before the flag that says they are valid
    error->set = 1;
  }
}

// An IndexCheck that owns its strings, kept for the error message.
struct KnownCheck {
  std::string op, index, at;
  int64_t limit;
  std::optional<int64_t> ignore;
  bool operator==(const KnownCheck& o) const {
    return op == o.op && index == o.index && at == o.at && limit == o.limit && ignore == o.ignore;
  }
};

struct Records {
  std::mutex mutex;
  std::vector<KnownCheck> checks;  // interned, so the kernel records a small index
  std::vector<DeviceRecord> devices;
};

Records& records() {
  static Records* r = new Records();  // never freed: see device_allocator
  return *r;
}

// Zeroes the device's claim, before any check that this thread queues from now on reads
// it. The memset runs on the legacy default stream, and the checks run on the callers'
// streams, non-blocking ones that CUDA does not order after the legacy stream: waiting for
// the memset here is what orders it first (without the wait, a check on a side stream
// could race the memset, as ThreadSanitizer reported on the host runtime).
void zero_claim(const DeviceRecord& record) {
  CUDA_CHECK(cudaMemset(record.claim, 0, sizeof(int)));
  CUDA_CHECK(cudaStreamSynchronize(nullptr));
}

int intern_check(Records& r, const IndexCheck& check) {
  const KnownCheck known{check.op, check.index, check.at, check.limit, check.ignore};
  for (size_t i = 0; i < r.checks.size(); ++i)
    if (r.checks[i] == known) return int(i);
  r.checks.push_back(known);
  return int(r.checks.size()) - 1;
}

DeviceRecord& device_record_locked(Records& r, int device) {
  if (r.devices.empty()) r.devices.resize(device_count());
  DeviceRecord& record = r.devices.at(device);
  if (!record.host) {
    DeviceGuard guard(device);
    CUDA_CHECK(cudaMalloc(&record.claim, sizeof(int)));
    zero_claim(record);
    void* host = nullptr;
    CUDA_CHECK(cudaHostAlloc(&host, sizeof(TargetError), cudaHostAllocMapped | cudaHostAllocPortable));
    *static_cast<TargetError*>(host) = TargetError{0, 0, 0, 0};
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

void check_indices_async(int device, const IndexCheck& check, const int64_t* indices, int64_t n,
                         cudaStream_t stream) {
  if (n == 0) return;
  Records& r = records();
  DeviceRecord record;
  int check_index;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    record = device_record_locked(r, device);
    check_index = intern_check(r, check);
  }
  // As kernels/cuda/launch.cuh launches (which this layer may not include): nvcc's launch,
  // or the host execution layer's in the host build (DPCORE_CUDA=HOST).
#ifdef __CUDACC__
  check_targets_kernel<<<1, kThreads, 0, stream>>>(indices, n, check.limit, check.ignore.has_value(),
                                                   check.ignore.value_or(0), check_index, record.claim,
                                                   record.device_view);
  CUDA_LAUNCH_CHECK();
#else
  host_exec::launch("check_targets_kernel", check_targets_kernel, dim3(1), dim3(kThreads), stream, indices,
                    static_cast<long long>(n), static_cast<long long>(check.limit), check.ignore.has_value(),
                    static_cast<long long>(check.ignore.value_or(0)), check_index, record.claim, record.device_view);
#endif
}

void raise_pending_target_error(int device) {
  Records& r = records();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.devices.empty() || !r.devices.at(device).host) return;
  DeviceRecord& record = r.devices[device];
  volatile TargetError* error = record.host;
  if (!error->set) return;
  const TargetError seen{error->set, error->check, error->row, error->target};
  error->set = 0;
  {
    DeviceGuard guard(device);
    zero_claim(record);  // re-arm the check
  }
  const KnownCheck& known = r.checks[seen.check];
  fail_index(IndexCheck{known.op.c_str(), known.index.c_str(), known.at.c_str(), known.limit, known.ignore}, seen.row,
             seen.target);
}

}  // namespace dpcore::kernels::cuda_runtime
