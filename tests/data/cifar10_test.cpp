// The CIFAR-10 reader on batch files written here.
#include <gtest/gtest.h>

#include <filesystem>

#include "data_files.h"
#include "engine/data/cifar10.h"
#include "support/error_of.h"
#include "support/test_support.h"

namespace dpcore::data {
namespace {

using testing::Bytes;
using testing::cifar10_bytes;
using testing::error_of;
using testing::pattern_bytes;
using testing::TempDir;
using testing::write_bytes;

// File f of a directory holds `records` records; record r of file f has label (f + r) % 10
// and pixels pattern_bytes(..., salt f).
Bytes batch_file(uint32_t f, size_t records) {
  Bytes labels(records);
  for (size_t r = 0; r < records; ++r) labels[r] = uint8_t((f + r) % 10);
  return cifar10_bytes(labels, pattern_bytes(records * 3072, f));
}

void write_directory(const TempDir& dir) {
  for (uint32_t f = 1; f <= 5; ++f) write_bytes(dir.file("data_batch_" + std::to_string(f) + ".bin"), batch_file(f, f));
  write_bytes(dir.file("test_batch.bin"), batch_file(0, 4));
}

TEST(Cifar10, LoadsTrainBatchesInOrderWithPixelsAndLabels) {
  TempDir dir;
  write_directory(dir);
  Dataset train = load_cifar10(dir.path(), Split::train);
  EXPECT_EQ(train.name, "cifar10 train");
  EXPECT_EQ(describe(train), "15 x 3 x 32 x 32, 10 classes");  // 1 + 2 + 3 + 4 + 5 records
  EXPECT_NO_THROW(check_dataset(train));
  int64_t i = 0;
  for (uint32_t f = 1; f <= 5; ++f) {
    const Bytes pixels = pattern_bytes(f * 3072, f);
    for (size_t r = 0; r < f; ++r, ++i) {
      EXPECT_EQ(train.labels[size_t(i)], int64_t((f + r) % 10)) << "file " << f << " record " << r;
      const float* img = train.image(i);
      // CHW as stored: red plane, green plane, blue plane.
      for (size_t p = 0; p < 3072; ++p)
        ASSERT_EQ(img[p], float(pixels[r * 3072 + p]) / 255.0f) << "file " << f << " record " << r << " pixel " << p;
    }
  }
}

TEST(Cifar10, LoadsTestBatch) {
  TempDir dir;
  write_directory(dir);
  Dataset test = load_cifar10(dir.path(), Split::test);
  EXPECT_EQ(test.name, "cifar10 test");
  EXPECT_EQ(test.n, 4);
  EXPECT_EQ(test.labels, (std::vector<int64_t>{0, 1, 2, 3}));
  const Bytes pixels = pattern_bytes(4 * 3072, 0);
  for (size_t p = 0; p < pixels.size(); ++p) ASSERT_EQ(test.images[p], float(pixels[p]) / 255.0f) << p;
}

TEST(Cifar10, SizeNotAMultipleOfTheRecordNamesFile) {
  TempDir dir;
  write_directory(dir);
  Bytes bytes = batch_file(3, 3);
  bytes.pop_back();
  write_bytes(dir.file("data_batch_3.bin"), bytes);
  std::string message = error_of([&] { load_cifar10(dir.path(), Split::train); });
  EXPECT_NE(message.find(dir.file("data_batch_3.bin") + ": size 9218 bytes is not a positive multiple of the "
                                                        "CIFAR-10 record size 3073"),
            std::string::npos)
      << message;
  write_bytes(dir.file("test_batch.bin"), {});
  message = error_of([&] { load_cifar10(dir.path(), Split::test); });
  EXPECT_NE(message.find(dir.file("test_batch.bin") + ": size 0 bytes"), std::string::npos) << message;
}

TEST(Cifar10, LabelOutOfRangeNamesFileAndRecord) {
  TempDir dir;
  write_directory(dir);
  Bytes bytes = batch_file(0, 4);
  bytes[2 * 3073] = 10;
  write_bytes(dir.file("test_batch.bin"), bytes);
  const std::string message = error_of([&] { load_cifar10(dir.path(), Split::test); });
  EXPECT_NE(message.find(dir.file("test_batch.bin") + ": label 10 of record 2 is outside [0, 10)"), std::string::npos)
      << message;
}

TEST(Cifar10, MissingBatchNamesFile) {
  TempDir dir;
  write_directory(dir);
  std::filesystem::remove(dir.file("data_batch_4.bin"));
  const std::string message = error_of([&] { load_cifar10(dir.path(), Split::train); });
  EXPECT_NE(message.find(dir.file("data_batch_4.bin") + " not found"), std::string::npos) << message;
}

TEST(Cifar10, ParsesFromMemoryWithSourceName) {
  const Bytes bytes = batch_file(7, 2);
  Dataset d = parse_cifar10(bytes.data(), bytes.size(), "in-memory");
  EXPECT_EQ(d.n, 2);
  EXPECT_EQ(d.labels, (std::vector<int64_t>{7, 8}));
  EXPECT_EQ(d.images[3072 + 1], float(bytes[3073 + 2]) / 255.0f);
  const std::string message = error_of([&] { parse_cifar10(bytes.data(), 100, "in-memory"); });
  EXPECT_NE(message.find("in-memory: size 100 bytes"), std::string::npos) << message;
}

}  // namespace
}  // namespace dpcore::data
