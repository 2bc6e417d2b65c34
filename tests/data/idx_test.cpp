// The IDX reader and Fashion-MNIST loader on files written here, raw and gzip, valid and
// broken in every way the reader checks, and on the real dataset when it is installed.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "data_files.h"
#include "engine/data/fashion_mnist.h"
#include "engine/data/idx.h"
#include "kernels/error.h"
#include "support/error_of.h"
#include "support/test_support.h"

namespace dpcore::data {
namespace {

using testing::Bytes;
using testing::error_of;
using testing::gzip_bytes;
using testing::idx_bytes;
using testing::pattern_bytes;
using testing::TempDir;
using testing::write_bytes;

constexpr uint32_t kImagesMagic = 0x00000803, kLabelsMagic = 0x00000801;

// Writes `bytes` to dir/name and returns the error read_idx_file gives for it.
std::string idx_error(const TempDir& dir, const std::string& name, const Bytes& bytes, int ndims) {
  write_bytes(dir.file(name), bytes);
  return error_of([&] { read_idx_file(dir.file(name), ndims); });
}

// The message names the file and contains the problem.
void expect_error(const std::string& message, const std::string& file, const std::string& problem) {
  EXPECT_NE(message.find(file), std::string::npos) << "message does not name " << file << ": " << message;
  EXPECT_NE(message.find(problem), std::string::npos) << "message does not say \"" << problem << "\": " << message;
}

TEST(Idx, ParsesRawAndGzipImages) {
  TempDir dir;
  const Bytes values = pattern_bytes(3 * 4 * 5, 1);
  const Bytes raw = idx_bytes(kImagesMagic, {3, 4, 5}, values);
  write_bytes(dir.file("raw"), raw);
  write_bytes(dir.file("raw.gz"), gzip_bytes(raw));
  for (const char* name : {"raw", "raw.gz"}) {
    IdxArray a = read_idx_file(dir.file(name), 3);
    EXPECT_EQ(a.dims, (std::vector<int64_t>{3, 4, 5})) << name;
    EXPECT_EQ(a.values, values) << name;
  }
}

TEST(Idx, GzipDetectedByContentNotName) {
  TempDir dir;
  const Bytes values = pattern_bytes(6, 2);
  const Bytes raw = idx_bytes(kLabelsMagic, {6}, values);
  write_bytes(dir.file("compressed-without-suffix"), gzip_bytes(raw));
  write_bytes(dir.file("plain.gz"), raw);
  EXPECT_EQ(read_idx_file(dir.file("compressed-without-suffix"), 1).values, values);
  EXPECT_EQ(read_idx_file(dir.file("plain.gz"), 1).values, values);
}

TEST(Idx, ConcatenatedGzipMembersAreOneStream) {
  const Bytes raw = idx_bytes(kLabelsMagic, {10}, pattern_bytes(10, 3));
  Bytes gz = gzip_bytes(Bytes(raw.begin(), raw.begin() + 7));
  Bytes tail = gzip_bytes(Bytes(raw.begin() + 7, raw.end()));
  gz.insert(gz.end(), tail.begin(), tail.end());
  IdxArray a = parse_idx(gz.data(), gz.size(), 1, "two-members.gz");
  EXPECT_EQ(a.values, pattern_bytes(10, 3));
}

TEST(Idx, WrongMagicNamesFile) {
  TempDir dir;
  Bytes bytes = idx_bytes(0x00000903, {1, 1, 1}, {0});  // type byte 0x09 (signed byte)
  expect_error(idx_error(dir, "signed-images", bytes, 3), "signed-images", "wrong magic number 0x00000903");
  bytes = idx_bytes(0x12340803, {1, 1, 1}, {0});
  expect_error(idx_error(dir, "junk-images", bytes, 3), "junk-images", "wrong magic number 0x12340803");
}

TEST(Idx, WrongDimensionCountNamesFile) {
  TempDir dir;
  // A labels file given where images are expected, and the other way round.
  expect_error(idx_error(dir, "labels-as-images", idx_bytes(kLabelsMagic, {2}, {0, 1}), 3), "labels-as-images",
               "wrong dimension count 1, expected 3");
  expect_error(idx_error(dir, "images-as-labels", idx_bytes(kImagesMagic, {1, 1, 1}, {0}), 1), "images-as-labels",
               "wrong dimension count 3, expected 1");
}

TEST(Idx, TruncatedHeaderNamesFile) {
  TempDir dir;
  expect_error(idx_error(dir, "two-bytes", Bytes{0, 0}, 1), "two-bytes", "ends inside the IDX header");
  Bytes bytes = idx_bytes(kImagesMagic, {5, 5}, {});  // the third dimension is missing
  expect_error(idx_error(dir, "short-dims", bytes, 3), "short-dims", "ends inside the IDX header");
  expect_error(idx_error(dir, "short-dims.gz", gzip_bytes(bytes), 3), "short-dims.gz", "ends inside the IDX header");
}

TEST(Idx, TruncatedDataNamesFile) {
  TempDir dir;
  Bytes bytes = idx_bytes(kImagesMagic, {2, 3, 3}, pattern_bytes(17, 0));
  expect_error(idx_error(dir, "short", bytes, 3), "short", "truncated: the header (2 x 3 x 3) needs 18 bytes");
  expect_error(idx_error(dir, "short.gz", gzip_bytes(bytes), 3), "short.gz", "the file holds 17");
}

TEST(Idx, TrailingDataNamesFile) {
  TempDir dir;
  Bytes bytes = idx_bytes(kLabelsMagic, {4}, pattern_bytes(6, 0));
  expect_error(idx_error(dir, "long", bytes, 1), "long", "2 trailing bytes after the 4 bytes");
  expect_error(idx_error(dir, "long.gz", gzip_bytes(bytes), 1), "long.gz", "2 trailing bytes after the 4 bytes");
}

TEST(Idx, LyingHeaderIsNotBelievedBeforeTheDataArrives) {
  // 2^31 x 2^30 x 1 claims 2 EiB of pixels; allocating that up front would throw
  // std::bad_alloc instead of the truncation error.
  const Bytes bytes = idx_bytes(kImagesMagic, {1u << 31, 1u << 30, 1}, pattern_bytes(10, 0));
  for (const Bytes& b : {bytes, gzip_bytes(bytes)})
    expect_error(error_of([&] { parse_idx(b.data(), b.size(), 3, "liar"); }), "liar", "the file holds 10");
  const Bytes huge = idx_bytes(kImagesMagic, {0xffffffffu, 0xffffffffu, 0xffffffffu}, {});
  expect_error(error_of([&] { parse_idx(huge.data(), huge.size(), 3, "huge"); }), "huge", "impossibly large");
}

TEST(Idx, CorruptGzipNamesFile) {
  TempDir dir;
  const Bytes raw = idx_bytes(kImagesMagic, {4, 8, 8}, pattern_bytes(256, 5));
  Bytes gz = gzip_bytes(raw);
  Bytes cut(gz.begin(), gz.begin() + gz.size() / 2);
  expect_error(idx_error(dir, "cut.gz", cut, 3), "cut.gz", "gzip data is truncated");
  Bytes flipped = gz;
  flipped[gz.size() - 6] ^= 0xff;  // inside the CRC-32 of the trailer
  expect_error(idx_error(dir, "crc.gz", flipped, 3), "crc.gz", "corrupt gzip data");
  Bytes junk = gz;
  junk.insert(junk.end(), {1, 2, 3});
  expect_error(idx_error(dir, "junk.gz", junk, 3), "junk.gz", "3 bytes of trailing garbage after the gzip data");
}

TEST(Idx, MissingFileIsNamed) {
  TempDir dir;
  expect_error(error_of([&] { read_idx_file(dir.file("absent"), 1); }), dir.file("absent"), "cannot open");
}

// A Fashion-MNIST directory with n images of h x w; `gzip` picks the file names.
void write_fashion(const TempDir& dir, const std::string& prefix, uint32_t n, uint32_t h, uint32_t w, bool gzip,
                   Bytes labels) {
  const std::string suffix = gzip ? ".gz" : "";
  Bytes images = idx_bytes(kImagesMagic, {n, h, w}, pattern_bytes(size_t(n) * h * w, 11));
  Bytes label_file = idx_bytes(kLabelsMagic, {uint32_t(labels.size())}, labels);
  write_bytes(dir.file(prefix + "-images-idx3-ubyte" + suffix), gzip ? gzip_bytes(images) : images);
  write_bytes(dir.file(prefix + "-labels-idx1-ubyte" + suffix), gzip ? gzip_bytes(label_file) : label_file);
}

TEST(FashionMnist, LoadsRawAndGzipDirectories) {
  TempDir raw_dir, gz_dir;
  write_fashion(raw_dir, "train", 3, 2, 4, false, {9, 0, 4});
  write_fashion(raw_dir, "t10k", 2, 2, 4, false, {1, 2});
  write_fashion(gz_dir, "train", 3, 2, 4, true, {9, 0, 4});
  write_fashion(gz_dir, "t10k", 2, 2, 4, true, {1, 2});
  for (const TempDir* dir : {&raw_dir, &gz_dir}) {
    Dataset train = load_fashion_mnist(dir->path(), Split::train);
    EXPECT_EQ(train.name, "fashion-mnist train");
    EXPECT_EQ(describe(train), "3 x 1 x 2 x 4, 10 classes");
    EXPECT_EQ(train.labels, (std::vector<int64_t>{9, 0, 4}));
    const Bytes pixels = pattern_bytes(3 * 2 * 4, 11);
    ASSERT_EQ(train.images.size(), pixels.size());
    for (size_t i = 0; i < pixels.size(); ++i) EXPECT_EQ(train.images[i], float(pixels[i]) / 255.0f) << i;
    Dataset test = load_fashion_mnist(dir->path(), Split::test);
    EXPECT_EQ(test.n, 2);
    EXPECT_EQ(test.labels, (std::vector<int64_t>{1, 2}));
  }
}

TEST(FashionMnist, ImageLabelCountMismatchNamesBothFiles) {
  TempDir dir;
  write_fashion(dir, "train", 3, 2, 2, false, {1, 2});
  expect_error(error_of([&] { load_fashion_mnist(dir.path(), Split::train); }),
               "train-images-idx3-ubyte holds 3 images", "train-labels-idx1-ubyte holds 2 labels");
}

TEST(FashionMnist, LabelOutOfRangeNamesFile) {
  TempDir dir;
  write_fashion(dir, "t10k", 3, 2, 2, true, {1, 10, 2});
  expect_error(error_of([&] { load_fashion_mnist(dir.path(), Split::test); }), "t10k-labels-idx1-ubyte.gz",
               "label 10 at index 1 is outside [0, 10)");
}

TEST(FashionMnist, EmptyFileIsRejected) {
  TempDir dir;
  write_fashion(dir, "train", 0, 28, 28, false, {});
  expect_error(error_of([&] { load_fashion_mnist(dir.path(), Split::train); }), "train-images-idx3-ubyte",
               "holds no images");
}

TEST(FashionMnist, MissingDirectoryNamesFileAndPackage) {
  TempDir dir;
  const std::string message = error_of([&] { load_fashion_mnist(dir.path(), Split::train); });
  expect_error(message, dir.path(), "neither train-images-idx3-ubyte nor train-images-idx3-ubyte.gz");
  EXPECT_NE(message.find("dataset-fashion-mnist"), std::string::npos) << message;
}

TEST(FashionMnist, RealDatasetFromDebianPackage) {
  if (!std::filesystem::exists(std::string(kFashionMnistDir) + "/train-labels-idx1-ubyte.gz") &&
      !std::filesystem::exists(std::string(kFashionMnistDir) + "/train-labels-idx1-ubyte"))
    GTEST_SKIP() << "Fashion-MNIST is not installed in " << kFashionMnistDir
                 << " (Debian package dataset-fashion-mnist)";
  for (Split split : {Split::train, Split::test}) {
    Dataset d = load_fashion_mnist(kFashionMnistDir, split);
    EXPECT_EQ(d.n, split == Split::train ? 60000 : 10000);
    EXPECT_EQ(d.c, 1);
    EXPECT_EQ(d.h, 28);
    EXPECT_EQ(d.w, 28);
    EXPECT_NO_THROW(check_dataset(d));
    // Fashion-MNIST is balanced: every class has exactly a tenth of the samples.
    std::vector<int64_t> per_class(10, 0);
    for (int64_t y : d.labels) ++per_class[size_t(y)];
    for (int64_t count : per_class) EXPECT_EQ(count, d.n / 10);
    float lo = 1, hi = 0;
    for (float x : d.images) lo = std::min(lo, x), hi = std::max(hi, x);
    EXPECT_EQ(lo, 0.0f);
    EXPECT_EQ(hi, 1.0f);
  }
}

}  // namespace
}  // namespace dpcore::data
