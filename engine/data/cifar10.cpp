#include "engine/data/cifar10.h"

#include <filesystem>
#include <vector>

#include "engine/data/bytes.h"
#include "kernels/error.h"

namespace dpcore::data {

static Dataset empty_cifar10(std::string name) {
  Dataset d;
  d.name = std::move(name);
  d.c = 3;
  d.h = 32;
  d.w = 32;
  d.num_classes = kCifar10Classes;
  return d;
}

// Checks one file's bytes and appends its records to `out`.
static void append_records(const uint8_t* bytes, size_t size, const std::string& source, Dataset& out) {
  DPCORE_CHECK(size > 0 && size % kCifar10Record == 0, source, ": size ", size,
               " bytes is not a positive multiple of the CIFAR-10 record size ", kCifar10Record,
               " (1 label byte + 3072 pixel bytes)");
  const size_t records = size / kCifar10Record;
  for (size_t r = 0; r < records; ++r) {
    const uint8_t* rec = bytes + r * kCifar10Record;
    DPCORE_CHECK(rec[0] < kCifar10Classes, source, ": label ", int(rec[0]), " of record ", r, " is outside [0, ",
                 kCifar10Classes, ")");
  }
  const size_t first = out.labels.size();
  out.labels.resize(first + records);
  out.images.resize((first + records) * kCifar10Pixels);
  float* pixels = out.images.data() + first * kCifar10Pixels;
  for (size_t r = 0; r < records; ++r) {
    const uint8_t* rec = bytes + r * kCifar10Record;
    out.labels[first + r] = rec[0];
    for (int64_t i = 0; i < kCifar10Pixels; ++i) pixels[r * kCifar10Pixels + i] = float(rec[1 + i]) / 255.0f;
  }
  out.n += int64_t(records);
}

Dataset parse_cifar10(const uint8_t* bytes, size_t size, const std::string& source) {
  Dataset d = empty_cifar10(source);
  append_records(bytes, size, source, d);
  return d;
}

Dataset load_cifar10(const std::string& dir, Split split) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  if (split == Split::train) {
    for (int i = 1; i <= 5; ++i) files.push_back("data_batch_" + std::to_string(i) + ".bin");
  } else {
    files.push_back("test_batch.bin");
  }
  std::vector<std::string> paths;
  uintmax_t total = 0;
  for (const std::string& file : files) {
    fs::path path = fs::path(dir) / file;
    std::error_code ec;
    DPCORE_CHECK(fs::is_regular_file(path, ec), "cifar10: ", path.string(),
                 " not found (expected the binary version's data_batch_1.bin .. data_batch_5.bin and "
                 "test_batch.bin in ",
                 dir, ")");
    total += fs::file_size(path, ec);
    paths.push_back(path.string());
  }
  Dataset d = empty_cifar10(std::string("cifar10 ") + split_name(split));
  d.images.reserve(size_t(total / kCifar10Record * kCifar10Pixels));
  d.labels.reserve(size_t(total / kCifar10Record));
  for (const std::string& path : paths) {
    std::vector<uint8_t> bytes = read_file_bytes(path);
    append_records(bytes.data(), bytes.size(), path, d);
  }
  return d;
}

}  // namespace dpcore::data
