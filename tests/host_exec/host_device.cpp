// cuda_available() for the tests on the host execution layer: its one "device", the host,
// is always there, so the CUDA test bodies run instead of skipping.
#include "support/test_support.h"

namespace dpcore::testing {

bool cuda_available() { return true; }

}  // namespace dpcore::testing
