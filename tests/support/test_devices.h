// The devices an engine-level test runs its body on: the CPU, and the first CUDA device
// where the build has one (a GPU, or the host build's emulated devices in CI).
#pragma once

#include <vector>

#include "engine/backend.h"

namespace dpcore::testing {

inline std::vector<Device> cpu_and_first_cuda_device() {
  std::vector<Device> out = {Device::cpu()};
  if (Backend* cuda = find_backend(Device::Type::CUDA); cuda && cuda->device_count() > 0)
    out.push_back(Device::cuda(0));
  return out;
}

}  // namespace dpcore::testing
