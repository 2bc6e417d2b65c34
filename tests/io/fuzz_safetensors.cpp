// libFuzzer target for the safetensors parser. Any input must either parse into tensors whose
// byte counts match their shapes, or throw dpcore::Error; a crash, a sanitizer report, another
// exception type or a broken invariant is a bug. Build (with the dpcore sources or library):
//   clang++ -std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -I. tests/io/fuzz_safetensors.cpp ...
#include <cstdint>
#include <cstdlib>

#include "engine/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    dpcore::io::SafetensorsFile file = dpcore::io::parse_safetensors(data, size, "fuzz-input");
    size_t total = 0;
    for (const dpcore::io::TensorRecord& t : file.tensors()) {
      size_t expected = dpcore::dtype_size(t.dtype);
      for (int64_t d : t.shape) expected *= size_t(d);
      if (t.data.size() != expected) std::abort();
      total += t.data.size();
    }
    if (total > size) std::abort();  // the tensors tile the buffer, which lies inside the input
  } catch (const dpcore::Error&) {
  }
  return 0;
}
