// cuda_available() for the tests: a device the engine can use (a GPU, or in the host build
// one of the host runtime's emulated devices).
#include "engine/runtime.h"
#include "support/test_support.h"

namespace dpcore::testing {

bool cuda_available() { return runtime::cuda_device_count() > 0; }

}  // namespace dpcore::testing
