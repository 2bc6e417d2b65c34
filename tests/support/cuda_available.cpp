// cuda_available() for the tests linked with libdpcore: a GPU the engine can use. (The
// host execution tests link tests/host_exec/host_device.cpp instead.)
#include "engine/runtime.h"
#include "support/test_support.h"

namespace dpcore::testing {

bool cuda_available() { return runtime::cuda_device_count() > 0; }

}  // namespace dpcore::testing
