// libFuzzer target: the IDX reader (raw and gzip) and the pairing of images with labels.
// Input: a little-endian uint16 k, then k bytes of images file, then the labels file.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "engine/data/fashion_mnist.h"
#include "engine/data/idx.h"
#include "kernels/error.h"

using namespace dpcore::data;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const size_t images_size = std::min<size_t>(size_t(data[0]) | size_t(data[1]) << 8, size - 2);
  const uint8_t* images = data + 2;
  const uint8_t* labels = images + images_size;
  Dataset d;
  try {
    IdxArray image_array = parse_idx(images, images_size, 3, "images");
    IdxArray label_array = parse_idx(labels, size - 2 - images_size, 1, "labels");
    d = idx_dataset(image_array, "images", label_array, "labels", kFashionMnistClasses, "fuzz");
  } catch (const dpcore::Error&) {
    return 0;  // rejected with a message: what bad input should get
  }
  // Accepted input must make a consistent dataset; an exception here aborts the run.
  check_dataset(d);
  return 0;
}
