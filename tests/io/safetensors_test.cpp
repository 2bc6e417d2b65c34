// The safetensors reader and writer: round trips, byte-exact agreement with the reference
// writer's own test vectors, and rejection (never a crash) of every kind of corrupt file.
#include "engine/io/safetensors.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "support/test_support.h"

namespace dpcore::io {
namespace {

using dpcore::testing::TempDir;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

// A file image: the 8-byte length, the header text as given, then `buffer_bytes` bytes.
std::vector<uint8_t> image(const std::string& header, size_t buffer_bytes, uint64_t claimed_length) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char(claimed_length >> (8 * i));
  out += header;
  out.append(buffer_bytes, '\x5a');
  return std::vector<uint8_t>(out.begin(), out.end());
}
std::vector<uint8_t> image(const std::string& header, size_t buffer_bytes) {
  return image(header, buffer_bytes, header.size());
}

// The dpcore::Error message parsing produces, or "" when it parses (a test then fails on the
// expected substring). Any other exception type escapes and fails the test.
std::string parse_error(const std::vector<uint8_t>& bytes, const std::string& source = "test.safetensors") {
  try {
    parse_safetensors(bytes.data(), bytes.size(), source);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string entry(const std::string& name, const std::string& dtype, const std::string& shape, uint64_t begin,
                  uint64_t end) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" +
         std::to_string(begin) + "," + std::to_string(end) + "]}";
}

template <class T>
TensorView view_of(const std::string& name, const std::vector<int64_t>& shape, const std::vector<T>& v) {
  return TensorView{name, dtype_of<T>::value, shape, v.data(), v.size() * sizeof(T)};
}

// A small file with two tensors and metadata, used by several tests.
struct SmallFile {
  std::vector<float> w = {1.5f, -2.0f, 3.25f, 0.0f, -0.5f, 7.0f};
  std::vector<int64_t> t = {3, 1, 4};
  std::vector<TensorView> views() const { return {view_of("w", {2, 3}, w), view_of("t", {3}, t)}; }
  std::map<std::string, std::string> metadata{{"format", "pt"}};
};

TEST(Safetensors, RoundTripKeepsOrderDtypesShapesBytesAndMetadata) {
  TempDir dir;
  std::vector<float> f32 = {1.0f, -0.0f, 3.5f, 1e-30f, -7.25f, 2.0f};
  std::vector<double> f64 = {3.141592653589793, -1e300};
  std::vector<int32_t> i32 = {-1, 2147483647};
  std::vector<int64_t> i64 = {int64_t(1) << 62, -5, 0};
  std::vector<kernels::BFloat16> bf16 = {{0x3f80}, {0xff80}, {0x0001}};
  std::vector<kernels::Float16> f16 = {{0x3c00}, {0x7bff}};
  std::vector<float> scalar = {42.0f}, empty;
  // Deliberately not sorted by name or dtype: the file keeps the caller's order.
  std::vector<TensorView> views = {view_of("z.f32", {2, 3}, f32), view_of("a.f64", {2}, f64),
                                   view_of("m.i32", {1, 2}, i32), view_of("b.i64", {3}, i64),
                                   view_of("h.bf16", {3}, bf16), view_of("g.f16", {2, 1}, f16),
                                   view_of("scalar", {}, scalar), view_of("empty", {0, 4}, empty)};
  std::map<std::string, std::string> meta = {{"lr", "0.1"}, {"note", "ünïcode"}};
  save_safetensors(dir.file("m.safetensors"), views, meta);

  SafetensorsFile file = load_safetensors(dir.file("m.safetensors"));
  EXPECT_EQ(file.names(),
            (std::vector<std::string>{"z.f32", "a.f64", "m.i32", "b.i64", "h.bf16", "g.f16", "scalar", "empty"}));
  EXPECT_EQ(file.metadata(), meta);
  ASSERT_EQ(file.tensors().size(), views.size());
  for (size_t i = 0; i < views.size(); ++i) {
    const TensorRecord& r = file.tensors()[i];
    EXPECT_EQ(r.dtype, views[i].dtype) << r.name;
    EXPECT_EQ(r.shape, views[i].shape) << r.name;
    ASSERT_EQ(r.data.size(), views[i].bytes) << r.name;
    // memcmp with a null pointer is undefined even for 0 bytes (the empty tensor has none).
    if (views[i].bytes > 0) EXPECT_EQ(std::memcmp(r.data.data(), views[i].data, views[i].bytes), 0) << r.name;
  }
  EXPECT_EQ(file.at("a.f64").values<double>()[1], -1e300);
  EXPECT_EQ(file.at("b.i64").values<int64_t>()[0], int64_t(1) << 62);
  EXPECT_EQ(file.at("scalar").numel(), 1);
  EXPECT_EQ(file.at("empty").numel(), 0);
  EXPECT_EQ(file.at("h.bf16").values<kernels::BFloat16>()[1].bits, 0xff80u);
  EXPECT_EQ(file.at("g.f16").numel(), 2);
}

TEST(Safetensors, HalfPrecisionHasPyTorchsDtypeNames) {
  TempDir dir;
  std::vector<kernels::BFloat16> bf16 = {{0x3f80}};
  std::vector<kernels::Float16> f16 = {{0x3c00}};
  save_safetensors(dir.file("h.safetensors"), {view_of("b", {1}, bf16), view_of("h", {1}, f16)});
  std::ifstream in(dir.file("h.safetensors"), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(bytes.find("\"b\":{\"dtype\":\"BF16\""), std::string::npos) << bytes;
  EXPECT_NE(bytes.find("\"h\":{\"dtype\":\"F16\""), std::string::npos) << bytes;
}

TEST(Safetensors, ParseFromMemoryMatchesLoadFromFile) {
  TempDir dir;
  SmallFile small;
  save_safetensors(dir.file("s.safetensors"), small.views(), small.metadata);
  std::vector<uint8_t> bytes = read_bytes(dir.file("s.safetensors"));
  SafetensorsFile a = load_safetensors(dir.file("s.safetensors"));
  SafetensorsFile b = parse_safetensors(bytes.data(), bytes.size(), "memory");
  EXPECT_EQ(b.source(), "memory");
  EXPECT_EQ(a.names(), b.names());
  EXPECT_EQ(a.metadata(), b.metadata());
  for (size_t i = 0; i < a.tensors().size(); ++i) EXPECT_EQ(a.tensors()[i].data, b.tensors()[i].data);
}

// The byte streams below are the expected outputs in the reference implementation's own
// tests (huggingface/safetensors, tensor.rs): same header text, padding and layout.
TEST(Safetensors, WriterMatchesReferenceBytes) {
  TempDir dir;
  std::vector<float> data = {0, 1, 2, 3, 4, 5};
  auto expect_file = [&](const std::vector<TensorView>& views, const std::map<std::string, std::string>& meta,
                         const std::string& header, uint64_t length) {
    save_safetensors(dir.file("ref.safetensors"), views, meta);
    std::vector<uint8_t> want = image(header, 0, length);
    const uint8_t* bytes = reinterpret_cast<const uint8_t*>(data.data());
    if (!views.empty()) want.insert(want.end(), bytes, bytes + 24);
    EXPECT_EQ(read_bytes(dir.file("ref.safetensors")), want) << header;
  };
  expect_file({view_of("attn.0", {1, 2, 3}, data)}, {},
              "{\"attn.0\":{\"dtype\":\"F32\",\"shape\":[1,2,3],\"data_offsets\":[0,24]}}", 64);
  expect_file({view_of("attn0", {1, 1, 2, 3}, data)}, {},
              "{\"attn0\":{\"dtype\":\"F32\",\"shape\":[1,1,2,3],\"data_offsets\":[0,24]}}       ", 72);
  expect_file({}, {}, "{}      ", 8);
  expect_file({}, {{"framework", "pt"}}, "{\"__metadata__\":{\"framework\":\"pt\"}}     ", 40);
}

TEST(Safetensors, ReadsReferenceExampleWithTensorsOutOfHeaderOrder) {
  // Header order differs from buffer order: the reader orders tensors by their bytes.
  std::string header = "{" + entry("second", "I32", "[2]", 8, 16) + "," + entry("first", "F64", "[1]", 0, 8) + "}";
  std::vector<uint8_t> bytes = image(header, 16);
  SafetensorsFile file = parse_safetensors(bytes.data(), bytes.size(), "x");
  EXPECT_EQ(file.names(), (std::vector<std::string>{"first", "second"}));
  EXPECT_TRUE(file.metadata().empty());
}

TEST(Safetensors, EveryTruncationIsAnErrorNotACrash) {
  TempDir dir;
  SmallFile small;
  save_safetensors(dir.file("full.safetensors"), small.views(), small.metadata);
  std::vector<uint8_t> full = read_bytes(dir.file("full.safetensors"));
  for (size_t n = 0; n < full.size(); ++n) {
    std::vector<uint8_t> prefix(full.begin(), full.begin() + ptrdiff_t(n));
    EXPECT_NE(parse_error(prefix), "") << "prefix of " << n << " bytes parsed";
    write_bytes(dir.file("cut.safetensors"), prefix);
    EXPECT_THROW(load_safetensors(dir.file("cut.safetensors")), Error) << "prefix of " << n << " bytes loaded";
  }
}

TEST(Safetensors, LyingHeaderLengthIsRejectedBeforeAllocating) {
  std::string header = "{" + entry("a", "F32", "[2]", 0, 8) + "}";
  std::string msg = parse_error(image(header, 8, uint64_t(1) << 62));
  EXPECT_TRUE(contains(msg, "header length 4611686018427387904 exceeds the limit")) << msg;
  msg = parse_error(image(header, 8, ~uint64_t(0)));
  EXPECT_TRUE(contains(msg, "exceeds the limit")) << msg;
  msg = parse_error(image(header, 8, header.size() + 9));  // one byte past the end of the file
  EXPECT_TRUE(contains(msg, "runs past the end of the file")) << msg;
  msg = parse_error(image(header, 8, header.size() - 1));  // cuts the JSON short
  EXPECT_TRUE(contains(msg, "not valid JSON")) << msg;
  msg = parse_error(image(header, 8, 0));
  EXPECT_TRUE(contains(msg, "not valid JSON")) << msg;
  msg = parse_error({1, 2, 3});
  EXPECT_TRUE(contains(msg, "fewer than the 8-byte header length")) << msg;
}

TEST(Safetensors, BadJsonIsRejected) {
  struct Case {
    std::string header, expected;
  };
  const std::vector<Case> cases = {
      {"not json", "not valid JSON"},
      {"{\"a\": ", "not valid JSON"},
      {"{} trailing", "not valid JSON"},
      {"{\"\xff\xfe\":1}", "not valid JSON"},  // invalid UTF-8
      {"[1,2]", "must be a JSON object, got a JSON array"},
      {"{\"a\":{\"b\":{\"c\":[1]}}}", "nests deeper"},
      {"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[", "nests deeper"},
      {"{" + entry("a", "F32", "[1]", 0, 4) + "," + entry("a", "F32", "[1]", 4, 8) + "}", "key 'a' twice"},
      {"{\"a\":[0,4]}", "tensor 'a': expected an object"},
      {"{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", "tensor 'a': missing \"dtype\""},
      {"{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", "missing \"shape\""},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", "missing \"data_offsets\""},
      {"{\"a\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}", "dtype must be a string, got 7"},
      {"{\"__metadata__\":{\"k\":1}}", "__metadata__ entry 'k' is 1; only strings"},
      {"{\"__metadata__\":[\"k\"]}", "__metadata__ must be an object"},
  };
  for (const Case& c : cases) {
    std::string msg = parse_error(image(c.header, 8), "model.safetensors");
    EXPECT_TRUE(contains(msg, c.expected)) << "header " << c.header << "\n  error: " << msg;
    EXPECT_TRUE(msg.rfind("model.safetensors: ", 0) == 0) << "error does not start with the file name: " << msg;
  }
}

TEST(Safetensors, DtypesOutsideDpcoreAreNamed) {
  std::string msg = parse_error(image("{" + entry("h", "I16", "[4]", 0, 8) + "}", 8));
  EXPECT_TRUE(contains(msg, "tensor 'h': dtype I16 is not supported by dpcore")) << msg;
  msg = parse_error(image("{" + entry("h", "Q4_K", "[4]", 0, 8) + "}", 8));
  EXPECT_TRUE(contains(msg, "tensor 'h': unknown dtype 'Q4_K'")) << msg;
}

TEST(Safetensors, ShapesAndOffsetsAreValidated) {
  struct Case {
    std::string header;
    size_t buffer;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"{" + entry("w", "F32", "[2,3]", 0, 20) + "}", 20,
       "tensor 'w': shape [2, 3] of F32 needs 24 bytes but data_offsets [0, 20] hold 20"},
      {"{" + entry("w", "F32", "[-1]", 0, 4) + "}", 4, "a shape entry is -1, expected a non-negative integer"},
      {"{" + entry("w", "F32", "[2.5]", 0, 10) + "}", 10, "a shape entry is 2.5"},
      {"{" + entry("w", "F32", "[\"2\"]", 0, 8) + "}", 8, "a shape entry is a JSON string"},
      {"{" + entry("w", "F32", "[4294967296,4294967296,4]", 0, 8) + "}", 8, "is too large to address"},
      {"{" + entry("w", "F32", "[9223372036854775808]", 0, 8) + "}", 8, "a shape entry is 9223372036854775808"},
      {"{" + entry("w", "F32", "[100]", 0, 400) + "}", 24,
       "tensor 'w': data_offsets [0, 400] run past the end of the 24-byte data buffer"},
      {"{" + entry("w", "F32", "[0]", 8, 4) + "}", 8, "data_offsets [8, 4] end before they begin"},
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, "data_offsets must be [begin, end]"},
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,-4]}}", 4, "data_offsets end is -4"},
      {"{" + entry("a", "F32", "[4]", 0, 16) + "," + entry("b", "F32", "[4]", 8, 24) + "}", 24,
       "tensor 'b' data_offsets [8, 24] overlap tensor 'a' data_offsets [0, 16]"},
      {"{" + entry("a", "F32", "[2]", 0, 8) + "," + entry("b", "F32", "[2]", 16, 24) + "}", 24,
       "bytes [8, 16) of the data buffer belong to no tensor"},
      {"{" + entry("b", "F32", "[2]", 8, 16) + "}", 16, "bytes [0, 8) of the data buffer belong to no tensor"},
      {"{" + entry("a", "F32", "[2]", 0, 8) + "}", 12, "the last 4 bytes of the 12-byte data buffer belong to no tensor"},
      {"{}", 4, "the last 4 bytes"},
  };
  for (const Case& c : cases) {
    std::string msg = parse_error(image(c.header, c.buffer));
    EXPECT_TRUE(contains(msg, c.expected)) << "header " << c.header << "\n  error: " << msg;
  }
}

TEST(Safetensors, LoadErrorsNameTheFile) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  write_bytes(path, image("{" + entry("fc.weight", "F32", "[25]", 0, 100) + "," +
                              entry("fc.bias", "F32", "[10]", 64, 104) + "}",
                          104));
  try {
    load_safetensors(path);
    FAIL() << "overlapping tensors loaded";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), path + ": tensor 'fc.bias' data_offsets [64, 104] overlap tensor 'fc.weight' "
                                            "data_offsets [0, 100]");
  }
  EXPECT_THROW(load_safetensors(dir.file("missing.safetensors")), Error);
  EXPECT_THROW(load_safetensors(dir.path()), Error);  // a directory is not a file
}

TEST(Safetensors, AccessorsReportMissingTensorsAndWrongTypes) {
  TempDir dir;
  SmallFile small;
  save_safetensors(dir.file("s.safetensors"), small.views(), small.metadata);
  SafetensorsFile file = load_safetensors(dir.file("s.safetensors"));
  EXPECT_EQ(file.find("nope"), nullptr);
  ASSERT_NE(file.find("w"), nullptr);
  EXPECT_EQ(file.find("w")->values<float>()[2], 3.25f);
  try {
    file.at("nope");
    FAIL() << "at() found a tensor that is not there";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), dir.file("s.safetensors") + ": no tensor named 'nope'")) << e.what();
  }
  EXPECT_THROW(file.at("w").values<double>(), Error);
  EXPECT_THROW(file.at("t").values<int32_t>(), Error);
}

TEST(Safetensors, SaveRejectsBadTensorsAndWritesNothing) {
  TempDir dir;
  std::vector<float> v(6);
  const std::string path = dir.file("bad.safetensors");
  auto expect_rejected = [&](const std::vector<TensorView>& views, const std::string& expected) {
    try {
      save_safetensors(path, views);
      ADD_FAILURE() << "saved; expected an error mentioning " << expected;
    } catch (const Error& e) {
      EXPECT_TRUE(contains(e.what(), expected)) << e.what();
    }
    EXPECT_TRUE(std::filesystem::is_empty(dir.path())) << "a failed save left a file behind";
  };
  expect_rejected({view_of("a", {6}, v), view_of("b", {6}, v), view_of("a", {6}, v)}, "tensor 'a' appears twice");
  expect_rejected({view_of("a", {2, 2}, v)}, "shape [2, 2] of float32 needs 16 bytes, but 24 were given");
  expect_rejected({view_of("a", {-6}, v)}, "shape [-6] has a negative size");
  expect_rejected({view_of("__metadata__", {6}, v)}, "reserved");
  expect_rejected({TensorView{"n", DType::Float32, {6}, nullptr, 24}}, "data is null");
  expect_rejected({view_of("bad\xff", {6}, v)}, "UTF-8");
}

// Only the complete file ever carries the target name: no temporary files linger after
// success or failure, and a failed save leaves the previous file as it was.
class AtomicSave : public ::testing::Test {
 protected:
  std::vector<std::string> dir_entries() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir.path())) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }
  TempDir dir;
  SmallFile small;
};

TEST_F(AtomicSave, SuccessLeavesOnlyTheFileReadableByOthers) {
  save_safetensors(dir.file("m.safetensors"), small.views());
  save_safetensors(dir.file("m.safetensors"), small.views());  // overwriting works too
  EXPECT_EQ(dir_entries(), std::vector<std::string>{"m.safetensors"});
  auto perms = std::filesystem::status(dir.file("m.safetensors")).permissions();
  EXPECT_NE(perms & std::filesystem::perms::others_read, std::filesystem::perms::none);
}

TEST_F(AtomicSave, WriteFailureKeepsThePreviousFile) {
  save_safetensors(dir.file("m.safetensors"), small.views(), small.metadata);
  const std::vector<uint8_t> before = read_bytes(dir.file("m.safetensors"));
  std::vector<float> big(1 << 16, 1.0f);

  // Make the kernel refuse writes beyond 4 KiB (EFBIG instead of the default SIGXFSZ),
  // so the save fails half-way through the data, exactly like a full disk.
  struct rlimit old_limit;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  struct rlimit small_limit = old_limit;
  small_limit.rlim_cur = 4096;
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small_limit), 0);
  std::string msg;
  try {
    save_safetensors(dir.file("m.safetensors"), {view_of("big", {int64_t(big.size())}, big)});
  } catch (const Error& e) {
    msg = e.what();
  }
  setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_handler);

  EXPECT_TRUE(contains(msg, "save_safetensors: cannot write")) << "error: '" << msg << "'";
  EXPECT_TRUE(contains(msg, dir.file("m.safetensors"))) << msg;
  EXPECT_EQ(read_bytes(dir.file("m.safetensors")), before);
  EXPECT_EQ(dir_entries(), std::vector<std::string>{"m.safetensors"});
}

TEST_F(AtomicSave, RenameFailureLeavesNoTemporaryFile) {
  std::filesystem::create_directories(dir.file("taken/sub"));  // rename cannot replace a non-empty directory
  try {
    save_safetensors(dir.file("taken"), small.views());
    FAIL() << "saved over a directory";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "cannot rename")) << e.what();
  }
  EXPECT_EQ(dir_entries(), std::vector<std::string>{"taken"});
}

TEST_F(AtomicSave, UnwritableDirectoryIsAnErrorNamingThePath) {
  if (geteuid() == 0) GTEST_SKIP() << "running as root, which may write to any directory";
  std::filesystem::create_directory(dir.file("ro"));
  std::filesystem::permissions(dir.file("ro"), std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  try {
    save_safetensors(dir.file("ro/m.safetensors"), small.views());
    ADD_FAILURE() << "saved into a read-only directory";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "cannot create a temporary file next to '" + dir.file("ro/m.safetensors")))
        << e.what();
  }
  std::filesystem::permissions(dir.file("ro"), std::filesystem::perms::owner_all);
}

}  // namespace
}  // namespace dpcore::io
