// libFuzzer target: the CIFAR-10 batch reader.
#include <cstddef>
#include <cstdint>

#include "engine/data/cifar10.h"
#include "kernels/error.h"

using namespace dpcore::data;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Dataset d;
  try {
    d = parse_cifar10(data, size, "fuzz");
  } catch (const dpcore::Error&) {
    return 0;  // rejected with a message: what bad input should get
  }
  // Accepted input must make a consistent dataset; an exception here aborts the run.
  check_dataset(d);
  return 0;
}
