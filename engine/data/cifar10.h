// CIFAR-10, binary version: data_batch_1.bin .. data_batch_5.bin (train, 50000 images) and
// test_batch.bin (10000). Each record is one label byte (0..9) and 3072 pixel bytes: the
// 32x32 red plane, then green, then blue (already CHW). Nothing else is in a file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/data/dataset.h"

namespace dpcore::data {

constexpr int64_t kCifar10Classes = 10;
constexpr int64_t kCifar10Pixels = 3 * 32 * 32;
constexpr int64_t kCifar10Record = 1 + kCifar10Pixels;

// One batch file's bytes. Throws dpcore::Error naming `source` when the size is not a
// positive multiple of 3073 or a label is not below 10.
Dataset parse_cifar10(const uint8_t* bytes, size_t size, const std::string& source);

// The five train batches (in order) or the test batch from `dir`.
Dataset load_cifar10(const std::string& dir, Split split);

}  // namespace dpcore::data
